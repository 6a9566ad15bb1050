"""Several workers behave as one server: each loads its model before it is counted alive,
listens on a socket of its own (clients that connect at once spread over them), /metrics sums
all of them, and a rate limit counted in a real Redis holds across them."""

import asyncio
import os
import re
import shutil
import signal
import subprocess
import time

import httpx
import pytest

from transduce.serve.workers import spreads

from .test_server import _free_port, server  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow  # real servers, several processes each

FIELDS = {"q": "seven", "source": "en", "target": "de"}


@pytest.fixture
def redis_url(tmp_path):
    """A real redis-server (Debian's; scripts/test.sh installs it) on a free port."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    port = _free_port()
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--dir", str(tmp_path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    deadline = time.monotonic() + 30
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise AssertionError("redis-server did not start") from None
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}"
    process.terminate()
    process.wait(timeout=30)


def _fresh_connection_each(url: str, n: int, **kwargs) -> list[httpx.Response]:
    """n requests, each on a new connection, so that the kernel spreads them over the workers."""
    return [httpx.post(f"{url}/translate", json=FIELDS, timeout=60, **kwargs) for _ in range(n)]


def _answered_by(log: str) -> set[str]:
    """The process ids in the access log's lines of POST /translate."""
    return {line.split()[1] for line in log.splitlines() if '"POST /translate"' in line}


async def _at_once(url: str, n: int) -> list[httpx.Response]:
    """n requests sent together, each on a connection of its own."""
    async with httpx.AsyncClient(base_url=url, timeout=60,
                                 limits=httpx.Limits(max_connections=n)) as client:
        return await asyncio.gather(*(client.post("/translate", json=FIELDS) for _ in range(n)))


def _started(log: str) -> list[str]:
    """The process ids of the workers that finished starting, in order."""
    return re.findall(r"\[(\d+)\] INFO uvicorn.error: Application startup complete", log)


def _wait_for_workers(logged, n: int) -> None:
    """Until n workers have started (in all, since the server started) and listen: a worker
    logs its application's start-up just before it listens on its socket."""
    deadline = time.monotonic() + 120
    while len(_started(logged.read_text())) < n:
        assert time.monotonic() < deadline, logged.read_text()
        time.sleep(0.1)
    time.sleep(0.5)


@pytest.mark.skipif(not spreads(), reason="this system spreads no connections over sockets "
                                          "bound with SO_REUSEPORT: the workers share one")
def test_clients_that_connect_at_once_land_on_every_worker(server, tmp_path):  # noqa: F811
    """With one socket shared, the worker that woke first took most such connections (32+0
    once: benchmarks/serve.md); with a socket each, the kernel spreads them. A worker killed is
    replaced by one with a socket of its own, and no connection waits on the dead one's (it
    would time out here)."""
    process, url = server("--workers", "2")
    logged = next(tmp_path.glob("server-*.log"))
    _wait_for_workers(logged, 2)  # a worker loading its model is not listening yet
    responses = asyncio.run(_at_once(url, 16))
    assert [r.status_code for r in responses] == [200] * 16
    workers = _answered_by(logged.read_text())
    assert len(workers) == 2, logged.read_text()  # one took all 16: 1 in 2^15 by chance
    killed = workers.pop()
    os.kill(int(killed.strip("[]")), signal.SIGKILL)
    _wait_for_workers(logged, 3)  # its replacement, its model loaded
    before = len(logged.read_text().splitlines())
    for _ in range(3):
        assert [r.status_code for r in asyncio.run(_at_once(url, 16))] == [200] * 16
    after = "\n".join(logged.read_text().splitlines()[before:])
    replacement = f"[{_started(logged.read_text())[-1]}]"
    assert _answered_by(after) == {*workers, replacement}
    os.kill(process.pid, signal.SIGTERM)
    assert process.wait(timeout=60) == 0


def test_metrics_are_summed_over_the_workers(server, tmp_path):  # noqa: F811
    process, url = server("--workers", "2")
    # each new connection goes to one worker's socket by a hash of its addresses (or, where the
    # workers share one socket, to whichever accepts first): ask until both have answered
    n = 0
    for _ in range(20):
        assert [r.status_code for r in _fresh_connection_each(url, 12)] == [200] * 12
        n += 12
        log = next(tmp_path.glob("server-*.log")).read_text()
        if len(_answered_by(log)) == 2:
            break
    log = next(tmp_path.glob("server-*.log")).read_text()
    assert len(_answered_by(log)) == 2, "one worker answered every request"
    counts = []
    for _ in range(8):  # whichever worker answers the scrape, it counts everyone's requests
        text = httpx.get(f"{url}/metrics", timeout=60).text
        line = next(line for line in text.splitlines()
                    if line.startswith('transduce_requests_total{endpoint="/translate",'
                                       'status="200"}'))
        counts.append(float(line.split()[-1]))
    assert counts == [float(n)] * 8
    assert f'transduce_sentences_total{{model="en-de"}} {float(n)}' in text
    log = next(tmp_path.glob("server-*.log")).read_text()
    assert "died" not in log, log  # no worker killed while it loaded its model
    # each line with its time; each request in the access log with its latency and id
    assert all(line[:4].isdigit() for line in log.splitlines() if line.strip()), log
    assert log.count('"POST /translate" 200') == n


def test_a_rate_limit_in_redis_holds_across_workers(server, redis_url):  # noqa: F811
    _, url = server("--workers", "2", "--rate-limit", "5/minute", "--rate-limit-storage",
                    redis_url)
    statuses = [r.status_code for r in _fresh_connection_each(url, 10)]
    assert statuses == [200] * 5 + [429] * 5  # 10 got through with a limiter per worker
    # another client (an API key of its own) has its own count
    assert httpx.get(f"{url}/languages", timeout=60).status_code == 200


def test_rate_limits_go_by_api_key_across_workers(server, redis_url, tmp_path):  # noqa: F811
    keys = tmp_path / "keys"
    keys.write_text("k1\nk2\n")
    _, url = server("--workers", "2", "--rate-limit", "3/minute", "--rate-limit-storage",
                    redis_url, "--api-keys", str(keys))
    for key in ("k1", "k2"):
        statuses = [httpx.post(f"{url}/translate", json={**FIELDS, "api_key": key},
                               timeout=60).status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429], key
