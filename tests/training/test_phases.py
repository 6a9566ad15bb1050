"""Ctrl-C or SIGTERM at any moment of `transduce train` loses no update: the command is held at
each named phase (TRANSDUCE_PAUSE_AT, transduce/pauses.py), signalled there, and must exit 130
with one line, leaving a checkpoint of every update done, or, before the first update, nothing
of the new run; what it leaves resumes."""

import os
import signal
import subprocess
import sys

import pytest

from transduce.runs import checkpoint as ckpt

from .test_trainer import FAST

pytestmark = pytest.mark.slow  # trains in a subprocess per signal and phase

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# 3 updates, validated after the 2nd and at the end
RUN = [*FAST, "train.max_updates=3", "train.validate_every=2", "train.log_every=1"]
# phase -> the updates done when it is reached (None: before any)
PHASES = {"prepare": None, "update": 0, "validate": 2, "save": 2, "final validation": 3}


def _ctrl_c_heard() -> None:
    """Ctrl-C as at a terminal: a suite started in the background (`cmd &` in a script) has
    SIGINT ignored, and a child inherits that, so Python would never raise KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _held(args: list[str], phase: str, cwd) -> subprocess.Popen:
    """`transduce ARGS`, started and held at `phase` (returns once it says so)."""
    env = {**os.environ, "TRANSDUCE_PAUSE_AT": phase, "PYTHONPATH": ROOT}
    process = subprocess.Popen([sys.executable, "-m", "transduce", *args], env=env, cwd=cwd,
                               stderr=subprocess.PIPE, text=True, preexec_fn=_ctrl_c_heard)
    seen = []
    for line in process.stderr:
        seen.append(line)
        if line.strip() == f"transduce: paused at {phase}":
            return process
    process.wait()
    raise AssertionError(f"never reached {phase}:\n{''.join(seen)}")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
@pytest.mark.parametrize("phase", list(PHASES))
def test_a_signal_in_any_phase_keeps_every_update_done(phase, signum, tmp_path):
    run = tmp_path / "run"
    process = _held(["train", "--run-dir", str(run), *RUN], phase, tmp_path)
    process.send_signal(signum)
    rest = process.stderr.read()
    assert process.wait(timeout=120) == 130, rest
    assert "Traceback" not in rest
    done = PHASES[phase]
    if not done:  # before the first update: nothing of the new run is left
        assert not run.exists(), rest
        assert "removed what this run wrote" in rest
        return
    assert ckpt.latest_checkpoint(run).name == f"update_{done:07d}", rest
    assert f"interrupted: checkpoint update_{done:07d} written" in rest
    finished = subprocess.run([sys.executable, "-m", "transduce", "train", "--resume", str(run)],
                              env={**os.environ, "PYTHONPATH": ROOT}, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    assert ckpt.latest_checkpoint(run).name == "update_0000003"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_while_preparing_a_resumed_run_changes_nothing(signum, tmp_path):
    run = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "transduce", "train", "--run-dir", str(run), *FAST,
                    "train.max_updates=2"], env={**os.environ, "PYTHONPATH": ROOT}, check=True,
                   cwd=tmp_path, capture_output=True)
    before = sorted(p.name for p in ckpt.checkpoint_dir(run).iterdir())
    process = _held(["train", "--resume", str(run), "train.max_updates=4"], "prepare", tmp_path)
    process.send_signal(signum)
    assert process.wait(timeout=120) == 130
    assert sorted(p.name for p in ckpt.checkpoint_dir(run).iterdir()) == before


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_while_averaging_leaves_the_previous_average(signum, tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": ROOT}
    subprocess.run([sys.executable, "-m", "transduce", "train", "--run-dir", str(run), *FAST,
                    "train.max_updates=3", "train.save_every=1", "train.keep_checkpoints=3"],
                   env=env, check=True, cwd=tmp_path, capture_output=True)
    subprocess.run([sys.executable, "-m", "transduce", "average", str(run), "--last", "2"],
                   env=env, check=True, cwd=tmp_path, capture_output=True)
    averaged = ckpt.checkpoint_dir(run) / "averaged" / ckpt.WEIGHTS
    before, listing = averaged.read_bytes(), sorted(os.listdir(ckpt.checkpoint_dir(run)))
    process = _held(["average", str(run), "--last", "3"], "average", tmp_path)
    process.send_signal(signum)
    assert process.wait(timeout=60) == 130
    assert averaged.read_bytes() == before
    assert sorted(os.listdir(ckpt.checkpoint_dir(run))) == listing  # no temporary directory
