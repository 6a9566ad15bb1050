"""Training never hangs: no pairs is an error before it starts, and a signal or the time limit
takes effect however slow a step is, the run resuming as if it had stopped between updates."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.training.test_trainer import FAST, _config, _weights
from transduce.errors import UserError
from transduce.runs import checkpoint as ckpt
from transduce.training.start import resume_run, start_run


def _files(tmp_path, src: str, tgt: str) -> list[str]:
    (tmp_path / "a.src").write_text(src)
    (tmp_path / "a.tgt").write_text(tgt)
    return ["data.dataset=null", f"data.train_src={tmp_path / 'a.src'}",
            f"data.train_tgt={tmp_path / 'a.tgt'}"]


@pytest.mark.parametrize("tokenizer", ["bpe", "word"])
def test_a_corpus_filtered_to_nothing_is_an_error_within_seconds(tmp_path, tokenizer):
    files = _files(tmp_path, "one\n" * 200,
                   "this is a much longer sentence than its source\n" * 200)
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "transduce", "train", "--run-dir", str(tmp_path / "run"), *FAST,
         *files, f"data.tokenizer={tokenizer}", "data.vocab_size=300", "data.max_length_ratio=3",
         "train.max_updates=5"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "no training pairs: train: kept 0 of 200 pairs; skipped 200 length ratio" in \
        result.stderr
    assert time.perf_counter() - start < 60
    assert not (tmp_path / "run").exists()


def test_no_validation_pairs_is_an_error_before_training(tmp_path):
    files = _files(tmp_path, "one two\n" * 50, "eins zwei\n" * 50)
    (tmp_path / "v.tsv").write_text("  \tzwei\n")  # its only pair is empty: skipped
    with pytest.raises(UserError, match="no validation pairs: valid: kept 0 of 1 pairs"):
        start_run(_config(*files, "data.tokenizer=word", f"data.valid_tsv={tmp_path / 'v.tsv'}"),
                tmp_path / "run")


def _slow_from(trainer, update: int, *, then=None, seconds: float = 60.0):
    """Make the forward and backward passes of update `update` (1-based) and later take
    `seconds` (in small sleeps, as a long step is many kernels); `then` runs at its start."""
    real = trainer.accumulate_gradients

    def slow(batches, **kwargs):
        if trainer.progress.update + 1 >= update:
            if then is not None:
                then()
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                time.sleep(0.01)
        return real(batches, **kwargs)

    trainer.accumulate_gradients = slow


def test_max_time_ends_a_step_that_would_outlast_it(tmp_path):
    trainer = start_run(_config("train.max_updates=100", "train.max_time=3"), tmp_path / "t")
    _slow_from(trainer, 3)
    start = time.perf_counter()
    trainer.train()
    assert time.perf_counter() - start < 30
    assert trainer.progress.update == 2  # the slow third update was given up
    assert ckpt.latest_checkpoint(tmp_path / "t").name == "update_0000002"


def test_sigterm_in_a_slow_step_stops_at_once_and_resumes_to_the_bit(tmp_path):
    start_run(_config("train.max_updates=6"), tmp_path / "straight").train()
    trainer = start_run(_config("train.max_updates=6"), tmp_path / "stopped")
    _slow_from(trainer, 4, then=lambda: os.kill(os.getpid(), signal.SIGTERM))
    start = time.perf_counter()
    trainer.train()
    assert time.perf_counter() - start < 30 and trainer.interrupted
    assert ckpt.latest_checkpoint(tmp_path / "stopped").name == "update_0000003"
    resumed = resume_run(tmp_path / "stopped")
    assert resumed.progress.update == 3
    resumed.train()
    a, b = _weights(tmp_path / "straight"), _weights(tmp_path / "stopped")
    for key in a:
        assert torch.equal(a[key], b[key]), key
