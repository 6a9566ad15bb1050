"""int8 linear layers: close to float32, each row's result independent of the batch, and the
quantized checkpoint made once and read back to the same model."""

import errno
import os
import tempfile

import pytest
import torch
import torch.nn.functional as F

from transduce.kernels import int8
from transduce.kernels.int8 import Int8Linear, is_int8, quantize_linear_layers, quantize_weight
from transduce.runs import int8 as int8_runs
from transduce.runs.checkpoint import save_weights

from ..conftest import random_tokens, small_model


@pytest.fixture(params=["int8 products", "small layers in float"])
def products(request, monkeypatch):
    """Both ways a layer multiplies: every layer in int8, or the default threshold (the small
    test models' layers are all below it, so they multiply their dequantized weights)."""
    if request.param == "int8 products":
        monkeypatch.setattr(int8, "MIN_INT8_WEIGHTS", 0)
    return request.param


def test_weights_round_to_int8_with_a_scale_per_output_row():
    weight = torch.randn(6, 10)
    q, scale = quantize_weight(weight)
    assert q.dtype == torch.int8 and q.abs().max() == 127 and scale.shape == (6,)
    assert torch.allclose(q.float() * scale[:, None], weight, atol=float(scale.max()) / 2)


def test_int8_linear_is_close_to_float(products):
    layer = torch.nn.Linear(256, 1024)
    x = torch.randn(3, 7, 256)
    expected = F.linear(x, layer.weight, layer.bias).detach()
    out = Int8Linear.quantize(layer)(x)
    assert out.shape == expected.shape
    error = (out - expected).norm() / expected.norm()
    assert error < 0.02, error  # 7-bit activations, 8-bit weights


def test_a_rows_result_does_not_depend_on_the_rest_of_the_batch(monkeypatch):
    # bit for bit, as float32 matrix products are not (their blocking depends on the rows)
    monkeypatch.setattr(int8, "MIN_INT8_WEIGHTS", 0)
    layer = Int8Linear.quantize(torch.nn.Linear(64, 96))
    x = torch.randn(9, 64)
    x[4] *= 100  # one row with a far larger range than the others
    together = layer(x)
    for i in (0, 4, 8):
        assert torch.equal(layer(x[i: i + 1]), together[i: i + 1])
    assert torch.equal(layer(x[2:7]), together[2:7])


def test_some_output_features_are_those_of_all(products):
    layer = Int8Linear.quantize(torch.nn.Linear(32, 96))
    x = torch.randn(5, 32)
    full = layer(x)
    assert torch.equal(layer(x, slice(0, 32)), full[:, :32])
    assert torch.equal(layer(x, slice(32, None)), full[:, 32:])
    assert torch.all(layer(torch.zeros(2, 32)) == layer.bias)  # zero rows: the bias alone


def test_quantizing_a_model_replaces_every_linear_layer_and_keeps_the_embeddings():
    model = small_model().eval()
    embedding = model.encoder.embedding.tokens.weight.clone()
    quantize_linear_layers(model)
    assert is_int8(model)
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert model.output.weight.dtype == torch.int8
    assert torch.equal(model.encoder.embedding.tokens.weight, embedding)  # float, tied no more


def test_the_int8_copy_is_made_once_and_read_back_to_the_same_model(tmp_path, monkeypatch,
                                                                     products):
    model = small_model().eval()
    weights = tmp_path / "model.safetensors"
    save_weights(model, weights)
    src, tgt = random_tokens(3, 7), random_tokens(3, 5)
    made = int8_runs.load_int8(small_model().eval(), weights)
    copy = tmp_path / "model.int8.safetensors"
    assert copy.is_file() and copy.stat().st_size < 0.5 * weights.stat().st_size
    monkeypatch.setattr(int8_runs, "quantize_linear_layers", _must_not_quantize)
    read = int8_runs.load_int8(small_model().eval(), weights)
    with torch.no_grad():
        assert torch.equal(made(src, tgt), read(src, tgt))
        float_logits = model(src, tgt)
        assert (made(src, tgt) - float_logits).norm() < 0.05 * float_logits.norm()


def test_an_int8_copy_of_other_weights_is_made_again(tmp_path):
    weights = tmp_path / "model.safetensors"
    save_weights(small_model().eval(), weights)
    int8_runs.load_int8(small_model().eval(), weights)
    torch.manual_seed(1)
    retrained = small_model().eval()
    save_weights(retrained, weights)  # the checkpoint replaced (an average made again)
    os.utime(weights, ns=(0, 10**9))
    model = int8_runs.load_int8(small_model().eval(), weights)
    expected = quantize_linear_layers(retrained)
    assert torch.equal(model.output.weight, expected.output.weight)


def test_a_read_only_directory_quantizes_in_memory(tmp_path, caplog, monkeypatch):
    weights = tmp_path / "model.safetensors"
    save_weights(small_model().eval(), weights)

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "mkstemp", read_only)  # as root chmod would not do
    model = int8_runs.load_int8(small_model().eval(), weights)
    assert is_int8(model) and not (tmp_path / "model.int8.safetensors").exists()
    assert "quantized in memory" in caplog.text


def _must_not_quantize(*args, **kwargs):
    if not kwargs.get("empty"):
        raise AssertionError("quantized again instead of reading the int8 copy")
    return quantize_linear_layers(*args, **kwargs)
