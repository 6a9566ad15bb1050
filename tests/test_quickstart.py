"""`transduce quickstart` end to end, reduced to a few updates, and the plot commands."""

import pytest

from transduce.cli import main
from transduce.quickstart import quickstart

pytestmark = pytest.mark.slow  # runs the quickstart


def test_quickstart_runs_end_to_end_and_draws_attention(tmp_path, capsys):
    figures = quickstart(tmp_path / "q", ["train.max_updates=40", "data.numbers_train_size=3000",
                                          "train.validate_every=0", "train.log_every=10"])
    out = capsys.readouterr().out
    assert "held-out numbers the model never saw (1,000)" in out and "exact match" in out
    assert 0.0 <= figures["exact"] <= 1.0
    png = figures["attention_png"].read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000


def test_quickstart_command_takes_overrides(tmp_path, capsys):
    assert main(["quickstart", "--run-dir", str(tmp_path / "q"), "train.max_updates=5",
                 "data.numbers_train_size=500", "train.validate_every=0"]) == 0
    assert "exact match" in capsys.readouterr().out


def test_plot_positional_writes_a_png(tmp_path):
    assert main(["plot", "positional", "-o", str(tmp_path / "pe.png"), "--d-model", "64"]) == 0
    png = (tmp_path / "pe.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_ctrl_c_in_quickstart_stops_it_without_translating(tmp_path):
    """Sent Ctrl-C while it saves its second update: the checkpoint is kept, and nothing of the
    1,000 held-out numbers is translated by a half-trained model (no attention picture)."""
    import signal

    from transduce.runs import checkpoint as ckpt

    from .training.test_phases import _held

    run = tmp_path / "q"
    overrides = ["train.max_updates=40", "data.numbers_train_size=500",
                 "train.validate_every=0", "train.save_every=2"]
    process = _held(["quickstart", "--run-dir", str(run), *overrides], "save", tmp_path)
    process.send_signal(signal.SIGINT)
    rest = process.stderr.read()
    assert process.wait(timeout=120) == 130, rest
    assert "quickstart stopped while training" in rest and "go on from update 2" in rest
    assert ckpt.latest_checkpoint(run).name == "update_0000002"
    assert not (run / "attention").exists()
