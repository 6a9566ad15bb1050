"""The fast kernels against the plain PyTorch reference paths (TRANSDUCE_KERNELS=reference): a
training step and a beam search run both ways, each in a fresh process, give the same results."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from transduce import kernels

ROOT = Path(__file__).resolve().parents[2]

# a training step's loss and gradients (R-Drop's loss and the plain one: both fused kernels),
# then a beam search
SCRIPT = r"""
import sys
import torch
from transduce import kernels
from transduce.decoding.config import DecodeConfig
from transduce.decoding.search import search
from transduce.model.config import ModelConfig
from transduce.model.transformer import Transformer
from transduce.training.loss import projected_label_smoothed_cross_entropy, r_drop_loss

torch.manual_seed(0)
model = Transformer(ModelConfig(d_model=32, d_ff=64, n_heads=4, n_encoder_layers=2,
                                n_decoder_layers=2, dropout=0.0, src_vocab_size=60,
                                tgt_vocab_size=60, max_positions=64))
src, tgt = torch.randint(4, 60, (6, 9)), torch.randint(4, 60, (6, 8))
src[2, 6:] = tgt[3, 5:] = 1  # padding
tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
hidden = model.features(src.repeat(2, 1), tgt_in.repeat(2, 1))
rdrop = r_drop_loss(hidden, model.output.weight, tgt_out.repeat(2, 1), alpha=5.0)
loss = projected_label_smoothed_cross_entropy(model.features(src, tgt_in), model.output.weight,
                                              tgt_out) + rdrop
loss.backward()
grads = {name: p.grad.clone() for name, p in model.named_parameters()}
model.eval()
with torch.no_grad():
    found = search(model, src, DecodeConfig(beam_size=4, max_len_b=12), nbest=2)
torch.save({"fast": kernels.fast(), "loss": loss.detach(), "grads": grads,
            "tokens": [[h.tokens for h in hyps] for hyps in found],
            "scores": torch.tensor([[h.score for h in hyps] for hyps in found])}, sys.argv[1])
"""


def _run(tmp_path: Path, kernels: str) -> dict:
    out = tmp_path / f"{kernels}.pt"
    env = {**os.environ, "TRANSDUCE_KERNELS": kernels, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", SCRIPT, str(out)], check=True, env=env, cwd=tmp_path)
    return torch.load(out, weights_only=False)


@pytest.fixture(autouse=True)
def _every_kernel_path():
    """Not here: these tests choose their paths themselves, in fresh processes."""


@pytest.mark.parametrize("path", [p for p in kernels.available() if p != "reference"])
def test_a_training_step_and_a_beam_search_equal_the_reference_paths(tmp_path, path):
    fast, reference = _run(tmp_path, path), _run(tmp_path, "reference")
    assert fast["fast"] and not reference["fast"]
    torch.testing.assert_close(fast["loss"], reference["loss"])
    for name, grad in reference["grads"].items():  # float32 sums in other orders
        torch.testing.assert_close(fast["grads"][name], grad, rtol=1e-4,
                                   atol=1e-5 * grad.abs().max().item(), msg=name)
    assert fast["tokens"] == reference["tokens"]
    torch.testing.assert_close(fast["scores"], reference["scores"])


def _switch(tmp_path: Path, value: str, code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRANSDUCE_KERNELS": value, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True, cwd=tmp_path)


def test_an_unknown_switch_value_warns_and_keeps_the_default(tmp_path):
    done = _switch(tmp_path, "quick", "from transduce import kernels; print(kernels.path())")
    assert done.stdout.strip() == kernels.default_path()
    assert ("TRANSDUCE_KERNELS='quick' is not one of auto, fast, reference, mkl, onednn, "
            "openblas") in done.stderr


@pytest.mark.parametrize("value", ["reference", " Reference "])
def test_the_switch_turns_every_fast_path_off(tmp_path, value):
    done = _switch(tmp_path, value, "from transduce import kernels; print(kernels.fast(), "
                                    "kernels.path())")
    assert done.stdout.split() == ["False", "reference"]


@pytest.mark.parametrize("value", [*kernels.available(), "auto", "fast"])
def test_the_switch_forces_any_path_the_build_has(tmp_path, value):
    """The CPU decides only what auto (and fast) mean."""
    done = _switch(tmp_path, value, "from transduce import kernels; print(kernels.path())")
    expected = kernels.default_path() if value in ("auto", "fast") else value
    assert done.stdout.strip() == expected


def test_use_switches_paths_at_run_time():
    before = kernels.path()
    with kernels.using("reference"):
        assert not kernels.fast()
        with kernels.using("mkl"):
            assert kernels.path() == "mkl" and kernels.fast()
        assert kernels.path() == "reference"
    assert kernels.path() == before
    with pytest.raises(ValueError, match="not one of"):
        kernels.use("fastest")


def test_the_default_follows_the_cpu(monkeypatch):
    """oneDNN on an AMD CPU with AVX-512, OpenBLAS's output layer on one without, MKL elsewhere
    (docs/speed.md)."""
    cpus = {("AuthenticAMD", "fpu avx2 avx512f"): "onednn",
            ("AuthenticAMD", "fpu avx2"): "openblas",
            ("GenuineIntel", "avx2 avx512f amx_tile"): "mkl", ("", ""): "mkl"}
    for (vendor, flags), expected in cpus.items():
        fields = {"vendor_id": vendor, "flags": flags}
        monkeypatch.setattr(kernels, "cpu_info", fields.__getitem__)
        kernels.default_path.cache_clear()
        try:
            assert kernels.default_path() == (expected if expected in kernels.available()
                                              else "mkl")
        finally:
            monkeypatch.undo()
            kernels.default_path.cache_clear()
