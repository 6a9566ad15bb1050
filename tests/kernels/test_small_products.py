import pytest
import torch

from transduce import kernels
from transduce.kernels.small_products import SCALAR_BELOW, matmul
from transduce.model.attention import attention_with_weights


@pytest.fixture
def written_out(monkeypatch):
    """How many products took the broadcast form (a sum over k) instead of `a @ b`."""
    count = [0]
    real = torch.Tensor.sum

    def counting(self, *args, **kwargs):
        count[0] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "sum", counting)
    return count


# (batch..., m, k, n): a decoding step's one query against 1-12 keys and the weights times the
# values (below PyTorch's bound), a source's 5 beams against its keys, and products at the bound
@pytest.mark.parametrize("shape", [(6, 4, 1, 32, 1), (6, 4, 1, 32, 12), (6, 4, 1, 12, 32),
                                   (3, 4, 5, 32, 2), (2, 1, 8, 25), (2, 1, 16, 25),
                                   (0, 4, 1, 32, 3)])
def test_matmul_equals_the_product(shape, kernel_path, written_out):
    *batch, m, k, n = shape
    a, b = torch.randn(*batch, m, k), torch.randn(*batch, k, n)
    torch.testing.assert_close(matmul(a, b), a @ b, rtol=1e-5, atol=1e-5)
    small = m * k * n < SCALAR_BELOW
    assert written_out[0] == (small and kernel_path != "reference")


def test_matmul_takes_strided_operands_and_gradients(kernel_path):
    q = torch.randn(5, 4, 1, 32, requires_grad=True)
    keys = torch.randn(5, 4, 7, 32, requires_grad=True)
    got = matmul(q, keys.transpose(-2, -1))
    expected = q @ keys.transpose(-2, -1)
    torch.testing.assert_close(got, expected)
    grads = torch.autograd.grad(got.square().sum(), (q, keys))
    for grad, want in zip(grads, torch.autograd.grad(expected.square().sum(), (q, keys)),
                          strict=True):
        torch.testing.assert_close(grad, want)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float64])
def test_other_dtypes_keep_the_product(dtype, kernel_path, written_out):
    a, b = torch.randn(4, 1, 32, dtype=dtype), torch.randn(4, 32, 5, dtype=dtype)
    assert torch.equal(matmul(a, b), a @ b)
    assert written_out[0] == 0


@pytest.mark.parametrize("keys", [1, 5, 12, 13, 20])
def test_attention_over_few_keys_equals_the_reference_path(keys, kernel_path):
    """A decoding step's attention (one query a row, a mask over the keys) is the reference
    path's on every path, across PyTorch's bound (12 keys below it, 13 above)."""
    torch.manual_seed(keys)
    q, k, v = torch.randn(6, 4, 1, 32), torch.randn(6, 4, keys, 32), torch.randn(6, 4, keys, 32)
    mask = torch.rand(6, 1, 1, keys) > 0.3
    mask[0] = False  # a row with nothing to attend to: zeros
    out, weights = attention_with_weights(q, k, v, mask)
    with kernels.using("reference"):
        expected, expected_weights = attention_with_weights(q, k, v, mask)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)
    assert not out[0].any()


def test_compiled_graphs_keep_the_product(monkeypatch, kernel_path):
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    a, b = torch.randn(4, 1, 32), torch.randn(4, 32, 5)
    calls = []
    monkeypatch.setattr(torch.Tensor, "__matmul__",
                        lambda x, y: calls.append(1) or torch.matmul(x, y))
    matmul(a, b)
    assert calls == [1]
