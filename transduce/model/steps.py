"""One decoder step at a time over a batch whose rows can be reordered and dropped: what a
search runs a model through (`Transformer.steps`)."""

from __future__ import annotations

import typing

import torch
from torch import Tensor

from transduce.kernels.linear import writes_into
from transduce.model.cache import copy_rows, moved_rows

if typing.TYPE_CHECKING:
    from transduce.model.transformer import Transformer


class DecoderSteps:
    """Encodes a batch once, then gives next-token log-probabilities step by step.

    With the cache (the default) each step feeds only the newest token; without it the whole
    prefix is fed every step (for checking the cache). Each source has `group` consecutive
    decoder rows: 1 to begin with, its k beams after `split(k)`; they share the source's encoder
    output and cross-attention keys and values, kept once per source. `select(sources)` keeps
    sources with their rows (finished sentences leave the batch); `reorder_beams(rows)` moves
    rows among those of the same source.
    """

    # how many tokens a call of `greedy` had best take: eager steps gain nothing from more than
    # one (a compiled model's steps take several in one graph: transduce.decoding.compiled)
    greedy_block = 1

    def __init__(self, model: Transformer, src: Tensor, *, use_cache: bool = True) -> None:
        """src (B, S): one row per source to begin with."""
        self.model = model
        self.src_mask = model.src_mask(src)
        self.memory = model.encode(src, self.src_mask)
        self.cache = self.new_cache() if use_cache else None
        self.group = 1
        # the decoder's input: the newest token (with the cache) or the whole prefix
        self.inputs = torch.full((self.memory.shape[0], 1), model.config.bos_id, dtype=torch.long,
                                 device=src.device)
        config = model.config
        self._never = torch.tensor([config.pad_id, config.bos_id], device=src.device)
        self._logits: Tensor | None = None  # the buffer of `_decode`
        self.joined = False  # whether sources have joined since the first step (`join`)

    def new_cache(self):
        """The cache the steps keep (a variant of these steps may keep another)."""
        return self.model.new_cache()

    @property
    def src_lengths(self) -> Tensor:
        """(sources,)"""
        return self.src_mask.view(self.src_mask.shape[0], -1).sum(-1)

    def log_probs(self) -> Tensor:
        """log p(next token | source, prefix) for every row: (rows, V), fp32; <pad> and <bos>
        are never a translation's tokens, so they get -inf (the others keep the model's
        log-probabilities, not renormalised)."""
        logits = self._decode().float()  # ours to overwrite: fresh, or the step's buffer
        log_probs = torch.log_softmax(logits, dim=-1, out=logits)
        return log_probs.index_fill_(1, self._never, float("-inf"))

    def logits(self) -> Tensor:
        """The next token's scores for every row, (rows, V), ordered as `log_probs` (which
        are these less a constant per row), <pad> and <bos> -inf: enough for an argmax."""
        return self._decode().float().index_fill_(1, self._never, float("-inf"))

    def greedy(self, eos_bias: Tensor) -> Tensor:
        """The next k tokens of every row, k = len(eos_bias): (rows, k). See `greedy_tokens`."""
        return greedy_tokens(self, eos_bias, self.model.config.eos_id)

    def _decode(self) -> Tensor:
        """The newest position's logits (rows, V). Where the output layer can write them into
        one, into a buffer kept from step to step (so a step's results are valid until the next
        step): fresh memory every step, tens of MB for a beam search's batch, costs page
        faults that slow the projection and log-softmax (docs/speed.md)."""
        out = None
        if self.memory.dtype == torch.float32 and writes_into(getattr(self.model, "output", None)):
            rows, vocab = len(self.inputs), self.model.config.tgt_vocab_size
            if self._logits is None or len(self._logits) < rows:
                self._logits = self.memory.new_empty(rows, vocab)
            out = self._logits[:rows]
        return self.model.decode_next(self.inputs, self.memory, self.src_mask, cache=self.cache,
                                      out=out)

    def join(self, src: Tensor) -> None:
        """Sources src (n, S) join the batch at the next step, after the others, `group` rows
        each, all starting from <bos> (continuous batching: the search decides what the rows
        hold). Their encoder output is computed now, and their cross-attention keys and values
        where a step has made the others' (else the first step makes all), so that the sources
        held are always those of the keys (sentences may leave before the next step: a server's
        cancelled requests), and a compiled step only reads them; their self-attention starts
        at the next position (a static cache's rows masked before their start: a graph of its
        own, once a process)."""
        if self.cache is None:
            raise ValueError("joining a batch needs the cache")
        mask = self.model.src_mask(src)
        memory = self.model.encode(src, mask)
        held = len(self.memory)
        length = max(self.memory.shape[1], memory.shape[1])
        self.memory = torch.cat([_pad_positions(self.memory, length),
                                 _pad_positions(memory, length)])
        self.src_mask = torch.cat([_pad_positions(self.src_mask, length, dim=-1),
                                   _pad_positions(mask, length, dim=-1)])
        rows = len(src) * self.group
        self.cache.join(rows, device=src.device)
        if self.cache.layers and self.cache.layers[0].cross_attention.keys is not None:
            joining = self.memory[held:]
            for layer, cache in zip(self.model.decoder.layers, self.cache.layers, strict=True):
                cache.cross_attention.append(*layer.cross_attn.source_keys(joining))
        self.joined = True
        self.inputs = torch.cat([self.inputs, torch.full(
            (rows, 1), self.model.config.bos_id, dtype=torch.long, device=src.device)])

    def limit(self, max_length: int) -> None:
        """No row's prefix will have more than `max_length` tokens (<bos> included), so the
        cache need not make room for more: with the search's limit known (a forced output of 16
        tokens, say) its keys and values are not copied into a buffer of 32 positions at the
        17th, fresh memory that cost the first batch of `base`-shape beam search a fifth of its
        time."""
        if self.cache is not None:
            self.cache.limit(max_length)

    def append(self, tokens: Tensor) -> None:
        """Extend every row's prefix by one token: (rows,)."""
        if self.cache is not None:
            self.inputs = tokens[:, None]
            if self.joined:  # positions no row that joined later reads any more
                self.cache.trim()
        else:
            self.inputs = torch.cat([self.inputs, tokens[:, None]], dim=1)

    def select(self, sources: Tensor) -> None:
        """Keep the sources `sources` (1-D index, in their new order) and all their rows."""
        moved = moved_rows(sources)
        self.memory = _keep(self.memory, sources, moved)
        self.src_mask = _keep(self.src_mask, sources, moved)
        if self.cache is not None:
            self.cache.select_sources(sources)
        rows = sources[:, None] * self.group + torch.arange(self.group, device=sources.device)
        self.reorder_beams(rows.view(-1))

    def split(self, k: int) -> None:
        """Each source's one row becomes k equal rows (its beams), to be extended differently."""
        if self.group != 1:
            raise ValueError(f"split needs one row per source, not {self.group}")
        self.reorder_beams(torch.arange(len(self.inputs), device=self.inputs.device)
                           .repeat_interleave(k))
        self.group = k

    def reorder_beams(self, rows: Tensor) -> None:
        """Keep decoder rows `rows`, each among the rows of its own source."""
        self.inputs = self.inputs.index_select(0, rows)
        if self.cache is not None:
            self.cache.select_rows(rows)


