"""The package as users get it: `python -m build` makes an sdist and, from it, a wheel; the wheel
installs into a fresh virtual environment (torch pinned first, as scripts/setup.sh does) and runs
a reduced `transduce quickstart` from outside the source tree.

pip installs without compiling bytecode (`--no-compile`), and the quickstart, the environment's
one process, writes what it imports (PYTHONDONTWRITEBYTECODE unset for it): compiling all of
torch's modules at install took 25 s of the test's ~110, the quickstart's own imports ~10."""

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow,  # builds the sdist and wheel and installs them
              pytest.mark.first]  # two minutes: started first

ROOT = Path(__file__).resolve().parents[1]


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done


def test_the_wheel_installs_in_a_fresh_environment_and_runs_the_quickstart(tmp_path):
    pytest.importorskip("build", reason="the test extra: pip install -e '.[test]'")
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)])
    [wheel], [sdist] = dist.glob("*.whl"), dist.glob("*.tar.gz")
    files = set(zipfile.ZipFile(wheel).namelist())
    for packaged in ("transduce/py.typed", "transduce/configs/quickstart.yaml",
                     "transduce/serve/page/index.html"):
        assert packaged in files, packaged
    assert any(name.endswith("/README.md") for name in tarfile.open(sdist).getnames())

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile"]
    _run([*pip, "torch==2.13.0"])  # the local CPU wheel, not a CUDA build
    _run([*pip, str(wheel)])
    work = tmp_path / "elsewhere"  # not the source tree: the installed package runs
    work.mkdir()
    done = _run([str(venv / "bin" / "transduce"), "quickstart", "--run-dir", "q",
                 "train.max_updates=5", "data.numbers_train_size=500",
                 "train.validate_every=0"], cwd=work,
                env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})
    assert "exact match" in done.stdout
    assert (work / "q" / "attention" / "attention_0001.png").is_file()
