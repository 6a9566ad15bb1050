"""`transduce translate` and `transduce evaluate`: their options, checked before any work, and
their runs, which never throw away finished translations."""

from __future__ import annotations

import argparse
import dataclasses
import sys
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
from transduce.files import check_output_file, check_writable
from transduce.options import add_config_options

if typing.TYPE_CHECKING:
    from transduce.decoding.translator import Translation, Translator

CHUNK = 500  # input lines sorted by length and batched together: Ctrl-C loses at most these
INTERRUPTED = 130
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
    parser.add_argument("--compile", action="store_true",
                        help="run the search's decoder steps compiled by torch.compile: less "
                             "overhead per step (small batches gain most), 15-60 s of "
                             "compiling first")


def add_translate_options(parser: argparse.ArgumentParser) -> None:
    add_model_and_search_options(parser)
    parser.add_argument("-i", "--input", help="input file, one sentence a line (default: stdin)")
    parser.add_argument("-o", "--output", help="output file (default: stdout); its directory is "
                                               "created if missing")
    parser.add_argument("--nbest", type=at_least(1), default=1,
                        help="write the N best translations of each sentence, Moses format: "
                             "id ||| text ||| score (N at most the beam size; default: 1)")
    parser.add_argument("--prefix-file", metavar="FILE",
                        help="target prefixes, one a line beside the input's: each translation "
                             "starts with its line's prefix and the search goes on from it (an "
                             "empty line: none)")
    add_glossary_option(parser)
    parser.add_argument("--interactive", action="store_true",
                        help="translate each line as you type it (Ctrl-D or Ctrl-C to quit)")
    parser.add_argument("--split-sentences", action="store_true",
                        help="each line may be a paragraph: cut it into sentences (spaCy's "
                             "sentencizer, the model's source language), translate them one "
                             "by one and put them back on the line with its own spacing; a "
                             "sentence too long for the model is cut, not truncated")
    parser.add_argument("--sample", action="store_true",
                        help="draw each translation at random from the model instead of "
                             "searching (e.g. for back-translation)")
    add_config_options(parser, Sampling, defaults=dict.fromkeys(SAMPLING_FIELDS),
                       default_text="{default}", help_prefix="with --sample: ")
    parser.add_argument("--alignments", metavar="FILE",
                        help="write the word alignments of each line's translation here, one "
                             "line each, Pharaoh's i-j (source word i, target word j, from 0), "
                             "from the penultimate decoder layer's cross-attention")
    parser.add_argument("--attention", metavar="DIR",
                        help="write one cross-attention heatmap (PNG) per sentence here")
    parser.add_argument("--layer", type=int,
                        help="with --attention: the decoder layer drawn, from 0, or from the "
                             "end when negative (default: -1, the last)")
    parser.add_argument("--heads", action="store_true",
                        help="with --attention: a grid of every head instead of their average")


def add_glossary_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--glossary", metavar="FILE",
                        help="a TSV of source term<TAB>target term: where a line holds a source "
                             "term (whole words; in any case if written in lower case, else as "
                             "written), its translation contains the target term (lexically "
                             "constrained beam search)")


def check_device_options(args: argparse.Namespace) -> None:
    """--device, --dtype and --compile together, before anything is loaded."""
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


def check_translate_options(args: argparse.Namespace) -> None:
    """Values and combinations of options that cannot work: one line each, before anything is
    loaded."""
    decode_options(args)
    check_device_options(args)
    if args.interactive:
        for given, name in ((args.input, "-i"), (args.output, "-o"), (args.nbest > 1, "--nbest"),
                            (args.attention, "--attention"), (args.prefix_file, "--prefix-file"),
                            (args.alignments, "--alignments")):
            if given:
                raise UserError(f"--interactive translates what you type and prints it: it "
                                f"takes no {name}")
    sampling_options(args)
    if args.sample:
        for given, name in ((args.beam_size, "beam_size"), (args.length_penalty, "length_penalty"),
                            (args.stopping, "stopping"), (args.nbest > 1, "nbest"),
                            (args.glossary, "glossary")):
            if given:
                raise UserError(f"--sample draws one translation instead of searching: it "
                                f"takes no {_flag(name)}")
    else:
        for name in SAMPLING_FIELDS:
            if getattr(args, name) is not None:
                raise UserError(f"{_flag(name)} is an option of --sample (drawing translations "
                                "at random)")
    if args.split_sentences:
        for given, name in ((args.nbest > 1, "--nbest"), (args.attention, "--attention"),
                            (args.prefix_file, "--prefix-file"), (args.alignments, "--alignments")):
            if given:
                raise UserError(f"--split-sentences translates a line as several sentences: "
                                f"it takes no {name}, which is of one sentence")
    for given, name in ((args.layer is not None, "--layer"), (args.heads, "--heads")):
        if given and not args.attention:
            raise UserError(f"{name} is an option of --attention DIR (the heatmaps)")


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
            message = message.replace(f"{section}.{field.name}", _flag(field.name))
        raise UserError(message) from None


def _flag(name: str) -> str:
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
                       dtype=args.dtype, checkpoint=checkpoints, compile=args.compile,
                       tgt_lang=args.tgt_lang)


