"""Checkpoints that survive a kill at any instant.

    RUN/checkpoints/update_000500/model.safetensors   the weights (tied ones stored once)
    RUN/checkpoints/update_000500/state.pt            optimiser, schedule, RNG, data position
    RUN/checkpoints/latest, RUN/checkpoints/best      one line: the name of a checkpoint

A checkpoint is written into a temporary directory, its files fsynced, then renamed into place,
so it exists whole or not at all; `latest` and `best` are replaced atomically the same way only
after it exists. Old update checkpoints beyond the last K are removed (never the best one).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from transduce.errors import UserError
from transduce.files import fsync_dir, make_public, write_atomically
from transduce.pauses import pause_point

WEIGHTS = "model.safetensors"
STATE = "state.pt"
AVERAGED = "averaged_from"  # metadata of an averaged checkpoint: the names averaged
LATEST_THEN = "latest_when_averaged"  # ... and the run's latest checkpoint then

log = logging.getLogger(__name__)


def checkpoint_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's tensors with each shared storage (tied embeddings) kept once."""
    seen: set[int] = set()
    state = {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        state[name] = tensor.detach().contiguous().cpu()
    return state


def save_weights(model: torch.nn.Module, path: Path) -> None:
    save_file(model_state(model), str(path))


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a weights file; a missing, truncated or foreign file is a `UserError`
    naming it."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such weights file")
    try:
        return load_file(str(path))
    except Exception as error:  # safetensors raises its own SafetensorError
        raise UserError(f"{path}: damaged, or not a weights file ({_first_line(error)})"
                        ) from None


def read_state(path: Path) -> dict:
    """A checkpoint's training state (optimiser, progress, RNG); damaged is a `UserError`."""
    try:
        state = torch.load(path, weights_only=False)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except Exception as error:  # truncated zip, empty file, foreign pickle
        raise UserError(f"{path}: damaged ({_first_line(error)})") from None
    if not isinstance(state, dict) or "progress" not in state:
        raise UserError(f"{path}: not the state of a transduce checkpoint")
    return state


def _first_line(error: Exception) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def load_weights(model: torch.nn.Module, path: Path,
                 state: dict[str, torch.Tensor] | None = None) -> None:
    """Load weights saved by `save_weights` (read from `path`, unless `state` holds them); a key
    left out must be tied to a loaded one."""
    state = read_weights(path) if state is None else state
    missing, unexpected = model.load_state_dict(state, strict=False)
    params = model.state_dict()
    loaded = {params[k].data_ptr() for k in state if k in params}
    untied = [k for k in missing if params[k].data_ptr() not in loaded]
    if untied or unexpected:
        raise UserError(f"{path}: weights do not fit this model (missing {untied}, "
                        f"unexpected {unexpected})")


def newest_intact(run_dir: Path) -> tuple[Path, dict, dict] | None:
    """The newest update checkpoint whose weights and state both read, with them: (directory,
    weights, state). A damaged one (a truncated file, a disk that filled up) is passed over
    with a warning naming it, so a run resumes from the one before."""
    root = checkpoint_dir(run_dir)
    latest = _pointer(root, "latest")
    names = sorted((p.name for p in root.glob("update_*") if p.is_dir()), reverse=True)
    if latest in names:  # the pointer first: it names the last checkpoint written whole
        names.remove(latest)
        names.insert(0, latest)
    for name in names:
        try:
            return (root / name, read_weights(root / name / WEIGHTS),
                    read_state(root / name / STATE))
        except UserError as error:
            log.warning("%s; trying the checkpoint before it", error)
    return None


