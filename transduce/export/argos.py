"""Our model as an Argos Translate package (`.argosmodel`), which LibreTranslate serves.

    translate-en_de-1_0/            one top directory, zipped
        metadata.json               package_version, argos_version, from/to code and name
        sentencepiece.model         the source tokenizer: Argos cuts text into its pieces
        model/                      the CTranslate2 model, "add_source_eos": true in its
                                    config.json (Argos appends no </s>; our models expect it)
        spacy/                      a blank spaCy pipeline: a sentence splitter that works
                                    offline (Argos >= 1.10 uses it with ARGOS_CHUNK_TYPE=SPACY)
        README.md

Argos translates each sentence with CTranslate2 (beam 4 by default, ARGOS_BEAM_SIZE=1 for
greedy search) and joins the pieces back into text. A package has no place for search
settings: Argos uses its own (its environment variables, a length penalty of 0.2, at most 256
tokens); the run's are in model/translate_options.json for a program that runs the model itself.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import zipfile
from pathlib import Path

from transduce.data.tokenizer import Tokenizers
from transduce.decoding.config import DecodeConfig
from transduce.errors import UserError
from transduce.export.ctranslate2 import save_ctranslate2
from transduce.model.transformer import Transformer

PACKAGE_VERSION = "1.0"
ARGOS_VERSION = "1.9.0"  # the oldest Argos Translate whose package format this is


def save_argos(model: Transformer, tokenizers: Tokenizers, out_path: Path, *,
               from_code: str, to_code: str, from_name: str | None = None,
               to_name: str | None = None, quantization: str | None = None,
               decode: DecodeConfig | None = None) -> Path:
    """Write the Argos Translate package `out_path` (a .argosmodel zip file)."""
    if tokenizers.src.kind not in ("sentencepiece", "marian"):
        raise UserError("an Argos package needs a SentencePiece tokenizer (data.tokenizer bpe "
                        "or unigram)")
    if tokenizers.lowercase:
        raise UserError("an Argos package cannot lowercase its input: this model's tokenizer "
                        "does (data.lowercase=true)")
    out_path = Path(out_path)
    top = f"translate-{from_code}_{to_code}-{PACKAGE_VERSION.replace('.', '_')}"
    with tempfile.TemporaryDirectory() as tmp:
        package = Path(tmp) / top
        package.mkdir()
        save_ctranslate2(model, tokenizers, package / "model", quantization=quantization,
                         decode=decode)
        config_path = package / "model" / "config.json"
        config = json.loads(config_path.read_text())
        config["add_source_eos"] = True
        config_path.write_text(json.dumps(config, indent=2) + "\n")
        (package / "sentencepiece.model").write_bytes(tokenizers.src.model_proto)
        _blank_spacy(from_code).to_disk(package / "spacy")
        metadata = {"package_version": PACKAGE_VERSION, "argos_version": ARGOS_VERSION,
                    "from_code": from_code, "from_name": from_name or _name(from_code),
                    "to_code": to_code, "to_name": to_name or _name(to_code),
                    "type": "translate"}
        (package / "metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
        (package / "README.md").write_text(
            f"# {metadata['from_name']} -> {metadata['to_name']}\n\nA transduce model packaged "
            "for Argos Translate: `argospm install` it, or\n"
            "`argostranslate.package.install_from_path(path)`.\n")
        partial = out_path.with_name(f".{out_path.name}.partial")
        out_path.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(package.rglob("*")):
                archive.write(path, path.relative_to(tmp))
        shutil.move(partial, out_path)  # whole or not at all
    return out_path


def _blank_spacy(code: str):
    try:
        import spacy
    except ImportError:
        raise UserError("an Argos package needs spaCy for its sentence splitter: pip install "
                        "'transduce[export]'") from None
    try:
        nlp = spacy.blank(code)
    except (ImportError, KeyError, ValueError):  # a language spaCy has no rules for
        nlp = spacy.blank("xx")
    return nlp  # Argos adds the rule-based sentencizer itself


def _name(code: str) -> str:
    try:
        from babel import Locale

        return Locale.parse(code).get_display_name("en").capitalize()
    except Exception:  # babel absent, or a code it does not know
        return code
