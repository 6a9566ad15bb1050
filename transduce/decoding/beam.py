"""Batched beam search with GNMT length normalisation, on the key/value cache.

Each sentence keeps `beam_size` live hypotheses. At every step the 2k best one-token extensions
of a sentence's beams are ranked by total log-probability: an extension ending in <eos> among
the top k becomes a finished hypothesis, scored by log p(y) / lp(|y|) with
lp(n) = ((5 + n) / 6)^alpha; the k best others continue. A sentence is done once it holds
`nbest` finished hypotheses and no live one is better than the worst of them:
- stopping="early" (the default) compares a live beam's score at the length it would have if it
  ended now, close to Hugging Face generate()'s default heuristic;
- stopping="exact" compares the best score a live beam could still reach (its log-probability
  can only fall, while lp grows with length up to the sentence's maximum), so the result is
  provably the best under the length penalty, at a cost: more rows searched for longer, about
  twice the time on Multi30k (docs/translating.md);
- stopping="finished" compares nothing: a sentence is done once `beam_size` hypotheses have
  finished, as CTranslate2 (patience 1), fairseq and generate(early_stopping=True) stop.
Either way the best finished hypothesis is returned, whatever its length or when it finished,
never simply the first to finish; done sentences leave the decoder's batch.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from transduce.decoding import constraints as lexical
from transduce.decoding.config import DecodeConfig
from transduce.decoding.ranking import top_k
from transduce.decoding.searchable import Searchable
from transduce.decoding.steps import compacting_order, forced_prefix, max_output_lengths

BEAM = DecodeConfig()


@dataclass(frozen=True, order=True)
class Hypothesis:
    score: float  # log p(y) / lp(|y|): what hypotheses are ranked by
    log_prob: float  # log p(y | x), <eos> included
    tokens: tuple[int, ...]  # without <bos> and <eos>


def length_penalty(length: int | Tensor, alpha: float, form: str = "gnmt"):
    """GNMT's lp(|y|) = ((5 + |y|) / 6)^alpha, or with form="power" |y|^alpha (the form of
    Hugging Face generate() and CTranslate2); |y| counts the output tokens with <eos>."""
    return (((5 + length) / 6) if form == "gnmt" else length) ** alpha


@torch.no_grad()
def beam_search(model: Searchable, src: Tensor, decode: DecodeConfig = BEAM, *,
                nbest: int = 1, prefixes: list[list[int]] | None = None,
                constraints: list[list[list[int]]] | None = None, use_cache: bool = True,
                on_done: Callable[[int, list[Hypothesis]], None] | None = None,
                ) -> list[list[Hypothesis]]:
    """The `nbest` best hypotheses of each source in src (B, S), best first, searched as
    `decode` says (beam_size, length_penalty, length_normalization, stopping, the length limits,
    renormalize). `prefixes` force the first target tokens of each sentence; `constraints`
    give each sentence token sequences that its outputs must contain (a glossary's terms:
    transduce.decoding.constraints). `on_done(i, hypotheses)` is told of each sentence's as
    soon as its search is over."""
    config = model.config
    eos, k, alpha = config.eos_id, decode.beam_size, decode.length_penalty
    form, min_len, renormalize = decode.length_normalization, decode.min_len, decode.renormalize
    if not 1 <= nbest <= k:
        raise ValueError(f"nbest must be between 1 and the beam size {k}, got {nbest}")
    batch, device = src.shape[0], src.device
    steps = model.steps(src, use_cache=use_cache)  # one row per sentence, then k
    forced, forced_len = forced_prefix(prefixes, batch, device)
    limits = max_output_lengths(steps.src_lengths, decode, config.max_positions)
    limits = torch.maximum(limits, forced_len)
    table = progress = None
    if constraints is not None and any(map(any, constraints)):
        table = lexical.Constraints.of(constraints, device)
        limits = torch.maximum(limits, forced_len + table.totals).clamp(
            max=config.max_positions - 2)  # where they do not fit, the best that does not meet them
        progress = lexical.Progress.start(batch, 1, device)
    steps.limit(int(limits.max()) + 1)  # <bos> and a token for each step
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]  # min-heaps of the nbest best
    ended = [0] * batch  # how many hypotheses of each sentence have finished
    fallback: list[list[Hypothesis]] = [[] for _ in range(batch)]  # constraints unmet at limit
    active = torch.arange(batch, device=device)  # the sentence of each group of `width` rows
    # all beams start equal, so the first step runs one row per sentence (the same work k times
    # over otherwise) and its k best extensions become the k beams
    width = 1
    scores = torch.zeros(batch, width, device=device)  # log p(prefix) of each row's prefix
    tokens = torch.zeros(batch, 0, dtype=torch.long, device=device)  # outputs so far
    for step in range(int(limits.max()) + 1):
        n = len(active)
        log_probs = steps.log_probs().view(n, width, -1)  # (n, width, V)
        vocab = log_probs.shape[-1]
        at_limit = step >= limits[active]  # only <eos> may follow
        if step < forced.shape[1]:  # only the forced token may follow
            rows = step < forced_len[active]
            allowed = forced[active, step].clamp(min=0)
            keep = F.one_hot(allowed, vocab).bool()[:, None, :]
            log_probs[rows] = log_probs[rows].masked_fill(~keep[rows], float("-inf"))
        candidates = extend(log_probs, scores, k, eos, early=step < min_len, at_limit=at_limit,
                       table=table, progress=progress, renormalize=renormalize)

        # finished hypotheses: <eos> among a sentence's top k candidates
        ends = candidates.ends(k)
        if ends:
            prefix = tokens.view(n, width, -1)
            for row, rank, met in ends:
                sentence = int(active[row])
                ended[sentence] += met
                _add((finished if met else fallback)[sentence], nbest, Hypothesis(
                    float(candidates.scores[row, rank]) / length_penalty(step + 1, alpha, form),
                    float(candidates.scores[row, rank]),
                    tuple(prefix[row, candidates.beam[row, rank]].tolist())))

        # the k best extensions that go on; as many as can stay in their parent's row do
        scores, beam, token, progress = candidates.going_on(k, in_parents=width == k)
        rows = (torch.arange(n, device=device)[:, None] * width + beam).view(-1)
        tokens = torch.cat([tokens.index_select(0, rows), token.view(-1, 1)], dim=1)
        if width == 1:  # each sentence's row becomes its k beams (which share its source side)
            steps.split(k)
            width = k
        else:
            steps.reorder_beams(rows)
        steps.append(token.view(-1))

        alive = active.tolist()
        done = sentences_done([finished[i] for i in alive], [ended[i] for i in alive], scores,
                              progress, table, limits[active].tolist(), [step] * n, nbest, decode)
        if on_done is not None:
            for sentence in active[done].tolist():
                on_done(sentence, _best(finished[sentence], fallback[sentence], nbest))
        if done.all():
            break
        if done.any():
            keep = compacting_order(done)
            active, scores = active[keep], scores[keep]
            if table is not None:
                table, progress = table.select(keep), progress.select(keep)
            rows = (keep[:, None] * k + torch.arange(k, device=device)).view(-1)
            tokens = tokens.index_select(0, rows)
            steps.select(keep)
    return [_best(hyps, unmet, nbest) for hyps, unmet in zip(finished, fallback, strict=True)]


def _best(finished: list[Hypothesis], fallback: list[Hypothesis], nbest: int
          ) -> list[Hypothesis]:
    """The nbest best of `finished`, made up from `fallback` (hypotheses that did not meet
    their constraints) where there are fewer."""
    return (sorted(finished, reverse=True) + sorted(fallback, reverse=True))[:nbest]


@dataclass
class Extensions:
    """A step's candidate extensions of each sentence's beams, (n, 2k) each, in the order beams
    are filled from them: total log-probabilities, the beams they extend, their tokens, whether
    they end (<eos>), and with constraints each one's progress and whether it has met them."""

    scores: Tensor
    beam: Tensor
    token: Tensor
    is_eos: Tensor
    progress: lexical.Progress | None = None
    complete: list[list[bool]] | None = None

    def ends(self, k: int) -> list[tuple[int, int, bool]]:
        """(row, rank, constraints met) of the candidates among each sentence's top k that end
        in <eos>: its finished hypotheses."""
        return [(row, rank, self.complete is None or self.complete[row][rank])
                for row, rank in self.is_eos[:, :k].nonzero().tolist()]

    def going_on(self, k: int, in_parents: bool | Tensor
                 ) -> tuple[Tensor, Tensor, Tensor, lexical.Progress | None]:
        """The k best candidates that do not end (there are at least k among 2k: one <eos> per
        beam): their scores, beams, tokens (n, k) and progress. Where `in_parents` (for every
        sentence, or (n,) each), the new beams are ordered so that as many as can stay in their
        parent's row do, and fewer rows move (`_in_parents_rows`)."""
        order = torch.argsort(self.is_eos.to(torch.int8), dim=1, stable=True)[:, :k]
        if in_parents is not False:
            moved = order.gather(1, _in_parents_rows(self.beam.gather(1, order)))
            order = moved if in_parents is True else torch.where(in_parents[:, None], moved,
                                                                 order)
        progress = None if self.progress is None else self.progress.gather(order)
        return (self.scores.gather(1, order), self.beam.gather(1, order),
                self.token.gather(1, order), progress)


