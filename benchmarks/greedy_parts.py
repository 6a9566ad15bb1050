"""Where a compiled greedy search's time goes, by part of the search loop: the wall time spent
in each of the functions below (wrapped to time their calls), as a share of a pass over the
sources in batches sorted by length, after a first pass that compiles.

The parts: the compiled graph (`CompiledSteps.greedy`, `greedy_block` tokens a call), making a
batch's steps (the encoder and the cross-attention caches), finished sentences leaving the batch
(`DecoderSteps.select`, `compacting_order`), and writing a block's tokens (`_take_block`).

    python benchmarks/greedy_parts.py --model runs/m30k-serve          # one thread
    python benchmarks/greedy_parts.py --model runs/m30k-serve --threads 2 --passes 5
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from loop_parts import Parts

SHARED = Path(os.environ.get("TRANSDUCE_SHARED_DATA",
                             Path(__file__).resolve().parents[2] / "shared" / "data"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="runs/m30k-serve", help="trained run directory")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64, help="sentences a batch")
    parser.add_argument("--passes", type=int, default=3, help="timed passes")
    args = parser.parse_args()

    from transduce import runtime
    runtime.tune()  # as the transduce command does, before the first tensor
    import torch

    import transduce.decoding.greedy as greedy
    from transduce.decoding.compiled import Compiled, CompiledSteps
    from transduce.decoding.config import DecodeConfig
    from transduce.decoding.translator import Translator
    from transduce.model.steps import DecoderSteps

    torch.set_num_threads(args.threads)
    translator = Translator.load(args.model, device="cpu", compile=False)
    model = Compiled(translator.model)
    config = model.config
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    sources = [translator.tokenizers.src.encode(line) + [config.eos_id] for line in lines]
    order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))
    decode = DecodeConfig(beam_size=1, max_len_a=0, max_len_b=64)

    parts = Parts()
    parts.timed(CompiledSteps, "greedy", "the compiled graph (CompiledSteps.greedy)")
    parts.timed(Compiled, "steps", "a batch's steps: encoder, caches (steps)")
    parts.timed(DecoderSteps, "select", "finished rows leave (DecoderSteps.select)")
    parts.timed(greedy, "compacting_order", "finished rows leave (compacting_order)")
    parts.timed(greedy, "_take_block", "a block's tokens written (_take_block)")

    def one_pass() -> int:
        tokens = 0
        for start in range(0, len(order), args.batch):
            batch = [sources[i] for i in order[start : start + args.batch]]
            width = max(map(len, batch))
            src = torch.tensor([s + [config.pad_id] * (width - len(s)) for s in batch])
            tokens += sum(map(len, greedy.greedy_search(model, src, decode)))
        return tokens

    one_pass()  # compiles
    print(f"{args.model}, torch {torch.__version__}, {args.threads} thread(s), "
          f"{len(sources)} sentences in batches of {args.batch}")
    for n in range(args.passes):
        parts.clear()
        start = time.perf_counter()
        tokens = one_pass()
        took = time.perf_counter() - start
        print(f"\npass {n + 1}: {took:.3f} s, {tokens / took:,.0f} target tokens/s\n")
        print(parts.table(took))


if __name__ == "__main__":
    main()
