"""Weights stored transposed (transduce.kernels.transposed): the same parameters and state dict,
and on every kernel path the same products as the weights stored as PyTorch stores them, in
every form a search asks for (`features`, `out=`, a large layer's blocks, oneDNN's and
OpenBLAS's copies of the weight, a compiled region)."""

import copy

import pytest
import torch
import torch.nn.functional as F

from transduce import kernels
from transduce.kernels import linear as linear_kernels
from transduce.kernels import transposed
from transduce.kernels.linear import Linear

from ..conftest import own_path_only, random_tokens, small_model


def _plain_and_stored(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module]:
    return model, transposed.store(copy.deepcopy(model))


@own_path_only  # the layout, not a product: no path changes it
def test_storing_keeps_the_parameters_and_the_state_dict():
    model = small_model()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    params = dict(model.named_parameters())
    versions = {name: p._version for name, p in params.items()}
    assert transposed.store(model) is model
    assert dict(model.named_parameters()) == params  # the same objects, names, tied ones tied
    assert model.output.weight is model.decoder.embedding.tokens.weight
    state = model.state_dict()
    assert state.keys() == before.keys()
    for name, tensor in before.items():
        assert torch.equal(state[name], tensor) and state[name].shape == tensor.shape
    linears = [m for m in model.modules() if isinstance(m, Linear)]
    assert linears and all(transposed.stored(m.weight) for m in linears)
    for name, p in params.items():  # every Linear's weight stored anew: copies kept go stale
        stored_here = any(p is m.weight for m in linears)
        assert (p._version > versions[name]) == stored_here, name
    after = {name: p._version for name, p in params.items()}
    transposed.store(model)  # again: nothing to do
    assert {name: p._version for name, p in params.items()} == after
    assert all(transposed.stored(m.weight) for m in linears)


@own_path_only
def test_weights_loaded_in_place_keep_the_layout():
    model, stored = _plain_and_stored(small_model())
    torch.manual_seed(1)
    other = small_model()
    stored.load_state_dict(other.state_dict())
    assert all(transposed.stored(m.weight) for m in stored.modules() if isinstance(m, Linear))
    for name, tensor in other.state_dict().items():
        assert torch.equal(stored.state_dict()[name], tensor)


@pytest.mark.parametrize("features", [slice(None), slice(0, 40), slice(40, 120)])
@pytest.mark.parametrize("bias", [True, False])
def test_a_stored_layer_multiplies_as_the_plain_one(features, bias, kernel_path):
    """Whole layers and slices of their features, returned and written into a buffer (a large
    layer's a block of features at a time), on this kernel path; then the same after the
    weight's copies were kept (oneDNN's packed one, OpenBLAS's transposed one) and the weight
    was stored anew."""
    for out_features in (120, linear_kernels.BLOCKED_FROM + 5):
        plain = Linear(32, out_features, bias=bias)
        stored = transposed.store(copy.deepcopy(plain))
        x = torch.randn(7, 32)
        with torch.no_grad():
            expected = F.linear(x, *linear_kernels._rows(plain.weight, plain.bias, features))
            part = None if features == slice(None) else features
            torch.testing.assert_close(stored(x, part), expected, rtol=1e-5, atol=1e-5)
            out = torch.full((9, len(expected[0])), float("nan"))[:7]
            torch.testing.assert_close(stored(x, part, out=out), expected, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
            kept = copy.deepcopy(plain)
            kept(x, part)  # copies of its weight kept on this path
            transposed.store(kept)
            torch.testing.assert_close(kept(x, part), expected, rtol=1e-5, atol=1e-5)


def test_a_stored_model_gives_the_plain_models_logits_eager_and_compiled(kernel_path):
    """A model's whole forward pass, and a compiled region's products of stored weights (the
    custom operators of oneDNN's and OpenBLAS's paths too)."""
    def layers(m):  # a feed-forward block (oneDNN's on its path) and the output layer
        return lambda x: (m.decoder.layers[0].ffn(x), m.output(x))

    torch._dynamo.reset()
    model, stored = _plain_and_stored(small_model())
    src, tgt = random_tokens(3, 7), random_tokens(3, 5)
    with torch.no_grad():
        expected = model(src, tgt)
        torch.testing.assert_close(stored(src, tgt), expected, rtol=1e-4, atol=1e-5)
        compiled = torch.compile(layers(stored), dynamic=True)
        for rows in (4, 9):
            x = torch.randn(rows, 32)
            torch.testing.assert_close(compiled(x), layers(model)(x), rtol=1e-5, atol=1e-5)


def test_stored_where_mkl_multiplies_float32_on_a_cpu(kernel_path):
    cpu = torch.device("cpu")
    assert transposed.pays(cpu, "float32") == (kernel_path == "mkl")
    assert not transposed.pays(cpu, "bfloat16") and not transposed.pays(cpu, "int8")
    assert not transposed.pays(torch.device("cuda"), "float32")
    model = small_model()
    assert transposed.store_where_it_pays(model, cpu, "float32") is model
    assert transposed.stored(model.output.weight) == (kernels.path() == "mkl")
