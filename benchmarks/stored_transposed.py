"""Our search with the weights as trained against the same weights stored transposed
(transduce.kernels.transposed, what `Translator.load` does on MKL's kernel path), taking turns in
one process, one thread, on the same batches of the trained model's test2016 sentences (sorted
by length, `--batch` a batch, as engines_in_turn.py batches them): a pass each after a first
pass each (the compiled search compiles in it), and each round's ratio of their seconds (trained
/ stored: above 1, storing them transposed is the faster), the median over the rounds, and how
many outputs are the same tokens. Compiled, as `serve` searches, or `--eager`.

    python benchmarks/stored_transposed.py --model runs/m30k-en-de
    python benchmarks/stored_transposed.py --model runs/m30k-en-de --batch 1 --sentences 300
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

from decode_engine import _batches
from decode_speed import SHARED
from engines_in_turn import _ours, in_turn, row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/m30k-en-de", help="trained run directory")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--sentences", type=int, default=None, help="the first N only")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--batch", type=int, default=16, help="sentences a batch (a server's "
                        "at 32 clients: about 16)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--eager", action="store_true", help="the eager search, not compiled")
    parser.add_argument("--max-len", type=int, default=64, help="output tokens at most")
    args = parser.parse_args()

    from transduce import runtime
    runtime.tune()  # as the transduce command does, before the first tensor
    import torch

    from transduce import kernels
    from transduce.decoding.config import DecodeConfig
    from transduce.decoding.graphed import compile_for
    from transduce.kernels import transposed
    from transduce.runs.load import load_run

    torch.set_num_threads(1)
    run = load_run(Path(args.model))
    trained, stored = run.model.eval(), transposed.store(load_run(Path(args.model)).model.eval())
    models = {"trained": trained, "stored": stored}
    if not args.eager:
        models = {name: compile_for(m, torch.device("cpu")) for name, m in models.items()}
    config = trained.config
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()[:args.sentences]
    sources = [run.tokenizers.src.encode(line) + [config.eos_id] for line in lines]
    batches = list(_batches(sources, args.batch))
    print(f"torch {torch.__version__}, kernel path {kernels.path()}, one thread, "
          f"{'eager' if args.eager else 'compiled'}; {args.model} on {args.src} "
          f"({len(sources)} sentences, batches of {args.batch})\n")
    print("| search | as trained tokens/s | stored transposed tokens/s | trained / stored "
          "seconds, each round | median | same outputs |")
    print("|---|---|---|---|---|---|")
    for k in args.beams:
        decode = DecodeConfig(beam_size=k, length_penalty=0.6, length_normalization="power",
                              max_len_a=0, max_len_b=args.max_len, min_len=1)
        first, seconds = in_turn({name: functools.partial(_ours, m, decode, sources, batches)
                                  for name, m in models.items()}, args.rounds)
        print(row("greedy" if k == 1 else f"beam {k}", first, seconds, args.max_len,
                  ("stored", "trained")), flush=True)


if __name__ == "__main__":
    main()
