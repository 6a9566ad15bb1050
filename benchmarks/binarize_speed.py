"""Tokenizing + binarizing speed and peak memory, by corpus size.

Learns an 8k shared BPE vocabulary on Multi30k train (or the number-words corpus when Multi30k
is not at ../shared/data), writes corpora of N pairs by cycling that text, and binarizes each in
a fresh process, reporting pairs/s and the process's peak resident memory: the memory should not
grow with N.

    python benchmarks/binarize_speed.py                          # 100k, 1M and 10M pairs
    python benchmarks/binarize_speed.py --pairs 100000 1000000
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHARED = Path(os.environ.get("TRANSDUCE_SHARED_DATA",
                             Path(__file__).resolve().parents[2] / "shared" / "data"))


def base_corpus():
    from transduce.data import NumberWords, ParallelFiles
    if (SHARED / "multi30k" / "train.en").is_file():
        return ParallelFiles(SHARED / "multi30k" / "train.en", SHARED / "multi30k" / "train.de")
    return NumberWords("train")


def child(args: argparse.Namespace) -> None:
    """Binarize one corpus and print: pairs, seconds, tokens, peak RSS and RSS before, MiB."""
    from transduce import runtime
    from transduce.data import ParallelFiles, Tokenizers, binarize
    runtime.tune()  # as the transduce command does
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Python, torch, ...
    tokenizers = Tokenizers.load(args.tokenizer)
    corpus = ParallelFiles(Path(args.src), Path(args.tgt))
    start = time.perf_counter()
    data = binarize(corpus, tokenizers, Path(args.out))
    seconds = time.perf_counter() - start
    tokens = int(data.src_lengths.sum() + data.tgt_lengths.sum())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(len(data), seconds, tokens, peak, baseline)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name in ("tokenizer", "src", "tgt", "out"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    from transduce.data import Tokenizers
    corpus = base_corpus()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tokenizers = Tokenizers.train(corpus.pairs, vocab_size=8000)
        tokenizers.save(tmp / "tok")
        pairs = list(corpus.pairs())
        print(f"text: {corpus} cycled; 8k shared BPE; {os.cpu_count()} CPUs\n")
        print("| pairs | seconds | pairs/s | subword tokens/s | peak memory | of which imports |")
        print("|---|---|---|---|---|---|")
        for n in args.pairs:
            src, tgt = tmp / "big.src", tmp / "big.tgt"
            with open(src, "w") as fs, open(tgt, "w") as ft:
                for s, t in itertools.islice(itertools.cycle(pairs), n):
                    fs.write(s + "\n")
                    ft.write(t + "\n")
            result = subprocess.run(
                [sys.executable, __file__, "--child", "--tokenizer", str(tmp / "tok"),
                 "--src", str(src), "--tgt", str(tgt), "--out", str(tmp / f"bin{n}")],
                capture_output=True, text=True, check=True)
            kept, seconds, tokens, peak, baseline = result.stdout.split()
            seconds = float(seconds)
            print(f"| {n:,} | {seconds:.1f} | {int(kept) / seconds:,.0f} | "
                  f"{int(tokens) / seconds:,.0f} | {float(peak):,.0f} MiB | "
                  f"{float(baseline):,.0f} MiB |", flush=True)
            for path in (src, tgt):
                path.unlink()


if __name__ == "__main__":
    main()
