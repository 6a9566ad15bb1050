"""Request bodies bounded in size and in time before any route reads them: a body over
--max-body-bytes is a 413 (refused from its Content-Length, or as soon as more arrives while it
streams: JSON, forms and multipart alike), one not complete within --body-timeout seconds a 408;
either way the connection is closed. Without them four 100 MB bodies took a worker from 742 MB
to 1.3 GB, and 300 connections sending a byte every 5 s held the server open indefinitely. A
JSON body nested deeper than MAX_JSON_DEPTH is a 400 before any parser sees it (a thousand
levels exhausted the parser's stack: a 500)."""

from __future__ import annotations

import asyncio
import json
import mmap
import re

from transduce.serve.service import ApiError

MAX_JSON_DEPTH = 32  # a request's JSON nests a few levels; a thousand would exhaust the stack
SMALL = 256 * 1024  # bodies up to this size are read into the heap, larger ones into a mapping
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKETS = re.compile(rb"[^\[\]{}]+")


class BodyLimits:
    """ASGI middleware: reads each HTTP request's body itself, counting and timing it, before
    the app sees the request; the app then reads it from memory. Refusals are answered here,
    as {"error": ...} like every other error, with the connection closed."""

    def __init__(self, app, max_bytes: int, timeout: float) -> None:
        self.app, self.max_bytes, self.timeout = app, max_bytes, timeout

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or ())
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                declared = int(declared)
            except ValueError:
                return await _answer(send, 400, "Invalid request: a Content-Length that is "
                                                "not a number")
            if declared > self.max_bytes:
                return await _answer(send, 413, self._too_large())
        try:
            body = await asyncio.wait_for(self._body(receive, declared), self.timeout or None)
            kind = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if body and (kind == b"application/json" or kind.endswith(b"+json")):
                check_json_depth(body)
        except asyncio.TimeoutError:
            return await _answer(send, 408, f"Request body not received within "
                                            f"{self.timeout:g} s (--body-timeout)")
        except ApiError as error:
            return await _answer(send, error.status, error.message)
        if body is None:  # the client left while sending
            return None
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # the disconnect, whenever it comes

        await self.app(scope, replay, send)

    async def _body(self, receive, declared: int | None) -> bytes | None:
        # A large body (or one of unknown size) is gathered in an anonymous mapping of the
        # largest size allowed, of which only the pages written are ever memory, given back
        # whole when it closes: in the heap, which transduce.runtime keeps at its peak for the
        # searches' sake, four streamed bodies refused at 10 MB left the server 43 MB larger.
        capacity = declared if declared is not None else self.max_bytes
        buffer = bytearray() if capacity <= SMALL else mmap.mmap(-1, max(capacity, 1))
        size = 0
        try:
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return None
                chunk = message.get("body", b"")
                if size + len(chunk) > capacity:
                    raise ApiError(413, self._too_large())
                if isinstance(buffer, bytearray):
                    buffer += chunk
                else:
                    buffer[size:size + len(chunk)] = chunk
                size += len(chunk)
                if not message.get("more_body", False):
                    return bytes(buffer[:size])
        finally:
            if not isinstance(buffer, bytearray):
                buffer.close()

    def _too_large(self) -> str:
        return f"Request body larger than {self.max_bytes:,} bytes (--max-body-bytes)"


async def _answer(send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def check_json_depth(body: bytes) -> None:
    """An ApiError 400 when `body`'s brackets, outside its strings, nest deeper than
    MAX_JSON_DEPTH."""
    depth = deepest = 0
    for bracket in _NOT_BRACKETS.sub(b"", _STRINGS.sub(b"", body)):
        depth += 1 if bracket in b"[{" else -1
        deepest = max(deepest, depth)
        if deepest > MAX_JSON_DEPTH:
            raise ApiError(400, f"Invalid request: JSON nested deeper than {MAX_JSON_DEPTH} "
                                "levels")
