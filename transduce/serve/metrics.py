"""The server's metrics in Prometheus' text format (GET /metrics). With several workers
(PROMETHEUS_MULTIPROC_DIR set, as `transduce serve --workers N` does) each worker writes its
values to files there and a scrape, whichever worker answers it, sums them all
(prometheus_client's multiprocess mode, as LibreTranslate uses it): one server, one count."""

from __future__ import annotations

import os
import time
from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

MULTIPROCESS = "PROMETHEUS_MULTIPROC_DIR"
_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_RATE_WINDOW = 60.0  # seconds the per-second gauges average over


def multiprocess() -> bool:
    return bool(os.environ.get(MULTIPROCESS))


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("transduce_requests", "HTTP requests answered",
                                ["endpoint", "status"], registry=r)
        self.errors = Counter("transduce_request_errors", "HTTP requests answered with an error "
                              "(status 400 and above)", ["endpoint", "status"], registry=r)
        self.in_progress = Gauge("transduce_requests_in_progress", "Requests being answered",
                                 registry=r, multiprocess_mode="livesum")
        self.latency = Histogram("transduce_request_seconds", "Time to answer a request",
                                 ["endpoint"], buckets=_LATENCY, registry=r)
        self.batch_sentences = Histogram("transduce_batch_sentences", "Sentences per search "
                                         "batch (continuous batching: per search step)",
                                         ["model"], buckets=_BATCH, registry=r)
        self.search_seconds = Histogram("transduce_batch_seconds", "Time to search one batch "
                                        "(continuous batching: one step)", ["model"],
                                        buckets=_LATENCY, registry=r)
        self.sentences = Counter("transduce_sentences", "Sentences translated", ["model"],
                                 registry=r)
        self.target_tokens = Counter("transduce_target_tokens", "Target tokens produced "
                                     "(<eos> included)", ["model"], registry=r)
        self._recent: deque[tuple[float, int, int]] = deque()  # (time, sentences, tokens)
        self.rates = [Gauge(f"transduce_{what}_per_second", f"{text} per second over the last "
                            f"{_RATE_WINDOW:g} s", registry=r, multiprocess_mode="livesum")
                      for what, text in (("sentences", "Sentences translated"),
                                         ("target_tokens", "Target tokens produced"))]

    def request(self, endpoint: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, str(status)).inc()
        if status >= 400:
            self.errors.labels(endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def batch(self, model: str, sentences: int, target_tokens: int, seconds: float, *,
              searched: int | None = None) -> None:
        """A search (or a step of one) of `searched` sentences (default: `sentences`) in
        `seconds`, which finished `sentences` of `target_tokens` in all."""
        self.batch_sentences.labels(model).observe(sentences if searched is None else searched)
        self.search_seconds.labels(model).observe(seconds)
        self.sentences.labels(model).inc(sentences)
        self.target_tokens.labels(model).inc(target_tokens)
        self._recent.append((time.monotonic(), sentences, target_tokens))
        self.refresh()

    def refresh(self) -> None:
        """The per-second gauges brought up to now (the service does it every second, so that a
        worker that has stopped translating reports 0 within a window)."""
        now = time.monotonic()
        while self._recent and self._recent[0][0] < now - _RATE_WINDOW:
            self._recent.popleft()
        for field, gauge in enumerate(self.rates, start=1):
            gauge.set(sum(entry[field] for entry in self._recent) / _RATE_WINDOW)

    def text(self) -> bytes:
        self.refresh()
        if not multiprocess():
            return generate_latest(self.registry)
        from prometheus_client import multiprocess as mp

        registry = CollectorRegistry()
        mp.MultiProcessCollector(registry)
        return generate_latest(registry)

    @staticmethod
    def leave() -> None:
        """This worker's live gauges no longer count (at its shutdown)."""
        if multiprocess():
            from prometheus_client import multiprocess as mp

            mp.mark_process_dead(os.getpid())
