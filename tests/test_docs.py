"""The documentation site builds with `mkdocs build --strict` (a broken link, a missing page or an
API reference that does not resolve fails it), and its API reference is read from the source."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_site_builds_strictly_with_the_api_reference(tmp_path):
    pytest.importorskip("mkdocstrings", reason="the docs extra: pip install -e '.[docs]'")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("Translator", "DecodeConfig", "Int8Linear", "beam_search", "tune"):
        assert name in api, name
    pages = {p.parent.name for p in (tmp_path / "site").glob("*/index.html")}
    nav = {p.stem for p in (ROOT / "docs").glob("*.md")} - {"index"}
    assert nav <= pages, f"pages not in the site: {sorted(nav - pages)}"
