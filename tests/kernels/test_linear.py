import gc

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from transduce import kernels
from transduce.kernels import linear as module
from transduce.kernels import openblas, weight_copies
from transduce.kernels.linear import Linear, linear, writes_into

needs_onednn = pytest.mark.skipif("onednn" not in kernels.available(),
                                  reason="this PyTorch has no oneDNN linear")


@pytest.fixture
def counted(monkeypatch):
    """How many times the oneDNN kernel ran, with oneDNN chosen whatever this CPU (for layers
    from `ONEDNN_FROM` weights, as the `kernel_path` fixture sets it)."""
    count, real = [0], module.onednn_linear

    def counting(*args):
        count[0] += 1
        return real(*args)

    monkeypatch.setattr(module, "onednn_linear", counting)
    with kernels.using("onednn"):
        yield count


@pytest.fixture
def calls(counted, monkeypatch):
    """`counted`, with every layer large enough for oneDNN (the small ones of these tests)."""
    monkeypatch.setattr(module, "ONEDNN_FROM", 0)
    return counted


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
    # computed there, not copied, but by oneDNN (the larger layer on its path)
    assert writes_into(layer) == (kernel_path != "onednn"
                                  or layer.weight.numel() < module.ONEDNN_FROM)


def test_a_compiled_linear_layer_equals_f_linear_on_every_path(kernel_path):
    """Inside a compiled region a large layer on the oneDNN path is `transduce::onednn_linear`
    (Inductor cannot lower oneDNN's op), the others F.linear: the same results, on rows that
    vary (one graph for them), of the whole layer or of some of its features. (One graph for
    every case: compiling one from an empty cache takes seconds.)"""
    torch._dynamo.reset()  # graphs of an earlier kernel path's case are not this one's
    layers = [Linear(128, 1024), Linear(128, 8)]  # one for oneDNN, one for MKL on its path
    parts = [slice(None), slice(0, 128), slice(128, None)]  # all, the first features, the rest
    compiled = torch.compile(lambda x: [torch.relu(layer(x, None if part == slice(None) else part))
                                        for layer in layers for part in parts],
                             dynamic=True, options={"cpp_wrapper": True})
    with torch.no_grad():
        for rows in (5, 70, 1):
            x = torch.randn(rows, 128)
            expected = [torch.relu(F.linear(x, layer.weight[part], layer.bias[part]))
                        for layer in layers for part in parts]
            for case, (got, wanted) in enumerate(zip(compiled(x), expected, strict=True)):
                torch.testing.assert_close(got, wanted, rtol=1e-5, atol=1e-5,
                                           msg=lambda m, case=case: f"case {case}: {m}")


@needs_onednn
def test_only_layers_of_onednn_from_weights_go_to_onednn(counted):
    """A layer of fewer than `ONEDNN_FROM` weights stays with MKL; from it, and an 8,000-word
    output layer, to oneDNN."""
    rows = module.ONEDNN_FROM // 128
    x = torch.randn(3, 128)
    with torch.no_grad():
        for features, expected in ((rows - 1, 0), (rows, 1), (8000, 2)):
            layer = Linear(128, features)
            torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias),
                                       rtol=1e-5, atol=1e-5)
            assert counted[0] == expected


@needs_onednn
def test_packed_weights_are_reordered_once_and_follow_changes_in_place(counted):
    """A weight is reordered into oneDNN's layout at its first product and kept; loaded into
    in place (a new version), it is reordered again; gone, so is its copy. Slices of it (a
    packed [W_Q; W_K; W_V]'s parts) have copies of their own."""
    layer = Linear(128, 2048)
    x = torch.randn(4, 128)
    with torch.no_grad():
        layer(x)
        first = module.packed(layer.weight)
        assert module.packed(layer.weight) is first  # kept
        layer.weight.copy_(torch.randn(2048, 128))  # as load_state_dict does
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias),
                                   rtol=1e-5, atol=1e-5)
        assert module.packed(layer.weight) is not first
        for part in (slice(0, 1024), slice(1024, None)):
            torch.testing.assert_close(layer(x, part), F.linear(
                x, layer.weight[part], layer.bias[part]), rtol=1e-5, atol=1e-5)
        assert module.packed(layer.weight, 0, 1024) is module.packed(layer.weight, 0, 1024)
    assert weight_copies.copies(layer.weight) == {
        ("onednn", 0, 2048), ("onednn", 0, 1024), ("onednn", 1024, 2048)}
    key = id(layer.weight)
    del layer
    gc.collect()
    assert key not in weight_copies._KEPT
    with torch.inference_mode():  # weights without a version counter: used as they are
        made = Linear(128, 2048)
        torch.testing.assert_close(made(x), F.linear(x, made.weight, made.bias),
                                   rtol=1e-5, atol=1e-5)
    assert not weight_copies.copies(made.weight)


