"""What the searches run on: anything with a model's config that encodes sources and steps
through their decoding, a `Searchable`. The model (`Transformer`), an ensemble of models
(`Ensemble`) and a model whose steps are compiled (`Compiled`) are; a search never asks which."""

from __future__ import annotations

from typing import Protocol

from torch import Tensor

from transduce.model.config import ModelConfig


class Steps(Protocol):
    """A batch's decoding, one step at a time (`transduce.model.steps.DecoderSteps`): each source
    has `group` consecutive rows (1, then its k beams after `split(k)`)."""

    greedy_block: int  # how many tokens a call of `greedy` had best take (1: one a step)

    @property
    def src_lengths(self) -> Tensor:
        """(sources,)"""

    def log_probs(self) -> Tensor:
        """log p(next token) of every row, (rows, V), fp32, ours to overwrite; <pad> and <bos>
        -inf."""

    def logits(self) -> Tensor:
        """The same less a constant per row: enough for an argmax or a softmax."""

    def greedy(self, eos_bias: Tensor) -> Tensor:
        """Greedy search's next k = len(eos_bias) tokens of every row, (rows, k), each fed to
        the next step, eos_bias[j] added to <eos>'s logit at the j-th
        (`transduce.model.steps.greedy_tokens`)."""

    def limit(self, max_length: int) -> None:
        """No row's prefix will have more than `max_length` tokens, <bos> included."""

    def append(self, tokens: Tensor) -> None:
        """Extend every row's prefix by one token, (rows,)."""

    def select(self, sources: Tensor) -> None:
        """Keep sources `sources` (in their new order) with all their rows."""

    def split(self, k: int) -> None:
        """Each source's one row becomes k equal rows, its beams."""

    def reorder_beams(self, rows: Tensor) -> None:
        """Keep rows `rows`, each among the rows of its own source."""

    def join(self, src: Tensor) -> None:
        """Sources src (n, S) join at the next step, after the others, `group` rows each, from
        <bos> (continuous batching; steps replaying CUDA graphs refuse: ValueError)."""


class Searchable(Protocol):
    config: ModelConfig

    def encode(self, src: Tensor, src_mask: Tensor | None = None):
        """The encoder's output for sources (B, S) (an ensemble's: one per member)."""

    def steps(self, src: Tensor, *, use_cache: bool = True) -> Steps:
        """src (B, S) encoded, ready for the first step."""

    def decode_with_attention(self, tgt: Tensor, memory, src_mask: Tensor | None,
                              ) -> tuple[Tensor, Tensor]:
        """Teacher-forced logits (B, T, V) and cross-attention weights (L, B, H, T, S): for
        looking inside (`Translator`'s attention pictures), not for searching."""
