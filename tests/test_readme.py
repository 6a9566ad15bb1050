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


def test_the_architecture_page_lists_every_module():
    text = (README.parent / "docs" / "architecture.md").read_text()
    modules = [p.relative_to(README.parent).as_posix()
               for p in (README.parent / "transduce").rglob("*.py")
               if p.name not in ("__init__.py", "__main__.py")]
    missing = [m for m in modules if f"    {m} " not in text]
    assert not missing, f"docs/architecture.md misses {missing}"