def extend(log_probs: Tensor, scores: Tensor, k: int, eos: int, *, early: bool | Tensor,
           at_limit: Tensor, table: lexical.Constraints | None,
           progress: lexical.Progress | None, renormalize: bool) -> Extensions:
    """One step of beam search over the next token's log-probabilities (n, width, V), which it
    may change: no <eos> where `early` (before the minimum length; for every sentence, or (n,)
    each), only <eos> where `at_limit` (n,), none before a beam has met its constraints; then
    the 2k best extensions of each sentence's beams (log-probabilities `scores` (n, width))."""
    vocab = log_probs.shape[-1]
    if early is True:
        log_probs[..., eos] = float("-inf")
    elif early is not False and early.any():
        log_probs[early, :, eos] = float("-inf")
    if at_limit.any():
        log_probs[at_limit] = log_probs[at_limit].masked_fill(
            torch.arange(vocab, device=log_probs.device) != eos, float("-inf"))
    if table is not None:
        lexical.forbid_unmet_eos(log_probs, progress, table, at_limit, eos)
    if renormalize:  # over the tokens this step allows (Hugging Face's renormalize_logits)
        log_probs = torch.log_softmax(log_probs, dim=-1)
    top_scores, beam, token = _best_extensions(scores, log_probs, 2 * k)
    after = complete = None
    if table is not None:  # in the order beams are filled from them
        top_scores, beam, token, after = lexical.extensions(
            table, progress, scores, log_probs, top_scores, beam, token)
        complete = after.complete(table).tolist()
    return Extensions(top_scores, beam, token, token.eq(eos) & top_scores.isfinite(), after,
                      complete)


