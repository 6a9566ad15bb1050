"""Several searches at once: threads of one process against processes of one thread each.

The trained model's test2016 sentences, greedy and beam 5, each engine of decode_speed.py
(benchmarks/decode_engine.py) run two ways on N CPUs: one process searching N batches at once
(`--threads N --searches N`: ours on threads of their own, CTranslate2 with inter_threads N),
and N processes at once, each with one thread and every Nth sentence. Target tokens/s: all the
tokens over the slowest process's seconds. What it shows: how much Python's GIL, which the
threads of one process share, costs each engine (docs/speed.md, "Several batches at once").

    python benchmarks/search_processes.py --model runs/m30k-serve
    python benchmarks/search_processes.py --model runs/m30k-serve --engines transduce ct2-fp32
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from decode_speed import SHARED, engine_command, export, write_spec


def _start(engine: str, spec: Path, threads: int, searches: int) -> subprocess.Popen:
    return subprocess.Popen(engine_command(engine, spec, threads, searches),
                            stdout=subprocess.PIPE, text=True)


def _result(process: subprocess.Popen) -> dict:
    out, _ = process.communicate()
    if process.returncode:
        raise SystemExit(f"{process.args[2]} failed (exit {process.returncode})")
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/m30k-serve", help="trained run directory")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--engines", nargs="+", default=["transduce-compiled", "ct2-fp32"])
    parser.add_argument("--cpus", type=int, default=2, help="N: searches, or processes")
    parser.add_argument("--max-len", type=int, default=64)
    parser.add_argument("--alpha", type=float, default=0.6)
    args = parser.parse_args()

    from transduce.decoding.translator import Translator

    translator = Translator.load(args.model, device="cpu")
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    sources = [translator.tokenizers.src.encode(line) + [translator.model.config.eos_id]
               for line in lines]
    n = args.cpus
    print(f"{args.model} on {args.src} ({len(sources)} sentences): target tokens/s, "
          f"{n} searches in one process / {n} processes of one thread\n")
    print("| engine | search | one process | processes | processes / one |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "trained"
        export(translator.model, translator.tokenizers, directory, args.engines)
        for beam in (1, 5):
            spec = {"beam": beam, "forced": False, "max_len": args.max_len, "alpha": args.alpha}
            whole = write_spec(directory, f"whole-{beam}", sources, **spec)
            parts = [write_spec(directory, f"part{i}-{beam}", sources[i::n], **spec)
                     for i in range(n)]
            for engine in args.engines:
                one = _result(_start(engine, whole, n, n))
                each = [_result(p) for p in [_start(engine, part, 1, 1) for part in parts]]
                alone = one["tokens"] / one["seconds"]
                apart = sum(r["tokens"] for r in each) / max(r["seconds"] for r in each)
                print(f"| {engine} | {'greedy' if beam == 1 else f'beam {beam}'} | "
                      f"{alone:,.0f} | {apart:,.0f} | {apart / alone:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
