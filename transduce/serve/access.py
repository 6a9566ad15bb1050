"""Each HTTP request's id, its line in the access log, its count in the metrics, and the
last-resort answer to a bug: a 500 naming the request id, one log line, and the connection kept
open for the client's next request (a bug re-raised to the server would log two tracebacks and
close the connection, so that the client's next request on it failed)."""

from __future__ import annotations

import json
import logging
import re
import time
import traceback
import uuid
from collections.abc import Callable

log = logging.getLogger("transduce.serve")
access_log = logging.getLogger("transduce.serve.access")

HEADER = b"x-request-id"  # read from the request when it is sane, sent back with the response
_SANE = re.compile(rb"[A-Za-z0-9._:-]{1,64}")


def request_id(scope) -> str:
    """The id of the request of `scope` (as the access log and the X-Request-ID header give it)."""
    return scope.get("state", {}).get("request_id", "-")


class Access:
    """ASGI middleware, outermost: gives each request an id (the client's X-Request-ID if it is
    1-64 characters of [A-Za-z0-9._:-], else a new one), sends it back as X-Request-ID, logs one
    line per request (time, client, method, path, status, latency, id), calling `track(path)`
    as it begins and what that returns with (status, seconds) as it ends; an exception from
    the app is answered here."""

    def __init__(self, app,
                 track: Callable[[str], Callable[[int, float], None]] | None = None) -> None:
        self.app, self.track = app, track

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        given = dict(scope.get("headers") or ()).get(HEADER, b"")
        rid = given.decode() if _SANE.fullmatch(given) else uuid.uuid4().hex[:16]
        scope.setdefault("state", {})["request_id"] = rid
        start, status = time.perf_counter(), None
        done = self.track(scope["path"]) if self.track is not None else None

        async def sending(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", ()),
                                                   (HEADER, rid.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as error:  # noqa: BLE001 - a bug: answered, logged in one line
            where = traceback.extract_tb(error.__traceback__)[-1]
            log.error("request %s: %s %s failed: %s: %s (%s:%d)", rid, scope["method"],
                      scope["path"], type(error).__name__, error, where.filename, where.lineno)
            if status is None:  # nothing sent yet: the client gets a 500 it can quote
                body = json.dumps({"error": f"Internal error ({type(error).__name__}); "
                                            f"request id {rid}"}).encode()
                await sending({"type": "http.response.start", "status": 500, "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
        finally:
            seconds = time.perf_counter() - start
            status = status or 499  # the client left before an answer began
            client = scope.get("client")
            access_log.info('%s "%s %s" %d %.1f ms id=%s',
                            f"{client[0]}:{client[1]}" if client else "-", scope["method"],
                            scope["path"], status, 1000 * seconds, rid)
            if done is not None:
                done(status, seconds)
