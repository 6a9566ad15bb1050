"""A server's latency beside another busy process: `transduce serve` on 127.0.0.1 with each
--threads given, one request at a time (two test2016-like sentences in one text, LibreTranslate's
POST /translate), first with nothing else running, then beside a process multiplying 512 x 512
matrices on every CPU. Prints each server's median and slowest latency. OpenMP's threads wait
for each other at every operation, so a server whose threads are all the CPUs stalls when another
process takes one (benchmarks/serve.md, "One thread with PyTorch's CPU threads").

    python benchmarks/serve_beside_busy.py --model runs/m30k-serve --threads 2 1
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

import httpx

TEXT = ("A man in a blue shirt is standing on a ladder cleaning windows. "
        "Two dogs play in the snow.")
BUSY = ("import time, torch\ntorch.set_num_threads(os.cpu_count() or 1)\n"
        "a = torch.randn(512, 512)\nwhile True: a @ a\n")


def latencies(model: str, threads: int, busy: bool, requests: int) -> list[float]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "transduce", "serve", "--model", model, "--port", str(port),
         "--no-compile", "--threads", str(threads)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    other = None
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        while True:
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the server did not start; run it by hand to see why")
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        if busy:
            other = subprocess.Popen([sys.executable, "-c", "import os\n" + BUSY])
            time.sleep(1)
        times = []
        for _ in range(requests):
            start = time.perf_counter()
            httpx.post(f"{url}/translate", json={"q": TEXT, "source": "auto", "target": "de"},
                       timeout=120).raise_for_status()
            times.append((time.perf_counter() - start) * 1000)
        return times
    finally:
        for process in (other, server):
            if process is not None:
                process.terminate()
                process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a trained run directory")
    parser.add_argument("--threads", type=int, nargs="+", default=[os.cpu_count() or 1, 1])
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()
    print("| server | median ms | max ms |\n|---|---|---|")
    for busy in (False, True):
        for threads in args.threads:
            times = latencies(args.model, threads, busy, args.requests)
            where = "beside the busy process" if busy else "nothing else running"
            print(f"| `--threads {threads}`, {where} | {statistics.median(times):.0f} | "
                  f"{max(times):.0f} |")


if __name__ == "__main__":
    main()
