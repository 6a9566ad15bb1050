"""MkDocs hook: the configuration reference page, generated from the config dataclasses.

Every key of the four sections (`model`, `data`, `train`, `decode`) with its type, its default
and the comments written beside and above its field in the source, so that the page cannot
drift from the code. The page is `configuration.md` of the built site.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import tokenize

from mkdocs.structure.files import File

from transduce.config import _FROM_TOKENIZER
from transduce.data.config import DataConfig
from transduce.decoding.config import DecodeConfig
from transduce.model.config import PRESETS, ModelConfig
from transduce.training.config import TrainConfig

INTRO = """# Configuration reference

A run's configuration is a YAML file with four sections; `transduce train CONFIG
section.key=value ...` overrides any key, and a run directory's `config.yaml` holds the resolved
one. Generated from the dataclasses below (their field comments), so it is the code's own word.

"""


def field_comments(cls: type) -> dict[str, str]:
    """The comment of each field of dataclass `cls`: the lines above it and the one beside it
    with its continuation lines (a `#` followed by the spaces that align it with that comment)."""
    comments: dict[str, list[str]] = {}
    above: list[str] = []
    last = None
    for line in inspect.getsource(cls).splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith(("def ", "@")):
            break
        if stripped.startswith("#"):
            text = stripped.lstrip("#").strip()
            if last is not None and stripped[1:].startswith("  ") and not above:
                comments[last].append(text)  # a continuation of the field line's comment
            else:
                above.append(text)
            continue
        name = stripped.split(":", 1)[0]
        if ":" not in stripped or not name.isidentifier():
            above, last = [], None  # the docstring, a blank line
            continue
        beside = [t.string.lstrip("#").strip() for t in
                  tokenize.generate_tokens(io.StringIO(stripped + "\n").readline)
                  if t.type == tokenize.COMMENT]
        comments[name] = above + beside
        above, last = [], name
    return {name: " ".join(parts) for name, parts in comments.items()}


def section_table(section: str, cls: type, skip: tuple[str, ...] = ()) -> str:
    comments = field_comments(cls)
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if f.default is not dataclasses.MISSING:
            default = repr(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = repr(f.default_factory())
        else:
            default = "(required)"
        cells = [f"`{section}.{f.name}`", f"`{f.type}`", f"`{default}`",
                 comments.get(f.name, "")]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


def page() -> str:
    presets = ", ".join(f"`{name}`" for name in sorted(PRESETS))
    return INTRO + "\n".join([
        "## model\n",
        f"`model.preset` (one of {presets}; default `'base'`) gives every key below a value; "
        "the other keys override it. The vocabulary sizes and special token ids come from "
        "the run's tokenizer.\n",
        section_table("model", ModelConfig, skip=_FROM_TOKENIZER),
        "## data\n", section_table("data", DataConfig),
        "## train\n", section_table("train", TrainConfig),
        "## decode\n", section_table("decode", DecodeConfig),
    ])


def on_files(files, config):
    files.append(File.generated(config, "configuration.md", content=page()))
    return files
