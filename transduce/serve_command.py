"""`transduce serve`: its options, and the server started with uvicorn."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import logging
import os
import signal
import socket
import tempfile
from pathlib import Path

from transduce.errors import UserError
from transduce.options import add_config_options, from_environment
from transduce.search_options import (
    add_decode_options,
    add_device_options,
    at_least,
    check_device_options,
    decode_options,
)
from transduce.serve.settings import ENVIRONMENT, ServeSettings

log = logging.getLogger("transduce.serve")
DEVICE = ("device", "dtype", "compile", "engine")  # the fields add_device_options declares

# every line with its time: uvicorn's own (started, stopping...), ours, and the access log,
# applied by uvicorn as it starts (the lines before, by the command's logging: TIMED_FORMAT)
TIMED_FORMAT = "%(asctime)s.%(msecs)03d [%(process)d] %(levelname)s %(name)s: %(message)s"
LOG_CONFIG = {
    "version": 1, "disable_existing_loggers": False,
    "formatters": {"timed": {"format": TIMED_FORMAT, "datefmt": "%Y-%m-%dT%H:%M:%S"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "timed",
                            "stream": "ext://sys.stderr"}},
    "loggers": {name: {"handlers": ["stderr"], "level": "INFO", "propagate": False}
                for name in ("uvicorn", "uvicorn.error", "transduce", "py.warnings")},
}


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", action="append", metavar="RUN_DIR",
                        help="a run directory to serve, named by its data.src_lang and "
                             "data.tgt_lang (or SRC:TGT=RUN_DIR); repeat for more pairs "
                             "(required)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    parser.add_argument("--port", type=at_least(0), default=5000,
                        help="port to listen on (default 5000, LibreTranslate's)")
    add_config_options(parser, ServeSettings, skip=DEVICE + ("decode",))
    add_decode_options(parser, default_text="each model's decode.{name}")
    add_device_options(parser)
    parser.set_defaults(parser=parser)  # for from_environment


def settings_of(args: argparse.Namespace) -> ServeSettings:
    """The server's settings from its options: one field each (those of the device as
    `transduce translate` names them, the search's as DecodeConfig's fields)."""
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(ServeSettings)
             if f.name != "decode"}
    return ServeSettings(**given, decode=decode_options(args))


def serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from transduce.serve import ModelSpec, create_app
        from transduce.serve.app import MODELS_VARIABLE, SETTINGS_VARIABLE
        from transduce.serve.metrics import MULTIPROCESS
        from transduce.serve.models import check_specs
        from transduce.serve.workers import Workers
    except ImportError as error:
        raise UserError(f"transduce serve needs {error.name}: pip install 'transduce[serve]'") \
            from None
    from_environment(args.parser, args, ENVIRONMENT)
    if not args.model:
        raise UserError(f"give --model RUN_DIR (or {ENVIRONMENT}MODEL=RUN_DIR,...)")
    check_device_options(args)
    settings = settings_of(args)
    settings.keys()  # readable, before anything is loaded
    specs = [ModelSpec.parse(m) for m in args.model]
    check_port(args.host, args.port)
    serving = dict(host=args.host, port=args.port, log_config=LOG_CONFIG, access_log=False,
                   timeout_graceful_shutdown=None)  # transduce.serve.access logs each request
    if settings.workers == 1:  # loaded as a worker's create_app loads them
        app = create_app(args.model, settings)
    else:  # each worker process builds its app from the environment (create_app's factory)
        check_specs(specs)
        if any("," in m for m in args.model):
            raise UserError("--workers: a --model with a comma in it cannot be passed on to "
                            "the workers; rename or link the run directory")
        os.environ[MODELS_VARIABLE] = ",".join(args.model)
        if not os.environ.get(MULTIPROCESS):  # the workers' metrics, summed by each scrape
            metrics_dir = tempfile.TemporaryDirectory(prefix="transduce-metrics-")
            os.environ[MULTIPROCESS] = metrics_dir.name
        if settings.files_dir is None:  # a file translated by one worker, downloaded from any
            files_dir = tempfile.TemporaryDirectory(prefix="transduce-files-")
            settings = dataclasses.replace(settings, files_dir=Path(files_dir.name))
        os.environ[SETTINGS_VARIABLE] = settings.to_json()
        app = "transduce.serve:create_app"
        # a worker answers its supervisor's pings only once it can: loading the models may
        # hold it longer than uvicorn's 5 s, which killed workers still loading
        serving.update(factory=True, workers=settings.workers,
                       timeout_worker_healthcheck=settings.worker_healthcheck_timeout)
    check_port(args.host, args.port)  # again: loading took a while
    log.info("serving on http://%s:%d (the page at /, the API at /docs)", args.host, args.port)
    # SIGTERM: uvicorn stops accepting, answers every request it holds, then raises the signal
    # again for the handler it found, this one: exit 0, the stop asked for
    signal.signal(signal.SIGTERM, _exit_0)
    if settings.workers > 1:  # uvicorn's supervisor, each worker a socket of its own
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: the workers stopped, as uvicorn's
            Workers(uvicorn.Config(app, **serving)).run()
    else:
        uvicorn.run(app, **serving)
    return 0


def check_port(host: str, port: int) -> None:
    """A UserError naming --host or --port unless the server can listen there (port 0: any)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise UserError(f"--host {host}: not an address of this machine ({error.strerror})"
                        ) from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as error:
            why = ("in use by another program" if error.errno == errno.EADDRINUSE
                   else error.strerror)
            raise UserError(f"--port {port}: cannot listen on {host}:{port}: {why}; pick "
                            "another --port") from None


def _exit_0(signum, frame) -> None:
    raise SystemExit(0)
