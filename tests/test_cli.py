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
    assert result.stderr.strip().splitlines()[-1] == "transduce: error: missing.en: no such file"
    assert "Traceback" not in result.stderr


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
