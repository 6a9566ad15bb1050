"""Who may ask: API keys and a rate limit per client address."""

from __future__ import annotations

import time
from collections import deque


class RateLimiter:
    """At most `limit` requests per client in any `window` seconds (a sliding window)."""

    def __init__(self, limit: int, window: float = 60.0, *, clock=time.monotonic) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._seen: dict[str, deque[float]] = {}

    def allow(self, client: str) -> bool:
        """Count a request of `client`; False when it is over the limit (and not counted)."""
        if self.limit <= 0:
            return True
        now = self._clock()
        times = self._seen.setdefault(client, deque())
        while times and times[0] <= now - self.window:
            times.popleft()
        if len(times) >= self.limit:
            return False
        times.append(now)
        if len(self._seen) > 10_000:  # forget clients with nothing in the window
            self._seen = {c: t for c, t in self._seen.items() if t and t[-1] > now - self.window}
        return True

    def retry_after(self, client: str) -> float:
        """Seconds until `client` may ask again."""
        times = self._seen.get(client)
        if not times:
            return 0.0
        return max(0.0, times[0] + self.window - self._clock())
