"""Data-parallel training (`transduce train --nproc N`): two one-thread processes, on gloo."""

import os
import subprocess
import sys

import pytest
import torch

from tests.training.test_trainer import FAST, _config, _weights
from transduce.runs import checkpoint as ckpt
from transduce.training.start import start_run

pytestmark = pytest.mark.slow  # trains in several processes


def _train(*args, expect=0):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    done = subprocess.run([sys.executable, "-m", "transduce", "train", "--nproc", "2", *args],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == expect, done.stderr[-3000:]
    return done


def test_two_processes_take_the_update_of_one_accumulating_two_batches(tmp_path):
    """Same batches, same loss normalisation: the same weights, up to the order of summation."""
    extra = ["model.dropout=0.0", "train.max_updates=6"]
    _train(*FAST, *extra, "--run-dir", str(tmp_path / "two"))
    one = start_run(_config(*extra, "train.accumulate=2", "train.threads=1"), tmp_path / "one")
    one.train()
    a, b = _weights(tmp_path / "two"), _weights(tmp_path / "one")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5, msg=key)
    initial = start_run(_config(*extra), tmp_path / "untrained").model.state_dict()
    assert all(not torch.equal(a[k], initial[k]) for k in a)  # each parameter was trained
    log = (tmp_path / "two" / "train.log").read_text()
    assert "data parallel: 2 processes on cpu, 2 batches of 600 tokens each" in log
    state = torch.load(ckpt.latest_checkpoint(tmp_path / "two") / ckpt.STATE,
                       weights_only=False)
    assert state["progress"]["tokens"] == one.progress.tokens  # the same batches


def test_a_two_process_run_resumes_to_the_bit(tmp_path):
    """Dropout on: each process's random state is in the checkpoint, and comes back."""
    _train(*FAST, "train.max_updates=8", "--run-dir", str(tmp_path / "a"))
    _train(*FAST, "train.max_updates=4", "--run-dir", str(tmp_path / "b"))
    _train("--resume", str(tmp_path / "b"), "train.max_updates=8")
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    for key in a:
        assert torch.equal(a[key], b[key]), key
    state = torch.load(ckpt.latest_checkpoint(tmp_path / "b") / ckpt.STATE, weights_only=False)
    assert len(state["rng"]["processes"]) == 1  # rank 1's, beside rank 0's
    assert not torch.equal(state["rng"]["torch"], state["rng"]["processes"][0]["torch"])


def test_nproc_under_torchrun_is_refused(monkeypatch, capsys):
    from transduce.cli import main

    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["train", "--nproc", "2", *FAST]) == 2
    assert "under torchrun leave it out" in capsys.readouterr().err


def test_nproc_below_one_is_refused(capsys):
    from transduce.cli import main

    assert main(["train", "--nproc", "0", *FAST]) == 2
    assert "--nproc must be at least 1, got 0" in capsys.readouterr().err


def test_the_relaunched_command_is_the_given_one_without_nproc():
    from transduce.cli import _without_nproc

    for nproc in (["--nproc", "2"], ["--nproc=2"], ["--npr", "2"], ["--np=2"]):
        argv = ["train", "c.yaml", *nproc, "--run-dir", "r", "train.lr=0.1", "--nothing"]
        assert _without_nproc(argv) == ["train", "c.yaml", "--run-dir", "r", "train.lr=0.1",
                                        "--nothing"]
