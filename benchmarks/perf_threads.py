"""Where each engine's CPU time goes, thread by thread, under Linux `perf`: the share of each
busy thread's samples in matrix products, in OpenMP waiting (a thread of the team spinning or
asleep while another works alone), in Python, and in the rest (the search's other operations and
PyTorch's dispatch around them).

Each engine runs in a process of its own, translating the first N test2016 sentences again and
again through a `Translator` (our batches, beam 5, |y|^alpha as CTranslate2 scores, two threads:
one search); after a first pass, `perf record` samples it for a few seconds. Engines: `transduce`
(eager), `transduce-compiled`, `transduce-ct2` (CTranslate2's search over the run's export).
"s a pass" is the fastest pass while sampled. Needs `perf` (Debian: linux-perf).

    python benchmarks/perf_threads.py --model runs/m30k-en-de
    python benchmarks/perf_threads.py --model runs/m30k-en-de --max-tokens 1000
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHARED = Path(os.environ.get("TRANSDUCE_SHARED_DATA",
                             Path(__file__).resolve().parents[2] / "shared" / "data"))
ENGINES = ("transduce", "transduce-compiled", "transduce-ct2")

CHILD = """
import sys, time
from pathlib import Path
import torch
from transduce.engines.engine import load
engine, model, src = sys.argv[1:4]
n, threads, max_tokens = map(int, sys.argv[4:7])
torch.set_num_threads(threads)  # one search on all of them (CTranslate2: its intra_threads)
options = {"transduce": dict(compile=False),
           "transduce-compiled": dict(compile=True)}.get(engine, {})
translator = load(model, engine="ctranslate2" if engine == "transduce-ct2" else "transduce",
                  device="cpu", searches=1, **options)
lines = Path(src).read_text(encoding="utf-8").splitlines()[:n]
search = dict(beam_size=5, length_normalization="power", max_tokens=max_tokens)
translator.translate(lines, **search)  # the first pass: compiles, fills caches
print("ready", flush=True)
while True:
    start = time.perf_counter()
    translator.translate(lines, **search)
    print("pass", time.perf_counter() - start, flush=True)
"""


def kind(symbol: str, dso: str) -> str:
    """What a sample was doing, from its symbol and library."""
    if "gemm" in symbol or "gemv" in symbol or dso.startswith("perf-"):  # perf-PID.map: JIT
        return "products"
    if dso.startswith("libgomp"):
        return "OpenMP waiting"
    if dso.startswith("libpython"):
        return "Python"
    return "the rest"


def profile(engine: str, args: argparse.Namespace) -> tuple[float, dict[int, collections.Counter]]:
    """Seconds a pass, and each thread's samples by kind."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp, "log")
        with log.open("w") as out:
            child = subprocess.Popen([sys.executable, "-c", CHILD, engine, args.model, args.src,
                                      str(args.sentences), str(args.threads),
                                      str(args.max_tokens)],
                                     stdout=out, stderr=subprocess.STDOUT)
        try:
            while "ready" not in log.read_text():
                if child.poll() is not None:
                    sys.exit(f"{engine} failed:\n{log.read_text()[-2000:]}")
                time.sleep(0.5)
            data = Path(tmp, "perf.data")
            subprocess.run(["perf", "record", "-F", "999", "-o", str(data), "-p", str(child.pid),
                            "--", "sleep", str(args.seconds)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        finally:
            child.kill()
            child.wait()
        passes = [float(line.split()[1]) for line in log.read_text().splitlines()
                  if line.startswith("pass ")]
        script = subprocess.run(["perf", "script", "-i", str(data), "-F", "tid,ip,sym,dso"],
                                check=True, capture_output=True, text=True).stdout
    threads: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in script.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        dso = fields[-1].strip("()").rsplit("/", 1)[-1]
        threads[int(fields[0])][kind(" ".join(fields[2:-1]), dso)] += 1
    return min(passes) if passes else float("nan"), threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="runs/m30k-en-de", help="trained run directory")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--sentences", type=int, default=640)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=8192,
                        help="source tokens a batch (translate's default; 1000: ~60 sentences)")
    parser.add_argument("--seconds", type=int, default=10, help="sampled, after the first pass")
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    args = parser.parse_args()
    kinds = ("products", "OpenMP waiting", "Python", "the rest")
    print(f"{args.model}, beam 5, {args.sentences} sentences, batches of {args.max_tokens} source "
          f"tokens, {args.threads} threads\n")
    print("| engine | s a pass | thread (share of samples) | " + " | ".join(kinds) + " |")
    print("|---" * (3 + len(kinds)) + "|")
    for engine in args.engines:
        seconds, threads = profile(engine, args)
        total = sum(sum(c.values()) for c in threads.values())
        busiest = sorted(threads.items(), key=lambda item: -sum(item[1].values()))
        for tid, counts in busiest[: args.threads]:
            n = sum(counts.values())
            shares = " | ".join(f"{counts[k] / n:.0%}" for k in kinds)
            print(f"| {engine} | {seconds:.2f} | {tid} ({n / total:.0%}) | {shares} |")


if __name__ == "__main__":
    main()
