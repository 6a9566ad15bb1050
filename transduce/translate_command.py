"""`transduce translate`: its options (with the model and search options of
transduce.search_options), checked before any work, and its run, which never throws away
finished translations."""

from __future__ import annotations

import argparse
import sys
import typing
from pathlib import Path

from transduce.decoding.config import SAMPLING_FIELDS, Sampling
from transduce.errors import UserError
from transduce.files import check_output_file, check_writable
from transduce.options import add_config_options
from transduce.search_options import (
    add_glossary_option,
    add_model_and_search_options,
    at_least,
    check_against_run,
    check_device_options,
    compiled_where_it_pays,
    decode_options,
    flag_of,
    load_translator,
    sampling_options,
    search_options,
)

if typing.TYPE_CHECKING:
    from transduce.decoding.translator import Translation, Translator

CHUNK = 500  # input lines sorted by length and batched together: Ctrl-C loses at most these
INTERRUPTED = 130


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
                                f"takes no {flag_of(name)}")
    else:
        for name in SAMPLING_FIELDS:
            if getattr(args, name) is not None:
                raise UserError(f"{flag_of(name)} is an option of --sample (drawing translations "
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
    translator = compiled_where_it_pays(translator, args, lines)
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
