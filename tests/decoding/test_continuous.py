"""Continuous batching: sentences joining a beam search between its steps, and leaving it when
finished, get what `beam_search` gives each alone, whatever they join and whenever."""

import random

import pytest
import torch

from transduce.decoding.beam import beam_search
from transduce.decoding.config import STOPPING, DecodeConfig
from transduce.decoding.continuous import ContinuousSearch
from transduce.decoding.ensemble import Ensemble

from .test_greedy import _model_that_stops

EOS = 3


def _sources(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randint(4, 49) for _ in range(rng.randint(1, 14))] + [EOS] for _ in range(n)]


def _arriving(search: ContinuousSearch, sources, prefixes=None, seed: int = 0,
              constraints=None) -> dict:
    """Sentences joining in small groups every few steps, until all are finished."""
    rng = random.Random(seed)
    queue, found, step = list(range(len(sources))), {}, 0
    while queue or search.active:
        if queue and step % rng.randint(1, 4) == 0:
            group = queue[:rng.randint(1, 5)]
            queue = queue[len(group):]
            search.join([sources[i] for i in group], group,
                        [prefixes[i] for i in group] if prefixes else None,
                        [constraints[i] for i in group] if constraints else None)
        for owner, hypotheses in search.step():
            assert owner not in found
            found[owner] = hypotheses
        step += 1
    return found


@pytest.mark.parametrize("decode, nbest", [
    (DecodeConfig(beam_size=4, max_len_b=12), 1),
    (DecodeConfig(beam_size=4, max_len_b=12, length_penalty=1.0), 3),
    (DecodeConfig(beam_size=3, max_len_b=10, stopping="exact", min_len=3), 2),
    (DecodeConfig(beam_size=4, max_len_b=12, length_penalty=2.0, stopping="finished"), 2),
    (DecodeConfig(beam_size=3, max_len_a=0.5, max_len_b=3, length_normalization="power",
                  renormalize=True), 1),
    (DecodeConfig(beam_size=1, max_len_b=9), 1),
])
def test_joining_sentences_get_what_beam_search_gives_each_alone(decode, nbest):
    model = _model_that_stops()
    sources = _sources(20)
    alone = [beam_search(model, torch.tensor([s]), decode, nbest=nbest)[0] for s in sources]
    found = _arriving(ContinuousSearch(model, decode, nbest), sources)
    assert [[h.tokens for h in found[i]] for i in range(len(sources))] == \
        [[h.tokens for h in hyps] for hyps in alone]
    assert [h.score for i in range(len(sources)) for h in found[i]] == pytest.approx(
        [h.score for hyps in alone for h in hyps], abs=1e-5)
    assert len({len(hyps[0].tokens) for hyps in alone}) > 1  # finished at different steps


def test_sentences_dropped_between_steps_leave_and_the_others_get_what_they_get_alone():
    """`drop`: a server's cancelled requests leave the search; the sentences left are searched
    as before, and a search all of whose sentences were dropped starts again at the next join."""
    model, decode = _model_that_stops(), DecodeConfig(beam_size=4, max_len_b=12)
    sources = _sources(20, seed=1)
    alone = [beam_search(model, torch.tensor([s]), decode)[0] for s in sources]
    search, rng = ContinuousSearch(model, decode), random.Random(2)
    queue, found, dropped, step = list(range(len(sources))), {}, set(), 0
    while queue or search.active:
        if queue and step % 2 == 0:
            search.join([sources[i] for i in queue[:3]], queue[:3])
            queue = queue[3:]
        if step % 3 == 1 and search.active:
            owner = rng.choice([s.owner for s in search.sentences])
            assert search.drop({owner, "nobody's"}) == 1
            dropped.add(owner)
        for owner, hypotheses in search.step():
            found[owner] = hypotheses
        step += 1
    assert dropped and not dropped & found.keys()
    assert found.keys() | dropped == set(range(len(sources)))
    assert {i: [h.tokens for h in found[i]] for i in found} == \
        {i: [h.tokens for h in alone[i]] for i in found}

    search.join(sources[:2], ["a", "b"])
    search.step()
    assert search.drop({"a", "b"}) == 2 and not search.active and not search.step()
    search.join(sources[2:3], ["c"])
    while search.active:
        finished = search.step()
    assert [h.tokens for h in finished[0][1]] == [h.tokens for h in alone[2]]


