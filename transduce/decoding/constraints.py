"""Lexically constrained beam search: target token sequences that every output must contain
(a glossary's terms), by dynamic beam allocation (Post & Vilar 2018, "Fast Lexically
Constrained Decoding with Dynamic Beam Allocation"), vectorised over the batch as in Hu et al.
2019 ("Improved Lexically Constrained Decoding for Translation and Monolingual Rewriting").

Each hypothesis carries its progress: the constraints it has produced (a bit each) and the one
it is spelling out, if any (its index and how many of its tokens are out). A token that is the
next of that constraint advances it; another token abandons it (it is unmet again) and may
start any unmet constraint that begins with it. `beam_search` then extends each beam not only
by its sentence's best tokens but also by every token that advances a constraint and by the
beam's own best token; groups the candidates into banks by how many constraint tokens they have
produced; and fills the k beams round-robin from the banks, the furthest bank first, each bank
best first (fairseq's striping). So a beam always makes progress, while others keep the model's
own choices and meet the constraints where the model would. <eos> may only follow a hypothesis
that has met all its sentence's constraints, except at the length limit, where a hypothesis that
has not becomes a fallback: returned only where no hypothesis met them all.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from transduce.errors import UserError

MAX_CONSTRAINTS = 63  # a sentence's, as bits of one int64


@dataclass(frozen=True)
class Constraints:
    """Each sentence's constraints as a table: `tokens` (n, J, L) padded with -1, `lengths`
    (n, J) (0 where a sentence has fewer than J)."""

    tokens: Tensor
    lengths: Tensor

    @classmethod
    def of(cls, constraints: list[list[list[int]]], device) -> Constraints:
        """From each sentence's list of token sequences. Empty ones are dropped, and so are
        repeats and those inside another of the sentence's (met when it is)."""
        constraints = [_outermost(sentence) for sentence in constraints]
        most = max(map(len, constraints), default=0)
        if most > MAX_CONSTRAINTS:
            raise UserError(f"a sentence with {most} glossary terms: at most {MAX_CONSTRAINTS}")
        longest = max((len(c) for sentence in constraints for c in sentence), default=0)
        tokens = torch.full((len(constraints), most, max(longest, 1)), -1, dtype=torch.long)
        lengths = torch.zeros(len(constraints), most, dtype=torch.long)
        for i, sentence in enumerate(constraints):
            for j, c in enumerate(sentence):
                tokens[i, j, : len(c)] = torch.tensor(c, dtype=torch.long)
                lengths[i, j] = len(c)
        return cls(tokens.to(device), lengths.to(device))

    @property
    def totals(self) -> Tensor:
        """(n,) the constraint tokens each sentence must produce."""
        return self.lengths.sum(dim=1)

    def select(self, index: Tensor) -> Constraints:
        return Constraints(self.tokens[index], self.lengths[index])

    def cat(self, other: Constraints) -> Constraints:
        """These sentences' constraints followed by `other`'s (padded to the larger table)."""
        j = max(self.tokens.shape[1], other.tokens.shape[1])
        length = max(self.tokens.shape[2], other.tokens.shape[2])

        def pad(c: Constraints) -> tuple[Tensor, Tensor]:
            n, cj, cl = c.tokens.shape
            tokens = c.tokens.new_full((n, j, length), -1)
            tokens[:, :cj, :cl] = c.tokens
            lengths = c.lengths.new_zeros(n, j)
            lengths[:, :cj] = c.lengths
            return tokens, lengths

        (a, la), (b, lb) = pad(self), pad(other)
        return Constraints(torch.cat([a, b]), torch.cat([la, lb]))


