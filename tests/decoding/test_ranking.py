import pytest
import torch

from tests.conftest import own_path_only
from transduce.decoding.ranking import argmax, top_k


@pytest.mark.parametrize("vocab", [8000, 37000, 1009])  # chunks of 64, of 74; a prime: none
def test_two_stage_top_k_equals_torch_topk(vocab):
    torch.manual_seed(0)
    x = torch.randn(30, vocab)
    x[3, 100:] = float("-inf")  # a row with few finite values, as after masking
    x[4] = 0.0  # nothing but ties
    values, indices = top_k(x, 10)
    expected = x.topk(10, dim=1).values
    torch.testing.assert_close(values, expected)
    torch.testing.assert_close(x.gather(1, indices), expected)  # the indices hold those values
    assert (indices.sort(1).values.diff(dim=1) > 0).all()  # distinct
    torch.testing.assert_close(indices[:3], x[:3].topk(10, dim=1).indices)  # no ties: the same


@pytest.mark.parametrize("vocab", [8000, 37000, 1009])
def test_two_stage_argmax_equals_torch_argmax_ties_included(vocab):
    torch.manual_seed(0)
    x = torch.randn(30, vocab)
    x[3, 100:] = float("-inf")
    x[4] = 0.0  # nothing but ties: the first
    x[5, [7, 500, 900]] = 10.0  # ties in different chunks: the first
    x[6, [70, 71]] = 10.0  # ties within a chunk
    x[7, 0] = float("-inf")
    x[8] = float("-inf")  # all -inf
    assert torch.equal(argmax(x), x.argmax(dim=1))


@own_path_only
def test_two_stage_argmax_compiled_equals_torch_argmax_ties_included():
    """As compiled greedy search's graph takes it (transduce.decoding.compiled: rows that vary,
    one graph), ties and -inf included."""
    torch._dynamo.reset()
    compiled = torch.compile(argmax, dynamic=True)
    torch.manual_seed(0)
    for rows in (6, 11):
        x = torch.randn(rows, 8000)
        x[0] = 0.0
        x[1, [7, 500, 900]] = 10.0
        x[2, [70, 71]] = 10.0
        x[3] = float("-inf")
        assert torch.equal(compiled(x), x.argmax(dim=1))


@own_path_only
def test_off_a_cpu_torch_kernels_rank_in_one_launch(monkeypatch):
    """The two stages are for a CPU's kernels; a tensor elsewhere (here the meta device, as a GPU
    would be) goes to torch's own topk and argmax."""
    from transduce.decoding import ranking

    def two_stages(vocab):
        raise AssertionError("the two stages off a CPU")

    monkeypatch.setattr(ranking, "_chunk_width", two_stages)
    x = torch.empty(30, 8000, device="meta")
    values, indices = top_k(x, 10)
    assert values.shape == indices.shape == (30, 10) and values.device.type == "meta"
    assert argmax(x).shape == (30,)