needs_openblas = pytest.mark.skipif("openblas" not in kernels.available(),
                                    reason="numpy's BLAS is not OpenBLAS")


@pytest.fixture
def on_openblas(monkeypatch):
    """How many products OpenBLAS made, with its path chosen whatever this CPU, on one thread."""
    count, real = [0], openblas.transposed

    def counting(weight):
        count[0] += 1
        return real(weight)

    monkeypatch.setattr(openblas, "transposed", counting)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with kernels.using("openblas"):
            yield count
    finally:
        torch.set_num_threads(threads)


@needs_openblas
@pytest.mark.parametrize("shape", [(7, 128), (3, 5, 128), (1, 128), (0, 128)])
@pytest.mark.parametrize("bias", [True, False])
def test_an_output_layer_on_openblas_equals_f_linear(shape, bias, on_openblas):
    """From `FROM_FEATURES` output features a layer is multiplied on OpenBLAS: returned, written
    into a buffer, or as the operator of a compiled graph, for inputs of any layout."""
    layer = Linear(128, openblas.FROM_FEATURES, bias=bias)
    x, strided = torch.randn(*shape), torch.randn(128, *shape[:-1]).movedim(0, -1)
    with torch.no_grad():
        for inputs in (x, strided):
            expected = F.linear(inputs, layer.weight, layer.bias)
            torch.testing.assert_close(layer(inputs), expected, rtol=1e-5, atol=1e-5)
        assert on_openblas[0] == (2 if shape[0] else 0)  # an empty batch stays with F.linear
        if len(shape) == 2:
            out = torch.full((shape[0] + 2, len(layer.weight)), float("nan"))[: shape[0]]
            assert layer(x, out=out).data_ptr() == out.data_ptr() and writes_into(layer)
            torch.testing.assert_close(out, F.linear(x, layer.weight, layer.bias),
                                       rtol=1e-5, atol=1e-5)
            torch._dynamo.reset()
            compiled = torch.compile(lambda x: torch.relu(layer(x)), dynamic=True,
                                     options={"cpp_wrapper": True})
            before = on_openblas[0]
            torch.testing.assert_close(compiled(x), torch.relu(F.linear(x, layer.weight,
                                                                        layer.bias)),
                                       rtol=1e-5, atol=1e-5)
            assert on_openblas[0] > before or not shape[0]


@needs_openblas
def test_openblas_takes_only_wide_layers_on_one_thread_without_gradients(on_openblas):
    """Narrower layers, a part of a layer's features, training, another dtype and a caller on
    two threads stay with F.linear (MKL)."""
    wide, narrow = Linear(64, openblas.FROM_FEATURES), Linear(64, openblas.FROM_FEATURES - 1)
    x = torch.randn(5, 64)
    with torch.no_grad():
        narrow(x), wide(x, slice(0, 10))
        wide.to(torch.bfloat16)(x.bfloat16())
        wide.float()
    assert on_openblas[0] == 0
    x.requires_grad_(True)
    wide(x).sum().backward()
    assert on_openblas[0] == 0 and x.grad is not None
    torch.set_num_threads(2)
    with torch.no_grad():
        torch.testing.assert_close(wide(x), F.linear(x, wide.weight, wide.bias))
    assert on_openblas[0] == 0
    torch.set_num_threads(1)
    with torch.no_grad():
        wide(x)
    assert on_openblas[0] == 1


@needs_openblas
def test_transposed_weights_are_made_once_and_follow_changes_in_place():
    """A weight is transposed at its first product and kept; loaded into in place (a new
    version), it is transposed again; gone, so is its copy."""
    layer = Linear(16, openblas.FROM_FEATURES)
    first = openblas.transposed(layer.weight)
    assert openblas.transposed(layer.weight) is first
    with torch.no_grad():
        layer.weight.mul_(2)
    again = openblas.transposed(layer.weight)
    assert again is not first
    np.testing.assert_array_equal(again, layer.weight.detach().t().numpy())
    assert weight_copies.copies(layer.weight) == {"openblas"}
    key = id(layer.weight)
    del layer
    gc.collect()
    assert key not in weight_copies._KEPT
