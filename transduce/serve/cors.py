"""CORS as LibreTranslate sends it: the same six headers on every answer, and a preflight
(OPTIONS) answered 200, so that a page on any origin can call the API as it calls
LibreTranslate's (its own front ends send an Authorization header and read it back)."""

from __future__ import annotations

HEADERS = [  # LibreTranslate 1.9's after_request, in its order
    (b"access-control-allow-origin", b"*"),
    (b"access-control-allow-headers", b"Authorization, Content-Type"),
    (b"access-control-expose-headers", b"Authorization"),
    (b"access-control-allow-methods", b"GET, POST"),
    (b"access-control-allow-credentials", b"true"),
    (b"access-control-max-age", str(60 * 60 * 24 * 20).encode()),
]


class Cors:
    """ASGI middleware adding HEADERS to every HTTP answer and answering OPTIONS itself."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["method"] == "OPTIONS":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [*HEADERS, (b"content-length", b"0")]})
            return await send({"type": "http.response.body", "body": b""})

        async def sending(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *HEADERS]}
            await send(message)

        await self.app(scope, receive, sending)
