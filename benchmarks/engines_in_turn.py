"""Our compiled search and CTranslate2's float32 search taking turns in one process, one thread.

decode_speed.py runs each engine in a process of its own, one after the other, so a host whose
speed drifts between runs (by up to 2x on the 2-core EPYC of docs/speed.md) moves the ratio of
two engines as much as any change does. Here both search the same batches (the trained model's
test2016 sentences sorted by length, 64 a batch as decode_engine.py batches them, or `--batch`)
in one process on one thread, a pass each in turn, after a first pass each (ours compiles in
it): each round's ratio of the two passes' seconds is taken under the same conditions, and the
median over the rounds is the figure. Also printed: how many outputs are the same tokens.
CTranslate2 multiplies on oneDNN, as `--engine ctranslate2` does and as CTranslate2 itself does
on an AMD CPU (on an Intel one it picks MKL, 4.8-6x slower at two threads on an AMX Xeon,
docs/speed.md), or on MKL with `--ct2-backend mkl`. Our beam search stops by its default rule
(`early`), or by CTranslate2's with `--stopping finished` (the same work on both sides).

    python benchmarks/engines_in_turn.py --model runs/m30k-en-de
    python benchmarks/engines_in_turn.py --model runs/m30k-en-de --beams 5 --batch 16
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from decode_engine import _batches
from decode_speed import SHARED, export


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/m30k-en-de", help="trained run directory")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--batch", type=int, default=64, help="sentences a batch (a server's "
                        "at 32 clients: about 16)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-len", type=int, default=64, help="output tokens at most")
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty |y|^alpha")
    parser.add_argument("--stopping", choices=["early", "exact", "finished"], default="early",
                        help="our beam search's stopping rule (CTranslate2's is finished: done "
                        "once it holds beam-size finished hypotheses)")
    parser.add_argument("--ct2-backend", choices=["onednn", "mkl"], default="onednn",
                        help="CTranslate2's matrix products (CT2_USE_MKL, read on its import)")
    args = parser.parse_args()
    os.environ["CT2_USE_MKL"] = "1" if args.ct2_backend == "mkl" else "0"

    from transduce import runtime
    runtime.tune()  # as the transduce command does, before the first tensor
    import ctranslate2
    import torch

    from transduce.decoding.config import DecodeConfig
    from transduce.decoding.graphed import compile_for
    from transduce.decoding.translator import Translator

    torch.set_num_threads(1)
    translator = Translator.load(args.model, device="cpu", compile=False)
    model, config = translator.model, translator.model.config
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    sources = [translator.tokenizers.src.encode(line) + [config.eos_id] for line in lines]
    batches = list(_batches(sources, args.batch))
    compiled = compile_for(model, torch.device("cpu"))
    with tempfile.TemporaryDirectory() as tmp:
        export(model, translator.tokenizers, Path(tmp), ["ct2-fp32"])
        ct2 = ctranslate2.Translator(str(Path(tmp) / "ct2-fp32"), device="cpu",
                                     intra_threads=1, inter_threads=1)
        pieces = json.loads((Path(tmp) / "pieces.json").read_text())
    index = {piece: i for i, piece in enumerate(pieces)}
    print(f"torch {torch.__version__}, CTranslate2 {ctranslate2.__version__} on "
          f"{args.ct2_backend}, one thread; our stopping rule {args.stopping}; "
          f"{args.model} on {args.src} ({len(sources)} sentences, batches of {args.batch})\n")
    print("| search | transduce-compiled tokens/s | ct2-fp32 tokens/s | ours / CTranslate2, "
          "each round | median | same outputs |")
    print("|---|---|---|---|---|---|")
    for k in args.beams:
        decode = DecodeConfig(beam_size=k, length_penalty=args.alpha,
                              length_normalization="power", max_len_a=0,
                              max_len_b=args.max_len, min_len=1, stopping=args.stopping)
        engines = {"ours": functools.partial(_ours, compiled, decode, sources, batches),
                   "theirs": functools.partial(_theirs, ct2, pieces, index, decode, sources,
                                               batches)}
        first, seconds = in_turn(engines, args.rounds)  # ours compiles in its first pass
        print(row("greedy" if k == 1 else f"beam {k}", first, seconds, args.max_len,
                  ("ours", "theirs")), flush=True)


def in_turn(searches: dict[str, Callable[[], list]], rounds: int
            ) -> tuple[dict[str, list], dict[str, list[float]]]:
    """A first pass of each search (a compiled one compiles in it), then `rounds` passes of
    each in turn: each one's outputs (of its first pass) and seconds (of the others)."""
    first = {name: search() for name, search in searches.items()}
    seconds: dict[str, list[float]] = {name: [] for name in searches}
    for _ in range(rounds):
        for name, search in searches.items():
            start = time.perf_counter()
            search()
            seconds[name].append(time.perf_counter() - start)
    return first, seconds


def row(label: str, first: dict[str, list], seconds: dict[str, list[float]], max_len: int,
        ratio: tuple[str, str]) -> str:
    """A table's row of `in_turn`'s results: each search's target tokens/s (outputs of at most
    `max_len` tokens and their <eos>; the median pass), in their order; each round's `ratio`
    (a, b): b's seconds over a's, a's speed against b's; their median; and the share of
    outputs the same tokens (of the first two)."""
    a, b = ratio
    speeds = [sum(min(len(o) + 1, max_len + 1) for o in outputs) / statistics.median(seconds[n])
              for n, outputs in first.items()]
    ratios = [y / x for x, y in zip(seconds[a], seconds[b], strict=True)]
    one, two = list(first.values())[:2]
    same = sum(x == y for x, y in zip(one, two, strict=True)) / len(one)
    return (f"| {label} | " + " | ".join(f"{speed:,.0f}" for speed in speeds)
            + f" | {', '.join(f'{r:.2f}' for r in ratios)} | {statistics.median(ratios):.2f}x"
            f" | {same:.1%} |")

def _ours(model, decode, sources: list, batches: list) -> list[list[int]]:
    """Our search of every batch (greedy or beam, as `decode` says): each sentence's tokens."""
    import torch

    from transduce.decoding.beam import beam_search
    from transduce.decoding.greedy import greedy_search

    outputs = [None] * len(sources)
    pad = model.config.pad_id
    for batch in batches:
        width = max(len(sources[i]) for i in batch)
        src = torch.tensor([sources[i] + [pad] * (width - len(sources[i])) for i in batch])
        found = ([list(h[0].tokens) for h in beam_search(model, src, decode)]
                 if decode.beam_size > 1 else greedy_search(model, src, decode))
        for i, out in zip(batch, found, strict=True):
            outputs[i] = out
    return outputs


def _theirs(ct2, pieces: list[str], index: dict, decode, sources: list, batches: list
            ) -> list[list[int]]:
    """CTranslate2's search of every batch with the same settings: each sentence's tokens."""
    outputs = [None] * len(sources)
    for batch in batches:
        results = ct2.translate_batch(
            [[pieces[t] for t in sources[i]] for i in batch], beam_size=decode.beam_size,
            max_decoding_length=decode.max_len_b + 1, length_penalty=decode.length_penalty)
        for i, r in zip(batch, results, strict=True):
            outputs[i] = [index[p] for p in r.hypotheses[0]]
    return outputs


if __name__ == "__main__":
    main()
