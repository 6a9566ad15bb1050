"""What the HTTP routes share: the models with their batchers, the settings, who may ask, and
the metrics; and the errors a request can get."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging

from starlette.requests import Request

from transduce.decoding.config import DecodeConfig
from transduce.decoding.translator import Translation
from transduce.errors import UserError
from transduce.serve.batcher import Batcher, Search, search_thread
from transduce.serve.continuous import ContinuousBatcher, Stepper
from transduce.serve.files import FileStore
from transduce.serve.guard import RateLimiter
from transduce.serve.metrics import Metrics
from transduce.serve.models import ServedModel, language_name
from transduce.serve.settings import ServeSettings
from transduce.serve.spread import Spread

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
        for model in models:  # the searches its engine cannot make: refused before serving
            model.translator.check_search(self.search(model).decode)
        self.metrics = Metrics()
        searches, threads = settings.search_threads(models[0].translator.device)
        # each search's thread, shared by every model's batcher of that search: the searches
        # of batches, or the steps of continuous batching
        self.search_threads = [search_thread(threads, n) for n in range(searches)]
        self.steppers = [Stepper(threads, n) for n in range(searches)]
        self.batchers = {pair: self._batchers(m) for pair, m in self.models.items()}
        self.limiter = RateLimiter(settings.rate_limit, settings.rate_limit_storage)
        self.files: FileStore | None = None  # made by start()
        self.api_keys = settings.keys()

    def _batchers(self, model: ServedModel) -> Batcher | ContinuousBatcher | Spread:
        """Continuous batching where asked (`ServeSettings.continuous`), else batches of the
        requests that came together: one batcher a search thread, spread (`Spread`) where
        there are several."""
        settings = self.settings
        if settings.continuous():
            batchers = [ContinuousBatcher(model.translator, max_tokens=settings.max_batch_tokens,
                                          max_sentences=settings.max_search_sentences,
                                          on_step=self._counter(model, continuous=True),
                                          stepper=stepper) for stepper in self.steppers]
        else:
            batchers = [Batcher(model.translator, max_tokens=settings.max_batch_tokens,
                                wait=settings.batch_wait_ms / 1000, batching=settings.batching,
                                on_batch=self._counter(model), thread=thread)
                        for thread in self.search_threads]
        return batchers[0] if len(batchers) == 1 else Spread(batchers)

    def _counter(self, model: ServedModel, continuous: bool = False):
        def on_batch(sentences: int, tokens: int, seconds: float, results) -> None:
            target_tokens = sum(t.length + 1 for t in results)  # <eos> included
            self.metrics.batch(model.name, len(results) if continuous else sentences,
                               target_tokens, seconds, searched=sentences)
        return on_batch

    def start(self) -> None:
        for batcher in self.batchers.values():
            batcher.start()
        self._refresh = asyncio.get_running_loop().create_task(self._refresh_metrics())
        self.files = FileStore(self.settings.files_dir)

    async def stop(self) -> None:
        await asyncio.gather(*(b.stop() for b in self.batchers.values()))
        for thread in self.search_threads:
            thread.shutdown(wait=True)
        self._refresh.cancel()
        self.metrics.leave()
        self.files.close()

    async def _refresh_metrics(self) -> None:
        while True:
            self.metrics.refresh()
            await asyncio.sleep(1.0)

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

    async def admit(self, request: Request, api_key) -> None:
        """Refuse a request with an API key that is not one of --api-keys (403), or without one
        when --require-api-key (400), as LibreTranslate does; or over the rate limit of its
        client: its key, else its address (429; every request counts)."""
        if self.api_keys and api_key not in (None, ""):
            if not isinstance(api_key, str) or api_key not in self.api_keys:
                raise ApiError(403, "Invalid API key")
        elif self.settings.require_api_key:
            raise ApiError(400, "Please contact the server operator to get an API key")
        client = (f"key:{api_key}" if api_key else
                  f"address:{request.client.host if request.client else 'unknown'}")
        if not await self.limiter.allow(client):
            wait = max(1, round(await self.limiter.retry_after(client)))
            raise ApiError(429, f"Slowdown: {self.limiter.described()}",
                           headers={"Retry-After": str(wait)})

    # -- translating ----------------------------------------------------------------------------

    async def translate(self, model: ServedModel, sentences: list[str], search: Search,
                        request: Request | None = None,
                        prefixes: list[str] | None = None,
                        terms: list[list[str]] | None = None) -> list[Translation]:
        """The translations, through the model's batcher, within the request timeout (each
        starting with its prefix and holding its terms, if given). If the client of `request`
        goes away first, its sentences leave the queue (if their batch has not begun) and nobody
        is answered."""
        if not sentences:
            return []
        work = asyncio.ensure_future(
            self.batchers[model.source, model.target].translate(sentences, search, prefixes,
                                                                terms))
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
            try:
                return work.result()
            except UserError as error:  # what this request asks that the search cannot do
                raise ApiError(400, f"Invalid request: {error}") from None
        if done:
            raise ApiError(499, "Client closed the request")
        raise ApiError(503, f"Translation took longer than {self.settings.timeout:g} s; "
                            "try again later", headers={"Retry-After": "1"})

    def search(self, model: ServedModel, *, nbest: int = 1, attention: bool = False,
               scores: bool = False, **decode) -> Search:
        """The search a request gets: the model's own settings (as `transduce translate
        --model RUN_DIR` searches) under the server's (--beam-size, ...) under the request's
        (`decode`: DecodeConfig's fields, None keeping a setting), its beam widened to hold
        the n-best asked for."""
        settings = {**self.settings.decode,
                    **{k: v for k, v in decode.items() if v is not None}}
        config = model.translator.decode_config(**settings)
        return Search(_widened(config, nbest), nbest, attention, scores)


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


def parse_json(text: str):
    """A request body's JSON (its depth bounded already by `transduce.serve.bodies`), its
    strings valid Unicode; else an ApiError 400 (a lone surrogate, "\ud800", would otherwise
    fail inside the tokenizer)."""
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
