"""How `transduce serve --workers 2` shares its clients' connections between its two workers,
and what an even share would give: 32 closed-loop clients (LibreTranslate's POST /translate, one
test2016 sentence a request, keep-alive connections from one aiohttp pool, as
benchmarks/serve_load.py's) against

- one server of two worker processes (each on a socket of its own where the system spreads
  connections by SO_REUSEPORT, transduce.serve.workers; else both on one), and
- two servers of one worker each (one thread each, as a worker of the first has), 16 clients on
  each: the two workers' shares even by construction.

For each: requests/s and latency over 20 s after 8 s of warming up, and how many of the open
connections each worker process held halfway through (`ss -tnp`, Linux's iproute2).

    python benchmarks/serve_balance.py --model runs/m30k-serve --serve-options --no-compile
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
from pathlib import Path

from serve_load import SHARED, load, start_server


def connections_per_process(port: int) -> list[int]:
    """Open connections to `port`, counted by the process that holds each, most first."""
    listed = subprocess.run(["ss", "-tnpH", "state", "established", f"( sport = :{port} )"],
                            capture_output=True, text=True, check=True).stdout
    pids = re.findall(r"pid=(\d+)", listed)
    return sorted((pids.count(pid) for pid in set(pids)), reverse=True)


async def measured(urls: list[str], lines: list[str], seconds: float,
                   clients: int) -> tuple[dict, list[list[int]]]:
    """serve_load's figures, and each server's connections per process halfway through."""
    running = asyncio.create_task(load(urls, lines, clients, seconds, ("en", "de")))
    await asyncio.sleep(seconds / 2)
    shares = [connections_per_process(int(url.rsplit(":", 1)[1])) for url in urls]
    return await running, shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="runs/m30k-serve", help="a trained run directory")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--serve-options", nargs=argparse.REMAINDER, default=[],
                        help="passed on to transduce serve")
    args = parser.parse_args()
    lines = [line for line in Path(args.src).read_text(encoding="utf-8").splitlines()
             if line.strip()]
    setups = {"one server, 2 workers": [["--workers", "2"]],
              "two servers, 1 worker each": [["--threads", "1"]] * 2}
    for name, options in setups.items():
        servers = [start_server(args.model, [*o, *args.serve_options]) for o in options]
        urls = [url for _, url in servers]
        asyncio.run(load(urls, lines, args.clients, 8.0, ("en", "de")))  # warming up

        found, shares = asyncio.run(measured(urls, lines, args.seconds, args.clients))
        print(f"{name}: {found['requests/s']:.1f} requests/s, p50 / p95 / p99 "
              + " / ".join(f"{1000 * found[q]:.0f}" for q in ("p50", "p95", "p99"))
              + f" ms, {found['errors']} errors; connections per worker: "
              f"{[n for share in shares for n in share]}", flush=True)
        for process, _ in servers:
            process.terminate()
            process.wait()


if __name__ == "__main__":
    main()
