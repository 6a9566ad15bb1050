"""A run's records: `metrics.jsonl` (one JSON object a row) and the same scalars as TensorBoard
event files.

A resumed run continues from a checkpoint, and whatever was recorded after that checkpoint
(before a kill) is about to be recorded again: `Records(run_dir, resume_at=update)` drops those
rows and writes the TensorBoard events anew from the rows kept, so a resumed run's records equal
those of a run that was never interrupted.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from transduce.files import write_atomically

METRICS = "metrics.jsonl"
TENSORBOARD = "tensorboard"


class Records:
    def __init__(self, run_dir: Path, *, resume_at: int | None = None) -> None:
        self.path = Path(run_dir) / METRICS
        kept = read_metrics(self.path, until=resume_at) if resume_at is not None else []
        if resume_at is not None:
            write_atomically(self.path, "".join(json.dumps(r) + "\n" for r in kept))
            shutil.rmtree(Path(run_dir) / TENSORBOARD, ignore_errors=True)
        self._writer = _tensorboard(Path(run_dir) / TENSORBOARD)
        for row in kept:
            self._add_scalars(row)

    def write(self, record: dict, *, split: str) -> None:
        """Append one row (`record` holds "update" and named values) of a split."""
        row = {"split": split, **record}
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
        self._add_scalars(row)

    def _add_scalars(self, row: dict) -> None:
        for key, value in row.items():
            if key not in ("split", "update") and value is not None:
                self._writer.add_scalar(f"{row['split']}/{key}", value, row["update"])

    def close(self) -> None:
        self._writer.close()


def read_metrics(path: Path, *, until: int | None = None) -> list[dict]:
    """The rows of a metrics.jsonl (those up to update `until`, when given); a line cut short by
    a kill is left out."""
    rows = []
    if not Path(path).is_file():
        return rows
    for line in Path(path).read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if until is None or row.get("update", 0) <= until:
            rows.append(row)
    return rows


class NoRecords:
    """What processes other than the main one record: nothing."""

    def write(self, record: dict, *, split: str) -> None:
        pass

    def close(self) -> None:
        pass


class _NoWriter:
    def add_scalar(self, *args, **kwargs) -> None:
        pass

    def close(self) -> None:
        pass


def _tensorboard(directory: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard not installed: metrics.jsonl and train.log still have it all
        return _NoWriter()
    return SummaryWriter(str(directory))
