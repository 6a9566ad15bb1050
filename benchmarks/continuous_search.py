"""Continuous batching without a server: a closed loop of N clients (each sends its next
sentence when its last is answered, no HTTP in between) served by a `ContinuousSearch` (a
sentence joins at the next step) and by batching as `transduce serve` does by default (the
sentences waiting are searched together; those arriving meanwhile wait for the next batch), on
the same sentences of a trained model; in one process, so only the search is measured.

Reported: sentences/s and each sentence's latency from its arrival, p50, p95 and p99; for
continuous batching also a step's p50 and p99 time and the self-attention cache's mean and
largest length.

    python benchmarks/continuous_search.py --model runs/m30k-serve
    python benchmarks/continuous_search.py --model runs/m30k-serve --active 8 32 --threads 1
    python benchmarks/continuous_search.py --model runs/m30k-serve --active 32 --threads 1 \
        --compile
    python benchmarks/continuous_search.py --model runs/m30k-serve --active 32 --threads 1 \
        --compile --max-search-sentences 0 24 16 12 8

With `--compile` both search with the compiled steps (as `transduce serve` does on a CPU in
float32), compiled before the first measurement as the server compiles them while it loads.
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


def continuous(translator: Translator, sources: list[list[int]], clients: int,
               max_sentences: int = 0) -> dict:
    """A `ContinuousSearch` serving `clients` (each sends its next sentence when its last is
    answered): the sentences waiting join at the next step, in order of arrival, at most
    `max_sentences` in the search at once (0: every client's, as `transduce serve
    --max-search-sentences`); latency from a sentence's arrival."""
    search = ContinuousSearch(translator.model, translator.decode)
    cap = max_sentences or clients
    arrived, waiting = dict.fromkeys(range(clients), 0.0), list(range(clients))
    latencies, steps, lengths = [], [], []
    following, clock = clients, 0.0
    while waiting or search.active:
        start = time.perf_counter()
        room = cap - search.active
        if room > 0 and waiting:
            joining, waiting[:] = waiting[:room], waiting[room:]
            search.join([sources[i] for i in joining], joining)
        finished = search.step()
        took = time.perf_counter() - start
        clock += took
        steps.append(took)
        lengths.append(int(search.steps.cache.length) if search.steps is not None else 0)
        for owner, _ in finished:
            latencies.append(clock - arrived.pop(owner))
            if following < len(sources):  # its client's next sentence
                arrived[following] = clock
                waiting.append(following)
                following += 1
    return {"sentences/s": len(latencies) / clock, "step p50": _quantile(steps, 0.5),
            "step p99": _quantile(steps, 0.99), "cache mean": sum(lengths) / len(lengths),
            "cache max": max(lengths), "p50": _quantile(latencies, 0.5),
            "p95": _quantile(latencies, 0.95), "p99": _quantile(latencies, 0.99)}


def batches(translator: Translator, lines: list[str], clients: int) -> dict:
    """A batching server's search (`Batcher`): the sentences waiting are searched together,
    each answered when its own search ends, and its client's next sentence waits for the next
    batch; latency from a sentence's arrival."""
    arrived = [time.perf_counter()] * clients
    waiting, following, latencies = list(range(clients)), clients, []
    start = time.perf_counter()

    def answered(i: int, _translation, batch: list[int]) -> None:
        nonlocal following
        latencies.append(time.perf_counter() - arrived[batch[i]])
        if following < len(lines):  # its client's next sentence
            arrived.append(time.perf_counter())
            waiting.append(following)
            following += 1

    while waiting:
        batch, waiting[:] = list(waiting), []
        translator.translate_detailed([lines[i] for i in batch],
                                      on_translation=lambda i, t, b=batch: answered(i, t, b))
    clock = time.perf_counter() - start
    return {"sentences/s": len(latencies) / clock, "p50": _quantile(latencies, 0.5),
            "p95": _quantile(latencies, 0.95), "p99": _quantile(latencies, 0.99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/m30k-serve", help="a trained run directory")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--sentences", type=int, default=700)
    parser.add_argument("--active", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--threads", type=int, default=0, help="0: PyTorch's default")
    parser.add_argument("--compile", action="store_true", help="the compiled steps")
    parser.add_argument("--max-search-sentences", type=int, nargs="+", default=[0],
                        help="continuous batching's sentences at once at most, each in turn "
                        "(0: every client's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    translator = Translator.load(args.model, device="cpu", compile=args.compile)
    if args.compile:
        from transduce.serve.models import warm

        for joining in (False, True):  # batches' graphs, and continuous batching's
            warm(translator, Path(args.model), joining)
    lines = [s for s in Path(args.src).read_text(encoding="utf-8").splitlines()
             if s.strip()][: args.sentences]
    sources = [translator.encode_source(line) for line in lines]
    print(f"{torch.get_num_threads()} threads; model {args.model}; {len(lines)} sentences; "
          f"beam {translator.decode.beam_size}\n")
    print("| search | clients | at once | sentences/s | step p50 / p99 ms | cache mean / max | "
          "latency p50 / p95 / p99 ms |")
    print("|---|---|---|---|---|---|---|")
    for active in args.active:
        translator.translate(lines[:64])  # warm-up
        for cap in args.max_search_sentences:
            c = continuous(translator, sources, active, cap)
            print(f"| continuous | {active} | {cap or active} | {c['sentences/s']:.1f} | "
                  f"{1000 * c['step p50']:.1f} / {1000 * c['step p99']:.1f} | "
                  f"{c['cache mean']:.0f} / {c['cache max']} | {1000 * c['p50']:.0f} / "
                  f"{1000 * c['p95']:.0f} / {1000 * c['p99']:.0f} |", flush=True)
        b = batches(translator, lines, active)
        print(f"| batching | {active} | | {b['sentences/s']:.1f} | | | {1000 * b['p50']:.0f} / "
              f"{1000 * b['p95']:.0f} / {1000 * b['p99']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
