"""Serving under load: `transduce serve` on 127.0.0.1, N clients each sending one sentence at a
time for a fixed time: continuous batching (--continuous-batching; one worker process, then
--workers), batching of the requests that came together (the default; one worker, then
--workers), and none (one request at a time).

Every client is a closed loop: it sends a single sentence of --src (LibreTranslate's POST
/translate, JSON), waits for the answer, and sends the next. Reported per concurrency: requests/s
and sentences/s (the same here: one sentence per request), latency p50/p95/p99, errors (any
status but 200, or no answer), and the server's peak memory (VmHWM, its worker processes'
added). The clients run in one process of their own (asyncio + aiohttp, lighter than httpx) on
the same machine, so on a 2-core CPU they take some of the server's time; every configuration
pays that alike.

    python benchmarks/serve_load.py --model runs/m30k-en-de
    python benchmarks/serve_load.py --model runs/m30k-en-de --clients 1 32 --seconds 10
    python benchmarks/serve_load.py --model runs/m30k-en-de --servers continuous batching
    python benchmarks/serve_load.py --model runs/m30k-en-de --servers batching --workers 1 \
        --clients 32 --engines transduce transduce-ct2 --serve-options --length-normalization power
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import httpx

SHARED = Path(os.environ.get("TRANSDUCE_SHARED_DATA",
                             Path(__file__).resolve().parents[2] / "shared" / "data"))


START_SECONDS = 600  # a compiled search warms up before the server is up: minutes on AVX2


def start_server(model: str, options: list[str]) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "transduce", "serve", "--model", model, "--port", str(port),
         *options], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited ({process.returncode}); run it by hand to see why")
        try:
            if httpx.get(f"{url}/health").status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit(f"the server did not start in {START_SECONDS} s")


def peak_memory_mib(pid: int) -> float:
    """The peak resident memory of a process and of its children (uvicorn's workers)."""
    total = 0
    children = Path(f"/proc/{pid}/task/{pid}/children")
    for process in [pid, *map(int, children.read_text().split())]:
        for line in Path(f"/proc/{process}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1])
    return total / 1024


async def load(urls: list[str], sentences: list[str], clients: int, seconds: float,
               pair: tuple[str, str]) -> dict:
    """Closed-loop clients, client i sending to urls[i % len(urls)] (one server, or several
    sharing the clients: benchmarks/serve_balance.py)."""
    latencies: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds

    async def client(index: int, http: aiohttp.ClientSession) -> None:
        nonlocal errors
        rng = random.Random(index)
        while time.perf_counter() < stop:
            sentence = rng.choice(sentences)
            start = time.perf_counter()
            try:
                async with http.post(f"{urls[index % len(urls)]}/translate", json={
                        "q": sentence, "source": pair[0], "target": pair[1]}) as response:
                    await response.read()
                    ok = response.status == 200
            except aiohttp.ClientError:
                ok = False
            if ok:
                latencies.append(time.perf_counter() - start)
            else:
                errors += 1

    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        began = time.perf_counter()
        await asyncio.gather(*(client(i, http) for i in range(clients)))
        elapsed = time.perf_counter() - began
    latencies.sort()

    def quantile(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else 0
    return {"requests/s": len(latencies) / elapsed, "p50": quantile(0.5),
            "p95": quantile(0.95), "p99": quantile(0.99), "errors": errors,
            "mean": statistics.fmean(latencies) if latencies else 0}


SERVERS = {"continuous": ["--continuous-batching"], "batching": [],
           "one at a time": ["--no-batching"]}
ENGINES = {"transduce": ["--no-compile"], "transduce-int8": ["--dtype", "int8"],
           "transduce-compiled": ["--compile"],
           # CTranslate2 stops a beam search its own way, which ours names `finished`
           "transduce-ct2": ["--engine", "ctranslate2", "--stopping", "finished"],
           "transduce-ct2-int8": ["--engine", "ctranslate2", "--dtype", "int8", "--stopping",
                                  "finished"]}
# continuous batching is transduce's own search's (the others batch the requests that came)
CONTINUOUS = ("transduce", "transduce-int8", "transduce-compiled")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/m30k-en-de", help="a trained run directory")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--pair", default="en:de", help="the pair the model serves")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32, 128])
    parser.add_argument("--seconds", type=float, default=20.0, help="per measurement")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="worker processes of the second batching server (default: the CPUs)")
    parser.add_argument("--threads", type=int, default=0,
                        help="--threads of every server (default 0: the server's own choice)")
    parser.add_argument("--servers", nargs="+", default=list(SERVERS),
                        choices=list(SERVERS), help="which servers (default: all)")
    parser.add_argument("--engines", nargs="+", default=["transduce"], choices=list(ENGINES),
                        help="each server with each of these engines (`serve --engine`, "
                             "`--dtype`, `--compile`; default: transduce)")
    parser.add_argument("--serve-options", nargs=argparse.REMAINDER, default=[],
                        help="options for every server, last (e.g. --length-normalization "
                             "power, which CTranslate2's engine needs for a beam search)")
    args = parser.parse_args()
    sentences = [s for s in Path(args.src).read_text(encoding="utf-8").splitlines() if s.strip()]
    pair = tuple(args.pair.split(":"))
    print(f"{os.cpu_count()} CPUs; model {args.model}; {len(sentences)} sentences of {args.src}; "
          f"{args.seconds:g} s per row; one sentence per request\n")
    print("| server | clients | requests/s | sentences/s | p50 ms | p95 ms | p99 ms | errors | "
          "peak memory |")
    print("|---|---|---|---|---|---|---|---|---|")
    workers = ["--workers", str(args.workers)]
    servers = [(name if name == "one at a time" or not many else f"{name}, {args.workers} workers",
                options + (workers if many else []))
               for name, options in SERVERS.items() if name in args.servers
               for many in ((False,) if name == "one at a time" or args.workers == 1
                            else (False, True))]
    servers = [(name if len(args.engines) == 1 else f"{engine}: {name}",
                options + ENGINES[engine])
               for engine in args.engines for name, options in servers
               if not name.startswith("continuous") or engine in CONTINUOUS]
    for name, options in servers:
        process, url = start_server(args.model, ["--max-texts", "-1", "--threads",
                                                 str(args.threads), *options,
                                                 *args.serve_options])
        try:
            asyncio.run(load([url], sentences[:50], 4, 3.0, pair))  # warm-up
            for clients in args.clients:
                r = asyncio.run(load([url], sentences, clients, args.seconds, pair))
                print(f"| {name} | {clients} | {r['requests/s']:.1f} | {r['requests/s']:.1f} | "
                      f"{1000 * r['p50']:.0f} | {1000 * r['p95']:.0f} | {1000 * r['p99']:.0f} | "
                      f"{r['errors']} | {peak_memory_mib(process.pid):.0f} MiB |", flush=True)
        finally:
            process.terminate()
            process.wait(timeout=120)


if __name__ == "__main__":
    main()
