"""Ctrl-C, SIGTERM and the time limit while training, honoured however slow a step is.

A signal (or the `max_time` alarm) between steps asks the loop to stop after the current update.
Inside `abandonable()`, where an update has read its batches and run forward and backward but not
yet changed a weight, it also raises `Abandon`: the loop gives that update up, puts the data
position and random state back as they were before it, and saves, so a run stops within moments
even when one update takes minutes, and resumes as if it had stopped between two updates.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading

log = logging.getLogger("transduce.train")


class Abandon(Exception):
    """Raised inside `Interrupts.abandonable()` when the run must stop at once."""


class Interrupts:
    """While entered, SIGINT and SIGTERM (and SIGALRM after `time_left` seconds) are recorded
    instead of ending the process; a second Ctrl-C aborts at once (KeyboardInterrupt). Outside
    the main thread, where Python cannot take signals, it records nothing."""

    def __init__(self, time_left: float | None = None, *, may_abandon: bool = True) -> None:
        self.time_left = time_left
        self.may_abandon = may_abandon  # False with several processes: all must finish a step
        self.signal: int | None = None
        self.time_up = False
        self._abandonable = False
        self._previous: dict = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is not threading.main_thread():
            return self
        wanted = [signal.SIGINT, signal.SIGTERM]
        if self.time_left is not None:
            wanted.append(signal.SIGALRM)
        self._previous = {s: signal.getsignal(s) for s in wanted}
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        if self.time_left is not None:
            signal.signal(signal.SIGALRM, self._on_alarm)
            signal.setitimer(signal.ITIMER_REAL, max(self.time_left, 1e-3))
        return self

    def __exit__(self, *exc) -> None:
        if signal.SIGALRM in self._previous:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    @contextlib.contextmanager
    def abandonable(self):
        """A stretch of work the run may give up: a signal or the alarm inside raises Abandon."""
        self._abandonable = self.may_abandon
        try:
            yield
        finally:
            self._abandonable = False

    def _on_signal(self, signum, frame) -> None:
        if self.signal is not None:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        self.signal = signum
        log.warning("stopping (signal %d): the checkpoint is written in a moment; press Ctrl-C "
                    "again to abort without it", signum)
        self._abandon()

    def _on_alarm(self, signum, frame) -> None:
        self.time_up = True
        self._abandon()

    def _abandon(self) -> None:
        if self._abandonable:
            self._abandonable = False  # once
            raise Abandon