def read_input(path: str | None) -> list[str]:
    """Lines of a file or stdin; invalid UTF-8 is an error naming the line."""
    from transduce.data.corpus import read_lines

    if path:
        if Path(path).is_file() and Path(path).stat().st_size == 0:
            return []
        return list(read_lines(Path(path)))
    lines = []
    for n, raw in enumerate(sys.stdin.buffer, start=1):
        try:
            lines.append(raw.decode("utf-8").rstrip("\r\n"))
        except UnicodeDecodeError as error:
            raise UserError(f"<stdin>:{n}: invalid UTF-8 at byte {error.start} of the line"
                            ) from None
    return lines


def translate(args: argparse.Namespace) -> int:
    check_translate_options(args)
    output = (check_output_file(Path(args.output), what="-o", inputs=(args.input,))
              if args.output else None)
    alignments = (check_output_file(Path(args.alignments), what="--alignments",
                                    inputs=(args.input, args.output, args.prefix_file))
                  if args.alignments else None)
    for path, flag in ((args.input, "-i"), (args.prefix_file, "--prefix-file")):
        if path and not Path(path).is_file():
            raise UserError(f"{flag} {path}: no such file")
    if args.attention:
        check_writable(Path(args.attention), what="--attention")
    check_against_run(args)
    options = search_options(args)
    translator = load_translator(args)
    translator.check_search(translator.decode_config(**decode_options(args)),
                            options["sampling"])
    if args.interactive:
        return _interactive(translator, options)
    if not args.input and sys.stdin.isatty():
        print("reading sentences from the terminal, one a line; end with Ctrl-D (-i FILE reads "
              "a file)", file=sys.stderr)
    lines = read_input(args.input)
    prefixes = read_input(args.prefix_file) if args.prefix_file else None
    if prefixes is not None and len(prefixes) != len(lines):
        raise UserError(f"line counts differ: --prefix-file {args.prefix_file} has "
                        f"{len(prefixes)} lines, {args.input or '<stdin>'} has {len(lines)}")
    if args.split_sentences:
        from transduce.decoding.paragraphs import Paragraphs

        translator = Paragraphs(translator, _source_language(args))
    return _translate_lines(lines, translator, options, args, output, prefixes, alignments)


def _source_language(args: argparse.Namespace) -> str:
    from transduce.runs.load import read_config

    return read_config(Path(args.model[0])).data.src_lang


def _translate_lines(lines: list[str], translator: Translator, options: dict,
                     args: argparse.Namespace, output: Path | None,
                     prefixes: list[str] | None = None, alignments: Path | None = None) -> int:
    """Translate CHUNK lines at a time (sorted by length within a chunk, for full batches),
    writing each translation the moment it and every line before it are finished: an
    interrupted run keeps every finished line up to the first unfinished one, in order.
    `prefixes`: each line's forced start of its translation; `alignments`: where each line's
    word alignments go, line by line with the output."""
    from tqdm import tqdm

    from transduce.decoding.alignment import pharaoh

    out = open(output, "w", encoding="utf-8") if output else sys.stdout
    links = open(alignments, "w", encoding="utf-8") if alignments else None
    bar = tqdm(total=len(lines), unit="sent", disable=not (args.input and sys.stderr.isatty()))
    written, maps = 0, 0
    finished: dict[int, Translation] = {}  # by line, until every line before is written

    def write(n: int, result: Translation) -> None:
        nonlocal written
        finished[n] = result
        while written in finished:
            result = finished.pop(written)
            if args.nbest > 1:  # Moses n-best format: id ||| translation ||| score
                out.writelines(f"{written} ||| {one_line(text)} ||| {score:.4f}\n"
                               for text, score in result.nbest)
            else:
                out.write(one_line(result.text) + "\n")
            if links is not None:
                links.write(pharaoh(translator.alignments(result)) + "\n")
            written += 1
        out.flush()
        if links is not None:
            links.flush()
        bar.update(1)

    try:
        for first in range(0, len(lines), CHUNK):
            results = translator.translate_detailed(
                lines[first:first + CHUNK], nbest=args.nbest,
                attention=bool(args.attention or args.alignments),
                on_translation=lambda i, result, first=first: write(first + i, result),
                prefixes=prefixes[first:first + CHUNK] if prefixes else None, **options)
            if args.attention:
                from transduce.visualize.attention import save_attention_maps

                maps += save_attention_maps(results, Path(args.attention), first=first + 1,
                                            layer=-1 if args.layer is None else args.layer,
                                            heads=args.heads)
    except KeyboardInterrupt:
        bar.close()
        where = f"in {output}" if output else "written"
        print(f"transduce: interrupted: the first {written:,} of {len(lines):,} translations "
              f"are {where}", file=sys.stderr)
        return INTERRUPTED
    finally:
        bar.close()
        if output:
            out.close()
        if links is not None:
            links.close()
    if args.attention:
        print(f"{maps} attention maps -> {args.attention}", file=sys.stderr)
    return 0


def one_line(text: str) -> str:
    """A translation as one line of output: a model whose tokenizer falls back to bytes can
    produce a line break (a sampled or barely trained one does), which would shift every later
    line against its source; each is written as a space."""
    return " ".join(text.splitlines())


def _interactive(translator: Translator, options: dict) -> int:
    print("type a sentence and press Enter (Ctrl-D to quit)", file=sys.stderr)
    try:
        for line in sys.stdin:
            print(one_line(translator.translate([line.rstrip("\n")], **options)[0]),
                  flush=True)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return INTERRUPTED
    except UnicodeDecodeError as error:
        raise UserError(f"<stdin>: invalid UTF-8 at byte {error.start} of what was typed"
                        ) from None
    return 0
