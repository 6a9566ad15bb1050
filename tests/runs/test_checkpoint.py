"""Damaged and stale checkpoints: resume passes over a damaged one, loading names it, and a
command says which checkpoint it loaded."""

import os
import stat

import pytest
import torch
from safetensors.torch import load_file

from tests.training.test_trainer import _config, _weights
from transduce import files
from transduce.cli import main
from transduce.decoding.translator import Translator
from transduce.errors import UserError
from transduce.runs import checkpoint as ckpt
from transduce.training.start import resume_run, start_run


def _truncate(path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


@pytest.mark.parametrize("damage", [("model.safetensors", 0.5), ("state.pt", 0.5),
                                    ("state.pt", 0.0), ("model.safetensors", 0.0)])
def test_resume_passes_over_a_damaged_latest_checkpoint(tmp_path, caplog, damage):
    start_run(_config("train.max_updates=6"), tmp_path / "straight").train()
    run = tmp_path / "run"
    start_run(_config("train.max_updates=6", "train.save_every=3"), run).train()
    name, keep = damage
    _truncate(ckpt.checkpoint_dir(run) / "update_0000006" / name, keep)
    resumed = resume_run(run)
    assert resumed.progress.update == 3
    assert f"update_0000006/{name}: damaged" in caplog.text
    assert "resuming from" in caplog.text and "update_0000003" in caplog.text
    resumed.train()  # and on to where the damaged one was, to the bit
    a, b = _weights(tmp_path / "straight"), _weights(run)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_every_checkpoint_damaged_is_one_clear_error(tmp_path):
    run = tmp_path / "run"
    start_run(_config("train.max_updates=2"), run).train()
    _truncate(ckpt.checkpoint_dir(run) / "update_0000002" / ckpt.STATE)
    with pytest.raises(UserError, match="every checkpoint is damaged"):
        resume_run(run)


def test_translate_names_the_damaged_weights_file(tmp_path, capsys):
    run = tmp_path / "run"
    start_run(_config("train.max_updates=2"), run).train()
    weights = ckpt.checkpoint_dir(run) / "update_0000002" / ckpt.WEIGHTS
    _truncate(weights)
    with pytest.raises(UserError, match=f"{weights}: damaged, or not a weights file"):
        Translator.load(run)
    not_weights = tmp_path / "notes.txt"
    not_weights.write_text("not a checkpoint")
    assert main(["translate", "--model", str(run), "--checkpoint", str(not_weights)]) == 2
    assert f"{not_weights}: damaged, or not a weights file" in capsys.readouterr().err


def test_loading_says_which_checkpoint_and_warns_of_a_stale_average(tmp_path, caplog):
    run = tmp_path / "run"
    start_run(_config("train.max_updates=4", "train.save_every=2"), run).train()
    ckpt.average_checkpoints(ckpt.update_checkpoints(run), ckpt.checkpoint_dir(run) / "averaged")
    caplog.clear()
    Translator.load(run)
    assert "checkpoint averaged" in caplog.text
    assert "the mean of update_0000002 .. update_0000004, 2 checkpoints" in caplog.text
    assert "older than its latest" not in caplog.text
    resume_run(run, ["train.max_updates=6"]).train()
    caplog.clear()
    Translator.load(run)
    assert "its averaged checkpoint is older than its latest, update_0000006" in caplog.text
    caplog.clear()
    Translator.load(run, checkpoint=ckpt.named_checkpoint(run, "latest"))
    assert "checkpoint update_0000006" in caplog.text and "older" not in caplog.text


def test_average_until_an_update_into_a_name_of_its_own(tmp_path, caplog, capsys):
    run = tmp_path / "run"
    start_run(_config("train.max_updates=6", "train.save_every=2",
                      "train.keep_checkpoints=5"), run).train()
    two, four, _ = ckpt.update_checkpoints(run)
    assert main(["average", str(run), "--last", "2", "--until", "5", "-o", "upto-4"]) == 0
    weights = ckpt.named_checkpoint(run, "upto-4")
    averaged, a, b = (load_file(str(w)) for w in (weights, two / ckpt.WEIGHTS,
                                                  four / ckpt.WEIGHTS))
    for key in averaged:
        torch.testing.assert_close(averaged[key], (a[key] + b[key]) / 2)
    assert ckpt.model_checkpoint(run) != weights  # the run's default is left as it was
    caplog.clear()
    Translator.load(run, checkpoint=weights)
    assert "checkpoint upto-4" in caplog.text
    assert "the mean of update_0000002 .. update_0000004, 2 checkpoints" in caplog.text

    # into the default name: no stale warning for an average made short of the latest on
    # purpose, until the run trains on
    assert main(["average", str(run), "--until", "4"]) == 0
    assert f"only 2 checkpoints kept in {run} up to update 4" in capsys.readouterr().err
    caplog.clear()
    Translator.load(run)
    assert "update_0000002 .. update_0000004" in caplog.text and "older" not in caplog.text
    resume_run(run, ["train.max_updates=8"]).train()
    caplog.clear()
    Translator.load(run)
    assert "its averaged checkpoint is older than its latest, update_0000008" in caplog.text

    assert main(["average", str(run), "--until", "1"]) == 2
    assert (f"{run}: no update checkpoint at or before update 1 (kept: update_0000002, "
            "update_0000004, update_0000006, update_0000008)") in capsys.readouterr().err
    for name in ("latest", "update_0000009", "../elsewhere", ".hidden"):
        with pytest.raises(SystemExit):
            main(["average", str(run), "-o", name])
        assert "a plain name, not a path" in capsys.readouterr().err


@pytest.fixture
def umask_027():
    """A umask that lets the group read, not others (as for a serving account's group)."""
    previous = os.umask(0o027)
    files.umask.cache_clear()
    yield
    os.umask(previous)
    files.umask.cache_clear()


def test_checkpoints_are_as_readable_as_the_umask_says(tmp_path, umask_027):
    run = tmp_path / "run"
    start_run(_config("train.max_updates=2"), run).train()
    ckpt.average_checkpoints(ckpt.update_checkpoints(run), ckpt.checkpoint_dir(run) / "averaged")
    root = ckpt.checkpoint_dir(run)
    for path in [root / "latest", *root.rglob("*"), *(run / "data").rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o750 if path.is_dir() else 0o640), (path, oct(mode))
