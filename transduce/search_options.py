"""The command line's model, search and device options, shared by `translate`, `evaluate`,
`score` and `serve`: the parser's options (one per field of DecodeConfig and Sampling), their
checks before any work, and the translator they load."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from pathlib import Path

from transduce.decoding.config import (
    DTYPES,
    FIELDS,
    LENGTH_NORMALIZATIONS,
    SAMPLING_FIELDS,
    STOPPING,
    DecodeConfig,
    Sampling,
)
from transduce.engines import ENGINES
from transduce.errors import UserError
from transduce.options import add_config_options

if typing.TYPE_CHECKING:
    from transduce.decoding.translator import Translator

ALIASES = {"beam_size": ["--beam"], "length_penalty": ["--lenpen"]}  # the flags' older names


def at_least(low: float, kind=int):
    """An argparse type: a number of `kind` that is at least `low`."""
    def parse(text: str):
        value = kind(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


def add_model_and_search_options(parser: argparse.ArgumentParser) -> None:
    add_model_options(parser)
    add_decode_options(parser)
    add_device_options(parser)
    parser.add_argument("--searches", type=at_least(0), default=0, metavar="N",
                        help="on a CPU, batches searched at once, each on a thread of its own "
                             "with an equal share of the CPU threads (CTranslate2's "
                             "inter_threads): more sentences a second, each batch slower; 1: "
                             "one batch at a time on all of them (default: 0, one a CPU thread)")


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """Which model: --model, --checkpoint, --tgt-lang."""
    parser.add_argument("--model", required=True, nargs="+", metavar="DIR",
                        help="a run directory of transduce train; several: their ensemble (one "
                             "tokenizer), each next token's probability the mean of theirs")
    parser.add_argument("--checkpoint", metavar="NAME",
                        help="which of its checkpoints (of each model's): averaged, best, latest, "
                             "update_0007000, ... or a checkpoint's path (default: averaged, "
                             "else best)")
    parser.add_argument("--tgt-lang", metavar="LANG",
                        help="the language to translate into, for a model of several target "
                             "languages (trained on data.corpora with language tokens)")


def add_decode_options(parser: argparse.ArgumentParser,
                       default_text: str = "the run's decode.{name}") -> None:
    """One option per field of DecodeConfig, by its name (and ALIASES), unset by default: the
    model's own setting then."""
    add_config_options(parser, DecodeConfig, aliases=ALIASES, defaults=dict.fromkeys(FIELDS),
                       default_text=default_text,
                       choices={"stopping": STOPPING,
                                "length_normalization": LENGTH_NORMALIZATIONS})


def add_device_options(parser: argparse.ArgumentParser, engine: bool = True) -> None:
    """Where the models run and in what precision: --device, --dtype, --compile, and (with
    `engine`, for the commands that search) --engine."""
    parser.add_argument("--device", default="auto",
                        help="auto (a GPU when there is one), cpu, cuda, cuda:N (default: auto)")
    parser.add_argument("--dtype", default="float32", choices=DTYPES,
                        help="bfloat16/float16: weights and activations in 16 bits, faster "
                             "for larger models on CPUs with bf16 support and on GPUs; int8 "
                             "(CPU): linear layers in int8, faster where matrix products "
                             "dominate; a few translations may differ (default: float32)")
    if engine:
        parser.add_argument("--engine", default="transduce", choices=ENGINES,
                            help="what searches: transduce's own search, or CTranslate2's over "
                                 "the run's CTranslate2 export (made on first use, beside the "
                                 "checkpoint), with the search settings it has (docs/speed.md "
                                 "says when each wins; default: transduce)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction,
                        help="run the search's decoder steps compiled by torch.compile: less "
                             "overhead per step (small batches gain most), 15-60 s of "
                             "compiling first (default: where that pays, on a CPU in float32: "
                             "serve, and inputs of a million source words or more, 2.5 million "
                             "for beam search; --no-compile: never)")


def add_glossary_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--glossary", metavar="FILE",
                        help="a TSV of source term<TAB>target term: where a line holds a source "
                             "term (whole words; in any case if written in lower case, else as "
                             "written), its translation contains the target term (lexically "
                             "constrained beam search)")


def check_device_options(args: argparse.Namespace) -> None:
    """--device, --dtype and --compile together, before anything is loaded or read."""
    from transduce.runtime import resolve_device

    resolve_device(args.device, setting="--device")
    if args.compile and args.dtype == "int8":
        raise UserError("--compile and --dtype int8 do not go together: torch.compile cannot "
                        "look inside the int8 layers' fbgemm kernels; choose one")
    if getattr(args, "engine", "transduce") != "transduce":
        for given, name in ((args.compile, "--compile"), (getattr(args, "glossary", None),
                                                          "--glossary")):
            if given:
                raise UserError(f"--engine {args.engine} takes no {name}: it is transduce's "
                                "own search's")
        if len(getattr(args, "model", None) or []) > 1:
            raise UserError(f"--engine {args.engine} runs one model: no ensembles")