@dataclass(frozen=True)
class Progress:
    """Each hypothesis's progress through its sentence's constraints, (n, width) each: `met`
    a bit per constraint produced, `current` the constraint being produced (-1: none),
    `position` how many of its tokens are out."""

    met: Tensor
    current: Tensor
    position: Tensor

    @classmethod
    def start(cls, n: int, width: int, device) -> Progress:
        zeros = torch.zeros(n, width, dtype=torch.long, device=device)
        return cls(zeros, zeros - 1, zeros)

    def gather(self, index: Tensor) -> Progress:
        """Each sentence's hypotheses `index` (n, m) of its own."""
        return Progress(*(t.gather(1, index) for t in (self.met, self.current, self.position)))

    def select(self, rows: Tensor) -> Progress:
        """Sentences `rows`, in that order."""
        return Progress(self.met[rows], self.current[rows], self.position[rows])

    def cat(self, other: Progress) -> Progress:
        return Progress(torch.cat([self.met, other.met]), torch.cat([self.current, other.current]),
                        torch.cat([self.position, other.position]))

    def produced(self, c: Constraints) -> Tensor:
        """(n, width) constraint tokens produced: all of each met constraint, and those of the
        current one (its bank)."""
        done = (_bits(self.met, c.lengths.shape[1]) * c.lengths[:, None, :]).sum(dim=2)
        return done + torch.where(self.current >= 0, self.position, 0)

    def complete(self, c: Constraints) -> Tensor:
        """(n, width) whether every constraint is met."""
        return self.produced(c) == c.totals[:, None]


def forbid_unmet_eos(log_probs: Tensor, progress: Progress, c: Constraints, at_limit: Tensor,
                     eos: int) -> None:
    """No <eos> (in place in log_probs (n, width, V)) after a hypothesis that has not met its
    constraints, unless its sentence is at the length limit (`at_limit` (n,))."""
    unmet = ~progress.complete(c) & ~at_limit[:, None]
    log_probs[..., eos].masked_fill_(unmet, float("-inf"))


def contenders(scores: Tensor, progress: Progress, c: Constraints) -> Tensor:
    """The beams' scores (n, width) as early stopping weighs them: -inf for a beam that has not
    met its constraints, which cannot end now. (Weighed as if it could, a beam that has spent
    nothing on the constraints yet keeps the search going long after a good hypothesis has met
    them, into long outputs that a strong length penalty then prefers: on Multi30k val with
    terms from the references, 20.86 BLEU against 30.78 without terms; 32.35 with this rule,
    docs/translating.md.)"""
    return scores.masked_fill(~progress.complete(c), float("-inf"))


def advance(c: Constraints, progress: Progress, tokens: Tensor) -> Progress:
    """The progress (n, m) after each hypothesis of `progress` (n, m) appends `tokens` (n, m)."""
    n, j, length = c.tokens.shape
    if j == 0:
        return progress
    met, current, position = progress.met, progress.current, progress.position
    flat = c.tokens.view(n, j * length)
    now = current.clamp(min=0)
    expected = flat.gather(1, now * length + position.clamp(max=length - 1))
    going = (current >= 0) & (tokens == expected)
    position = torch.where(going, position + 1, 0)
    ended = going & (position == c.lengths.gather(1, now))
    met = met | torch.where(ended, _bit(now), 0)
    current = torch.where(going & ~ended, current, -1)
    position = torch.where(current >= 0, position, 0)
    # a token that does not continue may start an unmet constraint (the first one it begins)
    unmet = (_bits(met, j) == 0) & (c.lengths[:, None, :] > 0)
    starts = unmet & (c.tokens[:, None, :, 0] == tokens[:, :, None]) & ~going[:, :, None]
    started = starts.any(dim=2)
    which = starts.to(torch.int8).argmax(dim=2)
    whole = started & (c.lengths.gather(1, which) == 1)
    met = met | torch.where(whole, _bit(which), 0)
    opened = started & ~whole
    return Progress(met, torch.where(opened, which, current), torch.where(opened, 1, position))


def advancing_tokens(c: Constraints, progress: Progress) -> Tensor:
    """(n, width, J + 1) the tokens that advance each hypothesis (-1: none): the next of its
    current constraint, and the first of each unmet one."""
    n, j, length = c.tokens.shape
    current, position = progress.current, progress.position
    if j == 0:
        return torch.full_like(current, -1)[:, :, None]
    flat = c.tokens.view(n, j * length)
    expected = flat.gather(1, current.clamp(min=0) * length + position.clamp(max=length - 1))
    expected = torch.where(current >= 0, expected, -1)
    unmet = (_bits(progress.met, j) == 0) & (c.lengths[:, None, :] > 0)
    firsts = torch.where(unmet, c.tokens[:, None, :, 0], -1)
    return torch.cat([expected[:, :, None], firsts], dim=2)


