"""The timing behind benchmarks/greedy_parts.py and beam_parts.py: functions wrapped to add up
the wall time of their calls, by part of a search loop, and a table of each part's share of a
pass."""

from __future__ import annotations

import collections
import time


class Parts:
    """`timed(owner, name, part)` wraps `owner.name` to count its calls' time as `part`'s;
    `clear()` before a pass, `table(seconds)` after it."""

    def __init__(self) -> None:
        self.seconds: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()

    def timed(self, owner, name: str, part: str) -> None:
        function = getattr(owner, name)

        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[part] += time.perf_counter() - start
                self.calls[part] += 1
        setattr(owner, name, call)

    def clear(self) -> None:
        self.seconds.clear()
        self.calls.clear()

    def table(self, took: float) -> str:
        """The parts, most time first: seconds, share of `took` (a pass), calls, us a call."""
        rows = ["| part | seconds | share | calls | us a call |", "|---|---|---|---|---|"]
        rows += [f"| {part} | {spent:.3f} | {spent / took:.1%} | {self.calls[part]} | "
                 f"{spent / self.calls[part] * 1e6:,.0f} |"
                 for part, spent in self.seconds.most_common()]
        return "\n".join(rows)
