"""Training speed and memory at WMT14's scale: a configuration (the base model's by default)
trained for some updates on the made-up corpus of prepare_scale.py (sentences of WMT14's
lengths, no download), on every GPU of this machine (one process each: DistributedDataParallel
when there are several) or on its CPU; target tokens/s and peak memory.

The configuration is used as shipped (its model, batch of `max_tokens` x `accumulate`,
precision `auto`: bf16 on a GPU that has it), with the training files replaced by the made-up
corpus and validation off. Its tokenizer is learnt once (the configuration's vocabulary size)
and kept in --work; `--tokenizer DIR` takes one learnt before (e.g. on another machine, with
`--learn-only`), the same for the same --pairs.

    python benchmarks/train_scale.py --config wmt14_en_de_base --pairs 300000 --updates 2000

Speed is the mean of the log windows after the first (CUDA's start-up and the allocator's
growth fall in the first), read from the run's metrics.jsonl; memory is PyTorch's peak on the
GPU (allocated, and reserved by its allocator).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from prepare_scale import make_corpus  # noqa: E402

from transduce.cli import _config_path  # noqa: E402
from transduce.config import load_config  # noqa: E402
from transduce.data.prepare import corpus  # noqa: E402
from transduce.data.tokenizer import Tokenizers  # noqa: E402


def settings(args, corpus_dir: Path) -> list[str]:
    return [f"data.train_src={corpus_dir / 'train.src'}",
            f"data.train_tgt={corpus_dir / 'train.tgt'}", "data.train_tsv=null",
            "data.valid_src=null", "data.valid_tgt=null", "data.valid_tsv=null",
            "data.dataset=null", "data.src_lang=src", "data.tgt_lang=tgt",
            f"train.max_updates={args.updates}", f"train.max_time={args.max_time}",
            "train.validate_every=0", "train.bleu=false", "train.save_every=0",
            f"train.log_every={args.log_every}", *args.overrides]


def learn_tokenizer(config_path: Path, overrides: list[str], directory: Path) -> None:
    """The configuration's tokenizer, learnt from the corpus, saved in `directory`."""
    data = load_config(config_path, overrides).data
    start = time.perf_counter()
    tokenizers = Tokenizers.train(
        corpus(data, "train").pairs, kind=data.tokenizer, vocab_size=data.vocab_size,
        shared=data.shared_vocab, character_coverage=data.character_coverage,
        min_freq=data.min_freq, lowercase=data.lowercase, symbols=data.symbols())
    tokenizers.save(directory)
    print(f"tokenizer: {data.tokenizer} {data.vocab_size:,} learnt in "
          f"{time.perf_counter() - start:.0f} s -> {directory}", flush=True)


def worker(config_path: Path, run_dir: Path, tokenizer: Path, overrides: list[str]) -> None:
    from transduce.training.start import start_run

    config = load_config(config_path, overrides)
    trainer = start_run(config, run_dir, tokenizers=Tokenizers.load(tokenizer))
    trainer.train()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="wmt14_en_de_base",
                        help="a configuration file or the name of a shipped one")
    parser.add_argument("--pairs", type=int, default=300_000)
    parser.add_argument("--updates", type=int, default=2000)
    parser.add_argument("--max-time", type=float, default=0.0,
                        help="stop after this many seconds of training (0: no limit)")
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--work", type=Path, default=Path("/tmp/transduce-train-scale"))
    parser.add_argument("--tokenizer", type=Path, help="one learnt before (default: learnt "
                        "once into --work)")
    parser.add_argument("--learn-only", action="store_true",
                        help="make the corpus and learn the tokenizer, then stop")
    parser.add_argument("--nproc", type=int, default=0,
                        help="processes (default: one per GPU, or one on a CPU)")
    parser.add_argument("overrides", nargs="*", help="section.key=value, over the "
                        "configuration's (e.g. data.max_tokens=12500 train.accumulate=2)")
    args = parser.parse_args()
    config_path = _config_path(args.config)
    corpus_dir = args.work / f"corpus-{args.pairs}"
    start = time.perf_counter()
    make_corpus(corpus_dir, args.pairs)
    print(f"corpus: {args.pairs:,} made-up pairs (made or found in "
          f"{time.perf_counter() - start:.0f} s)", flush=True)
    overrides = settings(args, corpus_dir)
    vocab = load_config(config_path, overrides).data.vocab_size
    tokenizer = args.tokenizer or args.work / f"tokenizer-{args.pairs}-{vocab}"
    if not (tokenizer / "tokenizer.json").is_file():
        learn_tokenizer(config_path, overrides, tokenizer)
    if args.learn_only:
        return
    gpus = torch.cuda.device_count()
    nproc = args.nproc or max(gpus, 1)
    run_dir = args.work / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    role = [__file__, "--worker", str(config_path), str(run_dir), str(tokenizer), *overrides]
    launcher = ([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}"]
                if nproc > 1 else [sys.executable])
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    start = time.perf_counter()
    subprocess.run([*launcher, *role], check=True, env=env)
    seconds = time.perf_counter() - start
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "tokens_per_s" in r]
    steady = rows[1:] or rows
    speed = sum(r["tokens_per_s"] for r in steady) / len(steady)
    config = load_config(run_dir / "config.yaml")
    device = torch.cuda.get_device_name(0) if gpus else "CPU"
    memory = (f"{max(r['gpu_memory_gib'] for r in rows):.1f} GiB (reserved "
              f"{max(r['gpu_reserved_gib'] for r in rows):.1f})"
              if "gpu_memory_gib" in rows[-1] else "-")
    print(f"\n{nproc} x {device}; {config.model.preset}, {config.data.max_tokens} tokens x "
          f"accumulate {config.train.accumulate} per process, precision "
          f"{config.train.precision}; {rows[-1]['update']} updates in {seconds:.0f} s (with "
          f"start-up)\n")
    print("| updates | target tokens/s (per GPU) | loss at the end | peak GPU memory |")
    print("|---|---|---|---|")
    print(f"| {rows[-1]['update']:,} | {speed:,.0f} ({speed / nproc:,.0f}) | "
          f"{rows[-1]['train_loss']:.3f} | {memory} |")
    print("\nper window (updates, target tokens/s): " + ", ".join(
        f"{r['update']}: {r['tokens_per_s']:,.0f}" for r in rows))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        config_path, run_dir, tokenizer, *overrides = sys.argv[2:]
        worker(Path(config_path), Path(run_dir), Path(tokenizer), overrides)
    else:
        main()