def extensions(c: Constraints, progress: Progress, scores: Tensor, log_probs: Tensor,
               top_scores: Tensor, beam: Tensor, token: Tensor
               ) -> tuple[Tensor, Tensor, Tensor, Progress]:
    """The candidates of a constrained step, in the order beams are filled from them.

    scores (n, width) and log_probs (n, width, V) as `beam_search` has them; top_scores, beam,
    token (n, m) the sentence's m best extensions. Adds each beam's advancing tokens and its own
    best token, drops repeats, and orders them all by bank round-robin (the furthest bank first,
    each bank best first, candidates of -inf last). Returns the first m: their total
    log-probabilities, beams, tokens and progress, each (n, m).
    """
    n, width, vocab = log_probs.shape
    m = top_scores.shape[1]
    extra = torch.cat([log_probs.argmax(dim=2, keepdim=True), advancing_tokens(c, progress)], 2)
    extra_scores = scores[:, :, None] + log_probs.gather(2, extra.clamp(min=0))
    extra_scores = extra_scores.masked_fill(extra < 0, float("-inf"))
    extra_beam = torch.arange(width, device=beam.device)[None, :, None].expand_as(extra)
    every_score = torch.cat([top_scores, extra_scores.reshape(n, -1)], dim=1)
    every_beam = torch.cat([beam, extra_beam.reshape(n, -1)], dim=1)
    every_token = torch.cat([token, extra.clamp(min=0).reshape(n, -1)], dim=1)
    # a repeat of an earlier candidate (the same beam and token) is dropped
    key = every_beam * vocab + every_token
    sorted_key, where = key.sort(dim=1, stable=True)
    repeat = torch.zeros_like(key, dtype=torch.bool)
    repeat.scatter_(1, where[:, 1:], sorted_key[:, 1:] == sorted_key[:, :-1])
    every_score = every_score.masked_fill(repeat, float("-inf"))

    after = advance(c, progress.gather(every_beam), every_token)
    bank = after.produced(c)
    alive = every_score.isfinite()
    # round-robin over the banks: sort by bank (furthest first), then best first within each;
    # a candidate's stripe is its rank within its bank
    by_score = every_score.argsort(dim=1, descending=True, stable=True)
    by_bank = bank.gather(1, by_score).argsort(dim=1, descending=True, stable=True)
    ranked = by_score.gather(1, by_bank)
    ranked_bank = bank.gather(1, ranked)
    positions = torch.arange(ranked.shape[1], device=ranked.device).expand_as(ranked)
    first = torch.ones_like(ranked_bank, dtype=torch.bool)
    first[:, 1:] = ranked_bank[:, 1:] != ranked_bank[:, :-1]
    stripe = positions - torch.where(first, positions, 0).cummax(dim=1).values
    top = int(bank.max()) + 1 if bank.numel() else 1
    order_key = stripe * top + (top - 1 - ranked_bank)
    order_key = order_key.masked_fill(~alive.gather(1, ranked), torch.iinfo(torch.long).max)
    order = ranked.gather(1, order_key.argsort(dim=1, stable=True))[:, :m]
    return (every_score.gather(1, order), every_beam.gather(1, order),
            every_token.gather(1, order), after.gather(order))


def _outermost(sequences: list[list[int]]) -> list[list[int]]:
    """`sequences` without empty ones, repeats, and those inside another, in order."""
    unique = list(dict.fromkeys(tuple(s) for s in sequences if s))
    return [list(s) for s in unique
            if not any(len(o) > len(s) and _inside(s, o) for o in unique)]


def _inside(short: tuple[int, ...], long: tuple[int, ...]) -> bool:
    return any(long[i : i + len(short)] == short for i in range(len(long) - len(short) + 1))


def _bit(index: Tensor) -> Tensor:
    return torch.ones_like(index) << index


def _bits(met: Tensor, j: int) -> Tensor:
    """(..., j) the bits of `met` (...)."""
    return (met[..., None] >> torch.arange(j, device=met.device)) & 1
