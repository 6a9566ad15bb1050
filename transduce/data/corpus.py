"""Reading parallel text: two aligned files or one TSV file, plain or gzip-compressed.

Readers stream line by line, so a corpus of any size passes through in bounded memory. Every
problem is an error naming the file (and line), or a skip that is counted and reported.
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path

from transduce.errors import DataError

log = logging.getLogger(__name__)


def open_binary(path: Path):
    """Open a file for reading bytes, decompressing gzip (by its magic number, not its name)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: file is empty")
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def read_lines(path: Path) -> Iterator[str]:
    """The lines of a UTF-8 text file without their line ending; invalid UTF-8 is an error."""
    path = Path(path)
    n = 0
    with open_binary(path) as f:
        for n, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise DataError(f"{path}:{n}: invalid UTF-8 at byte {error.start} of the line "
                                f"({raw[error.start:error.start + 4]!r})") from None
            yield line.rstrip("\r\n")
    if n == 0:
        raise DataError(f"{path}: file is empty")


def count_lines(path: Path) -> int:
    with open_binary(path) as f:
        return sum(1 for _ in f)


@dataclass(frozen=True)
class ParallelFiles:
    """Two aligned files: line N of `tgt` translates line N of `src`."""

    src: Path
    tgt: Path

    def pairs(self) -> Iterator[tuple[str, str]]:
        for s, t in zip_longest(read_lines(self.src), read_lines(self.tgt)):
            if s is None or t is None:
                raise DataError(
                    f"line counts differ: {self.src} has {count_lines(self.src)} lines, "
                    f"{self.tgt} has {count_lines(self.tgt)} (they must be aligned line by line)")
            yield s, t

    @property
    def files(self) -> tuple[Path, ...]:
        return (Path(self.src), Path(self.tgt))

    def __str__(self) -> str:
        return f"{self.src} + {self.tgt}"


@dataclass(frozen=True)
class TsvFile:
    """One file of source<TAB>target lines."""

    path: Path

    def pairs(self) -> Iterator[tuple[str, str]]:
        for n, line in enumerate(read_lines(self.path), start=1):
            fields = line.split("\t")
            if len(fields) != 2:
                raise DataError(f"{self.path}:{n}: expected source<TAB>target, found "
                                f"{len(fields) - 1} tab(s)")
            yield fields[0], fields[1]

    @property
    def files(self) -> tuple[Path, ...]:
        return (Path(self.path),)

    def __str__(self) -> str:
        return str(self.path)


@dataclass
class SkipCounts:
    """What a filter dropped, by reason, and what it kept."""

    kept: int = 0
    empty: int = 0
    too_long: int = 0
    length_ratio: int = 0
    examples: dict[str, int] = field(default_factory=dict)  # reason -> first pair number (1-based)

    @property
    def skipped(self) -> int:
        return self.empty + self.too_long + self.length_ratio

    def count(self, reason: str, numbers: list[int]) -> None:
        """Record skips for `reason` of the pairs `numbers` (1-based, in corpus order)."""
        if numbers:
            setattr(self, reason, getattr(self, reason) + len(numbers))
            self.examples.setdefault(reason, numbers[0])

    def report(self, name: str) -> str:
        total = self.kept + self.skipped
        text = f"{name}: kept {self.kept:,} of {total:,} pairs"
        if self.skipped:
            parts = [f"{getattr(self, r):,} {r.replace('_', ' ')} (first: pair {self.examples[r]})"
                     for r in ("empty", "too_long", "length_ratio") if getattr(self, r)]
            text += "; skipped " + ", ".join(parts)
        return text

    def to_dict(self) -> dict:
        return {"kept": self.kept, "empty": self.empty, "too_long": self.too_long,
                "length_ratio": self.length_ratio, "examples": dict(self.examples)}
