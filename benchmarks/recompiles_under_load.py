"""Graphs compiled while serving: a compiled server (two searches at once by default) under
rounds of concurrent requests for a fixed time, and how many times Dynamo compiled a graph again
after the server counted as up (/health), with the reasons it logged.

Two compiled searches at once once shared the compiled functions, and Dynamo's checks before a
graph, made from two threads at once, failed against each other's inputs ("Unexpected
recompilation: runtime guards failed even though they passed during recompilation-reason
analysis"): a graph compiled again while clients waited, in every 2-minute run of this on the
`mkl` and `openblas` paths. Each search now calls a copy of its own
(transduce.decoding.compiled, `use_copy`).

    python benchmarks/recompiles_under_load.py --model runs/m30k-serve --seconds 120
    TRANSDUCE_KERNELS=openblas python benchmarks/recompiles_under_load.py --model runs/m30k-serve
    python benchmarks/recompiles_under_load.py --model runs/m30k-serve --serve-options \
        --searches 2 --threads 2 --compile
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from num2words import num2words

CONTINUOUS = ["--continuous-batching", "--max-search-sentences", "8", "--searches", "2",
              "--threads", "2", "--compile"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def rounds(url: str, lines: list[str], seconds: float) -> int:
    """Rounds of one request per line, all at once, until `seconds` have passed."""
    done, end = 0, time.monotonic() + seconds
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        while time.monotonic() < end:
            answers = await asyncio.gather(*(client.post(
                "/translate", json={"q": line, "source": "en", "target": "de"})
                for line in lines))
            if any(a.status_code != 200 for a in answers):
                raise SystemExit(f"a request failed: {[a.status_code for a in answers]}")
            done += 1
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="run directory to serve")
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--requests", type=int, default=64, help="requests at once, a round")
    parser.add_argument("--serve-options", nargs=argparse.REMAINDER, default=CONTINUOUS,
                        help=f"options of `transduce serve` (default: {' '.join(CONTINUOUS)})")
    args = parser.parse_args()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as scratch:
        log_path = Path(scratch) / "server.log"
        with open(log_path, "w") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "transduce", "serve", "--model", args.model, "--port",
                 str(port), *args.serve_options], stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "TORCH_LOGS": "recompiles"})
        try:
            while True:
                if server.poll() is not None:
                    raise SystemExit(log_path.read_text()[-3000:])
                try:
                    if httpx.get(f"{url}/health").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.5)
            up = len(log_path.read_text())
            lines = [num2words(n) for n in range(1, 10_000, 15)][:args.requests]
            done = asyncio.run(rounds(url, lines, args.seconds))
        finally:
            server.terminate()
            server.wait()
        after = log_path.read_text()[up:].splitlines()
    recompiles = [line for line in after if "Recompiling function" in line]
    reasons = [found.group(1) for line in after  # "- 0/0: <the guard that failed>"
               if (found := re.search(r"\[__recompiles\]\s+- (\d+/\d+: .*)", line))]
    print(f"serve {' '.join(args.serve_options)} (TRANSDUCE_KERNELS="
          f"{os.environ.get('TRANSDUCE_KERNELS', 'auto')}): {done} rounds of {args.requests} "
          f"requests in {args.seconds:.0f} s; graphs compiled after /health: {len(recompiles)}")
    for reason in reasons:
        print("   ", reason[:200])


if __name__ == "__main__":
    main()
