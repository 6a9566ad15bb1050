import torch

from ..conftest import greedy_with, random_tokens, small_model

PAD, BOS, EOS = 1, 2, 3


def _uncached_greedy(model, src, max_len):
    """Greedy search the slow way: the whole prefix through the decoder at every step."""
    out = []
    for row in src:
        row = row[row != PAD][None]
        tgt = torch.tensor([[BOS]])
        for _ in range(max_len):
            nxt = model(row, tgt)[0, -1].argmax().item()
            if nxt == EOS:
                break
            tgt = torch.cat([tgt, torch.tensor([[nxt]])], dim=1)
        out.append(tgt[0, 1:].tolist())
    return out


def _model_that_stops(tie_output: bool = False, **overrides):
    """Random weights rarely choose <eos>: give it the output row of a token that greedy search
    picks often (slightly scaled up, so <eos> wins wherever that token did), so that outputs
    finish at different steps."""
    model = small_model(tie_output=tie_output, **overrides)
    outputs = greedy_with(model, random_tokens(8, 8), max_len_a=0, max_len_b=12)
    frequent = torch.tensor([t for o in outputs for t in o]).mode().values
    with torch.no_grad():
        model.output.weight[EOS] = 1.01 * model.output.weight[frequent]
    return model


def test_cached_batched_greedy_equals_slow_greedy_per_sentence():
    model = _model_that_stops()
    src = random_tokens(6, 9)
    src[1, 4:] = PAD
    src[3, 2:] = PAD
    got = greedy_with(model, src, max_len_a=0.0, max_len_b=12)
    assert got == _uncached_greedy(model, src, 12)
    assert len({len(o) for o in got}) > 1  # sentences finished at different steps


def test_batch_composition_does_not_change_outputs():
    model = _model_that_stops()
    src = random_tokens(5, 8)
    src[0, 3:] = PAD
    together = greedy_with(model, src, max_len_a=0, max_len_b=10)
    alone = [greedy_with(model, src[i : i + 1], max_len_a=0, max_len_b=10)[0] for i in range(5)]
    assert together == alone


def test_length_limits():
    model = small_model()
    src = random_tokens(2, 4)
    for out in greedy_with(model, src, max_len_a=1.0, max_len_b=2):
        assert len(out) <= 1.0 * 4 + 2  # a * source length + b
    assert all(len(o) >= 3 for o in greedy_with(model, src, max_len_a=0, max_len_b=5,
                                                  min_len=3))


@torch.no_grad()
def test_k_greedy_tokens_at_once_are_k_steps_of_one():
    """`Steps.greedy`: k tokens, each step's argmax fed to the next, <eos> barred where its
    bias says, the prefixes left as k appends leave them (the next step's logits agree)."""
    from transduce.decoding.ensemble import Ensemble

    model = _model_that_stops()
    src = random_tokens(5, 7)
    src[2, 3:] = PAD
    bias = torch.tensor([float("-inf"), float("-inf"), 0.0, 0.0, 0.0])
    for searchable in (model, Ensemble([model, _model_that_stops()])):
        at_once, one_by_one = searchable.steps(src), searchable.steps(src)
        tokens = at_once.greedy(bias)
        expected = []
        for b in bias:
            logits = one_by_one.logits()
            logits[:, EOS] += b
            expected.append(logits.argmax(1))
            one_by_one.append(expected[-1])
        assert tokens.tolist() == torch.stack(expected, 1).tolist()
        assert (tokens[:, :2] != EOS).all() and (tokens == EOS).any()  # barred, then chosen
        torch.testing.assert_close(at_once.logits(), one_by_one.logits())


def test_a_search_by_blocks_finds_the_tokens_of_one_step_at_a_time(monkeypatch):
    """Steps that take greedy tokens k at a time (as a compiled model's, here the eager model's
    made to): outputs ending inside a block, at their length limits, before the minimum length
    and after forced prefixes, and each told to `on_done` once, as one step at a time."""
    from transduce.model.steps import DecoderSteps

    model = _model_that_stops()
    src = random_tokens(7, 9)
    src[1, 5:] = src[4, 3:] = PAD
    prefixes = [[5, 6], [], [7], [8, 9, 10], [], [11], [12]]
    cases = [dict(max_len_a=0.0, max_len_b=12), dict(max_len_a=1.0, max_len_b=1),
             dict(max_len_a=0.0, max_len_b=12, min_len=5), dict(max_len_a=0.0, max_len_b=7,
                                                               prefixes=prefixes)]
    for settings in cases:
        expected = greedy_with(model, src, **settings)
        for block in (2, 3, 5):
            monkeypatch.setattr(DecoderSteps, "greedy_block", block)
            told = []
            got = greedy_with(model, src, on_done=lambda i, out, told=told: told.append((i, out)),
                              **settings)
            monkeypatch.undo()
            assert got == expected, (settings, block)
            assert sorted(told) == list(enumerate(expected))
    assert len({len(o) for o in expected}) > 1  # sentences finished at different steps
