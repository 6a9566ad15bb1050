"""The hostile cases of a real server's audit, against a real server: JSON nested 1,000 deep,
lone surrogates, a byte order mark, 100 MB bodies declared and streamed, a 200 MB multipart
part, and a hundred slow clients. Each gets a 4xx or is dropped, never a 5xx; the server goes
on serving; and its memory after them is within 10% of before."""

import concurrent.futures
import socket
import time
from pathlib import Path

import httpx
import pytest

from .test_server import server  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow  # a real server and hundreds of connections

FIELDS = {"q": "seven", "source": "en", "target": "de"}
DEEP = b'{"q": ' + b"[" * 1000 + b"]" * 1000 + b', "source": "en", "target": "de"}'
SURROGATE = b'{"q": "\\ud800 seven", "source": "en", "target": "de"}'
MB = 2**20


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _head(path: str, kind: str, length: int | None) -> bytes:
    size = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {kind}\r\n{size}\r\n\r\n"
            ).encode()


def _status(answer: bytes) -> int:
    return int(answer.split(b"\r\n")[0].split()[1]) if answer.startswith(b"HTTP/") else 0


def _send_until_refused(port: int, head: bytes, total: int, chunked: bool) -> tuple[int, int]:
    """Send `head` and then up to `total` bytes of body, 1 MB at a time, until the server
    answers or closes; returns (its status, 0 if none came; the bytes it took)."""
    block = b"x" * MB
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(head)
        try:
            while sent < total:
                s.sendall(b"%x\r\n%s\r\n" % (len(block), block) if chunked else block)
                sent += MB
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            return _status(s.recv(4096)), sent
        except ConnectionResetError:
            return 0, sent


def _slow_client(port: int, every: float) -> float:
    """A client sending one byte of its body every `every` seconds: how long until it is
    dropped."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(_head("/translate", "application/json", 1000))
        try:
            while time.monotonic() - start < 60:
                s.sendall(b" ")
                s.settimeout(every)
                try:
                    if not s.recv(4096):
                        break
                    break  # the 408
                except TimeoutError:
                    continue
        except (BrokenPipeError, ConnectionResetError):
            pass
    return time.monotonic() - start


def test_hostile_clients_get_4xx_and_leave_the_memory_as_it_was(server):  # noqa: F811
    process, url = server("--body-timeout", "2")
    port = int(url.rsplit(":", 1)[1])
    with httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(30):  # warm: the allocator's arenas, the batcher, the first searches
            assert client.post("/translate", json=FIELDS).status_code == 200
        before = _rss(process.pid)

        for path, body in (("/translate", DEEP), ("/detect", DEEP), ("/translate", SURROGATE),
                           ("/translate", SURROGATE.replace(b"}", b', "format": "html"}')),
                           ("/v1/translate", b'{"text": ["\\ud800 seven"]}'),
                           ("/translate", b"\xef\xbb\xbf" + DEEP)):
            for _ in range(20):
                response = client.post(path, content=body,
                                       headers={"Content-Type": "application/json"})
                assert 400 <= response.status_code < 500, (path, response.text)
        bom = client.post("/translate", content=b"\xef\xbb\xbf" + httpx.Request(
            "POST", url, json=FIELDS).content, headers={"Content-Type": "application/json"})
        assert bom.status_code == 200

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        declared = [pool.submit(_send_until_refused, port,
                                _head("/translate", "application/json", 100 * MB), 100 * MB,
                                False) for _ in range(4)]
        streamed = [pool.submit(_send_until_refused, port,
                                _head("/translate", "application/json", None), 100 * MB, True)
                    for _ in range(4)]
        multipart = pool.submit(_send_until_refused, port, _head(
            "/translate", "multipart/form-data; boundary=b", None), 200 * MB, True)
        for future in [*declared, *streamed, multipart]:
            status, sent = future.result()
            assert status in (413, 0) and sent < 50 * MB, (status, sent)  # refused early
    with concurrent.futures.ThreadPoolExecutor(100) as pool:
        dropped_after = list(pool.map(lambda _: _slow_client(port, 0.5), range(100)))
    assert max(dropped_after) < 20, max(dropped_after)  # --body-timeout 2, all of them

    with httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(10):
            assert client.post("/translate", json=FIELDS).status_code == 200
        metrics = client.get("/metrics").text
    assert 'status="5' not in metrics  # no 5xx counted, anywhere
    time.sleep(1)
    after = _rss(process.pid)
    assert after <= 1.1 * before, (before / MB, after / MB)