def _best_extensions(scores: Tensor, log_probs: Tensor, m: int) -> tuple[Tensor, Tensor, Tensor]:
    """The m best one-token extensions of each sentence's beams, best first: their total
    log-probabilities, beams and tokens, each (n, m).

    scores (n, width) are the beams' log-probabilities, log_probs (n, width, V) the next token's.
    A sentence's m best are among the m best of each of its beams, so the beams' scores are
    added to those (n, width, m) and not to all n * width * V log-probabilities; where a beam
    has fewer than m tokens, the missing ones are -inf.
    """
    n, width, vocab = log_probs.shape
    beam_scores, beam_tokens = top_k(log_probs.view(n * width, vocab), min(m, vocab))
    beam_scores, beam_tokens = beam_scores.view(n, width, -1), beam_tokens.view(n, width, -1)
    if vocab < m:
        beam_scores = F.pad(beam_scores, (0, m - vocab), value=float("-inf"))
        beam_tokens = F.pad(beam_tokens, (0, m - vocab))
    candidates = (scores[:, :, None] + beam_scores).view(n, width * m)
    top_scores, top = candidates.topk(m, dim=1)
    return top_scores, top // m, beam_tokens.view(n, width * m).gather(1, top)


def _in_parents_rows(parent: Tensor) -> Tensor:
    """Where each sentence's new beams go, given their parents (n, k): the first (best) child of
    each parent into its parent's row, the others into the rows of parents without children, in
    order. Returns (n, k): row r of a sentence receives its new beam [:, r]. The cache and the
    prefixes then move only where a parent has two children or more: 26% of the rows when beam 5
    translated Multi30k test2016 with a trained model, instead of all of them."""
    n, k = parent.shape
    rows = torch.arange(k, device=parent.device)
    siblings = parent[:, :, None] == parent[:, None, :]  # (n, k, k)
    first = ~(siblings & (rows[:, None] > rows)).any(2)  # no better sibling
    taken = ((parent[:, :, None] == rows) & first[:, :, None]).any(1)  # (n, rows)
    free = torch.argsort(taken.to(torch.int8), dim=1, stable=True)  # untaken rows first, in order
    row = torch.where(first, parent, free.gather(1, ((~first).cumsum(1) - 1).clamp(min=0)))
    return torch.empty_like(row).scatter_(1, row, rows.expand(n, k))