def test_forced_prefixes_and_an_ensemble_join_too():
    first = _model_that_stops()
    torch.manual_seed(1)
    ensemble = Ensemble([first, _model_that_stops(n_decoder_layers=2, d_ff=40)])
    sources = _sources(12, seed=1)
    prefixes = [[5 + i % 7] * (i % 3) for i in range(len(sources))]
    decode = DecodeConfig(beam_size=3, max_len_b=10)
    for model in (first, ensemble):
        alone = [beam_search(model, torch.tensor([s]), decode, prefixes=[p])[0]
                 for s, p in zip(sources, prefixes, strict=True)]
        found = _arriving(ContinuousSearch(model, decode), sources, prefixes, seed=2)
        assert [found[i][0].tokens for i in range(len(sources))] == [h[0].tokens for h in alone]
        assert all(found[i][0].tokens[:len(p)] == tuple(p) for i, p in enumerate(prefixes))


@pytest.mark.parametrize("beam_size", [1, 4])
def test_sentences_with_constraints_join_and_get_what_beam_search_gives_alone(beam_size):
    model = _model_that_stops()
    sources = _sources(16, seed=3)
    # some with none, so that some groups join with none beside some with
    constraints = [[[], [[10]], [[11, 12, 13]], [[14], [15, 16]]][i % 4] if i % 5 else []
                   for i in range(len(sources))]
    prefixes = [[7] if i % 3 == 0 else [] for i in range(len(sources))]
    decode = DecodeConfig(beam_size=beam_size, max_len_b=10)
    alone = [beam_search(model, torch.tensor([s]), decode, prefixes=[p], constraints=[c])[0]
             for s, p, c in zip(sources, prefixes, constraints, strict=True)]
    found = _arriving(ContinuousSearch(model, decode), sources, prefixes, seed=4,
                      constraints=constraints)
    assert [found[i][0].tokens for i in range(len(sources))] == [h[0].tokens for h in alone]
    for i, terms in enumerate(constraints):
        for term in terms:
            assert any(found[i][0].tokens[j : j + len(term)] == tuple(term)
                       for j in range(len(found[i][0].tokens)))


def _holds(tokens: tuple[int, ...], term: list[int]) -> bool:
    return any(tokens[j : j + len(term)] == tuple(term) for j in range(len(tokens)))


@pytest.mark.parametrize("stopping", STOPPING)
def test_a_sentence_short_of_hypotheses_that_met_its_constraints_ends_at_its_limit(stopping):
    """Short limits and several terms: some sentences reach their limit with fewer than n-best
    hypotheses that met them. Continuous batching has no loop bound of its own, so such a
    sentence must be done where no beam can go on, under every rule (under early and exact it
    went on past the model's positions and failed its batch), made up from hypotheses that
    missed them, as beam search gives it alone."""
    model = _model_that_stops()
    rng = random.Random(5)
    missed = 0
    for _ in range(24):
        decode = DecodeConfig(beam_size=rng.choice([1, 2, 3]), max_len_a=0.0,
                              max_len_b=rng.randint(1, 5), stopping=stopping)
        source = [rng.randint(4, 49) for _ in range(rng.randint(1, 6))] + [EOS]
        terms = [[rng.randint(4, 49) for _ in range(rng.randint(1, 3))]
                 for _ in range(rng.randint(1, 4))]
        nbest = rng.choice([1, 2]) if decode.beam_size > 1 else 1
        alone = beam_search(model, torch.tensor([source]), decode, nbest=nbest,
                            constraints=[terms])[0]
        search = ContinuousSearch(model, decode, nbest)
        search.join([source], ["it"], None, [terms])
        found = []
        for _ in range(model.config.max_positions - 1):
            found = search.step()
            if found:
                break
        assert [owner for owner, _ in found] == ["it"] and not search.active
        assert [h.tokens for h in found[0][1]] == [h.tokens for h in alone]
        assert [h.score for h in found[0][1]] == pytest.approx([h.score for h in alone],
                                                               abs=1e-5)
        missed += any(not all(_holds(h.tokens, term) for term in terms) for h in alone)
    assert missed  # the case in question came up


def test_a_busy_search_keeps_its_cache_short():
    """Sentences joining every step for long: the self-attention cache drops the positions no
    sentence reads any more, so it stays within a few sentences' lengths."""
    model = _model_that_stops()
    decode = DecodeConfig(beam_size=2, max_len_a=0, max_len_b=8)
    search = ContinuousSearch(model, decode)
    sources, lengths, finished = _sources(150, seed=3), [], 0
    for i, source in enumerate(sources):
        search.join([source], [i])
        finished += len(search.step())
        lengths.append(search.steps.cache.length)
    assert max(lengths[50:]) <= 2 * (decode.max_len_b + 2)  # not the 150 steps it has run
    assert finished > 100
