"""MkDocs hook: the measurement logs kept beside the benchmarks, as pages of the site.

`benchmarks/*.md` stay where the benchmarks are (each log next to the script that measured it);
the site shows them under the names below, so a reader of the documentation finds every
measured figure without leaving it.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

COPIED = {  # page of the site -> its source, from the repository's root
    "results.md": "benchmarks/multi30k.md",
    "serving-load.md": "benchmarks/serve.md",
}
ROOT = Path(__file__).resolve().parents[2]


def on_files(files, config):
    for page, source in COPIED.items():
        files.append(File.generated(config, page, content=(ROOT / source).read_text()))
    return files
