"""`transduce evaluate`: a test set translated as `translate` translates it, and scored:
sacreBLEU's BLEU, chrF and TER with their signatures."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from transduce.errors import UserError
from transduce.files import check_output_file
from transduce.search_options import (
    add_glossary_option,
    add_model_and_search_options,
    check_against_run,
    check_device_options,
    compiled_where_it_pays,
    decode_options,
    load_translator,
    search_options,
)
from transduce.translate_command import (
    one_line,
    read_input,
)


def add_evaluate_options(parser: argparse.ArgumentParser) -> None:
    add_model_and_search_options(parser)
    parser.add_argument("--src", required=True, help="source sentences, one per line")
    parser.add_argument("--ref", required=True, help="reference translations, line by line")
    parser.add_argument("--lowercase", action="store_true",
                        help="case-insensitive scores (sacreBLEU -lc)")
    add_glossary_option(parser)
    parser.add_argument("-o", "--output", help="also write the translations here")


def evaluate(args: argparse.Namespace) -> int:
    import sacrebleu

    decode_options(args)
    check_device_options(args)
    output = (check_output_file(Path(args.output), what="-o", inputs=(args.src, args.ref))
              if args.output else None)
    sources, references = read_input(args.src), read_input(args.ref)
    if len(sources) != len(references):
        raise UserError(f"line counts differ: {args.src} has {len(sources)} lines, {args.ref} "
                        f"has {len(references)}")
    check_against_run(args)
    options = search_options(args)
    translator = compiled_where_it_pays(load_translator(args), args, sources)
    translator.check_search(translator.decode_config(**decode_options(args)))
    start = time.perf_counter()
    hypotheses = translator.translate(sources, progress=sys.stderr.isatty(), **options)
    seconds = time.perf_counter() - start
    for metric in (sacrebleu.BLEU(lowercase=args.lowercase),
                   sacrebleu.CHRF(lowercase=args.lowercase),
                   sacrebleu.TER(case_sensitive=not args.lowercase)):  # a score, its signature
        print(f"{metric.corpus_score(hypotheses, [references])}  {metric.get_signature()}")
    print(f"{len(sources)} sentences in {seconds:.1f} s ({len(sources) / max(seconds, 1e-9):.1f} "
          f"sentences/s)")
    if output:
        output.write_text("".join(one_line(h) + "\n" for h in hypotheses), encoding="utf-8")
    return 0
