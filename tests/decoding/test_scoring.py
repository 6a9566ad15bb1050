"""Scoring given translations: the search's best output scores the search's own score, for the
model, an ensemble and its int8 copy, batched or alone."""

import math

import pytest
import torch

from transduce.decoding.beam import length_penalty
from transduce.decoding.config import DecodeConfig
from transduce.decoding.ensemble import Ensemble
from transduce.decoding.scoring import score

from ..conftest import beam_with, small_model
from .test_beam import _batch
from .test_greedy import _model_that_stops


@pytest.mark.parametrize("settings", [dict(length_penalty=0.6),
                                      dict(length_penalty=1.0, length_normalization="power"),
                                      dict(length_penalty=0.0, renormalize=True)])
def test_the_searchs_outputs_score_the_searchs_scores(settings):
    model = _model_that_stops()
    src = _batch(6)
    decode = DecodeConfig(beam_size=4, max_len_a=0, max_len_b=10, **settings)
    found = beam_with(model, src, nbest=3, **{k: getattr(decode, k) for k in (
        "beam_size", "max_len_a", "max_len_b", "length_penalty", "length_normalization",
        "renormalize")})
    for rank in range(3):
        targets = [list(hyps[rank].tokens) for hyps in found]
        scored = score(model, src, targets, decode)
        for hyps, got in zip(found, scored, strict=True):
            assert got.score == pytest.approx(hyps[rank].score, abs=1e-4)
            assert got.log_prob == pytest.approx(hyps[rank].log_prob, abs=1e-4)
            assert len(got.token_log_probs) == len(hyps[rank].tokens) + 1  # and <eos>
            assert got.per_token == pytest.approx(got.log_prob / len(got.token_log_probs))
            assert 0 < got.confidence <= 1


def test_a_score_is_the_sum_of_the_models_log_probabilities_alone_or_batched():
    """Teacher forcing by hand (the whole prefix through the model) gives the same; a pair
    scores the same alone and in a batch of others of other lengths."""
    model = small_model()
    src = _batch(4)
    targets = [[5, 6, 7], [], [9, 10, 11, 12, 13], [4]]
    decode = DecodeConfig(length_penalty=1.0, min_len=0)  # the empty target may end at once
    batched = score(model, src, targets, decode)
    for i, (target, got) in enumerate(zip(targets, batched, strict=True)):
        row = src[i:i + 1, : int((src[i] != 1).sum())]
        alone = score(model, row, [target], decode)[0]
        assert alone.token_log_probs == pytest.approx(got.token_log_probs, abs=1e-5)
        prefix = torch.tensor([[2, *target]])  # <bos> then the target
        with torch.no_grad():
            log_probs = torch.log_softmax(model(row, prefix)[0].float(), dim=-1)
        expected = [float(log_probs[t, y]) for t, y in enumerate([*target, 3])]
        assert list(got.token_log_probs) == pytest.approx(expected, abs=1e-4)
        assert got.score == pytest.approx(sum(expected) / length_penalty(len(target) + 1, 1.0),
                                          abs=1e-4)
    searched = score(model, src, targets, DecodeConfig(length_penalty=1.0))  # min_len 1
    assert searched[1].log_prob == float("-inf") and searched[1].confidence == 0.0
    assert [s.token_log_probs for s in searched[2:]] == [s.token_log_probs for s in batched[2:]]


def test_an_ensemble_scores_as_it_searches():
    members = [_model_that_stops(), small_model()]
    members[1].load_state_dict(members[0].state_dict())
    with torch.no_grad():
        for p in members[1].parameters():
            p.add_(0.01 * torch.randn_like(p))
    ensemble = Ensemble(members)
    src = _batch(3)
    decode = DecodeConfig(beam_size=3, max_len_a=0, max_len_b=8)
    found = beam_with(ensemble, src, beam_size=3, max_len_a=0, max_len_b=8)
    scored = score(ensemble, src, [list(h[0].tokens) for h in found], decode)
    assert [s.score for s in scored] == pytest.approx([h[0].score for h in found], abs=1e-4)
    assert all(math.isfinite(s.log_prob) for s in scored)
