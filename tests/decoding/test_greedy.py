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
