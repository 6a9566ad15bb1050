"""Request bodies bounded in size and in time before any route reads them: a body over
--max-body-bytes is a 413 (refused from its Content-Length, or as soon as more arrives while it
streams: JSON, forms and multipart alike), one not complete within --body-timeout seconds a 408;
either way the connection is closed. Without them four 100 MB bodies took a worker from 742 MB
to 1.3 GB, and 300 connections sending a byte every 5 s held the server open indefinitely."""

from __future__ import annotations

import asyncio
import json

from transduce.serve.service import ApiError


class BodyLimits:
    """ASGI middleware: reads each HTTP request's body itself, counting and timing it, before
    the app sees the request; the app then reads it from memory. Refusals are answered here,
    as {"error": ...} like every other error, with the connection closed."""

    def __init__(self, app, max_bytes: int, timeout: float) -> None:
        self.app, self.max_bytes, self.timeout = app, max_bytes, timeout

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None:
            try:
                too_large = int(declared) > self.max_bytes
            except ValueError:
                return await _answer(send, 400, "Invalid request: a Content-Length that is "
                                                "not a number")
            if too_large:
                return await _answer(send, 413, self._too_large())
        try:
            body = await asyncio.wait_for(self._body(receive), self.timeout or None)
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

    async def _body(self, receive) -> bytes | None:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise ApiError(413, self._too_large())
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _too_large(self) -> str:
        return f"Request body larger than {self.max_bytes:,} bytes (--max-body-bytes)"


async def _answer(send, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
