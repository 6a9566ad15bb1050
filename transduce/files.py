"""Writing files so that nothing is half-written and everything is readable as the umask says."""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from transduce.errors import UserError


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@functools.cache
def umask() -> int:
    """The process's file mode creation mask (reading it means setting it, so it is set back:
    read once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def make_public(path: Path) -> None:
    """Give a file or directory made by `tempfile` (private: 0600, 0700) the permissions the
    umask gives any other, so that e.g. a serving account can read checkpoints."""
    mode = 0o777 if Path(path).is_dir() else 0o666
    os.chmod(path, mode & ~umask())


def write_atomically(path: Path, text: str) -> None:
    """Replace the file at `path` with `text` whole: a kill leaves the old or the new one."""
    replace_atomically(path, lambda tmp: tmp.write_text(text))


def replace_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Replace the file at `path` with what `write(tmp)` writes to a temporary file beside it,
    whole: a kill leaves the old file or the new one, never a part."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        write(Path(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        make_public(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    fsync_dir(path.parent)


def check_writable(directory: Path, *, what: str) -> None:
    """Create `directory` (and its parents) if needed and make sure files can be written in it;
    a `UserError` naming it otherwise."""
    directory = Path(directory)
    for parent in (directory, *directory.parents):
        if parent.exists() and not parent.is_dir():
            raise UserError(f"{what} {directory}: cannot write there: {parent} is a file, not a "
                            "directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".transduce-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise UserError(f"{what} {directory}: cannot write there ({error.strerror})") from None


def check_output_file(path: Path, *, what: str, inputs: tuple = ()) -> Path:
    """Make sure `path` can be written before any work goes into what it will hold: its
    directory is created if missing; a directory, an unwritable place, or one of `inputs`
    (which writing would destroy) is a `UserError` naming it."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{what} {path}: is a directory")
    for source in inputs:
        if source and path.exists() and Path(source).exists() and os.path.samefile(path, source):
            raise UserError(f"{what} {path}: is also the input {source}; writing it would "
                            "destroy it")
    check_writable(path.parent, what=what)
    existed = path.exists()
    try:
        open(path, "ab").close()  # neither truncates nor changes what is there
    except OSError as error:
        raise UserError(f"{what} {path}: cannot write it ({error.strerror})") from None
    if not existed:
        path.unlink()
    return path
