import pytest
import torch

from transduce.kernels.dropout import Dropout, dropout, keep_mask


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_keep_mask_is_bernoulli_with_the_right_rate_and_no_pattern(p):
    keep = keep_mask(torch.Size([1000, 1000]), p).float()
    # one million draws: the rate is within 5 standard deviations (0.0023 at p=0.5)
    assert abs(keep.mean().item() - (1 - p)) < 0.0025
    # each of the four 16-bit lanes of a 64-bit draw (the top one has a fixed bit) is unbiased
    for lane in range(4):
        assert abs(keep.flatten()[lane::4].mean().item() - (1 - p)) < 0.005
    # neighbours are independent: P(both kept) = (1 - p)^2
    both = (keep.flatten()[:-1] * keep.flatten()[1:]).mean().item()
    assert abs(both - (1 - p) ** 2) < 0.005


def test_dropout_zeroes_and_rescales_and_gradient_uses_the_same_mask():
    x = torch.randn(64, 33, requires_grad=True)
    y = dropout(x, 0.25, training=True)
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / 0.75)
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad, kept.float() / 0.75)


def test_dropout_is_reproducible_from_the_seed_and_off_in_eval():
    x = torch.randn(10, 10)
    layer = Dropout(0.3)
    torch.manual_seed(5)
    a = layer(x)
    torch.manual_seed(5)
    torch.testing.assert_close(layer(x), a)
    assert layer.eval()(x) is x


def test_dropout_keeps_the_expectation():
    x = torch.ones(2000, 500)
    assert abs(dropout(x, 0.3, training=True).mean().item() - 1.0) < 0.01


def test_bad_probability_is_rejected():
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(1.0)
