"""The oneDNN path's row padding (`transduce.kernels.linear.row_bucket`): today's rule against the
one before 2026-11-28 (every row count padded to a multiple of 16 at least), alternated in one
process on the same search: test2016 in batches of 64 sorted sentences, as decode_speed.py
batches them. Both rules are warmed first (compiling, oneDNN's kernels for each row count), the
translations checked identical, then each round times one search with each rule. Prints the
seconds of every round; the machine's drift moves both rules of a round alike.

    python benchmarks/row_bucket.py --model runs/m30k-serve --compile --beam 1 --rounds 4
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

import transduce.kernels.linear as linear
from transduce.decoding.config import DecodeConfig
from transduce.decoding.translator import Translator

SHARED = Path(os.environ.get("TRANSDUCE_SHARED_DATA",
                             Path(__file__).resolve().parents[2] / "shared" / "data"))


def sixteen_at_least(rows: int) -> int:
    """The rule before: a multiple of 16, or of an eighth to a sixteenth of the rows."""
    return max(16, 1 << max(0, rows.bit_length() - 4))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/m30k-serve")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    translator = Translator.load(args.model, device="cpu", compile=args.compile)
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    sources = [translator.encode_source(line) for line in lines]
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
    batches = [[sources[i] for i in order[s:s + 64]] for s in range(0, len(order), 64)]
    decode = DecodeConfig(beam_size=args.beam, length_penalty=0.6,
                          length_normalization="power", max_len_a=0, max_len_b=64)
    rules = {"before (16 at least)": sixteen_at_least, "now": linear.row_bucket}

    def search() -> list:
        return [h[0].tokens for b in batches for h in translator.search_batch(b, decode)]

    found = {}
    for _ in range(2):
        for name, rule in rules.items():
            linear.row_bucket = rule
            found[name] = search()
    assert len({tuple(f) for f in found.values()}) == 1, "the rules found other translations"
    seconds: dict[str, list[float]] = {name: [] for name in rules}
    for _ in range(args.rounds):
        for name, rule in rules.items():
            linear.row_bucket = rule
            start = time.perf_counter()
            search()
            seconds[name].append(time.perf_counter() - start)
    kind = f"{'compiled' if args.compile else 'eager'} {'greedy' if args.beam == 1 else 'beam'}"
    print(f"{kind} {args.beam}, {args.threads} threads, kernel path {linear.kernels.path()}")
    for name, times in seconds.items():
        print(f"{name}: " + " ".join(f"{t:.3f}" for t in times) + " s")


if __name__ == "__main__":
    main()
