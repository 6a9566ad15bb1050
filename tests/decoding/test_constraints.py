import pytest
import torch

from transduce.decoding.config import DecodeConfig, Sampling
from transduce.decoding.constraints import Constraints, Progress, advance
from transduce.decoding.ensemble import Ensemble
from transduce.decoding.search import search
from transduce.errors import UserError

from ..conftest import beam_with, own_path_only, random_tokens, small_model
from .test_beam import _batch
from .test_ensemble import _members
from .test_greedy import _model_that_stops

KW = dict(max_len_a=0, max_len_b=12)


def _contains(tokens, term) -> bool:
    return any(tuple(tokens[i : i + len(term)]) == tuple(term) for i in range(len(tokens)))


def _constraints(n: int) -> list[list[list[int]]]:
    """Some sentences with none, one of one token, several, longer ones, overlapping ones."""
    shapes = [[], [[10]], [[11, 12, 13]], [[14], [15, 16]], [[17, 18], [18, 19]], [[20, 21], [20]]]
    return [shapes[i % len(shapes)] for i in range(n)]


@own_path_only  # a batch's outputs are a sentence's alone on every path: test_beam, test_greedy
@pytest.mark.parametrize("stopping", ["early", "exact", "finished"])
@pytest.mark.parametrize("k", [1, 4])
def test_every_constraint_is_in_every_output_batched_and_alone(k, stopping):
    model = _model_that_stops()
    src = _batch(12)
    constraints = _constraints(12)
    nbest = (k + 1) // 2
    kw = dict(KW, stopping=stopping)
    batched = beam_with(model, src, beam_size=k, nbest=nbest, constraints=constraints, **kw)
    for hyps, terms in zip(batched, constraints, strict=True):
        assert len(hyps) == nbest
        assert all(_contains(hyps[0].tokens, t) for t in terms), (hyps[0].tokens, terms)
        met = [all(_contains(h.tokens, t) for t in terms) for h in hyps]
        assert met == sorted(met, reverse=True)  # those that meet them first
    for i in range(12):
        row = src[i : i + 1, : int((src[i] != 1).sum())]
        alone = beam_with(model, row, beam_size=k, nbest=nbest, constraints=[constraints[i]],
                          **kw)
        assert [h.tokens for h in alone[0]] == [h.tokens for h in batched[i]]


def test_without_constraints_the_search_is_unchanged_to_the_bit():
    model = _model_that_stops()
    src = _batch(8)
    plain = beam_with(model, src, beam_size=4, nbest=2, **KW)
    assert beam_with(model, src, beam_size=4, nbest=2, constraints=None, **KW) == plain
    assert beam_with(model, src, beam_size=4, nbest=2, constraints=[[]] * 8, **KW) == plain
    # a sentence without constraints beside ones with: the same tokens as alone
    mixed = beam_with(model, src, beam_size=4, nbest=2,
                      constraints=[[] if i % 2 else [[10, 11]] for i in range(8)], **KW)
    assert [[h.tokens for h in mixed[i]] for i in range(1, 8, 2)] == \
        [[h.tokens for h in plain[i]] for i in range(1, 8, 2)]


def test_greedy_is_a_beam_of_one_when_constrained():
    model = _model_that_stops()
    src = _batch(6)
    constraints = _constraints(6)
    found = search(model, src, DecodeConfig(beam_size=1, **KW), constraints=constraints)
    expected = beam_with(model, src, beam_size=1, constraints=constraints, **KW)
    assert found == expected
    assert all(_contains(h[0].tokens, t)
               for h, c in zip(found, constraints, strict=True) for t in c)


def test_a_constraint_the_model_would_never_choose():
    model = _model_that_stops()
    src = _batch(4)
    plain = beam_with(model, src, beam_size=4, nbest=4, **KW)
    chosen = {t for hyps in plain for h in hyps for t in h.tokens}
    never = min(set(range(4, 50)) - chosen)  # in none of the 4 best of any sentence
    found = beam_with(model, src, beam_size=4, constraints=[[[never, never]]] * 4, **KW)
    assert all(_contains(h[0].tokens, (never, never)) for h in found)


