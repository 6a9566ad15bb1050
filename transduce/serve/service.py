"""What the HTTP routes share: the models with their batchers, the settings, who may ask, and
the metrics; and the errors a request can get."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re

from starlette.requests import Request

from transduce.decoding.config import DecodeConfig
from transduce.decoding.translator import Translation
from transduce.serve.batcher import Batcher, Search
from transduce.serve.guard import RateLimiter
from transduce.serve.metrics import Metrics
from transduce.serve.models import ServedModel, language_name
from transduce.serve.settings import ServeSettings

log = logging.getLogger("transduce.serve")


class ApiError(Exception):
    """A request the server will not serve: answered with `status` and {"error": message}."""

    def __init__(self, status: int, message: str, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


class Service:
    def __init__(self, models: list[ServedModel], settings: ServeSettings) -> None:
        if not models:
            raise ValueError("a server needs at least one model")
        self.settings = settings
        self.models = {(m.source, m.target): m for m in models}
        self.metrics = Metrics()
        self.batchers = {
            pair: Batcher(m.translator, max_tokens=settings.max_batch_tokens,
                          wait=settings.batch_wait_ms / 1000, batching=settings.batching,
                          on_batch=self._counter(m))
            for pair, m in self.models.items()}
        self.rate_limit, self.rate_window = settings.rate()
        self.limiter = RateLimiter(self.rate_limit, self.rate_window)
        self.api_keys = settings.keys()

    def _counter(self, model: ServedModel):
        def on_batch(sentences: int, tokens: int, seconds: float, results) -> None:
            target_tokens = sum(t.length + 1 for t in results)  # <eos> included
            self.metrics.batch(model.name, sentences, target_tokens, seconds)
        return on_batch

    def start(self) -> None:
        for batcher in self.batchers.values():
            batcher.start()

    async def stop(self) -> None:
        await asyncio.gather(*(b.stop() for b in self.batchers.values()))

    # -- languages ------------------------------------------------------------------------------

    def languages(self) -> list[dict]:
        """LibreTranslate's /languages: every language served, with the targets it reaches."""
        codes = sorted({code for pair in self.models for code in pair})
        return [{"code": code, "name": language_name(code),
                 "targets": sorted(t for s, t in self.models if s == code)} for code in codes]

    def described(self, code: str) -> str:
        return f"{language_name(code)} ({code})"

    def model(self, source: str, target: str) -> ServedModel:
        """The model of a pair, or the LibreTranslate error for it. `source` may be "auto"."""
        codes = {code for pair in self.models for code in pair}
        if source != "auto" and source not in codes:
            raise ApiError(400, f"{source} is not supported")
        if target not in codes:
            raise ApiError(400, f"{target} is not supported")
        if source == "auto":
            sources = sorted(s for s, t in self.models if t == target)
            if len(sources) == 1:
                return self.models[sources[0], target]
            if not sources:
                raise ApiError(400, f"Invalid request: nothing is translated into "
                                    f"{self.described(target)} here")
            raise ApiError(400, f"Invalid request: source auto: {self.described(target)} is "
                                f"translated from {', '.join(sources)} here, and this server "
                                "does not detect languages; give the source language")
        if (source, target) not in self.models:
            raise ApiError(400, f"{self.described(target)} is not available as a target "
                                f"language from {self.described(source)}")
        return self.models[source, target]

    # -- who may ask ----------------------------------------------------------------------------

    def admit(self, request: Request, api_key) -> None:
        """Refuse a request over the rate limit of its client address (every request counts),
        or without a valid API key when keys are required."""
        client = request.client.host if request.client else "unknown"
        if not self.limiter.allow(client):
            window = _per(self.rate_window)
            wait = max(1, round(self.limiter.retry_after(client)))
            raise ApiError(429, f"Slowdown: {self.rate_limit} per {window}",
                           headers={"Retry-After": str(wait)})
        if self.api_keys and (not isinstance(api_key, str) or api_key not in self.api_keys):
            raise ApiError(403, "Invalid API key")

    # -- translating ----------------------------------------------------------------------------

    async def translate(self, model: ServedModel, sentences: list[str], search: Search,
                        request: Request | None = None) -> list[Translation]:
        """The translations, through the model's batcher, within the request timeout. If the
        client of `request` goes away first, its sentences leave the queue (if their batch has
        not begun) and nobody is answered."""
        if not sentences:
            return []
        work = asyncio.ensure_future(
            self.batchers[model.source, model.target].translate(sentences, search))
        waits = {work}
        if request is not None:
            waits.add(asyncio.ensure_future(_disconnected(request)))
        try:
            done, _ = await asyncio.wait(waits, timeout=self.settings.timeout or None,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
        if work in done:
            return work.result()
        if done:
            raise ApiError(499, "Client closed the request")
        raise ApiError(503, f"Translation took longer than {self.settings.timeout:g} s; "
                            "try again later", headers={"Retry-After": "1"})

    def search(self, model: ServedModel, *, nbest: int = 1, attention: bool = False,
               **decode) -> Search:
        """The search a request gets: the model's own settings (as `transduce translate
        --model RUN_DIR` searches) under the server's (--beam-size, ...) under the request's
        (`decode`: DecodeConfig's fields, None keeping a setting), its beam widened to hold
        the n-best asked for."""
        settings = {**self.settings.decode,
                    **{k: v for k, v in decode.items() if v is not None}}
        config = model.translator.decode_config(**settings)
        return Search(_widened(config, nbest), nbest, attention)


def _widened(decode: DecodeConfig, nbest: int) -> DecodeConfig:
    return dataclasses.replace(decode, beam_size=max(decode.beam_size, nbest))


async def _disconnected(request: Request) -> None:
    """Returns once the client has gone (its body was read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def read_fields(request: Request) -> tuple[dict, bool]:
    """A LibreTranslate request's fields from a JSON, urlencoded or multipart body (and the query
    string), and whether they came as JSON."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    fields: dict = dict(request.query_params)
    if kind == "application/json" or kind.endswith("+json"):
        body = await request.body()
        try:
            data = parse_json(body.decode("utf-8-sig"))  # a BOM is no error (RFC 8259 8.1)
        except UnicodeDecodeError:
            raise ApiError(400, "Invalid request: the body is not UTF-8") from None
        if not isinstance(data, dict):
            raise ApiError(400, "Invalid JSON format")
        return {**fields, **data}, True
    if kind in ("application/x-www-form-urlencoded", "multipart/form-data"):
        if kind == "application/x-www-form-urlencoded":
            try:
                (await request.body()).decode("utf-8")
            except UnicodeDecodeError:
                raise ApiError(400, "Invalid request: the body is not UTF-8") from None
        try:
            form = await request.form()
        except Exception as error:  # noqa: BLE001 - python-multipart's many parse errors
            raise ApiError(400, f"Invalid request: unreadable form ({error})") from None
        for key in form:
            values = [v for v in form.getlist(key) if isinstance(v, str)]  # no uploaded files
            if values:  # q given several times is a batch (as clients send lists in forms)
                fields[key] = values if key == "q" and len(values) > 1 else values[0]
        return fields, False
    return fields, False


