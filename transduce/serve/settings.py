"""What a server allows and how it batches: `transduce serve`'s options, as one dataclass."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from transduce.errors import UserError


@dataclass(frozen=True)
class ServeSettings:
    beam_size: int | None = None  # None: each model's own decode.beam_size, as `translate` uses
    max_chars: int = 5000  # characters per request, all its texts together (-1: no limit)
    max_alternatives: int = 3  # LibreTranslate's `alternatives` at most
    max_texts: int = 128  # texts in one request's `q` / `text` list at most (-1: no limit)
    max_batch_tokens: int = 4096  # source tokens searched together, from all waiting requests
    batch_wait_ms: float = 5.0  # how long a batch waits for more requests to join it
    batching: bool = True  # False: one request at a time, as they come
    api_keys: frozenset[str] = frozenset()  # when not empty, every request needs one of them
    rate_limit: int = 0  # requests per client address per rate_window (0: no limit)
    rate_window: float = 60.0  # seconds
    timeout: float = 60.0  # seconds a request may wait for its translation (0: no limit)
    threads: int = 0  # CPU threads for the models, per worker (0: the CPUs / workers)
    workers: int = 1  # server processes, each with its own copy of the models
    device: str = "auto"
    dtype: str = "float32"
    compile: bool = False  # search steps compiled by torch.compile (transduce.decoding.compiled)

    def __post_init__(self) -> None:
        for name in ("max_batch_tokens", "workers"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1")
        for name in ("batch_wait_ms", "timeout", "rate_limit", "threads", "max_alternatives"):
            if getattr(self, name) < 0:
                raise UserError(f"--{name.replace('_', '-')} must not be negative")
        if self.beam_size is not None and self.beam_size < 1:
            raise UserError(f"--beam must be at least 1, got {self.beam_size}")
        for name in ("max_chars", "max_texts"):
            if getattr(self, name) < 1 and getattr(self, name) != -1:
                raise UserError(f"--{name.replace('_', '-')} must be at least 1, or -1 for none")


    def to_json(self) -> str:
        """For the worker processes: `from_json` gives these settings back."""
        fields = dataclasses.asdict(self)
        fields["api_keys"] = sorted(self.api_keys)
        return json.dumps(fields)

    @classmethod
    def from_json(cls, text: str) -> ServeSettings:
        fields = json.loads(text)
        return cls(**{**fields, "api_keys": frozenset(fields.get("api_keys", ()))})

    def threads_per_worker(self) -> int:
        """--threads; else with several workers the CPUs shared among them, else 0 (PyTorch's
        default)."""
        if self.threads or self.workers == 1:
            return self.threads
        return max(1, (os.cpu_count() or 1) // self.workers)


_WINDOWS = {"second": 1.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0}


def parse_rate_limit(text: str) -> tuple[int, float]:
    """"N/minute" (or N/second, N/hour, N/day) -> (N, the window in seconds)."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(second|minute|hour|day)\s*", text)
    if not match or int(match[1]) < 1:
        raise UserError(f"--rate-limit {text!r}: expected N/minute with N >= 1 "
                        "(or N/second, N/hour, N/day)")
    return int(match[1]), _WINDOWS[match[2]]


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