def save_checkpoint(run_dir: Path, name: str, model: torch.nn.Module, state: dict, *,
                    best: bool = False, keep: int = 3) -> Path:
    """Write checkpoint `name` atomically, point `latest` (and `best`) at it, prune old ones."""
    root = checkpoint_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / name
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}."))
    make_public(tmp)
    try:
        save_weights(model, tmp / WEIGHTS)
        torch.save(state, tmp / STATE)
        for file in (WEIGHTS, STATE):
            make_public(tmp / file)  # safetensors writes 0600
            with open(tmp / file, "rb") as f:
                os.fsync(f.fileno())
        fsync_dir(tmp)
        replace_dir(tmp, final)  # the same update saved again (after a resume): replaced
        fsync_dir(root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_atomically(root / "latest", name + "\n")
    if best:
        write_atomically(root / "best", name + "\n")
    _prune(root, keep)
    return final


def _pointer(root: Path, which: str) -> str | None:
    path = root / which
    if not path.is_file():
        return None
    name = path.read_text().strip()
    return name if (root / name / WEIGHTS).is_file() else None


def _prune(root: Path, keep: int) -> None:
    protected = {_pointer(root, "best"), _pointer(root, "latest")}
    updates = sorted(p.name for p in root.glob("update_*") if p.is_dir())
    for name in updates[:-keep]:
        if name not in protected:
            shutil.rmtree(root / name, ignore_errors=True)
    for stale in root.glob(".update_*"):  # a checkpoint whose writing was killed
        shutil.rmtree(stale, ignore_errors=True)


def latest_checkpoint(run_dir: Path) -> Path | None:
    root = checkpoint_dir(run_dir)
    name = _pointer(root, "latest")
    return root / name if name else None


def update_checkpoints(run_dir: Path, until: int | None = None) -> list[Path]:
    """The kept update checkpoints, oldest first; with `until`, those at or before it."""
    root = checkpoint_dir(run_dir)
    return sorted(p for p in root.glob("update_*") if (p / WEIGHTS).is_file()
                  and (until is None or int(p.name.removeprefix("update_")) <= until))


def model_checkpoint(run_dir: Path) -> Path:
    """The weights a run directory stands for: averaged if present, else best, else latest."""
    root = checkpoint_dir(run_dir)
    if (root / "averaged" / WEIGHTS).is_file():
        return root / "averaged" / WEIGHTS
    for which in ("best", "latest"):
        name = _pointer(root, which)
        if name:
            return root / name / WEIGHTS
    raise UserError(f"{run_dir}: no checkpoint here (is it a run directory of transduce train?)")


def describe(run_dir: Path, weights: Path) -> str:
    """Which checkpoint of a run `weights` is, in words."""
    weights = Path(weights)
    names = averaged_from(weights)
    return f"checkpoint {weights.parent.name} ({weights}" + (
        f": the mean of {names[0]} .. {names[-1]}, {len(names)} checkpoints)" if names else ")")


def stale_average(run_dir: Path, weights: Path) -> str | None:
    """A warning when `weights` is the run's average and the run has trained on since
    `transduce average` made it."""
    latest = latest_checkpoint(run_dir)
    if latest is None or not _is_averaged(run_dir, weights):
        return None
    names = averaged_from(weights)
    then = _metadata(weights).get(LATEST_THEN)  # older averages: judged by what they hold
    if (latest.name == then if then is not None else
            names[-1:] >= [latest.name] or (not names and latest.stat().st_mtime <=
                                            Path(weights).stat().st_mtime)):
        return None
    return (f"{run_dir}: its averaged checkpoint is older than its latest, {latest.name} (it "
            f"trained on after `transduce average`): average again, or pass --checkpoint latest")


def _is_averaged(run_dir: Path, weights: Path) -> bool:
    return Path(weights).parent.resolve() == (checkpoint_dir(run_dir) / "averaged").resolve()


def averaged_from(weights: Path) -> list[str]:
    """The checkpoints an averaged weights file is the mean of (empty if not recorded)."""
    return sorted(n for n in _metadata(weights).get(AVERAGED, "").split(",") if n)


def _metadata(weights: Path) -> dict[str, str]:
    try:
        with safe_open(str(weights), framework="pt") as f:
            return f.metadata() or {}
    except Exception:  # damaged, or not there: reading the weights will say so
        return {}


def named_checkpoint(run_dir: Path, name: str) -> Path:
    """The weights of checkpoint `name` of a run ("averaged", "best", "latest",
    "update_0007000", ...), or of `name` itself when it is a checkpoint directory or file."""
    path = Path(name)
    if (path / WEIGHTS).is_file():
        return path / WEIGHTS
    if path.is_file():
        return path
    root = checkpoint_dir(run_dir)
    target = root / ((_pointer(root, name) if name in ("best", "latest") else None) or name)
    if (target / WEIGHTS).is_file():
        return target / WEIGHTS
    kept = sorted(p.name for p in root.glob("*") if (p / WEIGHTS).is_file())
    raise UserError(f"{run_dir}: no checkpoint {name!r} (kept: {', '.join(kept) or 'none'}, "
                    f"and best, latest)")


def average_checkpoints(paths: list[Path], out_dir: Path) -> Path:
    """The element-wise mean of several checkpoints' weights, written atomically to out_dir."""
    if not paths:
        raise UserError("no checkpoints to average")
    total = None
    for path in paths:
        state = load_file(str(Path(path) / WEIGHTS))
        if total is None:
            total = {k: v.double() for k, v in state.items()}
        else:
            if state.keys() != total.keys():
                raise UserError(f"{path}: its weights do not match {paths[0]}")
            for k, v in state.items():
                total[k] += v.double()
    dtypes = {k: v.dtype for k, v in load_file(str(Path(paths[0]) / WEIGHTS)).items()}
    averaged = {k: (v / len(paths)).to(dtypes[k]) for k, v in total.items()}
    out_dir = Path(out_dir)
    metadata = {AVERAGED: ",".join(Path(p).name for p in paths)}
    latest = _pointer(out_dir.parent, "latest")
    if latest is not None:  # its run's, when written into one: stale once the run trains on
        metadata[LATEST_THEN] = latest
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    try:  # interrupted, it leaves the previous average as it was, and no temporary files
        make_public(tmp)
        save_file(averaged, str(tmp / WEIGHTS), metadata=metadata)
        make_public(tmp / WEIGHTS)
        pause_point("average")
        replace_dir(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def replace_dir(new: Path, final: Path) -> None:
    """Put directory `new` in the place of `final`, which may exist: at every moment one of
    them is there under its name (a crash between the two renames leaves the old one hidden
    beside it, `.NAME.old.*`, never a half-written one)."""
    if not final.exists():
        os.replace(new, final)
        return
    old = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.old."))
    os.replace(final, old / final.name)
    os.replace(new, final)
    shutil.rmtree(old, ignore_errors=True)
