"""The server's metrics in Prometheus' text format (GET /metrics), on a registry of its own."""

from __future__ import annotations

import time
from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_RATE_WINDOW = 60.0  # seconds the per-second gauges average over


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("transduce_requests", "HTTP requests answered",
                                ["endpoint", "status"], registry=r)
        self.errors = Counter("transduce_request_errors", "HTTP requests answered with an error "
                              "(status 400 and above)", ["endpoint", "status"], registry=r)
        self.in_progress = Gauge("transduce_requests_in_progress", "Requests being answered",
                                 registry=r)
        self.latency = Histogram("transduce_request_seconds", "Time to answer a request",
                                 ["endpoint"], buckets=_LATENCY, registry=r)
        self.batch_sentences = Histogram("transduce_batch_sentences", "Sentences per search "
                                         "batch", ["model"], buckets=_BATCH, registry=r)
        self.search_seconds = Histogram("transduce_batch_seconds", "Time to search one batch",
                                        ["model"], buckets=_LATENCY, registry=r)
        self.sentences = Counter("transduce_sentences", "Sentences translated", ["model"],
                                 registry=r)
        self.target_tokens = Counter("transduce_target_tokens", "Target tokens produced "
                                     "(<eos> included)", ["model"], registry=r)
        self._recent: deque[tuple[float, int, int]] = deque()  # (time, sentences, tokens)
        Gauge("transduce_sentences_per_second", f"Sentences translated per second over the "
              f"last {_RATE_WINDOW:g} s", registry=r).set_function(lambda: self._rate(1))
        Gauge("transduce_target_tokens_per_second", f"Target tokens produced per second over "
              f"the last {_RATE_WINDOW:g} s", registry=r).set_function(lambda: self._rate(2))

    def request(self, endpoint: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, str(status)).inc()
        if status >= 400:
            self.errors.labels(endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def batch(self, model: str, sentences: int, target_tokens: int, seconds: float) -> None:
        self.batch_sentences.labels(model).observe(sentences)
        self.search_seconds.labels(model).observe(seconds)
        self.sentences.labels(model).inc(sentences)
        self.target_tokens.labels(model).inc(target_tokens)
        self._recent.append((time.monotonic(), sentences, target_tokens))

    def _rate(self, field: int) -> float:
        now = time.monotonic()
        while self._recent and self._recent[0][0] < now - _RATE_WINDOW:
            self._recent.popleft()
        return sum(entry[field] for entry in self._recent) / _RATE_WINDOW

    def text(self) -> bytes:
        return generate_latest(self.registry)