def _add(heap: list[Hypothesis], k: int, hypothesis: Hypothesis) -> None:
    if len(heap) < k:
        heapq.heappush(heap, hypothesis)
    elif hypothesis > heap[0]:
        heapq.heapreplace(heap, hypothesis)


def sentences_done(heaps: list[list[Hypothesis]], ended: list[int], scores: Tensor,
                   progress: lexical.Progress | None, table: lexical.Constraints | None,
                   limits: list[int], steps: list[int], nbest: int, decode: DecodeConfig
                   ) -> Tensor:
    """Which sentences are done (n,): those with nbest finished hypotheses (`heaps`) that no
    live beam (log-probabilities `scores` (n, k)) beats: at the length it would have if it
    ended next, after `steps` steps, or (exact stopping) at the best length still possible
    within `limits`. With constraints, early stopping weighs only the beams that have met
    them (a beam that could end now). Stopping "finished": those of which `ended` counts
    beam_size finished hypotheses (with constraints, that have met them). Under every rule, also
    those where no beam can go on (past the length limit), however few they hold: a sentence
    whose hypotheses all missed its constraints (continuous batching has no other bound)."""
    best = scores.max(dim=1).values
    stuck = best == float("-inf")  # past the limit: ends, whatever it holds
    if decode.stopping == "finished":
        return stuck | torch.tensor(ended, device=scores.device).ge(decode.beam_size)
    alpha, form = decode.length_penalty, decode.length_normalization
    exact = decode.stopping == "exact"
    if table is not None and not exact:  # only the beams that have met the constraints
        best = lexical.contenders(scores, progress, table).max(dim=1).values
    done = stuck.cpu()
    best_live = best.tolist()  # log-probabilities: they only fall
    for row, heap in enumerate(heaps):
        if done[row] or len(heap) < nbest:
            continue
        if best_live[row] == float("-inf"):
            done[row] = True
            continue
        # a live beam has steps + 1 tokens; ending next, steps + 2 with <eos>. Exact: the best
        # it can reach is its log-prob now over the largest (alpha >= 0) length penalty possible
        length = limits[row] + 1 if exact and alpha >= 0 else steps[row] + 2
        done[row] = best_live[row] / length_penalty(length, alpha, form) <= heap[0].score
    return done.to(scores.device)
