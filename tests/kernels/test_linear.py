import pytest
import torch
import torch.nn.functional as F

from transduce import kernels
from transduce.kernels import linear as module
from transduce.kernels.linear import Linear, linear, writes_into

needs_onednn = pytest.mark.skipif("onednn" not in kernels.available(),
                                  reason="this PyTorch has no oneDNN linear")


@pytest.fixture
def calls(monkeypatch):
    """How many times the oneDNN kernel ran, with oneDNN chosen whatever this CPU."""
    count, real = [0], module.onednn_linear

    def counting(*args):
        count[0] += 1
        return real(*args)

    monkeypatch.setattr(module, "onednn_linear", counting)
    with kernels.using("onednn"):
        yield count


@needs_onednn
@pytest.mark.parametrize("shape", [(7, 16), (3, 5, 16), (300, 16), (0, 16)])  # rows padded
@pytest.mark.parametrize("bias", [True, False])
def test_inference_on_onednn_equals_f_linear(shape, bias, calls):
    weight, b = torch.randn(24, 16), (torch.randn(24) if bias else None)
    x, strided = torch.randn(*shape), torch.randn(16, shape[0]).t()  # strided: not contiguous
    with torch.no_grad():
        for inputs in (x, strided):
            torch.testing.assert_close(linear(inputs, weight, b), F.linear(inputs, weight, b),
                                       rtol=1e-5, atol=1e-5)
    assert calls[0] == (2 if shape[0] else 0)  # an empty batch stays with F.linear


@needs_onednn
def test_training_and_other_dtypes_keep_f_linear(calls):
    layer = Linear(16, 8)
    x = torch.randn(4, 16, requires_grad=True)
    layer(x).sum().backward()  # gradients are due: F.linear, which has a backward pass
    expected = F.linear(x, layer.weight, layer.bias)
    torch.testing.assert_close(layer(x), expected)
    assert x.grad is not None and layer.weight.grad is not None
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(x.detach()).dtype == torch.bfloat16  # autocast decides, as for F.linear
    with torch.no_grad():
        layer.to(torch.bfloat16)(x.detach().bfloat16())
    assert calls[0] == 0
    with torch.no_grad():
        Linear(16, 8)(x.detach())
    assert calls[0] == 1


def test_row_buckets_are_few_and_waste_at_most_an_eighth():
    padded = {n: n + (-n % module.row_bucket(n)) for n in range(1, 2049)}
    assert len(set(padded.values())) <= 80  # 2,048 row counts, few kernels
    assert all(p - n <= max(15, n // 8) for n, p in padded.items())


@pytest.mark.parametrize("features", [100, module.BLOCKED_FROM + 5])  # one product; blocks
@pytest.mark.parametrize("bias", [True, False])
def test_written_into_a_buffer_equals_f_linear(features, bias, kernel_path):
    layer = Linear(16, features, bias=bias)
    x = torch.randn(7, 16)
    out = torch.full((9, features), float("nan"))[:7]  # a view of a larger buffer, as a search's
    with torch.no_grad():
        result = layer(x, out=out)
        expected = F.linear(x, layer.weight, layer.bias)
    assert result.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)  # every path writes it
    assert writes_into(layer) == (kernel_path != "onednn")  # computed there, not copied


def test_a_compiled_linear_layer_equals_f_linear_on_every_path(kernel_path):
    """Inductor cannot lower oneDNN's op: inside a compiled region the layer is F.linear."""
    layer = Linear(16, 24)
    compiled = torch.compile(lambda x: torch.relu(layer(x)))
    x = torch.randn(5, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), torch.relu(F.linear(x, layer.weight,
                                                                     layer.bias)))