MAX_JSON_DEPTH = 32  # a request's JSON nests a few levels; a thousand would exhaust the stack
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


def parse_json(text: str):
    """A request body's JSON, its depth bounded before parsing, its strings valid Unicode; else
    an ApiError 400 (a body nested a thousand levels deep or holding a lone surrogate, "\ud800",
    would otherwise fail deep inside the parser or the tokenizer)."""
    depth = deepest = 0
    for bracket in _NOT_BRACKETS.sub("", _STRINGS.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
        if deepest > MAX_JSON_DEPTH:
            raise ApiError(400, f"Invalid request: JSON nested deeper than {MAX_JSON_DEPTH} "
                                "levels")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise ApiError(400, "Invalid JSON format") from None
    check_unicode(data)
    return data


def check_unicode(value, field: str = "body") -> None:
    """ApiError 400 naming the field whose text is not valid Unicode (a lone surrogate)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(400, f"Invalid request: {field} is not valid Unicode (a lone "
                                "surrogate)") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            check_unicode(key, field)
            check_unicode(item, key if field == "body" else field)
    elif isinstance(value, list):
        for item in value:
            check_unicode(item, field)


def _per(seconds: float) -> str:
    for name, length in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        if seconds == length:
            return f"1 {name}"
    return f"{seconds:g} seconds"
