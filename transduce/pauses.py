"""Named points where a command can be held, so that a test can signal it exactly there.

`TRANSDUCE_PAUSE_AT=validate transduce train ...` stops the first time the run reaches the point
named `validate`, says so on stderr ("transduce: paused at validate") and waits there until a
signal arrives (or `until()` says one has) or two minutes pass, then goes on as if it had been
slow. The tests of interrupts send Ctrl-C or SIGTERM to every phase of `train` this way
(tests/training/test_phases.py); unset, the variable costs one dictionary lookup.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

VARIABLE = "TRANSDUCE_PAUSE_AT"
_passed: set[str] = set()


def pause_point(name: str, until: Callable[[], bool] = lambda: False,
                seconds: float = 120.0) -> None:
    """Hold here, once a process, if TRANSDUCE_PAUSE_AT names this point."""
    if os.environ.get(VARIABLE) != name or name in _passed:
        return
    _passed.add(name)
    print(f"transduce: paused at {name}", file=sys.stderr, flush=True)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not until():
        time.sleep(0.02)
