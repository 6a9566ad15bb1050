"""What the searches share: batches that shrink, output length limits, forced prefixes."""

from __future__ import annotations

import torch
from torch import Tensor

from transduce.decoding.config import DecodeConfig


def compacting_order(done: Tensor) -> Tensor:
    """Which sentences to keep, in which order, when those with `done` (n,) leave the batch:
    each kept one stays in its place, but the last ones fill the places left before them. Only
    those move, so the caches copy a few rows in place rather than all of them (a batch of
    Multi30k sentences loses some almost every step)."""
    keep = (~done).nonzero().squeeze(1)
    order = torch.arange(len(keep), device=done.device)
    holes = done[: len(keep)].nonzero().squeeze(1)  # as many as kept sentences beyond them
    order[holes] = keep[len(keep) - len(holes):]
    return order


def max_output_lengths(src_lengths: Tensor, decode: DecodeConfig, max_positions: int) -> Tensor:
    """a * source length + b output tokens (before <eos>), within the model's positions."""
    limit = (src_lengths.double() * decode.max_len_a + decode.max_len_b).floor().long()
    return limit.clamp(min=1, max=max_positions - 2)


def forced_prefix(prefixes: list[list[int]] | None, batch: int, device) -> tuple[Tensor, Tensor]:
    """(B, P) forced target tokens (padded with -1) and their lengths (B,)."""
    if not prefixes:
        return (torch.full((batch, 0), -1, dtype=torch.long, device=device),
                torch.zeros(batch, dtype=torch.long, device=device))
    width = max(map(len, prefixes))
    table = torch.full((batch, width), -1, dtype=torch.long)
    for i, p in enumerate(prefixes):
        table[i, : len(p)] = torch.tensor(p, dtype=torch.long)
    return table.to(device), torch.tensor([len(p) for p in prefixes]).to(device)
