"""One process at a time in a run directory.

`train` (new or resumed), `average` and `import` hold an operating-system lock (`fcntl.flock`)
on RUN_DIR/.lock while they write there. The kernel releases it when its holder exits or dies,
so there are no stale locks to remove by hand; a second command gets one line naming the holder
("runs/x is in use by PID 4127 (transduce train, started 09:14)") and never advice to remove a
run that is in use. On systems without flock (Windows) the lock is not taken.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from transduce.errors import UserError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None

NAME = ".lock"


class RunLock:
    """The lock on a run directory (created if missing), taken at once or refused: a UserError
    naming the holder. `release()` (or leaving the `with` block) gives it up."""

    def __init__(self, run_dir: Path, command: str) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._file = open(self.run_dir / NAME, "a+", encoding="utf-8")  # noqa: SIM115 - held
        if fcntl is None:
            return
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(self._file)
            self._file.close()
            raise UserError(f"{self.run_dir} is in use by {holder}; wait for it to finish, or "
                            "stop it (Ctrl-C keeps its work)") from None
        self._file.seek(0)
        self._file.truncate()
        json.dump({"pid": os.getpid(), "command": command, "started": time.time()}, self._file)
        self._file.flush()

    def release(self) -> None:
        if not self._file.closed:
            self._file.close()  # closing the file releases the lock

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def in_use(run_dir: Path) -> str | None:
    """Who holds the lock of `run_dir` ("PID 4127 (transduce train, started 09:14)"), or None
    if nobody does; writes nothing."""
    path = Path(run_dir) / NAME
    if fcntl is None or not path.is_file():
        return None
    try:
        with open(path, encoding="utf-8") as file:
            try:
                fcntl.flock(file, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return _holder(file)
            return None  # closing it releases the shared lock just taken
    except OSError:
        return None


def _holder(file) -> str:
    """"PID 4127 (transduce train, started 09:14)", from what the holder wrote."""
    file.seek(0)
    try:
        written = json.loads(file.read() or "{}")
        started = time.strftime("%H:%M", time.localtime(float(written["started"])))
        return f"PID {int(written['pid'])} ({written['command']}, started {started})"
    except (ValueError, KeyError, TypeError):  # its holder is writing it at this moment
        return "another process"