def decode_options(args: argparse.Namespace) -> dict:
    """The search settings given as options ({field: value}), checked as `DecodeConfig` checks
    them, its messages naming the options."""
    options = {name: getattr(args, name) for name in FIELDS if getattr(args, name) is not None}
    _checked(DecodeConfig, options, "decode")
    return options


def sampling_options(args: argparse.Namespace) -> Sampling | None:
    """What --sample draws with, checked as `Sampling` checks it; None without --sample."""
    given = {name: getattr(args, name) for name in SAMPLING_FIELDS
             if getattr(args, name, None) is not None}
    sampling = _checked(Sampling, given, "sampling")
    return sampling if getattr(args, "sample", False) else None


def _checked(kind, options: dict, section: str):
    """kind(**options), its messages naming the options rather than the config's keys."""
    try:
        return kind(**options)
    except UserError as error:
        message = str(error)
        for field in dataclasses.fields(kind):
            message = message.replace(f"{section}.{field.name}", flag_of(field.name))
        raise UserError(message) from None


def flag_of(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def check_against_run(args: argparse.Namespace) -> None:
    """The options that depend on the run (its beam size, its decoder's layers), checked
    against its config.yaml before the model is loaded."""
    from transduce.runs.load import read_config

    config = read_config(Path(args.model[0]))
    beam = args.beam_size or config.decode.beam_size
    nbest = getattr(args, "nbest", 1)
    if nbest > beam and not getattr(args, "sample", False):
        where = "--beam-size" if args.beam_size else f"the run's decode.beam_size, {beam}"
        raise UserError(f"--nbest {nbest} needs a beam at least as large ({where}); pass "
                        f"--beam-size {nbest}")
    if getattr(args, "layer", None) is not None:
        layers = config.model.get("n_decoder_layers")
        if not -layers <= args.layer < layers:
            raise UserError(f"--layer {args.layer}: the model has {layers} decoder layers "
                            f"(0 to {layers - 1}, or -1 to -{layers})")


def search_options(args: argparse.Namespace) -> dict:
    """The search settings the options give: DecodeConfig's fields, sampling's, the glossary
    (read and checked here, before the model is loaded)."""
    options = {**decode_options(args), "sampling": sampling_options(args)}
    if getattr(args, "glossary", None):
        from transduce.decoding.glossary import Glossary

        options["glossary"] = Glossary.read(args.glossary)
    return options


def load_translator(args: argparse.Namespace) -> Translator:
    from transduce.engines import engine
    from transduce.runs.checkpoint import named_checkpoint
    from transduce.runtime import resolve_device

    resolve_device(args.device, setting="--device")  # before the model is read
    dirs = [Path(m) for m in args.model]
    if args.checkpoint and len(dirs) > 1 and Path(args.checkpoint).exists():
        raise UserError(f"--checkpoint {args.checkpoint}: with several models, name a checkpoint "
                        "each run has (averaged, best, latest, update_0007000, ...), not a path")
    checkpoints = [named_checkpoint(d, args.checkpoint) for d in dirs] if args.checkpoint else None
    return engine.load(dirs, engine=getattr(args, "engine", "transduce"), device=args.device,
                       dtype=args.dtype, checkpoint=checkpoints, compile=bool(args.compile),
                       tgt_lang=args.tgt_lang, searches=getattr(args, "searches", 1))


def compiled_where_it_pays(translator: Translator, args: argparse.Namespace,
                           lines: list[str], beams: int | None = None) -> Translator:
    """The translator of `load_translator`, its search compiled if neither --compile nor
    --no-compile is given and compiling pays for searching `lines` with `beams` beams (None:
    as the options and the run say; transduce.decoding.compiled.pays: one model of
    transduce's own engine, in float32 on a CPU, a million source words or more)."""
    if args.compile is not None or getattr(args, "engine", "transduce") != "transduce" \
            or len(args.model) > 1:
        return translator
    from transduce.decoding.compiled import pays
    from transduce.runs.load import read_config
    from transduce.runtime import resolve_device

    if beams is None:
        beams = 1 if getattr(args, "sample", False) else (
            getattr(args, "beam_size", None)
            or read_config(Path(args.model[0])).decode.beam_size)
    words = sum(len(line.split()) for line in lines)
    if pays(resolve_device(args.device), args.dtype, words, beams):
        return translator.compiled()
    return translator
