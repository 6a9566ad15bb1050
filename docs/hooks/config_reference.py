"""MkDocs hook: the configuration reference page, generated from the config dataclasses.

Every key of the four sections (`model`, `data`, `train`, `decode`) with its type, its default
and its description, `setting(default, "...")` in the source (transduce.fields): the one the
command-line options show, so that the page cannot drift from the code. The page is
`configuration.md` of the built site.
"""

from __future__ import annotations

import dataclasses

from mkdocs.structure.files import File

from transduce.config import _FROM_TOKENIZER
from transduce.data.config import DataConfig
from transduce.decoding.config import DecodeConfig, Sampling
from transduce.fields import help_of
from transduce.model.config import PRESETS, ModelConfig
from transduce.training.config import TrainConfig

INTRO = """# Configuration reference

A run's configuration is a YAML file with four sections; `transduce train CONFIG
section.key=value ...` overrides any key, and a run directory's `config.yaml` holds the resolved
one. Generated from the dataclasses below (their fields' descriptions), so it is the code's own
word.

"""


def section_table(section: str, cls: type, skip: tuple[str, ...] = ()) -> str:
    comments = help_of(cls)
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
        "Sampling (`transduce translate --sample`, `Translator.translate(sampling=Sampling(...))`) "
        "is not a config section; its settings:\n",
        section_table("sampling", Sampling),
    ])


def on_files(files, config):
    files.append(File.generated(config, "configuration.md", content=page()))
    return files
