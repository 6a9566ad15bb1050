"""Greedy search and sampling: one token per sentence per step, on the key/value cache."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
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
                               use_cache=use_cache, on_done=on_done, blocks=True)


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
                        prefixes, use_cache: bool, on_done=None,
                        blocks: bool = False) -> list[list[int]]:
    """`choose` picks each row's next token from its logits, (rows, V) -> (rows,): they are the
    log-probabilities less a constant per row, so no log-softmax is needed for an argmax or a
    softmax. With `blocks` (`choose` is the argmax), steps that take several greedy tokens in
    one call (`greedy_block`: a compiled model's) take them so, past the forced prefixes; a
    row that ends within a block keeps the tokens before its end, as it would one at a time."""
    config = model.config
    steps = model.steps(src, use_cache=use_cache)
    batch = src.shape[0]
    forced, forced_len = forced_prefix(prefixes, batch, src.device)
    limits = max_output_lengths(steps.src_lengths, decode, config.max_positions)
    limits = torch.maximum(limits, forced_len)
    longest = int(limits.max())
    block = steps.greedy_block if blocks else 1
    steps.limit(longest + block - 1)  # <bos> and the tokens before the last, a block's too
    out = torch.full((batch, longest), config.pad_id, dtype=torch.long)
    lengths = limits.clone().cpu()
    limits_cpu = limits.cpu()
    active = torch.arange(batch, device=src.device)  # the sentence of each decoder row
    step = 0
    while step < longest:
        active_cpu = active.cpu()
        # a block's positions step .. step + block - 1 must be the model's
        if block > 1 and step >= forced.shape[1] and step + block <= config.max_positions:
            eos_bias = _eos_bias(step, block, decode.min_len, src.device)
            finished = _take_block(steps.greedy(eos_bias).cpu(), step, active_cpu,
                                   limits_cpu, out, lengths, config)
            taken = block
        else:
            logits = steps.logits()
            if step < decode.min_len:
                logits[:, config.eos_id] = float("-inf")
            tokens = choose(logits)
            if step < forced.shape[1]:
                rows = step < forced_len[active]
                tokens = torch.where(rows, forced[active, min(step, forced.shape[1] - 1)],
                                     tokens)
            ended = tokens.eq(config.eos_id).cpu()
            out[active_cpu, step] = tokens.cpu().masked_fill(ended, config.pad_id)
            lengths[active_cpu[ended]] = step
            finished = ended | ((step + 1) >= limits_cpu[active_cpu])
            taken = 1
        if on_done is not None:
            for i in active_cpu[finished].tolist():
                on_done(i, out[i, : int(lengths[i])].tolist())
        if finished.all():
            break
        if taken == 1:
            steps.append(tokens)
        if finished.any():  # drop finished sentences from the decoder's batch
            keep = compacting_order(finished.to(src.device))
            active = active[keep]
            steps.select(keep)
        step += taken
    return [out[i, : int(lengths[i])].tolist() for i in range(batch)]


def _eos_bias(step: int, block: int, min_len: int, device) -> Tensor:
    """What a block's steps add to <eos>'s logit: -inf before the minimum length, else 0."""
    return torch.tensor([float("-inf") if step + j < min_len else 0.0 for j in range(block)],
                        device=device)


def _take_block(tokens: Tensor, step: int, active: Tensor, limits: Tensor, out: Tensor,
                lengths: Tensor, config) -> Tensor:
    """Write a block's tokens (rows, k), taken from `step` on by the sentences `active`, into
    `out`, each up to its <eos> or its length limit, and those ends into `lengths`; return
    which rows finished (on the CPU, as every argument). In NumPy, on views of the tensors: a
    dozen operations on a few dozen rows, which PyTorch's dispatch made 4% of a compiled greedy
    search of Multi30k (329-376 us a block against 147-187 now, docs/speed.md)."""
    tokens, active = tokens.numpy(), active.numpy()
    k = tokens.shape[1]
    is_eos = tokens == config.eos_id
    first_eos = np.where(is_eos.any(1), is_eos.argmax(1), k)  # k: none
    room = limits.numpy()[active] - step  # tokens each sentence may still have, >= 1
    kept = np.minimum(first_eos, room)  # its tokens among the block's
    width = min(k, out.shape[1] - step)  # room is never more
    within = np.arange(width)[None] < kept[:, None]
    out.numpy()[active, step : step + width] = np.where(within, tokens[:, :width], config.pad_id)
    ended = first_eos < np.minimum(room, k)  # by <eos>, within the block and the limit
    lengths.numpy()[active[ended]] = step + first_eos[ended]
    return torch.from_numpy(ended | (room <= k))
