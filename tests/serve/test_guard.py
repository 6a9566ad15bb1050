"""The rate limit: the `limits` library's moving window, per client, in memory here (in Redis,
shared by workers: tests/serve/test_workers.py)."""

import asyncio

import pytest

from transduce.errors import UserError
from transduce.serve.guard import RateLimiter, check_storage, parse_rate


def test_rate_limit_is_a_moving_window_per_client():
    async def run():
        limiter = RateLimiter("2/minute")
        allowed = [await limiter.allow("a") for _ in range(3)]
        other = await limiter.allow("b")  # another client has its own window
        wait = await limiter.retry_after("a")
        return allowed, other, wait, limiter.described()
    allowed, other, wait, described = asyncio.run(run())
    assert allowed == [True, True, False] and other
    assert 55 < wait <= 60
    assert described == "2 per 1 minute"


def test_no_limit_allows_everything():
    async def run():
        limiter = RateLimiter(None)
        return [await limiter.allow("a") for _ in range(1000)], await limiter.retry_after("a")
    allowed, wait = asyncio.run(run())
    assert all(allowed) and wait == 0.0


def test_rates_and_storages_are_checked():
    assert parse_rate(" 5/second").amount == 5
    assert RateLimiter("5 per 2 minutes").described() == "5 per 2 minutes"
    for bad in ("fast", "0/minute", "5/minute;10/hour"):
        with pytest.raises(UserError, match="expected N/minute"):
            parse_rate(bad)
    assert check_storage("redis://127.0.0.1:6379") == "redis://127.0.0.1:6379"
    with pytest.raises(UserError, match="--rate-limit-storage 'mongodb://x': expected memory://"):
        check_storage("mongodb://x")
