"""The documentation site builds with `mkdocs build --strict` (a broken link, a missing page or an
API reference that does not resolve fails it), and its API reference is read from the source."""

import dataclasses
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds the documentation site

ROOT = Path(__file__).resolve().parents[1]


def docs_hook(name: str):
    """The module of docs/hooks/NAME.py, as MkDocs loads it."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    nav |= {"configuration", "results", "serving-load"}  # made by the hooks
    assert nav <= pages, f"pages not in the site: {sorted(nav - pages)}"


def test_the_configuration_reference_has_every_key_with_its_comment(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    config_reference = docs_hook("config_reference")
    from transduce.config import _FROM_TOKENIZER
    from transduce.data.config import DataConfig
    from transduce.decoding.config import DecodeConfig
    from transduce.fields import help_of
    from transduce.model.config import ModelConfig
    from transduce.training.config import TrainConfig

    page = config_reference.page()
    for section, cls in (("model", ModelConfig), ("data", DataConfig), ("train", TrainConfig),
                         ("decode", DecodeConfig)):
        comments = help_of(cls)
        for f in dataclasses.fields(cls):
            if section == "model" and f.name in _FROM_TOKENIZER:
                continue
            assert f"`{section}.{f.name}`" in page, f"{section}.{f.name}"
            assert comments.get(f.name), f"{section}.{f.name} has no description in the source"
            assert comments[f.name].replace("|", "\\|") in page
    # the words --help shows: one description of each setting
    import argparse

    from transduce.cli import build_parser

    commands = next(a for a in build_parser()._actions
                    if isinstance(a, argparse._SubParsersAction))
    shown = {a.dest: a.help for a in commands.choices["translate"]._actions}
    for name, text in help_of(DecodeConfig).items():
        assert shown[name].startswith(text.replace("%", "%%")), name
