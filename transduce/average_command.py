"""`transduce average`: the mean of a run's last N update checkpoints (the paper's final step),
or of the last N at or before an update, written as a checkpoint of the run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from transduce.errors import UserError
from transduce.files import check_writable
from transduce.search_options import at_least


def averaged_name(text: str) -> str:
    """An argparse type: a name for an averaged checkpoint in a run's checkpoints/, not one
    that training writes or points with (best, latest, update_...)."""
    if (not text or text in (".", "..") or "/" in text or "\\" in text or text.startswith(".")
            or text in ("best", "latest") or text.startswith("update_")):
        raise argparse.ArgumentTypeError(
            f"a plain name, not a path or one of training's own (best, latest, update_...), "
            f"got {text!r}")
    return text


def add_average_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR",
                        help="a run directory of transduce train; the average goes into its "
                             "checkpoints/averaged, which translate and evaluate then use")
    parser.add_argument("--last", type=at_least(1), default=5,
                        help="how many of the last update checkpoints (default: 5)")
    parser.add_argument("--until", type=at_least(0), metavar="UPDATE",
                        help="the last N kept at or before this update, not the latest: a "
                             "run as if stopped there (default: the latest)")
    parser.add_argument("-o", "--output", type=averaged_name, default="averaged",
                        metavar="NAME",
                        help="the checkpoint to write, in the run's checkpoints/; translate "
                             "and evaluate use it with --checkpoint NAME (default: averaged, "
                             "which they use by default)")


def average(args: argparse.Namespace) -> None:
    from transduce.runs.checkpoint import average_checkpoints, checkpoint_dir, update_checkpoints
    from transduce.runs.lock import RunLock

    run_dir = Path(args.run_dir)
    if not checkpoint_dir(run_dir).is_dir():
        raise UserError(f"{run_dir}: no checkpoints here (is it a run directory of transduce "
                        "train?)")
    check_writable(checkpoint_dir(run_dir), what="run directory")
    with RunLock(run_dir, "transduce average"):  # a run still training is refused
        paths = update_checkpoints(run_dir, until=args.until)
        if not paths:
            kept = ", ".join(p.name for p in update_checkpoints(run_dir)) or "none"
            where = "" if args.until is None else f" at or before update {args.until}"
            raise UserError(f"{run_dir}: no update checkpoint{where} (kept: {kept})")
        paths = paths[-args.last:]
        if len(paths) < args.last:
            print(f"transduce: note: only {len(paths)} checkpoints kept in {args.run_dir}"
                  + ("" if args.until is None else f" up to update {args.until}"),
                  file=sys.stderr)
        out = average_checkpoints(paths, checkpoint_dir(run_dir) / args.output)
    print(f"averaged {', '.join(p.name for p in paths)} -> {out}")
