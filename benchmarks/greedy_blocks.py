"""Compiled greedy search by blocks: several greedy tokens a graph (`greedy_block`) against one,
and against the eager search, paired in one process.

A trained run's model (as `Translator.load` gives it) is compiled once; its greedy search runs
the 1,000 test2016 sentences (batches of 64 sorted by length, at most 64 tokens) with blocks of
1 and of each size asked for, and eagerly, in turn, for several rounds: the rounds are paired, so
a machine whose speed drifts (a shared one) compares like with like. The first pass of each
block size (compiling its graph) is timed apart; the translations of every block size must be
those of one step a graph.

    python benchmarks/greedy_blocks.py --model runs/m30k-bench --blocks 2 4
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

SHARED = Path(os.environ.get("TRANSDUCE_SHARED_DATA",
                             Path(__file__).resolve().parents[2] / "shared" / "data"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/m30k-en-de", help="trained run directory")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--blocks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch

    from transduce import runtime
    runtime.tune()
    torch.set_num_threads(args.threads)
    from transduce.decoding.compiled import Compiled, CompiledSteps
    from transduce.decoding.config import DecodeConfig
    from transduce.decoding.greedy import greedy_search
    from transduce.decoding.translator import Translator

    translator = Translator.load(args.model, device="cpu")
    model = translator.model.eval()
    compiled = Compiled(model)
    config = model.config
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    sources = [translator.tokenizers.src.encode(line) + [config.eos_id] for line in lines]
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
    decode = DecodeConfig(beam_size=1, max_len_a=0, max_len_b=64)

    def translate_all(searchable) -> tuple[int, dict]:
        tokens, outputs = 0, {}
        for start in range(0, len(order), 64):
            batch = order[start : start + 64]
            width = max(len(sources[i]) for i in batch)
            src = torch.tensor([sources[i] + [config.pad_id] * (width - len(sources[i]))
                                for i in batch])
            for i, out in zip(batch, greedy_search(searchable, src, decode), strict=True):
                outputs[i] = out
                tokens += len(out) + 1  # and its <eos> (or its last step)
        return tokens, outputs

    default = CompiledSteps.greedy_block
    sizes = [1, *[b for b in args.blocks if b != 1]]
    print(f"torch {torch.__version__}, {args.threads} threads; {args.model}; {len(lines)} "
          f"sentences; greedy_block as shipped: {default}")
    reference = None
    for size in sizes:
        CompiledSteps.greedy_block = size
        start = time.perf_counter()
        _, outputs = translate_all(compiled)
        print(f"blocks of {size}: first pass (compiling) {time.perf_counter() - start:.0f} s",
              flush=True)
        reference = reference or outputs
        assert outputs == reference, f"blocks of {size} translate otherwise than blocks of 1"
    speeds: dict = {"eager": [], **{size: [] for size in sizes}}
    for _ in range(args.rounds):
        for kind in speeds:
            if kind != "eager":
                CompiledSteps.greedy_block = kind
            start = time.perf_counter()
            tokens, _ = translate_all(model if kind == "eager" else compiled)
            speeds[kind].append(tokens / (time.perf_counter() - start))
    CompiledSteps.greedy_block = default
    print("\n| search | target tokens/s, median of rounds | each round | / blocks of 1, "
          "median of rounds |")
    print("|---|---|---|---|")
    for kind, values in speeds.items():
        name = "eager" if kind == "eager" else f"compiled, blocks of {kind}"
        ratio = statistics.median(v / one for v, one in zip(values, speeds[1], strict=True))
        print(f"| {name} | {statistics.median(values):,.0f} | "
              f"{', '.join(f'{v:,.0f}' for v in values)} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
