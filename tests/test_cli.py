import subprocess
import sys

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
