"""The compiled decoder step (`--compile`, transduce/decoding/compiled.py) against the eager one.

Greedy and beam 5 search with every output forced to 16 tokens (17 steps), random weights, one
batch of 1, 64 or 320 sentences (one sentence: an interactive request; 64: a benchmark batch),
in one process: milliseconds per decoder step (median of 5 searches after one that compiles),
the seconds that first search took, and whether the tokens are identical.

    python benchmarks/compiled_step.py                    # tiny and base
    python benchmarks/compiled_step.py --shapes tiny --rows 1 64
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch

from transduce import runtime
from transduce.decoding.beam import beam_search
from transduce.decoding.compiled import Compiled
from transduce.decoding.config import DecodeConfig
from transduce.decoding.greedy import greedy_search
from transduce.model import ModelConfig, Transformer

STEPS = 17


def search(model, src, k: int) -> list:
    decode = DecodeConfig(beam_size=k, max_len_a=0, max_len_b=STEPS - 1, min_len=STEPS - 1)
    if k == 1:
        return greedy_search(model, src, decode)
    return [h[0].tokens for h in beam_search(model, src, decode)]


def timed(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["tiny", "base"])
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 64, 320])
    parser.add_argument("--beams", nargs="+", type=int, default=[1, 5])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    runtime.tune()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads; ms per decoder step, median of 5 "
          f"searches of {STEPS} steps")
    print("\n| shape | search | sentences | eager | compiled | ratio | first compiled search "
          "| same tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in args.shapes:
        torch.manual_seed(0)
        model = Transformer(ModelConfig.preset(shape, src_vocab_size=8000,
                                               tgt_vocab_size=8000)).eval()
        compiled = Compiled(model)
        for k in args.beams:
            for rows in args.rows:
                src = torch.randint(4, 8000, (rows, 20))
                src[rows // 2:, 15:] = model.config.pad_id
                with torch.no_grad():
                    eager_tokens = search(model, src, k)
                    start = time.perf_counter()
                    same = search(compiled, src, k) == eager_tokens
                    first = time.perf_counter() - start
                    eager = timed(functools.partial(search, model, src, k))
                    fast = timed(functools.partial(search, compiled, src, k))
                print(f"| {shape} | {'greedy' if k == 1 else f'beam {k}'} | {rows} | "
                      f"{eager / STEPS * 1e3:.2f} | {fast / STEPS * 1e3:.2f} | "
                      f"{eager / fast:.2f}x | {first:.0f} s | {'yes' if same else 'NO'} |",
                      flush=True)


if __name__ == "__main__":
    main()
