"""Claiming a directory for a new run without damaging what is there.

A new run starts only in a directory that does not exist or is empty: a directory holding a run
(or anything else) is refused before a byte is written into it, and a new run that fails before
its first checkpoint takes away what it made, so a refused or failed `transduce train` leaves the
file system as it found it. The claim holds the directory's lock (`transduce.runs.lock`): two
commands never claim one directory.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

from transduce.errors import UserError
from transduce.files import check_writable
from transduce.runs import checkpoint as ckpt
from transduce.runs.lock import NAME as LOCK_NAME
from transduce.runs.lock import RunLock, in_use

log = logging.getLogger(__name__)


def holds_run(path: Path) -> bool:
    """Whether `path` is a run directory with at least one checkpoint (one to resume)."""
    return any(ckpt.update_checkpoints(path)) or ckpt.latest_checkpoint(path) is not None


def entries(path: Path) -> list[Path]:
    """What a directory holds, its lock file aside (none if it is not a directory)."""
    path = Path(path)
    return [c for c in path.iterdir() if c.name != LOCK_NAME] if path.is_dir() else []


def refuse_unless_free(path: Path, *, what: str = "--run-dir") -> None:
    """A `UserError` unless a new run may start in `path` (absent or empty); reads, never
    writes."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{what} {path}: is a file, not a directory")
    if not entries(path):
        return
    if holds_run(path):
        raise UserError(f"{what} {path} already holds a run; continue it with `transduce train "
                        f"--resume {path}`, or pick another {what}")
    if (path / "config.yaml").is_file() or (path / "tokenizer.json").is_file():
        raise UserError(f"{what} {path} holds a run that wrote no checkpoint (no process is "
                        f"using it: killed early? its train.log may say); remove it or pick "
                        f"another {what}")
    raise UserError(f"{what} {path} is not empty and not a run directory; pick another {what}")


class NewRun:
    """A directory claimed for a new run: `NewRun(path)` refuses (one `UserError`, nothing
    written) unless the run may start there; `discard()` takes away what the run made when it
    failed before writing a checkpoint."""

    def __init__(self, path: Path, *, what: str = "--run-dir", command: str = "transduce train",
                 refuse: Callable[..., None] = refuse_unless_free) -> None:
        """`refuse(path, what=what)` raises a `UserError` unless the directory may be claimed
        (by default: unless it is absent or empty); it runs before a byte is written, and again
        once the lock is held, since another command may have begun meanwhile."""
        self.path = Path(path)
        holder = in_use(self.path)
        if holder:
            raise UserError(f"{what} {self.path} is in use by {holder}")
        refuse(self.path, what=what)
        self.created = not self.path.exists()
        check_writable(self.path, what=what)
        self._had_lock_file = (self.path / LOCK_NAME).exists()
        self.lock = RunLock(self.path, command)  # of two commands at once, one stops here
        try:
            refuse(self.path, what=what)
        except BaseException:
            self.give_up()
            raise

    def give_up(self) -> None:
        """Release the directory, taking away the lock file if this claim made it (and the
        directory if it made that)."""
        self.lock.release()
        if self.created:
            shutil.rmtree(self.path, ignore_errors=True)
        elif not self._had_lock_file:
            (self.path / LOCK_NAME).unlink(missing_ok=True)

    def discard(self) -> None:
        """Remove what this run wrote, unless it got as far as a checkpoint (then it can be
        resumed, and stays)."""
        if holds_run(self.path):
            return
        _close_logs_under(self.path)
        self.lock.release()
        if self.created:
            shutil.rmtree(self.path, ignore_errors=True)
            return
        for child in self.path.iterdir():  # it was empty: empty it again
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)


def _close_logs_under(path: Path) -> None:
    root = logging.getLogger("transduce")
    for handler in list(root.handlers):
        name = getattr(handler, "baseFilename", None)
        if name and Path(name).resolve().is_relative_to(path.resolve()):
            root.removeHandler(handler)
            handler.close()
