import pytest
import torch

from transduce.decoding.beam import length_penalty
from transduce.decoding.ensemble import Ensemble

from ..conftest import beam_with, greedy_with, random_tokens, small_model
from .test_beam import _batch
from .test_greedy import _model_that_stops

PAD, BOS, EOS = 1, 2, 3


def _members():
    """Two models of different shapes that finish their outputs at different steps."""
    first = _model_that_stops()
    torch.manual_seed(1)
    second = _model_that_stops(n_decoder_layers=2, d_ff=40)
    return first, second


def _mean_log_probs(models, src, tgt):
    """log of the models' mean next-token probability after tgt (1, T), the slow way."""
    probs = [torch.softmax(m(src, tgt)[0, -1].float(), -1) for m in models]
    return torch.stack(probs).mean(0).log()


def test_ensemble_greedy_equals_slow_greedy_on_the_mean_distribution():
    models = _members()
    src = _batch()
    fast = greedy_with(Ensemble(models), src, max_len_a=0, max_len_b=12)
    for row, out in zip(src, fast, strict=True):
        row = row[row != PAD][None]
        tgt = torch.tensor([[BOS]])
        for step in range(12):
            log_probs = _mean_log_probs(models, row, tgt)
            log_probs[[PAD, BOS, *([EOS] if step == 0 else [])]] = float("-inf")  # min_len 1
            token = int(log_probs.argmax())
            if token == EOS:
                break
            tgt = torch.cat([tgt, torch.tensor([[token]])], dim=1)
        assert out == tgt[0, 1:].tolist()
    assert fast != greedy_with(models[0], src, max_len_a=0, max_len_b=12)  # not one member's


def test_ensemble_beam_scores_are_the_mean_distributions_log_probabilities():
    models = _members()
    src = _batch(4)
    alpha = 0.6
    results = beam_with(Ensemble(models), src, beam_size=4, nbest=3,
                          length_penalty=alpha, max_len_a=0, max_len_b=10)
    for row, hyps in zip(src, results, strict=True):
        row = row[row != PAD][None]
        for h in hyps:
            tokens = [BOS, *h.tokens, EOS]
            log_prob = sum(float(_mean_log_probs(models, row, torch.tensor([tokens[:t]]))[
                tokens[t]]) for t in range(1, len(tokens)))
            assert h.log_prob == pytest.approx(log_prob, abs=1e-4)
            assert h.score == pytest.approx(
                log_prob / length_penalty(len(h.tokens) + 1, alpha), abs=1e-4)


def test_ensemble_beam_one_is_greedy_and_cached_is_uncached():
    ensemble = Ensemble(_members())
    src = _batch()
    greedy = greedy_with(ensemble, src, max_len_a=0, max_len_b=12)
    beam = beam_with(ensemble, src, beam_size=1, max_len_a=0, max_len_b=12)
    assert [h[0].tokens for h in beam] == [tuple(g) for g in greedy]
    kw = dict(beam_size=3, nbest=3, max_len_a=0, max_len_b=10)
    cached = beam_with(ensemble, src, **kw)
    uncached = beam_with(ensemble, src, use_cache=False, **kw)
    assert [[h.tokens for h in hs] for hs in cached] == [[h.tokens for h in hs] for hs in uncached]


def test_ensemble_outputs_do_not_depend_on_the_batch():
    ensemble = Ensemble(_members())
    src = _batch(24, 10)
    kw = dict(beam_size=4, max_len_a=0, max_len_b=10)
    together = [h[0].tokens for h in beam_with(ensemble, src, **kw)]
    alone = [beam_with(ensemble, src[i : i + 1, : int((src[i] != PAD).sum())], **kw)[0][0]
             .tokens for i in range(0, 24, 5)]
    assert alone == together[::5]


def test_an_ensemble_of_a_model_with_itself_is_the_model():
    model = _model_that_stops()
    src = _batch()
    kw = dict(beam_size=3, nbest=2, max_len_a=0, max_len_b=10)
    alone, twice = beam_with(model, src, **kw), beam_with(Ensemble([model, model]), src, **kw)
    assert [[h.tokens for h in hs] for hs in alone] == [[h.tokens for h in hs] for hs in twice]
    for a, b in zip(alone, twice, strict=True):
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)


def test_members_need_one_vocabulary():
    with pytest.raises(ValueError, match="model 2 of the ensemble has tgt_vocab_size=60"):
        Ensemble([small_model(), small_model(tgt_vocab_size=60, share_embeddings=False)])


def test_the_ensemble_accepts_the_shortest_of_its_members_positions():
    members = [small_model(max_positions=64), small_model(max_positions=20)]
    ensemble = Ensemble(members)
    assert ensemble.config.max_positions == 20 and members[0].config.max_positions == 64
    out = greedy_with(ensemble, random_tokens(2, 10), max_len_a=1.0, max_len_b=50)
    assert max(map(len, out)) == 18  # room for <bos> and <eos>; random weights rarely stop
    assert ensemble.num_parameters() == sum(m.num_parameters() for m in members)
