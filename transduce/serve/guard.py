"""Who may ask, how often: a moving-window rate limit per client (its API key when it gives a
valid one, else its address), counted by the `limits` library in a storage all workers share."""

from __future__ import annotations

import time

from limits import RateLimitItem, parse_many
from limits.aio.strategies import MovingWindowRateLimiter
from limits.storage import storage_from_string

from transduce.errors import UserError

STORAGES = ("memory://", "redis://", "rediss://", "redis+unix://")  # --rate-limit-storage


class RateLimiter:
    """At most `rate` ("N/minute", "N/second", "N/hour", "N/day") requests per client in any
    window of that length. `storage`: "memory://" counts in this process, fine for one worker;
    "redis://HOST:PORT" in a Redis server, shared by every worker (and every machine) using it.
    No rate: every request is allowed."""

    def __init__(self, rate: str | None, storage: str = "memory://") -> None:
        self.item: RateLimitItem | None = parse_rate(rate) if rate else None
        self.uri = check_storage(storage)
        self._limiter: MovingWindowRateLimiter | None = None

    def _strategy(self) -> MovingWindowRateLimiter:
        if self._limiter is None:  # made in the event loop that uses it
            options = {"implementation": "redispy"} if self.uri.startswith("redis") else {}
            self._limiter = MovingWindowRateLimiter(
                storage_from_string("async+" + self.uri, **options))
        return self._limiter

    async def allow(self, client: str) -> bool:
        """Count a request of `client`; False when it is over the limit (and not counted)."""
        if self.item is None:
            return True
        return await self._strategy().hit(self.item, "transduce", client)

    async def retry_after(self, client: str) -> float:
        """Seconds until `client` may ask again."""
        if self.item is None:
            return 0.0
        stats = await self._strategy().get_window_stats(self.item, "transduce", client)
        return max(0.0, stats.reset_time - time.time())

    def described(self) -> str:
        """As LibreTranslate's 429 says it: "5 per 1 minute"."""
        item = self.item
        if item is None:
            return ""
        plural = "s" if item.multiples > 1 else ""
        return f"{item.amount} per {item.multiples} {item.GRANULARITY.name}{plural}"


def parse_rate(text: str) -> RateLimitItem:
    """"N/minute" (or N/second, N/hour, N/day; "N per 5 minutes" also) as the `limits`
    library's item."""
    try:
        items = parse_many(text.strip())
    except ValueError:
        items = []
    item = items[0] if len(items) == 1 else None
    if item is None or item.amount < 1:
        raise UserError(f"--rate-limit {text!r}: expected N/minute with N >= 1 "
                        "(or N/second, N/hour, N/day)")
    return item


def check_storage(uri: str) -> str:
    if not uri.startswith(STORAGES):
        raise UserError(f"--rate-limit-storage {uri!r}: expected memory:// or "
                        "redis://HOST:PORT (rediss://, redis+unix:// also)")
    return uri
