"""Which engine searches (`--engine`): transduce's own, or CTranslate2's over the run's export
(transduce.engines.ctranslate2); either way a `Translator`, with the same batching, options,
results and server."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from transduce.decoding.translator import Translator
from transduce.engines import ENGINES
from transduce.errors import UserError


def load(model_dir: str | Path | Sequence[str | Path], *, engine: str = "transduce",
         **options) -> Translator:
    """`Translator.load(model_dir, **options)` searching with `engine`."""
    if engine == "transduce":
        return Translator.load(model_dir, **options)
    if engine == "ctranslate2":
        from transduce.engines.ctranslate2 import CTranslate2Translator

        return CTranslate2Translator.load(model_dir, **options)
    raise UserError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
