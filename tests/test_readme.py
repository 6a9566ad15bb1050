"""The README's test command is CI's, and the architecture page lists every module. (Every
command and snippet of the README runs in tests/test_doc_commands.py.)"""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_ci_runs_the_readme_test_command():
    ci = (README.parent / ".ci" / "run").read_text()
    assert "scripts/test.sh" in README.read_text()
    assert re.search(r"^exec scripts/test.sh$", ci, re.M)


def test_the_architecture_page_lists_every_module():
    text = (README.parent / "docs" / "architecture.md").read_text()
    modules = [p.relative_to(README.parent).as_posix()
               for p in (README.parent / "transduce").rglob("*.py")
               if p.name not in ("__init__.py", "__main__.py")]
    missing = [m for m in modules if not re.search(rf"^{re.escape(m)} ", text, re.M)]
    assert not missing, f"docs/architecture.md misses {missing}"
