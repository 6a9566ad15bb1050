"""`transduce import` and `transduce export`: models of other toolkits in, ours out."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from transduce.errors import UserError

EXPORTS = ("huggingface", "ctranslate2", "argos")
QUANTIZATIONS = ("int8", "int8_float32", "float16")

log = logging.getLogger("transduce")


def add_import_options(parser: argparse.ArgumentParser) -> None:
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND",
                                  help="the kind of model: marian (OPUS-MT)")
    marian = kinds.add_parser(
        "marian", help="a Marian model (OPUS-MT) in the Hugging Face format",
        description="A Marian model (Helsinki-NLP's OPUS-MT: config.json, weights, source.spm, "
                    "target.spm, vocab.json) as a run directory that translate, evaluate, serve, "
                    "export and train --init-from take.")
    marian.add_argument("source", metavar="SRC",
                        help="the model's directory, or its Hugging Face hub id "
                             "(e.g. Helsinki-NLP/opus-mt-en-de)")
    marian.add_argument("--out", required=True, metavar="RUN_DIR",
                        help="the run directory to write (absent or empty)")
    marian.add_argument("--src-lang", metavar="CODE",
                        help="the source language (en, de, ...; default: what the model says "
                             "in its tokenizer_config.json or its name, opus-mt-en-de)")
    marian.add_argument("--tgt-lang", metavar="CODE",
                        help="the target language (default: as --src-lang)")


def _quiet_transformers() -> None:
    """No progress bars from transformers while it loads and writes weights: one line each."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # the command says what to install
        return
    hf_logging.disable_progress_bar()


def import_model(args: argparse.Namespace) -> None:
    from transduce.importers.marian import import_marian

    _quiet_transformers()
    out = import_marian(args.source, Path(args.out), src_lang=args.src_lang,
                        tgt_lang=args.tgt_lang)
    print(f"imported {args.source} -> {out}")


def add_export_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (trained or imported)")
    parser.add_argument("--to", required=True, choices=EXPORTS,
                        help="huggingface: a MarianMTModel (Pegasus for pre-norm) directory; "
                             "ctranslate2: a CTranslate2 model directory; argos: an Argos "
                             "Translate package (.argosmodel) for LibreTranslate")
    parser.add_argument("--out", required=True, metavar="PATH",
                        help="the directory (or, for argos, the .argosmodel file) to write")
    parser.add_argument("--quantization", choices=QUANTIZATIONS, default=None,
                        help="ctranslate2 and argos: weights in int8, int8_float32 or float16 "
                             "(default: float32)")
    parser.add_argument("--checkpoint", default=None,
                        help="which weights: averaged, best, latest, a checkpoint's name or a "
                             "path (default: averaged, else best, else latest)")


def export(args: argparse.Namespace) -> None:
    from transduce.runs import checkpoint as ckpt
    from transduce.runs.load import load_run

    _quiet_transformers()
    out = Path(args.out)
    if args.quantization and args.to == "huggingface":
        raise UserError("--quantization goes with --to ctranslate2 or argos")
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        raise UserError(f"--out {out}: already exists; pick a new path")
    weights = ckpt.named_checkpoint(Path(args.run_dir), args.checkpoint) if args.checkpoint \
        else None
    run = load_run(Path(args.run_dir), weights)
    languages = (run.config.data.src_lang, run.config.data.tgt_lang)
    if args.to == "huggingface":
        from transduce.export.marian import save_huggingface

        save_huggingface(run.model, run.tokenizers, out, decode=run.config.decode,
                         languages=languages)
    elif args.to == "ctranslate2":
        from transduce.export.ctranslate2 import save_ctranslate2

        save_ctranslate2(run.model, run.tokenizers, out, quantization=args.quantization,
                         decode=run.config.decode)
    else:
        from transduce.export.argos import save_argos

        save_argos(run.model, run.tokenizers, out, from_code=languages[0],
                   to_code=languages[1], quantization=args.quantization,
                   decode=run.config.decode)
    print(f"exported {args.run_dir} ({args.to}) -> {out}")
