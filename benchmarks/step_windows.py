"""Compiled steps that attend to the positions written against steps that attend to a window of
the least power of two above them (16, 32, 64, ...: what they read before, the positions not
written masked), paired in one process on one thread.

One compiled model searches both ways: its steps' window is swapped for the power of two's
around each pass (`CompiledSteps._window`; the buffers are the same, of the bucket's length and
one more either way, and so is the graph: the window's length is one of its sizes). Batches:
the test2016 sentences sorted by length, `--batch` a batch, greedy and beam 5, a pass each way
after a first pass each (which compiles), each round's ratio of seconds (power of two /
written: above 1, the written are the faster) and how many outputs are the same tokens.
Continuous batching: benchmarks/continuous_search.py's closed loop of 32 clients, each way in
turn, with every client's sentence searched at once and with 16 at most.

    python benchmarks/step_windows.py --model runs/m30k-en-de
"""

from __future__ import annotations

import argparse
import contextlib
import functools
from pathlib import Path

from continuous_search import continuous
from decode_engine import _batches
from decode_speed import SHARED
from engines_in_turn import _ours, in_turn, row


@contextlib.contextmanager
def power_of_two_windows():
    from transduce.decoding.compiled import CompiledSteps
    from transduce.model.static_cache import bucket

    written = CompiledSteps._window
    CompiledSteps._window = lambda steps, n: written(steps, bucket(n - 1))
    try:
        yield
    finally:
        CompiledSteps._window = written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/m30k-en-de", help="trained run directory")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-len", type=int, default=64, help="output tokens at most")
    args = parser.parse_args()

    from transduce import runtime
    runtime.tune()  # as the transduce command does, before the first tensor
    import torch

    from transduce.decoding.config import DecodeConfig
    from transduce.decoding.translator import Translator
    from transduce.serve.models import warm

    torch.set_num_threads(1)
    translator = Translator.load(args.model, device="cpu", compile=True)
    model, config = translator.model, translator.model.config
    lines = [line for line in Path(args.src).read_text(encoding="utf-8").splitlines()
             if line.strip()]
    sources = [translator.tokenizers.src.encode(line) + [config.eos_id] for line in lines]
    batches = list(_batches(sources, args.batch))
    print(f"torch {torch.__version__}, one thread; {args.model} on {args.src} "
          f"({len(sources)} sentences, batches of {args.batch})\n")
    print("| search | written tokens/s | power of two tokens/s | power of two / written, "
          "each round | median | same outputs |")
    print("|---|---|---|---|---|---|")
    for k in (1, 5):
        decode = DecodeConfig(beam_size=k, length_penalty=0.6, length_normalization="power",
                              max_len_a=0, max_len_b=args.max_len, min_len=1)
        ours = functools.partial(_ours, model, decode, sources, batches)

        def bucketed(ours=ours):
            with power_of_two_windows():
                return ours()
        first, seconds = in_turn({"written": ours, "power of two": bucketed}, args.rounds)
        print(row("greedy" if k == 1 else f"beam {k}", first, seconds, args.max_len,
                  ("written", "power of two")), flush=True)

    for joining in (False, True):  # a server's warm-up: batches' graphs, continuous batching's
        warm(translator, Path(args.model), joining)
    print("\n| continuous batching, 32 clients | at once | sentences/s | step p50 ms | "
          "latency p50 / p95 / p99 ms |")
    print("|---|---|---|---|---|")
    for _ in range(2):
        for window, context in (("written", contextlib.nullcontext),
                                ("power of two", power_of_two_windows)):
            for cap in (0, 16):
                with context():
                    c = continuous(translator, sources[:700], 32, cap)
                print(f"| {window} | {cap or 32} | {c['sentences/s']:.1f} | "
                      f"{1000 * c['step p50']:.1f} | {1000 * c['p50']:.0f} / "
                      f"{1000 * c['p95']:.0f} / {1000 * c['p99']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
