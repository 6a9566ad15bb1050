from transduce.serve.guard import RateLimiter


def test_rate_limit_is_a_sliding_window_per_client():
    now = [0.0]
    limiter = RateLimiter(2, 60.0, clock=lambda: now[0])
    assert limiter.allow("a")
    now[0] = 10.0
    assert limiter.allow("a")
    assert not limiter.allow("a")
    assert limiter.allow("b")  # another client has its own window
    now[0] = 30.0
    assert not limiter.allow("a")
    assert limiter.retry_after("a") == 30.0
    now[0] = 60.0  # the first request has left the window, the second not yet
    assert limiter.allow("a") and not limiter.allow("a")


def test_no_limit_allows_everything():
    limiter = RateLimiter(0)
    assert all(limiter.allow("a") for _ in range(1000))
