"""What a server allows and how it batches: `transduce serve`'s options, as one dataclass."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from transduce.errors import UserError
from transduce.fields import setting

ENVIRONMENT = "TRANSDUCE_SERVE_"  # TRANSDUCE_SERVE_MAX_CHARS=200: --max-chars 200 unless given


@dataclass(frozen=True)
class ServeSettings:
    """`transduce serve`'s options, one field each (transduce.serve_command generates them):
    also read from TRANSDUCE_SERVE_<FIELD> variables."""

    max_chars: int = setting(5000,
        "characters per text at most, as LibreTranslate counts (-1: none)")
    max_texts: int = setting(128, "texts in one request at most (-1: no limit)")
    max_alternatives: int = setting(3, "LibreTranslate's alternatives at most")
    max_batch_tokens: int = setting(4096,
        "source tokens searched together, from all waiting requests")
    max_search_sentences: int = setting(0,
        "with --continuous-batching: sentences searched at once at most, the others waiting "
        "for some to leave (0: as many as --max-batch-tokens allows)")
    batch_wait_ms: float = setting(5.0, "how long a batch waits for more requests to join it "
                                        "(not with --continuous-batching)")
    batching: bool = setting(True, "false (--no-batching): one request at a time, as they come")
    continuous_batching: bool = setting(False,
        "sentences join the search between its steps and leave it when finished, instead of a "
        "search taking the requests that came before it began: the same translations "
        "(benchmarks/serve.md measures both)")
    api_keys: Path | None = setting(None,
        "a file of API keys, one per line: a request giving a key must give one of them, and "
        "is rate-limited by its key instead of its address", metavar="FILE")
    require_api_key: bool = setting(False,
        "every request must give one of the --api-keys (LibreTranslate: a request without one "
        "gets a 400 asking for one)")
    rate_limit: str | None = setting(None,
        "requests per client (its API key, else its address): N/minute (N/second, N/hour, "
        "N/day also)", metavar="N/minute")
    rate_limit_storage: str = setting("memory://",
        "where the rate limit counts: memory:// in each worker, redis://HOST:PORT shared by "
        "all (needed with --workers above 1)", metavar="URI")
    metrics_auth_token: str | None = setting(None,
        "GET /metrics then needs the header 'Authorization: Bearer TOKEN'", metavar="TOKEN")
    files_translation: bool = setting(True,
        "POST /translate_file translates .txt, .html, .docx and .odt files (false, "
        "--no-files-translation: a 403, as LibreTranslate's --disable-files-translation)")
    files_dir: Path | None = setting(None,
        "where translated files wait for their download, 30 minutes (default: a temporary "
        "directory, shared by the workers)", metavar="DIR")
    split_sentences: bool = setting(True,
        "texts are cut into sentences, each translated on its own, and put back with their "
        "own spacing (false, --no-split-sentences: each line whole)")
    timeout: float = setting(60.0, "seconds: a request not translated by then gets a 503 (0: none)")
    max_body_bytes: int = setting(10 * 2**20,
        "a request body larger than this is refused (413) before it is read whole")
    body_timeout: float = setting(30.0,
        "seconds a client has to send its whole request body, else a 408 and it is dropped "
        "(0: no limit)")
    worker_healthcheck_timeout: int = setting(120,
        "seconds a worker may take to answer its supervisor's health check before it is "
        "restarted (with --workers above 1): enough to load the models")
    workers: int = setting(1,
        "server processes, each with its own copy of the models and its own batches; on a CPU, "
        "more workers with fewer threads each keep more cores busy")
    threads: int = setting(0,
        "CPU threads per worker (0: the CPUs shared among the workers; with one worker all CPUs "
        "but one, which is left to HTTP, the event loop and the machine's other work)")
    searches: int = setting(1,
        "searches at once in each worker, each on a thread of its own with an equal share of "
        "its --threads (at least one each), requests going to the least busy: as `transduce "
        "translate --searches` (0: one per thread); on a CPU, searches of one thread each keep "
        "every core busy with one copy of the models")
    device: str = setting("auto", "where the models run: as `transduce translate --device`")
    dtype: str = setting("float32", "what they compute in: as `transduce translate --dtype`")
    compile: bool | None = setting(None,
        "search steps compiled: as `transduce translate --compile` (default: where that pays, "
        "`compiles`)")
    engine: str = setting("transduce",
        "what searches: as `transduce translate --engine` (ctranslate2: batches of requests, "
        "not continuous batching)")
    decode: dict = setting(default_factory=dict, help=(
        "search settings over each model's own decode section (DecodeConfig's fields: "
        "--beam-size, ...; none: the model's)"))

    def __post_init__(self) -> None:
        for name in ("max_batch_tokens", "workers", "max_body_bytes",
                     "worker_healthcheck_timeout"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1")
        for name in ("batch_wait_ms", "timeout", "threads", "max_alternatives", "body_timeout",
                     "max_search_sentences", "searches"):
            if getattr(self, name) < 0:
                raise UserError(f"--{name.replace('_', '-')} must not be negative")
        for name in ("max_chars", "max_texts"):
            if getattr(self, name) < 1 and getattr(self, name) != -1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1, or -1 for none")
        if self.rate_limit is not None or self.rate_limit_storage != "memory://":
            from transduce.serve.guard import check_storage, parse_rate

            if self.rate_limit is not None:
                parse_rate(self.rate_limit)
            check_storage(self.rate_limit_storage)
        if (self.rate_limit and self.workers > 1
                and self.rate_limit_storage.startswith("memory://")):
            raise UserError("--rate-limit with --workers above 1 needs --rate-limit-storage "
                            "redis://HOST:PORT: in memory each worker would count on its own")
        if self.require_api_key and self.api_keys is None:
            raise UserError("--require-api-key needs --api-keys FILE")
        for name in ("api_keys", "files_dir"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, Path(getattr(self, name)))

    def keys(self) -> frozenset[str]:
        """The API keys of --api-keys (none: every request is welcome)."""
        return read_api_keys(self.api_keys) if self.api_keys else frozenset()

    def to_json(self) -> str:
        """For the worker processes: `from_json` gives these settings back."""
        fields = dataclasses.asdict(self)
        for name in ("api_keys", "files_dir"):
            fields[name] = str(fields[name]) if fields[name] else None
        return json.dumps(fields)

    @classmethod
    def from_environment(cls, environ: dict | None = None) -> ServeSettings:
        """The settings of TRANSDUCE_SERVE_<FIELD> variables (TRANSDUCE_SERVE_MAX_CHARS=200,
        TRANSDUCE_SERVE_BEAM_SIZE=4 for the search), as `transduce serve` reads them, for an
        app made by another server (`uvicorn --factory transduce.serve:create_app`); a bad
        value is a UserError naming the variable."""
        import typing

        import yaml

        from transduce.config import _coerce, _describe
        from transduce.decoding.config import DecodeConfig

        environ = os.environ if environ is None else environ
        values: dict = {"decode": {}}
        for kind, target in ((cls, values), (DecodeConfig, values["decode"])):
            for name, hint in typing.get_type_hints(kind).items():
                variable = ENVIRONMENT + name.upper()
                if name == "decode" or variable not in environ:
                    continue
                text = environ[variable]
                base = Path if hint == Path | None else hint
                try:
                    value = text if base in (str, str | None) else yaml.safe_load(text)
                    target[name] = Path(text) if base is Path else _coerce(value, base)
                except (TypeError, ValueError, yaml.YAMLError):
                    raise UserError(f"{variable}={text!r}: expected {_describe(base)}") from None
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> ServeSettings:
        return cls(**json.loads(text))

    def continuous(self) -> bool:
        """Whether sentences join searches between their steps: --continuous-batching, with
        batching and transduce's own search."""
        return self.batching and self.continuous_batching and self.engine == "transduce"

    def compiles(self) -> bool:
        """--compile, --no-compile, or where it pays (transduce.decoding.compiled.pays): with
        transduce's own search on a CPU in float32, or on a GPU but for continuous batching
        there (a GPU's compiled steps replay CUDA graphs, which no sentence can join: refused
        when asked for)."""
        from transduce.decoding.compiled import pays
        from transduce.runtime import resolve_device

        def replayed(device) -> bool:  # continuous batching's steps compiled as CUDA graphs
            return self.continuous() and device.type == "cuda"

        if self.compile is not None:
            if self.compile and replayed(resolve_device(self.device)):
                raise UserError("--continuous-batching on a GPU searches with eager steps "
                                "(compiled ones replay CUDA graphs, which no sentence can "
                                "join): --no-compile")
            return self.compile
        device = resolve_device(self.device)
        return self.engine == "transduce" and not replayed(device) and pays(device, self.dtype)

    def threads_per_worker(self) -> int:
        """--threads; else with several workers the CPUs shared among them; with one, all CPUs
        but one. Its search thread is a worker's only thread with PyTorch's CPU threads
        (`transduce.runtime.in_passing_thread`), so all of them pay on a machine of the
        server's own (on 2 CPUs `--threads 2` answered 1.25x the requests of one thread at 32
        clients), but OpenMP's threads wait for each other at every operation, and when
        another busy process takes a CPU from one of them the search stalls (a request's median
        latency 282 ms with two threads against 118 with one, beside a process multiplying
        matrices on both CPUs: benchmarks/serve.md). One CPU left is the safe default."""
        if self.threads:
            return self.threads
        cpus = os.cpu_count() or 1
        return max(1, cpus - 1) if self.workers == 1 else max(1, cpus // self.workers)

    def search_threads(self, device) -> tuple[int, int]:
        """How many searches at once (--searches, checked for `device`, a torch.device: only
        a CPU takes several) and the PyTorch CPU threads of each (0 for a single search: the
        worker's own)."""
        from transduce.decoding.parallel import check_searches

        searches = check_searches(self.searches or self.threads_per_worker(), device)
        return searches, max(1, self.threads_per_worker() // searches) if searches > 1 else 0


def read_api_keys(path: Path) -> frozenset[str]:
    """One key per line; blank lines and lines starting with # are ignored."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"--api-keys {path}: cannot read it ({e})") from None
    keys = frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))
    if not keys:
        raise UserError(f"--api-keys {path}: no key in it (one per line)")
    return keys
