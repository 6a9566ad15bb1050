"""One decoder step at a time over a batch whose rows can be reordered and dropped."""

from __future__ import annotations

import torch
from torch import Tensor

from transduce.model.transformer import Transformer


class DecoderSteps:
    """Encodes a batch once, then gives next-token log-probabilities step by step.

    With the cache (the default) each step feeds only the newest token; without it the whole
    prefix is fed every step (for checking the cache). `select(rows)` keeps, reorders or repeats
    rows (finished sentences leaving the batch, a source's row repeated for its beams);
    `reorder_beams(rows)` moves rows only among those of the same source, whose encoder output
    and cross-attention cache are the same.
    """

    def __init__(self, model: Transformer, src: Tensor, *, use_cache: bool = True) -> None:
        """src (B, S): one row per source to begin with."""
        self.model = model
        self.src_mask = model.src_mask(src)
        self.memory = model.encode(src, self.src_mask)
        self.cache = model.new_cache() if use_cache else None
        # the decoder's input: the newest token (with the cache) or the whole prefix
        self.inputs = torch.full((self.memory.shape[0], 1), model.config.bos_id, dtype=torch.long,
                                 device=src.device)
        config = model.config
        self._never = torch.tensor([config.pad_id, config.bos_id], device=src.device)

    @property
    def src_lengths(self) -> Tensor:
        return self.src_mask.view(self.src_mask.shape[0], -1).sum(-1)

    def log_probs(self) -> Tensor:
        """log p(next token | source, prefix) for every row: (rows, V), fp32; <pad> and <bos>
        are never a translation's tokens, so they get -inf (the others keep the model's
        log-probabilities, not renormalised)."""
        log_probs = torch.log_softmax(self._decode().float(), dim=-1)
        return log_probs.index_fill_(1, self._never, float("-inf"))

    def logits(self) -> Tensor:
        """The next token's scores for every row, (rows, V), ordered as `log_probs` (which
        are these less a constant per row), <pad> and <bos> -inf: enough for an argmax."""
        return self._decode().float().index_fill_(1, self._never, float("-inf"))

    def _decode(self) -> Tensor:
        return self.model.decode(self.inputs, self.memory, self.src_mask, cache=self.cache)[:, -1]

    def append(self, tokens: Tensor) -> None:
        """Extend every row's prefix by one token: (rows,)."""
        if self.cache is not None:
            self.inputs = tokens[:, None]
        else:
            self.inputs = torch.cat([self.inputs, tokens[:, None]], dim=1)

    def select(self, rows: Tensor) -> None:
        self.memory = self.memory.index_select(0, rows)
        self.src_mask = self.src_mask.index_select(0, rows)
        self._reorder(rows, cross_attention=True)

    def reorder_beams(self, rows: Tensor) -> None:
        self._reorder(rows, cross_attention=False)

    def _reorder(self, rows: Tensor, cross_attention: bool) -> None:
        self.inputs = self.inputs.index_select(0, rows)
        if self.cache is not None:
            self.cache.select(rows, cross_attention=cross_attention)


def max_output_lengths(src_lengths: Tensor, max_len_a: float, max_len_b: int,
                       max_positions: int) -> Tensor:
    """a * source length + b output tokens (before <eos>), within the model's positions."""
    limit = (src_lengths.double() * max_len_a + max_len_b).floor().long()
    return limit.clamp(min=1, max=max_positions - 2)


def forced_prefix(prefixes: list[list[int]] | None, batch: int, device) -> tuple[Tensor, Tensor]:
    """(B, P) forced target tokens (padded with -1) and their lengths (B,)."""
    if not prefixes:
        return torch.full((batch, 0), -1, dtype=torch.long), torch.zeros(batch, dtype=torch.long)
    width = max(map(len, prefixes))
    table = torch.full((batch, width), -1, dtype=torch.long)
    for i, p in enumerate(prefixes):
        table[i, : len(p)] = torch.tensor(p, dtype=torch.long)
    return table.to(device), torch.tensor([len(p) for p in prefixes]).to(device)