def greedy_tokens(steps, eos_bias: Tensor, eos_id: int) -> Tensor:
    """Greedy search's next k = len(eos_bias) tokens of every row of `steps`, (rows, k), one step
    at a time: each the argmax of its step's logits (<pad> and <bos> never) with eos_bias[j] (0,
    or -inf before the minimum length) added to <eos>'s, and fed to the next step; the rows'
    prefixes then hold all k. A row whose output ends (<eos>) within them goes on past it: the
    search keeps what comes before. What a compiled step computes in one graph for several
    tokens (transduce.decoding.compiled), and how eager steps would."""
    tokens = []
    for bias in eos_bias:
        logits = steps.logits()
        logits[:, eos_id] += bias
        chosen = logits.argmax(dim=1)
        steps.append(chosen)
        tokens.append(chosen)
    return torch.stack(tokens, dim=1)


def _pad_positions(x: Tensor, length: int, dim: int = 1) -> Tensor:
    """x padded with zeros (False for a mask) to `length` along `dim` (its source positions)."""
    missing = length - x.shape[dim]
    if not missing:
        return x
    shape = list(x.shape)
    shape[dim] = missing
    return torch.cat([x, x.new_zeros(shape)], dim=dim)


def _keep(rows: Tensor, index: Tensor, moved: Tensor | None) -> Tensor:
    """rows.index_select(0, index); in place (rows is ours to change) given `moved_rows(index)`."""
    if moved is None:
        return rows.index_select(0, index)
    copy_rows(rows, index[moved], moved)
    return rows[: len(index)]
