"""A compiled search's graphs with and without Inductor's "decompose_mm_pass", in one process.

With the pass (transduce.decoding.compiled `INDUCTOR_OPTIONS`) a graph of one row computes its
linear layers as Inductor's own loops; without it each is a call to the BLAS (MKL's generic
matrix-vector product on an AMD CPU). Two figures, the two kinds of graph taking turns, one
thread:

1. one greedy block (two tokens) of one sentence at position 20, milliseconds a call;
2. greedy search over the Multi30k test2016 English sentences in batches of 64 sorted by
   length (as benchmarks/decode_speed.py), whose last steps are a batch's longest sentence
   alone: target tokens/s, and whether every block's tokens are the same.

    python benchmarks/one_row_graphs.py --model runs/m30k-en-de
    python benchmarks/one_row_graphs.py --shape base --parts 1     # random weights
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from transduce import runtime
from transduce.decoding.compiled import CompiledSteps

SHARED = Path(os.environ.get("TRANSDUCE_SHARED_DATA",
                             Path(__file__).resolve().parents[2] / "shared" / "data"))
BLOCK = CompiledSteps.greedy_block  # greedy tokens a graph takes


def graphs():
    """The compiled greedy block without the pass and with it (the search's own): the search's
    Inductor options but for the pass."""
    from transduce.decoding import compiled

    compiled._configure()

    def greedy(model, inputs, memory, src_mask, cache, never, eos_bias):
        return compiled._greedy(model, inputs, memory, src_mask, cache, never, eos_bias, BLOCK)

    without = {key: value for key, value in compiled.INDUCTOR_OPTIONS.items()
               if key != "post_grad_fusion_options"}
    return {"BLAS calls": torch.compile(greedy, dynamic=True, options=without),
            "decompose_mm_pass": compiled.compiled_greedy(BLOCK)}


def one_row(model, variants, calls: int, rounds: int) -> None:
    from transduce.decoding.compiled import bucket

    torch.manual_seed(0)
    src = torch.randint(4, model.config.src_vocab_size, (1, 16))
    src[0, -1] = model.config.eos_id
    steps = model.steps(src)
    steps.limit(128)
    eos_bias, position = torch.zeros(BLOCK), 20
    for _ in range(position // BLOCK + 1):  # the cache filled up to the position
        steps.greedy(eos_bias)

    def call(graph):
        steps._position = position
        steps.cache.position.fill_(position)
        steps.cache.read(steps._window(bucket(position + BLOCK - 1)))
        return graph(steps.model, steps.inputs.detach(), steps.memory.detach(),
                     steps.src_mask.detach(), steps.cache, steps._never, eos_bias)[0]

    tokens = {name: call(graph).clone() for name, graph in variants.items()}
    times = {name: [] for name in variants}
    for _ in range(rounds):
        for name, graph in variants.items():
            start = time.perf_counter()
            for _ in range(calls):
                call(graph)
            times[name].append((time.perf_counter() - start) / calls * 1000)
    print(f"\none sentence, a greedy block of {BLOCK} at position {position}, {rounds} rounds "
          f"of {calls} calls (same tokens: {len({str(t.tolist()) for t in tokens.values()}) == 1})")
    print("\n| graphs | least ms a call | median |\n|---|---|---|")
    for name, values in times.items():
        print(f"| {name} | {min(values):.3f} | {statistics.median(values):.3f} |")


def searches(model, tokenizers, variants, src: Path, passes: int) -> None:
    from transduce.decoding import compiled, greedy
    from transduce.decoding.config import DecodeConfig

    specials = tokenizers.specials
    lines = src.read_text(encoding="utf-8").splitlines()
    ids = [s + [specials["eos_id"]] for s in tokenizers.src.encode_batch(lines)]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    batches = [order[i: i + 64] for i in range(0, len(order), 64)]
    decode = DecodeConfig(beam_size=1, max_len_a=0, max_len_b=128)
    blocks: list = []
    taken = greedy._take_block

    def keep(tokens, *args):  # each block's tokens, to compare the two kinds
        blocks.append(tokens.clone())
        return taken(tokens, *args)

    def one_pass() -> int:
        n = 0
        for batch in batches:
            width = max(len(ids[i]) for i in batch)
            rows = torch.tensor([ids[i] + [specials["pad_id"]] * (width - len(ids[i]))
                                 for i in batch])
            n += sum(len(out) + 1 for out in greedy.greedy_search(model, rows, decode))
        return n

    found = {}
    greedy._take_block = keep
    try:
        for name, graph in variants.items():  # a first pass each: compiling, not timed
            compiled._GREEDY[BLOCK, 0] = graph
            blocks.clear()
            one_pass()
            found[name] = list(blocks)
    finally:
        greedy._take_block = taken
    first, *others = found.values()
    same = all(len(o) == len(first) and all(map(torch.equal, o, first)) for o in others)
    times = {name: [] for name in variants}
    for _ in range(passes):
        for name, graph in variants.items():
            compiled._GREEDY[BLOCK, 0] = graph
            start = time.perf_counter()
            tokens = one_pass()
            times[name].append(time.perf_counter() - start)
    compiled._GREEDY[BLOCK, 0] = variants["decompose_mm_pass"]
    print(f"\ngreedy search of {len(lines)} sentences ({src.name}), batches of 64, {passes} "
          f"passes each, {tokens:,} target tokens (every block's tokens the same: {same})")
    print("\n| graphs | least s | median s | target tokens/s (median) |\n|---|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {min(values):.3f} | {median:.3f} | {tokens / median:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="runs/m30k-en-de", help="trained run directory")
    parser.add_argument("--shape", help="random weights at this preset instead (part 1 only)")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--parts", nargs="+", type=int, default=[1, 2], choices=[1, 2])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--passes", type=int, default=6)
    args = parser.parse_args()
    runtime.tune()
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    from transduce.decoding.compiled import Compiled
    from transduce.model import ModelConfig, Transformer
    from transduce.runs.load import load_run

    if args.shape:
        torch.manual_seed(0)
        model = Transformer(ModelConfig.preset(args.shape, src_vocab_size=32000,
                                               tgt_vocab_size=32000)).eval()
        tokenizers, name = None, f"random {args.shape}"
    else:
        run = load_run(Path(args.model))
        model, tokenizers, name = run.model, run.tokenizers, args.model
    print(f"torch {torch.__version__}, one thread, {name}")
    variants, searched = graphs(), Compiled(model)
    if 1 in args.parts:
        one_row(searched, variants, args.calls, args.rounds)
    if 2 in args.parts and tokenizers is not None:
        searches(searched, tokenizers, variants, Path(args.src), args.passes)


if __name__ == "__main__":
    main()
