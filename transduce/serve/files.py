"""Translated files waiting for their download (LibreTranslate's /translate_file and
/download_file): each under a name of its own in one directory, which every worker of a server
shares, and removed after RETENTION seconds, as LibreTranslate removes them."""

from __future__ import annotations

import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

RETENTION = 30 * 60.0
_STORED = re.compile(r"[0-9a-f]{32}\.[\w .()\[\]-]{1,200}")  # what `put` names a file


class FileStore:
    """Files in `directory` (None: a temporary one, removed by `close`)."""

    def __init__(self, directory: Path | None = None) -> None:
        self._owned = directory is None
        self.directory = Path(tempfile.mkdtemp(prefix="transduce-files-")) if directory is None \
            else Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def put(self, filename: str, write: Callable[[Path], None]) -> str:
        """Store what `write(path)` writes under a new name for `filename`; returns the name."""
        self.forget_old()
        safe = re.sub(r"[^\w .()\[\]-]", "_", Path(filename).name)[-200:].strip() or "file"
        name = f"{uuid.uuid4().hex}.{safe}"
        partial = self.directory / f".{name}.partial"
        write(partial)
        partial.replace(self.directory / name)  # a download never sees half a file
        return name

    def path(self, name: str) -> Path | None:
        """The stored file `name`, or None: never a path outside the directory."""
        if not _STORED.fullmatch(name) or "/" in name or name.startswith("."):
            return None
        path = self.directory / name
        return path if path.is_file() else None

    @staticmethod
    def download_name(name: str) -> str:
        """The name the file was given: the stored name less its id."""
        return name.split(".", 1)[1]

    def forget_old(self) -> None:
        limit = time.time() - RETENTION
        for path in self.directory.iterdir():
            try:
                if path.stat().st_mtime < limit:
                    path.unlink()
            except OSError:  # another worker took it first
                pass

    def close(self) -> None:
        if self._owned:
            shutil.rmtree(self.directory, ignore_errors=True)
