"""`transduce serve`: its options, and the server started with uvicorn."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import socket
from pathlib import Path

from transduce.errors import UserError
from transduce.translate_command import add_device_options, at_least, check_device_options

log = logging.getLogger("transduce.serve")


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", action="append", required=True, metavar="RUN_DIR",
                        help="a run directory to serve, named by its data.src_lang and "
                             "data.tgt_lang (or SRC:TGT=RUN_DIR); repeat for more pairs")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    parser.add_argument("--port", type=at_least(0), default=5000,
                        help="port to listen on (default 5000, LibreTranslate's)")
    parser.add_argument("--beam", type=at_least(1), metavar="K",
                        help="the beam size of every search (default: each model's own, as "
                             "`transduce translate` uses it)")
    parser.add_argument("--max-chars", type=int, default=5000, metavar="N",
                        help="characters per request at most, all its texts together "
                             "(default 5000; -1: no limit)")
    parser.add_argument("--max-texts", type=int, default=128, metavar="N",
                        help="texts in one request at most (default 128; -1: no limit)")
    parser.add_argument("--max-alternatives", type=at_least(0), default=3, metavar="N",
                        help="LibreTranslate's alternatives at most (default 3)")
    parser.add_argument("--max-batch-tokens", type=at_least(1), default=4096, metavar="N",
                        help="source tokens searched together, from all waiting requests "
                             "(default 4096)")
    parser.add_argument("--batch-wait-ms", type=at_least(0.0, float), default=5.0, metavar="MS",
                        help="how long a batch waits for more requests to join (default 5)")
    parser.add_argument("--no-batching", action="store_true",
                        help="serve one request at a time, as they come (for comparison)")
    parser.add_argument("--api-keys", type=Path, metavar="FILE",
                        help="a file of API keys, one per line: then every request needs one")
    parser.add_argument("--rate-limit", metavar="N/minute",
                        help="requests per client address (N/second, N/hour, N/day also)")
    parser.add_argument("--timeout", type=at_least(0.0, float), default=60.0, metavar="SECONDS",
                        help="a request not translated by then gets a 503 (default 60; 0: none)")
    parser.add_argument("--workers", type=at_least(1), default=1,
                        help="server processes, each with its own copy of the models and its "
                             "own batches (default 1); on a CPU, more workers with fewer "
                             "threads each keep more cores busy")
    parser.add_argument("--threads", type=at_least(0), default=0,
                        help="CPU threads per worker (default: the CPUs shared among the "
                             "workers; with one worker PyTorch's default)")
    add_device_options(parser)

def serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from transduce.serve import ModelSpec, ServeSettings, create_app, load_models
        from transduce.serve.app import MODELS_VARIABLE, SETTINGS_VARIABLE
        from transduce.serve.models import check_specs
        from transduce.serve.settings import parse_rate_limit, read_api_keys
    except ImportError as error:
        raise UserError(f"transduce serve needs {error.name}: pip install 'transduce[serve]'") \
            from None
    check_device_options(args)
    limit, window = parse_rate_limit(args.rate_limit) if args.rate_limit else (0, 60.0)
    settings = ServeSettings(
        beam_size=args.beam, max_chars=args.max_chars, max_texts=args.max_texts,
        max_alternatives=args.max_alternatives, max_batch_tokens=args.max_batch_tokens,
        batch_wait_ms=args.batch_wait_ms, batching=not args.no_batching,
        api_keys=read_api_keys(args.api_keys) if args.api_keys else frozenset(),
        rate_limit=limit, rate_window=window, timeout=args.timeout, threads=args.threads,
        workers=args.workers, device=args.device, dtype=args.dtype, compile=args.compile)
    specs = [ModelSpec.parse(m) for m in args.model]
    check_port(args.host, args.port)
    serving = dict(host=args.host, port=args.port, log_level="info",
                   timeout_graceful_shutdown=None)
    if settings.workers == 1:
        app = create_app(load_models(specs, device=args.device, dtype=args.dtype,
                                     compile=args.compile), settings)
    else:  # each worker process builds its app from the environment (create_app's factory)
        check_specs(specs)
        if any("," in m for m in args.model):
            raise UserError("--workers: a --model with a comma in it cannot be passed on to "
                            "the workers; rename or link the run directory")
        os.environ[MODELS_VARIABLE] = ",".join(args.model)
        os.environ[SETTINGS_VARIABLE] = settings.to_json()
        app = "transduce.serve:create_app"
        serving.update(factory=True, workers=settings.workers)
    check_port(args.host, args.port)  # again: loading took a while
    log.info("serving on http://%s:%d (the page at /, the API at /docs)", args.host, args.port)
    # SIGTERM: uvicorn stops accepting, answers every request it holds, then raises the signal
    # again for the handler it found, this one: exit 0, the stop asked for
    signal.signal(signal.SIGTERM, _exit_0)
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
