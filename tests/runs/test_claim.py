"""A refused or failed `transduce train` leaves the file system as it found it."""

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training.test_trainer import FAST, _config
from transduce.cli import main
from transduce.errors import UserError
from transduce.quickstart import quickstart
from transduce.training.start import resume_run, start_run


def snapshot(directory: Path) -> dict:
    """Every file under `directory` with its bytes' hash, mode and time."""
    return {str(p.relative_to(directory)): (hashlib.sha256(p.read_bytes()).hexdigest(),
                                            p.stat().st_mode, p.stat().st_mtime_ns)
            if p.is_file() else "dir" for p in sorted(directory.rglob("*"))}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    path = tmp_path_factory.mktemp("held") / "run"
    start_run(_config("train.max_updates=2"), path).train()
    return path


def test_a_new_run_into_a_run_directory_is_refused_leaving_it_byte_identical(run, capsys):
    before = snapshot(run)
    # another vocabulary and another config: the tokenizer and data/ would be rebuilt
    assert main(["train", "configs/quickstart.yaml", "--run-dir", str(run),
                 "data.vocab_size=400", "data.numbers_train_size=500"]) == 2
    err = capsys.readouterr().err
    assert "already holds a run" in err and f"--resume {run}" in err
    assert snapshot(run) == before


def test_prepare_into_a_run_directory_is_refused_leaving_it_byte_identical(run, capsys):
    before = snapshot(run)
    assert main(["prepare", "--out", str(run), "--vocab-size", "400",
                 "--numbers-train-size", "500"]) == 2
    assert "run directory" in capsys.readouterr().err
    assert snapshot(run) == before


def test_a_non_empty_directory_that_is_no_run_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="not empty"):
        start_run(_config("train.max_updates=1"), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_a_failed_train_leaves_no_run_directory(tmp_path):
    (tmp_path / "a.en").write_text("one\ntwo\nthree\n")
    (tmp_path / "a.de").write_text("eins\nzwei\n")
    files = ["data.dataset=null", f"data.train_src={tmp_path / 'a.en'}",
             f"data.train_tgt={tmp_path / 'a.de'}"]
    with pytest.raises(UserError, match="line counts differ"):
        start_run(_config(*files), tmp_path / "new" / "run")
    assert not (tmp_path / "new" / "run").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="line counts differ"):
        start_run(_config(*files), tmp_path / "empty")
    assert list((tmp_path / "empty").iterdir()) == []  # emptied again, not removed


def test_a_run_failing_before_its_first_checkpoint_takes_away_what_it_wrote(tmp_path,
                                                                            monkeypatch):
    trainer = start_run(_config("train.max_updates=5"), tmp_path / "run")
    assert (tmp_path / "run" / "tokenizer.json").is_file()

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(trainer, "accumulate_gradients", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        trainer.train()
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # runs the quickstart twice
def test_quickstart_twice_goes_on_from_the_first_run(tmp_path, capsys):
    settings = ["train.max_updates=4", "data.numbers_train_size=300", "train.validate_every=0"]
    first = quickstart(tmp_path / "q", settings)
    second = quickstart(tmp_path / "q", settings)  # finished: evaluated again, not retrained
    assert second["exact"] == first["exact"]
    assert (tmp_path / "q" / "checkpoints" / "latest").read_text().strip() == "update_0000004"
    with pytest.raises(UserError, match=r"other settings \(train.max_updates: 4 there, 6 here"):
        quickstart(tmp_path / "q", [*settings[1:], "train.max_updates=6"])


def test_a_refused_command_in_a_subprocess_is_one_line(run):
    result = subprocess.run([sys.executable, "-m", "transduce", "train", "--run-dir", str(run),
                             *FAST], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "already holds a run" in result.stderr


def test_a_resume_that_would_change_the_model_is_refused_leaving_the_run_as_it_was(run):
    before = snapshot(run)
    with pytest.raises(UserError, match="do not fit the model the configuration now describes"):
        resume_run(run, ["model.d_model=64", "train.max_updates=4"])
    assert snapshot(run) == before
