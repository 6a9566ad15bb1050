"""Data-parallel training speed: one process of N threads against N processes of one thread each.

The real `Trainer` update on a run's data (its config, tokenizer and training split), timed over
the same number of updates both ways: one process with batches of `data.max_tokens`, then
`--nproc` processes (started through torchrun) with batches of max_tokens / nproc each, so an
update trains on the same number of tokens. For the processes, also where an update's time goes:
the forward and backward passes (with DistributedDataParallel's sums of the gradients, which
run during the backward pass, or FSDP's gathers and reductions; waiting for the slowest
included), summing the loss, and agreeing whether to stop.

    python benchmarks/data_parallel.py --from-run runs/m30k-en-de --updates 80 --parallel ddp
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from transduce.config import load_config
from transduce.data.tokenizer import Tokenizers
from transduce.training.start import start_run


def measure(run: Path, updates: int, max_tokens: int, out: Path, parallel: str) -> dict:
    """Target tokens/s of `updates` updates (after 5 untimed), and ms per update by part."""
    config = load_config(run / "config.yaml", [f"data.max_tokens={max_tokens}",
                                               f"train.parallel={parallel}"])
    trainer = start_run(config, out, tokenizers=Tokenizers.load(run))
    world = trainer.world
    parts = {"compute": 0.0, "sum loss": 0.0, "agree to stop": 0.0}

    def timed(name, function):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            result = function(*args, **kwargs)
            parts[name] += time.perf_counter() - start
            return result
        return wrapper

    trainer.accumulate_gradients = timed("compute", trainer.accumulate_gradients)
    trainer.parallel.sum = timed("sum loss", trainer.parallel.sum)
    agree = timed("agree to stop", trainer.stop_reason)
    stream = trainer.epochs.stream(trainer.progress)
    tokens, start = 0, 0.0
    for step in range(5 + updates):
        if step == 5:
            parts.update(dict.fromkeys(parts, 0.0))
            tokens, start = 0, time.perf_counter()
        agree()
        batches = [next(stream) for _ in range(world.size)]
        tokens += sum(b.n_tgt_tokens for b in batches)
        trainer.step(*trainer.gradients(batches))
    seconds = time.perf_counter() - start
    return {"tokens/s": tokens / seconds, "ms/update": 1000 * seconds / updates,
            **{name: 1000 * value / updates for name, value in parts.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-run", dest="run", type=Path, required=True,
                        help="a run directory to take the config, tokenizer and data from")
    parser.add_argument("--updates", type=int, default=80)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--parallel", choices=["ddp", "fsdp"], default="ddp",
                        help="the processes' engine (train.parallel)")
    parser.add_argument("--max-tokens", type=int, help="per update (default: the run's "
                        "data.max_tokens); each of the processes takes 1/nproc of it")
    parser.add_argument("role", nargs="?", choices=["worker"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    max_tokens = args.max_tokens or load_config(args.run / "config.yaml").data.max_tokens
    with tempfile.TemporaryDirectory() as scratch:
        if args.role:  # one of the --nproc processes under torchrun: max_tokens is its own
            r = measure(args.run, args.updates, max_tokens, Path(scratch) / "run",
                        args.parallel)
            print(f"| {os.environ['WORLD_SIZE']} processes x {torch.get_num_threads()} thread, "
                  f"{max_tokens} tokens each, {args.parallel} (rank {os.environ['RANK']}) | "
                  f"{r['tokens/s']:,.0f} | "
                  f"{r['ms/update']:.0f} | {r['compute']:.0f} | {r['sum loss']:.1f} | "
                  f"{r['agree to stop']:.1f} |", flush=True)
            return
        print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {args.updates} updates of "
              f"{max_tokens} target tokens (padded) after 5 untimed, {args.run}\n")
        print("| processes | target tokens/s | ms/update | forward+backward | sum loss | "
              "agree to stop |")
        print("|---|---|---|---|---|---|")
        r = measure(args.run, args.updates, max_tokens, Path(scratch) / "one", "ddp")
        print(f"| 1 process x {torch.get_num_threads()} threads, {max_tokens} tokens | "
              f"{r['tokens/s']:,.0f} | {r['ms/update']:.0f} | {r['compute']:.0f} | - | - |",
              flush=True)
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, os.cpu_count() // args.nproc))}
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        f"--nproc-per-node={args.nproc}", __file__, "worker",
                        "--from-run", str(args.run), "--updates", str(args.updates),
                        "--parallel", args.parallel,
                        f"--max-tokens={max_tokens // args.nproc}"], check=True, env=env)


if __name__ == "__main__":
    main()
