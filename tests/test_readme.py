"""The README's commands and examples are the ones that work."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_python_examples_run(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks
    (tmp_path / "configs").symlink_to(README.parent / "configs")
    monkeypatch.chdir(tmp_path)  # runs/ of the examples land here
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})


def test_ci_runs_the_readme_test_command():
    ci = (README.parent / ".ci" / "run").read_text()
    assert "scripts/test.sh" in README.read_text()
    assert re.search(r"^exec scripts/test.sh$", ci, re.M)
