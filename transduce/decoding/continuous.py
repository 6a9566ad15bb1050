"""Beam search over a batch that sentences join and leave between steps (continuous batching,
for a server: a sentence that arrives during a search starts at the next step instead of
waiting for the whole search to end).

The search is `beam_search`'s (transduce.decoding.beam), sentence by sentence: each sentence
counts its own steps for its length limit, minimum length, forced prefix and length penalty. A
sentence joins with its k beams at once, all but the first dead (log-probability -inf), so its
first step extends one beam as `beam_search`'s does; the model's steps (`DecoderSteps.join`)
encode it when it joins and start its self-attention at the batch's next position. So each
sentence gets what `beam_search` gives it alone, whenever it joins and whatever it joins.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from transduce.decoding import constraints as lexical
from transduce.decoding.beam import (
    Hypothesis,
    _add,
    _best,
    extend,
    length_penalty,
    sentences_done,
)
from transduce.decoding.config import DecodeConfig
from transduce.decoding.searchable import Searchable
from transduce.decoding.steps import compacting_order, max_output_lengths


@dataclass
class _Sentence:
    owner: Hashable  # whose sentence: told with its hypotheses
    limit: int  # output tokens before <eos> at most
    forced: list[int]  # its first tokens, forced
    finished: list[Hypothesis] = field(default_factory=list)  # a min-heap of the n-best
    fallback: list[Hypothesis] = field(default_factory=list)  # ... of those short of constraints
    ended: int = 0  # how many of its hypotheses have finished (met their constraints)


class ContinuousSearch:
    """`join(sources)` between steps, `step()` until `active` is 0: each step returns the
    sentences finished in it, as (owner, n-best hypotheses best first)."""

    def __init__(self, model: Searchable, decode: DecodeConfig, nbest: int = 1) -> None:
        if not 1 <= nbest <= decode.beam_size:
            raise ValueError(f"nbest must be between 1 and the beam size {decode.beam_size}")
        self.model, self.decode, self.nbest = model, decode, nbest
        self.k = decode.beam_size
        self.steps = None  # the model's, made by the first join
        self.sentences: list[_Sentence] = []  # in batch order
        self.source_tokens: list[int] = []  # each sentence's, <eos> included
        self._own: Tensor | None = None  # (n,) steps each sentence has taken
        self._scores: Tensor | None = None  # (n, k) log p of each beam's prefix
        self._tokens: Tensor | None = None  # (n * k, t) prefixes, the latest t tokens
        self._limits: Tensor | None = None  # (n,) each sentence's length limit
        self._forcing = False  # whether any sentence has a forced prefix
        self._table: lexical.Constraints | None = None  # each sentence's constraints, if any has
        self._progress: lexical.Progress | None = None  # (n, k) each beam's through them

    @property
    def active(self) -> int:
        return len(self.sentences)

    @property
    def tokens(self) -> int:
        """The source tokens of the sentences being searched."""
        return sum(self.source_tokens)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.no_grad()
    def join(self, sources: list[list[int]], owners: list[Hashable],
             prefixes: list[list[int]] | None = None,
             constraints: list[list[list[int]]] | None = None) -> None:
        """Sentences (token ids, <eos> included) that start at the next step, each with its
        forced prefix and its constraints (token sequences its outputs must contain), if any."""
        config, device, k = self.model.config, self.device, self.k
        width = max(map(len, sources))
        src = torch.tensor([s + [config.pad_id] * (width - len(s)) for s in sources],
                           device=device)
        limits = max_output_lengths(torch.tensor([len(s) for s in sources]), self.decode,
                                    config.max_positions).tolist()
        prefixes = prefixes or [[] for _ in sources]
        table = lexical.Constraints.of(constraints or [[] for _ in sources], "cpu")
        needed = table.totals.tolist()  # constraint tokens: the limit makes room for them
        joining = [_Sentence(owner, min(max(limit, len(forced) + need), config.max_positions - 2),
                             forced)
                   for owner, limit, forced, need in zip(owners, limits, prefixes, needed,
                                                          strict=True)]
        self.sentences += joining
        self._forcing |= any(s.forced for s in joining)
        table = lexical.Constraints(table.tokens.to(device), table.lengths.to(device))
        progress = lexical.Progress.start(len(sources), k, device)
        if self._table is not None or table.tokens.shape[1]:
            if self._table is None:  # those searched already have none
                n = len(self.sentences) - len(sources)
                self._table = lexical.Constraints.of([[] for _ in range(n)], device)
                self._progress = lexical.Progress.start(n, k, device)
            self._table, self._progress = self._table.cat(table), self._progress.cat(progress)
        limits = torch.tensor([s.limit for s in joining], device=device)
        self.source_tokens += [len(s) for s in sources]
        scores = torch.full((len(sources), k), float("-inf"), device=device)
        scores[:, 0] = 0.0  # one live beam: the first step extends it alone
        own = torch.zeros(len(sources), dtype=torch.long, device=device)
        if self.steps is None:
            self.steps = self.model.steps(src)
            self.steps.split(k)
            self._own, self._scores, self._limits = own, scores, limits
            self._tokens = torch.zeros(len(sources) * k, 0, dtype=torch.long, device=device)
            return
        self.steps.join(src)
        self._own = torch.cat([self._own, own])
        self._limits = torch.cat([self._limits, limits])
        self._scores = torch.cat([self._scores, scores])
        self._tokens = torch.cat([self._tokens, self._tokens.new_zeros(
            len(sources) * k, self._tokens.shape[1])])

    @torch.no_grad()
    def step(self) -> list[tuple[Hashable, list[Hypothesis]]]:
        """One step of every sentence; those finished leave the batch and are returned."""
        if not self.sentences:
            return []
        decode, k = self.decode, self.k
        eos = self.model.config.eos_id
        n, own = len(self.sentences), self._own
        log_probs = self.steps.log_probs().view(n, k, -1)  # (n, k, V)
        vocab = log_probs.shape[-1]
        steps_taken = own.tolist()
        forced = [(i, s.forced[steps_taken[i]]) for i, s in enumerate(self.sentences)
                  if steps_taken[i] < len(s.forced)] if self._forcing else []
        if forced:  # only the forced token may follow
            rows = torch.tensor([i for i, _ in forced], device=own.device)
            keep = F.one_hot(torch.tensor([t for _, t in forced], device=own.device),
                             vocab).bool()[:, None, :]
            log_probs[rows] = log_probs[rows].masked_fill(~keep, float("-inf"))
        candidates = extend(log_probs, self._scores, k, eos, early=own < decode.min_len,
                       at_limit=own >= self._limits, table=self._table,
                       progress=self._progress, renormalize=decode.renormalize)

        ends = candidates.ends(k)
        if ends:
            prefix = self._tokens.view(n, k, -1)
            for row, rank, met in ends:
                length = steps_taken[row]
                tokens = prefix[row, candidates.beam[row, rank]]
                sentence = self.sentences[row]
                sentence.ended += met
                _add(sentence.finished if met else sentence.fallback, self.nbest, Hypothesis(
                    float(candidates.scores[row, rank]) / length_penalty(
                        length + 1, decode.length_penalty, decode.length_normalization),
                    float(candidates.scores[row, rank]),
                    tuple(tokens[tokens.shape[0] - length:].tolist())))

        # as beam_search: beams stay in their parents' rows where they can, from the second step
        self._scores, beam, token, self._progress = candidates.going_on(k, in_parents=own > 0)
        rows = (torch.arange(n, device=own.device)[:, None] * k + beam).view(-1)
        longest = int(own.max()) + 1
        self._tokens = torch.cat([self._tokens.index_select(0, rows), token.view(-1, 1)],
                                 dim=1)[:, -longest:]
        self.steps.reorder_beams(rows)
        self.steps.append(token.view(-1))

        done = sentences_done([s.finished for s in self.sentences],
                              [s.ended for s in self.sentences], self._scores,
                              self._progress, self._table, [s.limit for s in self.sentences],
                              steps_taken, self.nbest, decode)
        self._own = own + 1
        if not done.any():
            return []
        found = [(self.sentences[i].owner,
                  _best(self.sentences[i].finished, self.sentences[i].fallback, self.nbest))
                 for i in done.nonzero().squeeze(1).tolist()]
        self._leave(done)
        return found

    @torch.no_grad()
    def drop(self, owners: set[Hashable]) -> int:
        """The sentences of `owners` leave between steps, unfinished and untold (their requests
        were cancelled: a client gone, a timeout). Returns how many left."""
        gone = [s.owner in owners for s in self.sentences]
        if any(gone):
            self._leave(torch.tensor(gone, device=self._own.device))
        return sum(gone)

    def _leave(self, done: Tensor) -> None:
        """The sentences with `done` (n,) leave the batch, the others kept in order of the
        caches' least copying (`compacting_order`)."""
        if done.all():  # empty: the next join starts a new batch
            self.steps, self.sentences, self.source_tokens = None, [], []
            self._table = self._progress = None
            return
        keep = compacting_order(done)
        kept = keep.tolist()
        self.sentences = [self.sentences[i] for i in kept]
        self.source_tokens = [self.source_tokens[i] for i in kept]
        self._own, self._scores = self._own[keep], self._scores[keep]
        self._limits = self._limits[keep]
        if self._table is not None:
            self._table, self._progress = self._table.select(keep), self._progress.select(keep)
        rows = (keep[:, None] * self.k + torch.arange(self.k, device=keep.device)).view(-1)
        self._tokens = self._tokens.index_select(0, rows)
        self.steps.select(keep)
