"""One process per run directory: a second train, train --resume, average or import is refused
in one line naming the first; the lock dies with its holder (kill -9 leaves none)."""

import os
import re
import signal
import subprocess
import sys

import pytest

from transduce.cli import main
from transduce.runs import checkpoint as ckpt
from transduce.runs.lock import RunLock, in_use

from ..training.test_phases import ROOT, _held
from ..training.test_trainer import FAST

pytestmark = pytest.mark.slow  # trains in subprocesses, two at once

HOLDER = r"is in use by PID (\d+) \((transduce [a-z -]+), started \d\d:\d\d\)"


def _transduce(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transduce", *args], cwd=cwd, timeout=300,
                          env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True)


@pytest.fixture
def trained(tmp_path):
    run = tmp_path / "run"
    done = _transduce("train", "--run-dir", str(run), *FAST, "train.max_updates=2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return run


def _refused(done: subprocess.CompletedProcess, pid: int, command: str) -> None:
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    match = re.search(HOLDER, line)
    assert match and int(match[1]) == pid and match[2] == command, line
    assert "remove" not in line


def test_a_second_resume_is_refused_while_the_first_trains(trained, tmp_path):
    first = _held(["train", "--resume", str(trained), "train.max_updates=4"], "update", tmp_path)
    try:
        second = _transduce("train", "--resume", str(trained), "train.max_updates=4",
                            cwd=tmp_path)
        _refused(second, first.pid, "transduce train --resume")
        _refused(_transduce("average", str(trained), cwd=tmp_path), first.pid,
                 "transduce train --resume")
    finally:
        first.send_signal(signal.SIGINT)
        assert first.wait(timeout=120) == 130
    assert ckpt.latest_checkpoint(trained).name == "update_0000002"  # the first's, no other
    assert in_use(trained) is None


def test_a_new_run_in_a_directory_in_use_is_refused_without_advice_to_remove_it(tmp_path):
    run = tmp_path / "run"
    first = _held(["train", "--run-dir", str(run), *FAST, "train.max_updates=3"], "update",
                  tmp_path)
    try:  # the first has written its config but no checkpoint yet
        second = _transduce("train", "--run-dir", str(run), *FAST, cwd=tmp_path)
        _refused(second, first.pid, "transduce train")
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=120) == 130
    assert not run.exists()  # the first was stopped before its first update


def test_kill_9_leaves_no_stale_lock(trained, tmp_path):
    first = _held(["train", "--resume", str(trained), "train.max_updates=4"], "update", tmp_path)
    first.kill()
    first.wait()
    assert in_use(trained) is None
    done = _transduce("train", "--resume", str(trained), "train.max_updates=4", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert ckpt.latest_checkpoint(trained).name == "update_0000004"


def test_average_and_import_take_the_lock(trained, tmp_path, capsys):
    from ..importers.opus_mt import make_opus_mt

    opus, out = make_opus_mt(tmp_path / "opus-mt-en-de"), tmp_path / "imported"
    with RunLock(trained, "transduce train"), RunLock(out, "transduce import"):
        assert main(["average", str(trained)]) == 2
        assert re.search(HOLDER, capsys.readouterr().err)
        assert main(["import", "marian", str(opus), "--out", str(out)]) == 2
        assert re.search(HOLDER, capsys.readouterr().err)
    assert main(["average", str(trained)]) == 0
    assert main(["import", "marian", str(opus), "--out", str(out)]) == 0  # its lock file: no bar
