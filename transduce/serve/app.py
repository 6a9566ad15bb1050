"""The server's ASGI app: `create_app(models, settings)`, for `transduce serve`, `uvicorn
--factory` and gunicorn alike."""

from __future__ import annotations

import contextlib
import logging
import os
from importlib import resources
from pathlib import Path

import torch
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException

from transduce import __version__
from transduce.errors import UserError
from transduce.runtime import resolve_device
from transduce.serve import libretranslate, v1
from transduce.serve.access import Access
from transduce.serve.bodies import BodyLimits
from transduce.serve.cors import Cors
from transduce.serve.models import ModelSpec, ServedModel, load_models
from transduce.serve.service import ApiError, Service
from transduce.serve.settings import ServeSettings

log = logging.getLogger("transduce.serve")

PAGE = Path(str(resources.files("transduce.serve") / "page"))


MODELS_VARIABLE = "TRANSDUCE_SERVE_MODELS"  # (also TRANSDUCE_SERVE_MODEL, as --model's)
SETTINGS_VARIABLE = "TRANSDUCE_SERVE_SETTINGS"  # all of them: what `serve --workers` passes on


def create_app(models: list[ServedModel] | list[str | Path] | None = None,
               settings: ServeSettings | None = None) -> FastAPI:
    """The app serving `models`: loaded ones, or run directories (also "en:de=RUN_DIR") to load.

    Called with no arguments, as `uvicorn --factory transduce.serve:create_app` or gunicorn's
    workers do, it reads the run directories from TRANSDUCE_SERVE_MODELS (separated by commas)
    and the settings from TRANSDUCE_SERVE_SETTINGS (`ServeSettings.to_json()`), if set, else
    from TRANSDUCE_SERVE_<SETTING> variables, one each (`ServeSettings.from_environment`).
    """
    if settings is None and os.environ.get(SETTINGS_VARIABLE):
        settings = ServeSettings.from_json(os.environ[SETTINGS_VARIABLE])
    settings = settings or ServeSettings.from_environment()
    # the threads of a worker, before its models load (CTranslate2's engine takes them then,
    # and leaves PyTorch one: transduce.engines.ctranslate2)
    loaded = bool(models) and isinstance(models[0], ServedModel)
    if settings.threads_per_worker() and (not loaded or settings.engine == "transduce"):
        torch.set_num_threads(settings.threads_per_worker())
    if models is None:
        given = os.environ.get(MODELS_VARIABLE) or os.environ.get(MODELS_VARIABLE[:-1], "")
        models = [m for m in given.split(",") if m]
        if not models:
            raise UserError(f"no models: set {MODELS_VARIABLE} to run directories")
    if not isinstance(models[0], ServedModel):
        searches, threads = settings.search_threads(resolve_device(settings.device))
        models = load_models([ModelSpec.parse(str(m)) for m in models], device=settings.device,
                             dtype=settings.dtype, compile=settings.compiles(),
                             engine=settings.engine, continuous=settings.continuous(),
                             searches=searches, threads=threads)
    service = Service(list(models), settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        service.start()
        yield
        await service.stop()  # what was accepted is finished first

    # Swagger UI's files are served from the package (fastapi-offline's), not from a CDN, so
    # /docs works offline
    app = FastAPIOffline(title="transduce", version=__version__, lifespan=lifespan,
                         openapi_url="/spec", docs_url="/docs", redoc_url=None,
                         favicon_url="/favicon.ico",
                         description="Machine translation with the Transformer of \"Attention "
                                     "Is All You Need\": LibreTranslate's API and transduce's "
                                     "own (/v1).")
    app.state.service = service
    app.add_middleware(BodyLimits, max_bytes=settings.max_body_bytes,
                       timeout=settings.body_timeout)
    app.add_middleware(Cors)
    app.add_middleware(Access, track=_tracker(service))  # outermost: sees every answer
    _errors(app)
    app.include_router(libretranslate.router(service))
    app.include_router(v1.router(service))

    @app.get("/metrics", include_in_schema=False)
    async def metrics(request: Request) -> Response:
        token = settings.metrics_auth_token
        if token and request.headers.get("authorization") != f"Bearer {token}":
            raise ApiError(401, "Unauthorized")
        return Response(service.metrics.text(),
                        media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(PAGE / "index.html")

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> FileResponse:
        return FileResponse(PAGE / "favicon.svg", media_type="image/svg+xml")

    @app.get("/page/{name}", include_in_schema=False)
    async def page_file(name: str) -> FileResponse:
        if name not in {"app.js", "style.css", "favicon.svg"}:
            raise ApiError(404, "Not Found")
        return FileResponse(PAGE / name)

    return app


def _errors(app: FastAPI) -> None:
    """Every error as {"error": "one line"}; a bug is a 500 naming its request id, answered
    by `transduce.serve.access.Access`."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> JSONResponse:
        return JSONResponse({"error": error.message}, error.status, headers=error.headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        return JSONResponse({"error": str(error.detail)}, error.status_code,
                            headers=getattr(error, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        return JSONResponse({"error": f"Invalid request: {where or 'body'}: {first['msg']}"},
                            422)


ROUTES = {"/translate", "/translate_file", "/detect", "/suggest", "/languages", "/v1/translate",
          "/v1/models", "/metrics"}  # counted by path; any other path as "other"


def _tracker(service: Service):
    metrics = service.metrics

    def track(path: str):
        working = path in ROUTES and path != "/metrics"  # a scrape does not count itself
        if working:
            metrics.in_progress.inc()

        def answered(status: int, seconds: float) -> None:
            if working:
                metrics.in_progress.dec()
            metrics.request(path if path in ROUTES else "other", status, seconds)
        return answered
    return track
