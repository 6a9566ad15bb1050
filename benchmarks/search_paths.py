"""Whole searches on each kernel path, one thread: seconds a pass, alternating the paths.

Each path runs in a process of its own (TRANSDUCE_KERNELS, read at import), eager and compiled
(`--compile`), greedy and beam 5 with |y|^alpha, translating the first N test2016 sentences
through a `Translator` in batches of `--max-tokens` (a server's: 20-90 sentences), on one
thread (each of `translate`'s searches, a one-worker server's). A first pass compiles and warms
up; then `--rounds` rounds, each running every path's process for `--passes` passes, the order
of the paths reversed every other round; medians over all passes, and how many translations
each path finds the same as the first path's.

    python benchmarks/search_paths.py --model runs/m30k-en-de --paths mkl openblas
    python benchmarks/search_paths.py --model runs/m30k-en-de --paths mkl openblas --compile
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

SHARED = Path(os.environ.get("TRANSDUCE_SHARED_DATA",
                             Path(__file__).resolve().parents[2] / "shared" / "data"))

CHILD = """
import json, sys, time
from pathlib import Path
import torch
from transduce.decoding.translator import Translator
model, src, n, beam, alpha, max_tokens, compile, passes = sys.argv[1:9]
torch.set_num_threads(1)
translator = Translator.load(model, device="cpu", compile=compile == "1")
lines = Path(src).read_text(encoding="utf-8").splitlines()[:int(n)]
search = dict(beam_size=int(beam), length_normalization="power", length_penalty=float(alpha),
              max_tokens=int(max_tokens))
outputs = translator.translate(lines, **search)  # compiles, warms up
times = []
for _ in range(int(passes)):
    start = time.perf_counter()
    translator.translate(lines, **search)
    times.append(time.perf_counter() - start)
print(json.dumps({"times": times, "outputs": outputs}))
"""


def run(path: str, args, beam: int) -> dict:
    env = {**os.environ, "TRANSDUCE_KERNELS": path}
    done = subprocess.run([sys.executable, "-c", CHILD, args.model, args.src, str(args.n),
                           str(beam), str(args.alpha), str(args.max_tokens),
                           "1" if args.compile else "0", str(args.passes)],
                          env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/m30k-en-de")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--paths", nargs="+", default=["mkl", "openblas"])
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--n", type=int, default=640, help="sentences")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args()
    first = args.paths[0]
    for beam in args.beams:
        times = {path: [] for path in args.paths}
        outputs = {}
        for round_ in range(args.rounds):
            for path in args.paths if round_ % 2 == 0 else args.paths[::-1]:
                found = run(path, args, beam)
                times[path] += found["times"]
                outputs[path] = found["outputs"]
        base = statistics.median(times[first])
        print(f"{'compiled' if args.compile else 'eager'}, beam {beam}, {args.n} sentences:")
        for path in args.paths:
            median = statistics.median(times[path])
            same = sum(map(str.__eq__, outputs[path], outputs[first]))
            print(f"  {path}: {median:.2f} s a pass ({base / median:.2f}x {first}), passes "
                  f"{', '.join(f'{t:.2f}' for t in times[path])}; {same} of {args.n} the same")


if __name__ == "__main__":
    main()
