"""One search over a batch of sources, whichever kind the settings ask for: what `Translator`
and validation both run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from transduce.decoding.beam import Hypothesis, beam_search
from transduce.decoding.config import DecodeConfig
from transduce.decoding.ensemble import Ensemble
from transduce.decoding.greedy import greedy_search, sample
from transduce.model.transformer import Transformer


@dataclass(frozen=True)
class Sampling:
    """Draw each next token instead of searching (e.g. for back-translation)."""

    temperature: float = 1.0  # divides the logits
    top_k: int = 0  # draw from the k likeliest tokens (0: all)
    top_p: float = 1.0  # ... or from the likeliest holding this much probability (nucleus)
    generator: torch.Generator | None = None  # for the same draws again


def search(model: Transformer | Ensemble, src: Tensor, decode: DecodeConfig, *, nbest: int = 1,
           prefixes: list[list[int]] | None = None, sampling: Sampling | None = None,
           on_done: Callable[[int, list[Hypothesis]], None] | None = None,
           ) -> list[list[Hypothesis]]:
    """The `nbest` best hypotheses of each source of src (B, S), best first, in batch order:
    drawn when `sampling` is given, else greedy search when decode.beam_size and nbest are 1
    (what beam search of size 1 finds, faster), else beam search. `prefixes` force the first
    target tokens of each sentence. Greedy and sampled hypotheses carry no score (0.0).
    `on_done(i, hypotheses)` is told of each source's as soon as they are known."""
    limits = dict(max_len_a=decode.max_len_a, max_len_b=decode.max_len_b,
                  min_len=decode.min_len, prefixes=prefixes)
    if on_done is not None and (sampling is not None or (decode.beam_size == 1 and nbest == 1)):
        limits["on_done"] = lambda i, tokens: on_done(i, _unscored(tokens))
    if sampling is not None:
        outputs = sample(model, src, temperature=sampling.temperature, top_k=sampling.top_k,
                         top_p=sampling.top_p, generator=sampling.generator, **limits)
    elif decode.beam_size == 1 and nbest == 1:
        outputs = greedy_search(model, src, **limits)
    else:
        return beam_search(model, src, beam_size=decode.beam_size,
                           length_penalty_alpha=decode.length_penalty, nbest=nbest,
                           length_normalization=decode.length_normalization,
                           stopping=decode.stopping, renormalize=decode.renormalize,
                           on_done=on_done, **limits)
    return [_unscored(tokens) for tokens in outputs]


def _unscored(tokens: list[int]) -> list[Hypothesis]:
    return [Hypothesis(0.0, 0.0, tuple(tokens))]
