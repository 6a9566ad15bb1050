"""Ensembles: several models with one vocabulary decode together, each next token's probability
the mean of theirs (as fairseq and OpenNMT ensemble).

Independent models err differently, and averaging their distributions cancels part of that:
on Multi30k val two `tiny` models, each trained for 60 minutes on one core, score 40.36 and 40.07
alone and 41.07 together (benchmarks/multi30k.md, attempt 11).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from transduce.decoding.searchable import Searchable, Steps
from transduce.errors import UserError
from transduce.model.config import ModelConfig
from transduce.model.steps import greedy_tokens

# what the members of an ensemble must agree on: the tokens they read and write
_SAME = ("src_vocab_size", "tgt_vocab_size", "pad_id", "bos_id", "eos_id", "unk_id")


class Ensemble(nn.Module):
    """Models searched as one (a `Searchable`, of `Searchable`s: models or compiled ones). The
    members may differ in shape, not in vocabulary."""

    def __init__(self, models: Sequence[Searchable]) -> None:
        super().__init__()
        if not models:
            raise UserError("an ensemble needs at least one model")
        first = models[0].config
        for i, model in enumerate(models[1:], start=2):
            for name in _SAME:
                if getattr(model.config, name) != getattr(first, name):
                    raise UserError(f"model {i} of the ensemble has {name}="
                                     f"{getattr(model.config, name)}, model 1 "
                                     f"{getattr(first, name)}: members need one vocabulary")
        self.members = nn.ModuleList(models)
        # the first member's, with the longest sequence every member accepts
        self.config: ModelConfig = dataclasses.replace(first, max_positions=min(
            m.config.max_positions for m in models))

    def num_parameters(self) -> int:
        return sum(m.num_parameters() for m in self.members)

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> list[Tensor]:
        return [m.encode(src, src_mask) for m in self.members]

    def steps(self, src: Tensor, *, use_cache: bool = True) -> EnsembleSteps:
        return EnsembleSteps(self, src, use_cache=use_cache)

    def decode_with_attention(self, tgt: Tensor, memory: list[Tensor], src_mask: Tensor | None,
                              ) -> tuple[Tensor, Tensor]:
        """The members' mean log-probabilities (B, T, V) and mean cross-attention weights
        (layers, B, heads, T, S), which needs members of the same depth and heads."""
        outputs = [m.decode_with_attention(tgt, mem, src_mask)
                   for m, mem in zip(self.members, memory, strict=True)]
        shapes = {tuple(w.shape) for _, w in outputs}
        if len(shapes) > 1:
            raise UserError("the attention of an ensemble needs members with the same layers "
                             f"and heads, got weights of shapes {sorted(shapes)}")
        log_probs = torch.stack([torch.log_softmax(out.float(), dim=-1) for out, _ in outputs])
        weights = torch.stack([w.float() for _, w in outputs])
        return torch.logsumexp(log_probs, 0) - math.log(len(outputs)), weights.mean(0)


class EnsembleSteps:
    """`Steps` over an ensemble's members, each with its own encoder output and cache."""

    greedy_block = 1  # the members' steps run one at a time, whatever each could take

    def __init__(self, ensemble: Ensemble, src: Tensor, *, use_cache: bool = True) -> None:
        self.members: list[Steps] = [m.steps(src, use_cache=use_cache) for m in ensemble.members]
        self._log_n = math.log(len(self.members))
        self._eos_id = ensemble.config.eos_id

    @property
    def src_lengths(self) -> Tensor:
        return self.members[0].src_lengths

    def log_probs(self) -> Tensor:
        """log of the members' mean next-token probability, (rows, V), fp32."""
        total = self.members[0].log_probs()  # the step's to overwrite
        for member in self.members[1:]:
            torch.logaddexp(total, member.log_probs(), out=total)
        return total.sub_(self._log_n)

    def logits(self) -> Tensor:
        """The ensemble's scores are only defined normalised: its log-probabilities."""
        return self.log_probs()

    def greedy(self, eos_bias: Tensor) -> Tensor:
        return greedy_tokens(self, eos_bias, self._eos_id)

    def limit(self, max_length: int) -> None:
        for member in self.members:
            member.limit(max_length)

    def append(self, tokens: Tensor) -> None:
        for member in self.members:
            member.append(tokens)

    def select(self, sources: Tensor) -> None:
        for member in self.members:
            member.select(sources)

    def split(self, k: int) -> None:
        for member in self.members:
            member.split(k)

    def join(self, src: Tensor) -> None:
        for member in self.members:
            member.join(src)

    def reorder_beams(self, rows: Tensor) -> None:
        for member in self.members:
            member.reorder_beams(rows)

