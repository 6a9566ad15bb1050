"""Continuous batching without a server: a `ContinuousSearch` kept at N sentences (one joins as
one leaves, a closed loop of N clients with no HTTP in between) against batches of N sentences
searched whole, on the same sentences of a trained model; in one process, so only the search
is measured.

Reported: sentences/s; for continuous batching, a step's p50 and p99 time, the self-attention
cache's mean and largest length, and each sentence's latency (from joining to finishing) p50,
p95 and p99; for batches, each sentence's latency counted from its batch's start.

    python benchmarks/continuous_search.py --model runs/m30k-serve
    python benchmarks/continuous_search.py --model runs/m30k-serve --active 8 32 --threads 1
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

from transduce.decoding.continuous import ContinuousSearch
from transduce.decoding.translator import Translator

SHARED = Path(os.environ.get("TRANSDUCE_SHARED_DATA",
                             Path(__file__).resolve().parents[2] / "shared" / "data"))


def _quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def continuous(translator: Translator, sources: list[list[int]], active: int) -> dict:
    search = ContinuousSearch(translator.model, translator.decode)
    search.join(sources[:active], list(range(active)))
    joined, latencies, steps, lengths = dict.fromkeys(range(active), 0.0), [], [], []
    following, clock = active, 0.0
    while following < len(sources) or search.active:
        start = time.perf_counter()
        finished = search.step()
        newcomers = [i for i in range(following, min(len(sources),
                                                     following + len(finished)))]
        if newcomers:  # as many join as left: N clients, each sending its next sentence
            search.join([sources[i] for i in newcomers], newcomers)
            following += len(newcomers)
        took = time.perf_counter() - start
        clock += took
        steps.append(took)
        lengths.append(search.steps.cache.length if search.steps is not None else 0)
        for owner, _ in finished:
            latencies.append(clock - joined.pop(owner))
        for i in newcomers:
            joined[i] = clock
    return {"sentences/s": len(latencies) / clock, "step p50": _quantile(steps, 0.5),
            "step p99": _quantile(steps, 0.99), "cache mean": sum(lengths) / len(lengths),
            "cache max": max(lengths), "p50": _quantile(latencies, 0.5),
            "p95": _quantile(latencies, 0.95), "p99": _quantile(latencies, 0.99)}


def batches(translator: Translator, lines: list[str], size: int) -> dict:
    latencies, clock = [], 0.0
    for first in range(0, len(lines), size):
        start = time.perf_counter()
        done: list[float] = []
        translator.translate_detailed(
            lines[first:first + size],
            on_translation=lambda i, t, done=done, start=start: done.append(
                time.perf_counter() - start))
        clock += time.perf_counter() - start
        latencies += done
    return {"sentences/s": len(latencies) / clock, "p50": _quantile(latencies, 0.5),
            "p95": _quantile(latencies, 0.95), "p99": _quantile(latencies, 0.99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/m30k-serve", help="a trained run directory")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--sentences", type=int, default=700)
    parser.add_argument("--active", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--threads", type=int, default=0, help="0: PyTorch's default")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    translator = Translator.load(args.model, device="cpu")
    lines = [s for s in Path(args.src).read_text(encoding="utf-8").splitlines()
             if s.strip()][: args.sentences]
    sources = [translator.encode_source(line) for line in lines]
    print(f"{torch.get_num_threads()} threads; model {args.model}; {len(lines)} sentences; "
          f"beam {translator.decode.beam_size}\n")
    print("| search | sentences at once | sentences/s | step p50 / p99 ms | cache mean / max | "
          "latency p50 / p95 / p99 ms |")
    print("|---|---|---|---|---|---|")
    for active in args.active:
        batches(translator, lines[:64], active)  # warm-up
        c = continuous(translator, sources, active)
        b = batches(translator, lines, active)
        print(f"| continuous | {active} | {c['sentences/s']:.1f} | {1000 * c['step p50']:.1f} / "
              f"{1000 * c['step p99']:.1f} | {c['cache mean']:.0f} / {c['cache max']} | "
              f"{1000 * c['p50']:.0f} / {1000 * c['p95']:.0f} / {1000 * c['p99']:.0f} |")
        print(f"| batches | {active} | {b['sentences/s']:.1f} | | | {1000 * b['p50']:.0f} / "
              f"{1000 * b['p95']:.0f} / {1000 * b['p99']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
