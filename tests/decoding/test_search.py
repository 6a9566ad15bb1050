import pytest
import torch

from transduce.decoding.beam import beam_search
from transduce.decoding.config import DecodeConfig, Sampling
from transduce.decoding.greedy import greedy_search, sample
from transduce.decoding.search import search
from transduce.errors import UserError

from ..conftest import random_tokens, small_model


def test_search_runs_the_search_its_settings_name():
    model = small_model()
    src = random_tokens(5, 7)
    limits = dict(max_len_a=0.0, max_len_b=9, min_len=2)
    greedy = DecodeConfig(beam_size=1, **limits)
    assert [h[0].tokens for h in search(model, src, greedy)] == [
        tuple(t) for t in greedy_search(model, src, greedy)]
    beam = DecodeConfig(beam_size=3, length_penalty=1.0, **limits)
    assert search(model, src, beam, nbest=2) == beam_search(model, src, beam, nbest=2)
    seeded = Sampling(top_k=5, seed=4)
    drawn = search(model, src, greedy, sampling=seeded)
    assert [h[0].tokens for h in drawn] == [tuple(t) for t in sample(
        model, src, greedy, Sampling(top_k=5), generator=torch.Generator().manual_seed(4))]


@pytest.mark.parametrize(("settings", "message"), [
    (dict(temperature=0), "sampling.temperature must be positive"),
    (dict(top_k=-1), "sampling.top_k must be >= 0"),
    (dict(top_p=1.5), r"sampling.top_p must be in \(0, 1\]"),
])
def test_sampling_settings_are_checked_where_they_are_declared(settings, message):
    with pytest.raises(UserError, match=message):
        Sampling(**settings)


def test_each_source_is_told_once_as_soon_as_it_is_done_with_what_is_returned():
    model = small_model()
    src = random_tokens(6, 7)
    src[1, 3:] = 1  # shorter: a lower length limit, done earlier
    for decode, nbest in ((DecodeConfig(beam_size=1, max_len_a=0.5, max_len_b=3), 1),
                          (DecodeConfig(beam_size=3, max_len_a=0.5, max_len_b=3), 2)):
        told = []
        returned = search(model, src, decode, nbest=nbest,
                          on_done=lambda i, hyps, told=told: told.append((i, hyps)))
        assert sorted(i for i, _ in told) == list(range(6))  # each once
        assert all(hyps == returned[i] for i, hyps in told)
        if decode.beam_size == 1:  # told at the step each ends: shorter outputs first
            lengths = [len(hyps[0].tokens) for _, hyps in told]
            assert lengths == sorted(lengths)
