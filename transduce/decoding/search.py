"""One search over a batch of sources, whichever kind the settings ask for: what `Translator`
and validation both run."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from transduce.decoding.beam import Hypothesis, beam_search
from transduce.decoding.config import DecodeConfig, Sampling
from transduce.decoding.greedy import greedy_search, sample
from transduce.decoding.searchable import Searchable
from transduce.errors import UserError


def search(model: Searchable, src: Tensor, decode: DecodeConfig, *, nbest: int = 1,
           prefixes: list[list[int]] | None = None,
           constraints: list[list[list[int]]] | None = None, sampling: Sampling | None = None,
           generator: torch.Generator | None = None,
           on_done: Callable[[int, list[Hypothesis]], None] | None = None,
           ) -> list[list[Hypothesis]]:
    """The `nbest` best hypotheses of each source of src (B, S), best first, in batch order:
    drawn when `sampling` is given (from `generator`, else from its seed), else greedy search
    when decode.beam_size and nbest are 1 (what beam search of size 1 finds, faster), else beam
    search. `prefixes` force the first target tokens of each sentence. `constraints`: token
    sequences each sentence's outputs must contain (a glossary's terms), found by beam search
    even of size 1 (transduce.decoding.constraints); sampling does not take them. Greedy and
    sampled hypotheses carry no score (0.0). `on_done(i, hypotheses)` is told of each source's
    as soon as they are known."""
    constrained = constraints is not None and any(constraints)
    if constrained and sampling is not None:
        raise UserError("a glossary needs a search (greedy or beam), not sampling")
    if sampling is None and (decode.beam_size > 1 or nbest > 1 or constrained):
        return beam_search(model, src, decode, nbest=nbest, prefixes=prefixes,
                           constraints=constraints if constrained else None, on_done=on_done)
    told = None if on_done is None else lambda i, tokens: on_done(i, _unscored(tokens))
    if sampling is not None:
        outputs = sample(model, src, decode, sampling, generator=generator, prefixes=prefixes,
                         on_done=told)
    else:
        outputs = greedy_search(model, src, decode, prefixes=prefixes, on_done=told)
    return [_unscored(tokens) for tokens in outputs]


def _unscored(tokens: list[int]) -> list[Hypothesis]:
    return [Hypothesis(0.0, 0.0, tuple(tokens))]
