"""Greedy search, batched, on the incremental key/value cache."""

from __future__ import annotations

import torch
from torch import Tensor

from transduce.model.transformer import Transformer


def max_output_lengths(src_lengths: Tensor, max_len_a: float, max_len_b: int,
                       max_positions: int) -> Tensor:
    """a * source length + b tokens (before <eos>), within the model's positions."""
    limit = (src_lengths.double() * max_len_a + max_len_b).floor().long()
    return limit.clamp(min=1, max=max_positions - 1)


@torch.no_grad()
def greedy_search(model: Transformer, src: Tensor, *, max_len_a: float = 1.0,
                  max_len_b: int = 50, min_len: int = 1) -> list[list[int]]:
    """The most likely next token at each step, for a batch of sources (B, S).

    Encodes once, then runs one decoder step per output token with the cache; a sentence that
    has produced <eos> (or reached its maximum length) leaves the batch, so the work shrinks as
    outputs finish. Returns each output's token ids without <bos>/<eos>, in batch order.
    """
    config = model.config
    src_mask = model.src_mask(src)
    memory = model.encode(src, src_mask)
    batch = src.shape[0]
    limits = max_output_lengths(src_mask.view(batch, -1).sum(-1), max_len_a, max_len_b,
                                config.max_positions)
    out = torch.full((batch, int(limits.max())), config.pad_id, dtype=torch.long)
    lengths = limits.clone()
    active = torch.arange(batch)  # which sentences the rows of the decoder's batch are
    tokens = torch.full((batch, 1), config.bos_id, dtype=torch.long, device=src.device)
    cache = model.new_cache()
    for step in range(int(limits.max())):
        logits = model.decode(tokens, memory, src_mask, cache=cache)[:, -1]  # (b, V)
        if step < min_len:
            logits[:, config.eos_id] = float("-inf")
        best = logits.argmax(-1)
        finished = best.eq(config.eos_id).cpu()
        best_cpu = best.cpu()
        out[active, step] = best_cpu.masked_fill(finished, config.pad_id)
        lengths[active[finished]] = step
        finished |= (step + 1) >= limits[active]
        if finished.all():
            break
        if finished.any():  # drop finished sentences from the decoder's batch
            keep = (~finished).nonzero().squeeze(1)
            active = active[keep]
            keep = keep.to(src.device)
            cache.select(keep)
            memory, src_mask, best = memory[keep], src_mask[keep], best[keep]
        tokens = best[:, None]
    return [out[i, : int(lengths[i])].tolist() for i in range(batch)]
