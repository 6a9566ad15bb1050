"""Data preparation at WMT14's scale: `transduce prepare` time and peak memory on a corpus of
4.5 million pairs made here (no download), and a training process's memory over it.

The corpus is made deterministically from a seed: two vocabularies of 100,000 made-up words with
Zipf's frequencies, sentences of 1-120 words (log-normal, about 25 on average, WMT14's), each
target the source's words mapped to the other vocabulary, with one word in ten dropped or
added. Then, each in a process of its own (peak memory: the process's maximum resident size):

1. `transduce prepare --train-src ... --train-tgt ... --vocab-size 32000` (the base model's
   shared BPE);
2. a training process of a `tiny` model for a few updates (with the tokenizer of step 1: it
   binarizes the pairs for itself, then trains) over a tenth of the pairs and over all of them:
   what it holds beside the model grows with the corpus only by its index (the memory-mapped
   token ids are read as they are used); then each run resumed in a fresh process, its pairs
   binarized already: the training process alone, anonymous and file-backed memory apart.

    python benchmarks/prepare_scale.py --pairs 4500000 --work /tmp/scale
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

WORDS = 100_000
LETTERS = np.array(list("abcdefghijklmnopqrstuvwxyz"))


def vocabulary(rng: np.random.Generator) -> np.ndarray:
    lengths = rng.integers(2, 12, WORDS)
    letters = rng.choice(LETTERS, int(lengths.sum()))
    starts = np.concatenate([[0], np.cumsum(lengths)])
    return np.array(["".join(letters[a:b]) for a, b in zip(starts[:-1], starts[1:], strict=True)],
                    dtype=object)


def make_corpus(directory: Path, pairs: int, seed: int = 1, chunk: int = 100_000) -> None:
    """`pairs` pairs as directory/train.src and train.tgt (made once; kept if there)."""
    src_path, tgt_path = directory / "train.src", directory / "train.tgt"
    if src_path.is_file() and tgt_path.is_file():
        return
    rng = np.random.default_rng(seed)
    src_words, tgt_words = vocabulary(rng), vocabulary(rng)
    mapping = rng.permutation(WORDS)
    zipf = 1.0 / np.arange(1, WORDS + 1) ** 1.1
    zipf /= zipf.sum()
    directory.mkdir(parents=True, exist_ok=True)
    with open(src_path, "w", encoding="utf-8") as src, open(tgt_path, "w", encoding="utf-8") as tgt:
        for first in range(0, pairs, chunk):
            n = min(chunk, pairs - first)
            lengths = np.clip(rng.lognormal(3.1, 0.55, n).astype(int), 1, 120)
            ids = rng.choice(WORDS, int(lengths.sum()), p=zipf)
            noise = rng.random(len(ids))
            extra = rng.choice(WORDS, len(ids), p=zipf)
            at = 0
            src_lines, tgt_lines = [], []
            for length in lengths.tolist():
                words = ids[at:at + length]
                src_lines.append(" ".join(src_words[words]))
                out = mapping[words]
                kept = out[noise[at:at + length] >= 0.05]  # one in twenty dropped
                added = extra[at:at + length][noise[at:at + length] >= 0.95]  # one in twenty added
                tgt_lines.append(" ".join(tgt_words[np.concatenate([kept, added])]) or "x")
                at += length
            src.write("\n".join(src_lines) + "\n")
            tgt.write("\n".join(tgt_lines) + "\n")


def run(command: list[str]) -> tuple[float, float]:
    """Seconds and peak resident memory (MiB) of a command run in a process of its own."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{process.stderr.read()[-3000:]}")
    return seconds, usage.ru_maxrss / 1024  # Linux: KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4_500_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/transduce-scale"))
    parser.add_argument("--vocab-size", type=int, default=32_000)
    parser.add_argument("--updates", type=int, default=20, help="of each training run")
    parser.add_argument("--skip", nargs="*", default=[], choices=["prepare", "train"])
    args = parser.parse_args()
    corpus = args.work / f"corpus-{args.pairs}"
    start = time.perf_counter()
    make_corpus(corpus, args.pairs)
    size = sum(f.stat().st_size for f in corpus.iterdir()) / 2**20
    print(f"{os.cpu_count()} CPUs; corpus: {args.pairs:,} pairs, {size:,.0f} MiB of text "
          f"(made or found in {time.perf_counter() - start:.0f} s)\n")
    print("| step | pairs | seconds | peak memory |\n|---|---|---|---|")
    transduce = [sys.executable, "-m", "transduce"]
    prepared = args.work / f"prepared-{args.pairs}"
    if "prepare" not in args.skip:
        seconds, peak = run([*transduce, "prepare", "--dataset", "null", "--train-src",
                             str(corpus / "train.src"), "--train-tgt", str(corpus / "train.tgt"),
                             "--src-lang", "src", "--tgt-lang", "tgt", "--vocab-size",
                             str(args.vocab_size), "--out", str(prepared)])
        print(f"| `transduce prepare` (BPE {args.vocab_size:,}) | {args.pairs:,} | "
              f"{seconds:.0f} | {peak:,.0f} MiB |", flush=True)
    if "train" in args.skip:
        return
    tenth = args.work / f"corpus-{args.pairs}-tenth"
    if not tenth.is_dir():
        tenth.mkdir(parents=True)
        for side in ("src", "tgt"):
            with open(corpus / f"train.{side}", encoding="utf-8") as whole, \
                    open(tenth / f"train.{side}", "w", encoding="utf-8") as part:
                for number, line in enumerate(whole):
                    if number >= args.pairs // 10:
                        break
                    part.write(line)
    runs = []
    for source, pairs in ((tenth, args.pairs // 10), (corpus, args.pairs)):
        run_dir = args.work / f"run-{pairs}"
        runs.append((run_dir, pairs))
        report = args.work / f"run-{pairs}.memory"
        seconds, peak = run([sys.executable, __file__, "--train-worker", str(source),
                             str(prepared), str(run_dir), str(args.updates), str(report)])
        prepared_rss, training_rss = report.read_text().split()
        print(f"| `tiny` training, {args.updates} updates, on the prepared tokenizer: resident "
              f"after binarizing / at the end of training | {pairs:,} | {seconds:.0f} | "
              f"{float(prepared_rss):,.0f} / {float(training_rss):,.0f} MiB (peak "
              f"{peak:,.0f}) |", flush=True)
    for run_dir, pairs in runs:  # the training alone: resumed over its binarized pairs
        report = args.work / f"resume-{pairs}.memory"
        seconds, peak = run([sys.executable, __file__, "--resume-worker", str(run_dir),
                             str(2 * args.updates), str(report)])
        setup, trained = report.read_text().splitlines()
        print(f"| the same run resumed for {args.updates} more updates (its pairs binarized "
              f"already): anonymous / file-backed resident memory after setting up, then after "
              f"training | {pairs:,} | {seconds:.0f} | {setup} MiB, then {trained} MiB |",
              flush=True)


def resident() -> dict[str, int]:
    """This process's resident memory, MiB: anonymous (RssAnon) and file-backed (RssFile:
    memory-mapped pages of the shards, which the kernel may drop)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text()
                  .splitlines() if ":" in line)
    return {k: int(fields[k].split()[0]) // 1024 for k in ("RssAnon", "RssFile")}


def resume_worker(run_dir: Path, updates: int, report: Path) -> None:
    from transduce.training.start import resume_run

    trainer = resume_run(run_dir, [f"train.max_updates={updates}"])
    setup = resident()
    trainer.train()
    trained = resident()
    report.write_text("".join(f"{m['RssAnon']:,} / {m['RssFile']:,}\n"
                              for m in (setup, trained)))


def train_worker(source: Path, prepared: Path, run_dir: Path, updates: int,
                 report: Path) -> None:
    """Train `tiny` on `source`'s pairs with the prepared tokenizer; write the resident memory
    after binarizing and after training (MiB) to `report`."""
    import shutil

    from transduce.config import load_config
    from transduce.data.tokenizer import Tokenizers
    from transduce.training.start import start_run

    shutil.rmtree(run_dir, ignore_errors=True)
    config = load_config(overrides=[
        "model.preset=tiny", "data.dataset=null", f"data.train_src={source / 'train.src'}",
        f"data.train_tgt={source / 'train.tgt'}", f"train.max_updates={updates}",
        "train.validate_every=0", "train.bleu=false", "train.log_every=1000"])
    trainer = start_run(config, run_dir, tokenizers=Tokenizers.load(prepared))
    after_binarizing = sum(resident().values())
    trainer.train()
    report.write_text(f"{after_binarizing} {sum(resident().values())}\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--resume-worker"]:
        resume_worker(Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
    elif sys.argv[1:2] == ["--train-worker"]:
        source, prepared, run_dir, updates, report = sys.argv[2:]
        train_worker(Path(source), Path(prepared), Path(run_dir), int(updates), Path(report))
    else:
        main()
