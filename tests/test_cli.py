import subprocess
import sys

import pytest

from transduce.cli import main


def test_params_prints_the_exact_count(capsys):
    assert main(["params", "base", "--vocab", "37000"]) == 0
    assert "63,082,496 parameters" in capsys.readouterr().out


def test_bad_value_is_one_line_without_traceback():
    result = subprocess.run([sys.executable, "-m", "transduce", "params", "tiny", "--vocab", "1"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "model.pad_id" in result.stderr


def test_prepare_reports_vocabulary_pairs_and_padding(tmp_path, capsys):
    assert main(["prepare", "--out", str(tmp_path), "--vocab-size", "400",
                 "--numbers-train-size", "2000"]) == 0
    out = capsys.readouterr().out
    assert "vocabulary 400 shared" in out and "train: 2,000 pairs" in out
    assert "padding" in out and (tmp_path / "tokenizer.json").is_file()


def test_prepare_with_a_missing_file_is_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "transduce", "prepare", "--out", str(tmp_path),
                             "--train-src", "missing.en", "--train-tgt", "missing.de"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "transduce: error: --train-src missing.en: no such file"]  # before any work
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("existing", [False, True])
def test_prepare_refuses_a_corpus_filtered_to_nothing_and_leaves_nothing(tmp_path, capsys,
                                                                         existing):
    (tmp_path / "a.en").write_text("one\n" * 50)
    (tmp_path / "a.de").write_text("this is a much longer sentence than its source\n" * 50)
    out = tmp_path / "out"
    if existing:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    assert main(["prepare", "--out", str(out), "--dataset", "null", "--train-src",
                 str(tmp_path / "a.en"), "--train-tgt", str(tmp_path / "a.de"), "--tokenizer",
                 "word", "--max-length-ratio", "3"]) == 2
    err = capsys.readouterr().err
    assert "no training pairs: train: kept 0 of 50 pairs; skipped 50 length ratio" in err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"] if existing else (
        not out.exists())


def test_the_model_line_names_a_preset_only_when_the_model_is_one(tmp_path, caplog):
    from transduce.config import load_config
    from transduce.training.start import start_run

    from .training.test_trainer import FAST

    caplog.set_level("INFO")
    start_run(load_config(overrides=[*FAST, "train.max_updates=1"]), tmp_path / "a").train()
    assert "(its own shape: D=32" in caplog.text  # FAST's tiny model is narrower than tiny
    caplog.clear()
    start_run(load_config(overrides=["model.preset=tiny", "data.numbers_train_size=300",
                                     "train.max_updates=1", "train.validate_every=0",
                                     "train.bleu=false"]), tmp_path / "b").train()
    assert "(tiny preset: D=128" in caplog.text


def test_null_unsets_an_optional_setting(tmp_path, capsys):
    (tmp_path / "a.en").write_text("one two\nthree\n")
    (tmp_path / "a.de").write_text("eins zwei\ndrei\n")
    assert main(["prepare", "--out", str(tmp_path / "out"), "--dataset", "null",
                 "--train-src", str(tmp_path / "a.en"), "--train-tgt", str(tmp_path / "a.de"),
                 "--tokenizer", "word"]) == 0
    assert "train: 2 pairs" in capsys.readouterr().out


@pytest.mark.parametrize("option", ["--bpe-dropout", "--bidirectional-epochs"])
def test_prepare_has_no_option_for_training_time_data_settings(capsys, option):
    # prepare writes the corpus as it is; BPE-dropout resamples it and bidirectional training
    # reverses it while training
    with pytest.raises(SystemExit) as exit:
        main(["prepare", "--out", "unused", option, "1"])
    assert exit.value.code == 2
    assert f"unrecognized arguments: {option}" in capsys.readouterr().err


def _subparsers(parser):
    import argparse

    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_every_option_of_every_command_says_what_it_does():
    import re

    from transduce.cli import build_parser

    for name, command in _subparsers(build_parser()).items():
        for action in command._actions:
            if action.dest == "help":
                continue
            text = re.sub(r"\(default: [^)]*\)", "", action.help or "").strip()
            assert len(text) > 10, f"transduce {name} {action.option_strings or action.dest}"


def test_choices_are_listed_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["prepare", "--help"])
    assert "--tokenizer {bpe,unigram,word}" in capsys.readouterr().out


def test_a_usage_error_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["translate", "--model", "x", "--beam", "two"])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "argument --beam-size/--beam: invalid int value: 'two'" in err


@pytest.mark.parametrize("argv, message", [
    (["train", "--reset-optimizer"], "--reset-optimizer goes with --resume RUN_DIR"),
    (["train", "--resume", "r", "--run-dir", "s"], "it takes no --run-dir"),
    (["average", "nowhere"], "nowhere: no checkpoints here"),
    (["plot", "positional", "-o", "/proc/version/pe.png"], "-o /proc/version: cannot write"),
])
def test_invalid_combinations_and_places_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_resuming_a_finished_run_says_how_to_go_on(tmp_path, caplog):
    from tests.training.test_trainer import FAST

    run = tmp_path / "run"
    assert main(["train", "--run-dir", str(run), *FAST, "train.max_updates=2"]) == 0
    caplog.clear()
    assert main(["train", "--resume", str(run)]) == 0
    assert (f"{run} has already reached max_updates=2: nothing to train. To go on, raise the "
            f"limit, e.g. `transduce train --resume {run} train.max_updates=4`") in caplog.text


def test_every_shipped_config_is_in_the_package_and_found_by_name(tmp_path):
    from importlib import resources
    from pathlib import Path

    from transduce.cli import _config_path

    root = Path(__file__).resolve().parents[1]
    shipped = Path(str(resources.files("transduce") / "configs"))
    for config in (root / "configs").glob("*.yaml"):
        assert (shipped / config.name).read_text() == config.read_text(), config.name
        assert _config_path(config.stem) == shipped / config.name
    assert "configs/*.yaml" in (root / "pyproject.toml").read_text()
    assert (root / "LICENSE").read_text().startswith("MIT License")


@pytest.mark.parametrize("command", ["train", "prepare", "average"])
def test_an_unwritable_place_is_one_line_before_any_work(tmp_path, capsys, command):
    from tests.training.test_trainer import FAST

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    place = str(blocker / "run")
    argv = {"train": ["train", "--run-dir", place, *FAST],
            "prepare": ["prepare", "--out", place, "--numbers-train-size", "100"],
            "average": ["average", place]}[command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and str(blocker) in err, err
    assert blocker.read_text() == ""


def test_attention_heads_are_drawn_as_a_square_grid(tmp_path):
    import struct

    import torch

    from transduce.visualize.attention import plot_attention

    src, tgt = [f"s{i}" for i in range(30)], [f"t{i}" for i in range(12)]
    out = plot_attention(torch.rand(4, 12, 30).softmax(-1), src, tgt, tmp_path / "a.png",
                         title="a long source sentence " * 20)
    width, height = struct.unpack(">II", out.read_bytes()[16:24])
    assert 0.5 < width / height < 2.5  # 2 x 2, not one row of 4
