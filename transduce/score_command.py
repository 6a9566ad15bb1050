"""`transduce score`: how probable a model finds given translations, one line of scores each."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from transduce.errors import UserError
from transduce.files import check_output_file
from transduce.search_options import (
    add_device_options,
    add_model_options,
    check_device_options,
    compiled_where_it_pays,
    load_translator,
)
from transduce.translate_command import (
    INTERRUPTED,
    read_input,
)

COLUMNS = ("score", "log_prob", "per_token", "tokens")


def add_score_options(parser: argparse.ArgumentParser) -> None:
    add_model_options(parser)
    parser.add_argument("--src", required=True, help="source sentences, one per line")
    parser.add_argument("--tgt", required=True, help="their translations, line by line")
    parser.add_argument("-o", "--output", help="the scores, tab-separated, one line per pair: "
                        + ", ".join(COLUMNS) + " (default: stdout)")
    parser.add_argument("--token-scores", action="store_true",
                        help="a fifth column: each target token's log-probability, <eos> last, "
                             "space-separated")
    parser.add_argument("--length-penalty", type=float,
                        help="alpha of the score column's length penalty, as the search's "
                             "(default: the run's decode.length_penalty)")
    parser.add_argument("--max-tokens", type=int, help="source tokens per batch (default: the "
                        "run's decode.max_tokens)")
    add_device_options(parser, engine=False)  # scores are the model's own, teacher-forced


def score(args: argparse.Namespace) -> int:
    check_device_options(args)
    if args.max_tokens is not None and args.max_tokens < 1:
        raise UserError(f"--max-tokens must be >= 1, got {args.max_tokens}")
    output = (check_output_file(Path(args.output), what="-o", inputs=(args.src, args.tgt))
              if args.output else None)
    for path, flag in ((args.src, "--src"), (args.tgt, "--tgt")):
        if not Path(path).is_file():
            raise UserError(f"{flag} {path}: no such file")
    sources, targets = read_input(args.src), read_input(args.tgt)
    if len(sources) != len(targets):
        raise UserError(f"line counts differ: {args.src} has {len(sources)} lines, {args.tgt} "
                        f"has {len(targets)}")
    # teacher-forced: one row a pair, as a greedy search's
    translator = compiled_where_it_pays(load_translator(args), args, sources, beams=1)
    settings = {k: v for k, v in (("length_penalty", args.length_penalty),
                                  ("max_tokens", args.max_tokens)) if v is not None}
    try:
        scores = translator.score(sources, targets, progress=sys.stderr.isatty(), **settings)
    except KeyboardInterrupt:
        print("transduce: interrupted: nothing written", file=sys.stderr)
        return INTERRUPTED
    lines = []
    for s in scores:
        row = [s.score, s.log_prob, s.per_token, len(s.token_log_probs)]
        text = "\t".join(_number(v) for v in row)
        if args.token_scores:
            text += "\t" + " ".join(_number(v) for v in s.token_log_probs)
        lines.append(text + "\n")
    if output:
        output.write_text("".join(lines), encoding="utf-8")
    else:
        sys.stdout.writelines(lines)
    return 0


def _number(value: float | int) -> str:
    if isinstance(value, int):
        return str(value)
    return "-inf" if value == -math.inf else f"{value:.6f}"