def test_constraints_in_an_ensemble():
    ensemble = Ensemble(_members())
    src = _batch(6)
    constraints = _constraints(6)
    found = beam_with(ensemble, src, beam_size=3, constraints=constraints, **KW)
    for hyps, terms in zip(found, constraints, strict=True):
        assert all(_contains(hyps[0].tokens, t) for t in terms)


def test_with_a_forced_prefix_and_constraints_both_hold():
    model = _model_that_stops()
    src = _batch(4)
    found = beam_with(model, src, beam_size=4, prefixes=[[5, 6]] * 4,
                      constraints=[[[10]], [[6, 7]], [], [[11, 12]]], **KW)
    for hyps, terms in zip(found, [[[10]], [[6, 7]], [], [[11, 12]]], strict=True):
        assert hyps[0].tokens[:2] == (5, 6)
        assert all(_contains(hyps[0].tokens, t) for t in terms)


def test_constraints_longer_than_the_model_allows_give_the_best_that_does_not_meet_them():
    model = _model_that_stops(max_positions=16)
    src = _batch(2)
    found = beam_with(model, src, beam_size=2, constraints=[[[10] * 20], [[11]]], **KW)
    assert len(found[0]) == 1 and len(found[0][0].tokens) <= 14  # a fallback, not an error
    assert 11 in found[1][0].tokens


def test_the_score_is_the_log_probability_of_the_tokens():
    model = _model_that_stops()
    src = _batch(3)
    found = beam_with(model, src, beam_size=4, constraints=[[[10, 11]]] * 3, length_penalty=0.0,
                      **KW)
    for i, hyps in enumerate(found):
        tokens = torch.tensor([[2, *hyps[0].tokens]])
        with torch.no_grad():
            logits = model(src[i : i + 1], tokens)
        log_probs = logits.log_softmax(-1)[0]
        target = [*hyps[0].tokens, 3]
        total = sum(float(log_probs[t, tok]) for t, tok in enumerate(target))
        assert hyps[0].log_prob == pytest.approx(total, abs=1e-4)


def test_sampling_refuses_constraints():
    model = small_model()
    with pytest.raises(UserError, match="glossary"):
        search(model, random_tokens(1, 5), DecodeConfig(beam_size=1), sampling=Sampling(),
               constraints=[[[10]]])


def test_progress_advances_abandons_and_restarts():
    table = Constraints.of([[[5, 6, 7], [6, 8], [9]]], "cpu")
    progress = Progress.start(1, 1, "cpu")
    seen = []
    for token in [5, 6, 5, 6, 7, 6, 9, 8, 6, 8]:
        progress = advance(table, progress, torch.tensor([[token]]))
        seen.append((int(progress.met), int(progress.current), int(progress.position),
                     int(progress.produced(table))))
    assert seen == [
        (0, 0, 1, 1),  # 5: starts [5 6 7]
        (0, 0, 2, 2),  # 6: continues it
        (0, 0, 1, 1),  # 5: abandons it, and starts it again
        (0, 0, 2, 2),
        (1, -1, 0, 3),  # 7: [5 6 7] met
        (1, 1, 1, 4),  # 6: starts [6 8]
        (5, -1, 0, 4),  # 9: abandons [6 8]; [9] met at once
        (5, -1, 0, 4),  # 8: nothing
        (5, 1, 1, 5),
        (7, -1, 0, 6),  # every constraint met
    ]
    assert bool(progress.complete(table))


def test_more_constraints_than_a_sentence_can_carry_is_a_clear_error():
    with pytest.raises(UserError, match="at most 63"):
        Constraints.of([[[i] for i in range(64)]], "cpu")
