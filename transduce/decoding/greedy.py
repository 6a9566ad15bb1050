"""Greedy search and sampling: one token per sentence per step, on the key/value cache."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from transduce.decoding.config import DecodeConfig, Sampling
from transduce.decoding.ranking import argmax
from transduce.decoding.searchable import Searchable
from transduce.decoding.steps import compacting_order, forced_prefix, max_output_lengths

GREEDY = DecodeConfig(beam_size=1)
DRAW = Sampling()


def greedy_search(model: Searchable, src: Tensor, decode: DecodeConfig = GREEDY, *,
                  prefixes: list[list[int]] | None = None, use_cache: bool = True,
                  on_done: Callable[[int, list[int]], None] | None = None) -> list[list[int]]:
    """The most likely next token at each step, for a batch of sources (B, S), within the
    lengths `decode` allows (its beam size is not read: this is what a beam of 1 finds).

    Returns each output's token ids without <bos>/<eos>, in batch order. A sentence that has
    produced <eos> (or reached its maximum length) leaves the batch, so the work shrinks as
    outputs finish. `prefixes` force the first target tokens of each sentence. `on_done(i,
    output)` is told of each sentence's output as soon as it is complete.
    """
    return _one_token_per_step(model, src, argmax, decode, prefixes=prefixes,
                               use_cache=use_cache, on_done=on_done)


def sample(model: Searchable, src: Tensor, decode: DecodeConfig = GREEDY,
           sampling: Sampling = DRAW, *, generator: torch.Generator | None = None,
           prefixes: list[list[int]] | None = None,
           on_done: Callable[[int, list[int]], None] | None = None) -> list[list[int]]:
    """Sample each next token (e.g. for back-translation): from p^(1/temperature), restricted
    to the `top_k` most likely tokens and/or the smallest set whose probability reaches
    `top_p` (nucleus). The draws come from `generator`, else from one seeded with
    `sampling.seed` (if given)."""
    if generator is None and sampling.seed is not None:
        generator = torch.Generator(device=src.device).manual_seed(sampling.seed)
    temperature, top_k, top_p = sampling.temperature, sampling.top_k, sampling.top_p

    def choose(logits: Tensor) -> Tensor:
        scores = logits / temperature  # softmax(scores) = p^(1/temperature), renormalised
        if top_k:
            kth = scores.topk(min(top_k, scores.shape[-1]), dim=-1).values[:, -1:]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        if top_p < 1.0:
            ordered, order = scores.sort(dim=-1, descending=True)
            cumulative = ordered.softmax(-1).cumsum(-1)
            drop = cumulative - ordered.softmax(-1) >= top_p  # keep the first token reaching p
            scores = scores.scatter(1, order, ordered.masked_fill(drop, float("-inf")))
        return torch.multinomial(scores.softmax(-1), 1, generator=generator).squeeze(1)

    return _one_token_per_step(model, src, choose, decode, prefixes=prefixes, use_cache=True,
                               on_done=on_done)


@torch.no_grad()
def _one_token_per_step(model: Searchable, src: Tensor, choose, decode: DecodeConfig, *,
                        prefixes, use_cache: bool, on_done=None) -> list[list[int]]:
    """`choose` picks each row's next token from its logits, (rows, V) -> (rows,): they are the
    log-probabilities less a constant per row, so no log-softmax is needed for an argmax or a
    softmax."""
    config = model.config
    steps = model.steps(src, use_cache=use_cache)
    batch = src.shape[0]
    forced, forced_len = forced_prefix(prefixes, batch, src.device)
    limits = max_output_lengths(steps.src_lengths, decode, config.max_positions)
    limits = torch.maximum(limits, forced_len)
    steps.limit(int(limits.max()))  # <bos> and the tokens before the last
    out = torch.full((batch, int(limits.max())), config.pad_id, dtype=torch.long)
    lengths = limits.clone().cpu()
    active = torch.arange(batch, device=src.device)  # the sentence of each decoder row
    for step in range(int(limits.max())):
        logits = steps.logits()
        if step < decode.min_len:
            logits[:, config.eos_id] = float("-inf")
        tokens = choose(logits)
        if step < forced.shape[1]:
            rows = step < forced_len[active]
            tokens = torch.where(rows, forced[active, min(step, forced.shape[1] - 1)], tokens)
        finished = tokens.eq(config.eos_id)
        active_cpu = active.cpu()
        out[active_cpu, step] = tokens.masked_fill(finished, config.pad_id).cpu()
        lengths[active_cpu[finished.cpu()]] = step
        finished |= (step + 1) >= limits[active]
        if on_done is not None:
            for i in active_cpu[finished.cpu()].tolist():
                on_done(i, out[i, : int(lengths[i])].tolist())
        if finished.all():
            break
        steps.append(tokens)
        if finished.any():  # drop finished sentences from the decoder's batch
            keep = compacting_order(finished)
            active = active[keep]
            steps.select(keep)
    return [out[i, : int(lengths[i])].tolist() for i in range(batch)]
