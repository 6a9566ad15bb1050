"""Hardware fast paths, kept apart from the paper's modules, and the one switch that picks them.

The model, the loss and the search compute what the paper says with plain PyTorch; where a faster
kernel computes the same thing on some hardware, they call this package instead:

- `linear`: float32 inference products on MKL (PyTorch's own `F.linear`), on oneDNN, or a
  vocabulary's output layer on OpenBLAS, numpy's BLAS (`openblas`); on MKL's path a searched
  model's weights stored transposed, for MKL's plain product (`transposed`);
- `dropout`: a dropout mask drawn four elements per random number on CPU (`Dropout`);
- `attention`: PyTorch's fused scaled-dot-product kernel, where it pays;
- `small_products`: attention's batched products too small for PyTorch's vectorised CPU kernel;
- `loss`: the output projection and the label-smoothed loss (and R-Drop's) fused, a chunk of
  positions at a time, with their gradients written by hand.

Which path runs is chosen at run time, by `use(path)` or by the environment variable
TRANSDUCE_KERNELS (read when this package is imported):

- `auto` (the default; `fast` is the same): the fast kernels, the float32 products on the
  library this CPU runs fastest: oneDNN on an AMD CPU with AVX-512, MKL with the output layer on
  OpenBLAS on an AMD CPU without it, MKL elsewhere (`default_path`, docs/speed.md);
- `mkl`, `onednn` or `openblas`: the fast kernels, the float32 products forced onto that library
  (`openblas`: the output layer, the rest on MKL; all run on any x86-64 CPU; `onednn` needs a
  PyTorch built with it, `openblas` a numpy whose BLAS is OpenBLAS: `available()`);
- `reference`: plain PyTorch everywhere (`F.linear`, `F.dropout`, attention written out, the loss
  from the logits): slower, and the same results up to float rounding and other dropout masks.

The CPU decides only the default: every path runs on every machine, and the tests run the
kernel, model and decoding tests under each (`tests/conftest.py`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Iterator

SWITCH = "TRANSDUCE_KERNELS"
PATHS = ("reference", "mkl", "onednn", "openblas")  # what `path()` can be
CHOICES = ("auto", "fast", *PATHS)  # what the switch accepts


def cpu_info(field: str) -> str:
    """A field of the first CPU in /proc/cpuinfo ("vendor_id": "GenuineIntel", "AuthenticAMD";
    "flags"), or "" if unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.split(":", 1)[0].strip() == field:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


@functools.cache
def available() -> tuple[str, ...]:
    """The paths this installation has: reference and mkl always (mkl: PyTorch's own float32
    product, MKL's on x86), onednn where PyTorch has oneDNN's linear kernel, openblas where
    numpy's BLAS is OpenBLAS."""
    import torch

    from transduce.kernels import openblas

    has = {"onednn": (torch.backends.mkldnn.is_available()
                      and hasattr(torch.ops.mkldnn, "_linear_pointwise")),
           "openblas": openblas.available()}
    return tuple(path for path in PATHS if has.get(path, True))


@functools.cache
def default_path() -> str:
    """The path `auto` means on this machine. MKL runs its AVX2 code on AMD processors; oneDNN
    uses AVX-512 there when the CPU has it, and its linear kernel was faster at every shape of
    the decoder on an AVX-512 EPYC. On an AVX2-only EPYC oneDNN is the slower (packed, no faster
    in whole searches), but OpenBLAS multiplies the output layer 1.2-2.2x as fast as MKL (the
    other layers no faster; greedy search 1.17x); on Intel processors MKL runs its own AVX-512
    code and is as fast or faster (docs/speed.md)."""
    if cpu_info("vendor_id") != "AuthenticAMD":
        return "mkl"
    best = "onednn" if "avx512f" in cpu_info("flags").split() else "openblas"
    return best if best in available() else "mkl"


def resolve(choice: str) -> str:
    """The path a switch value names (`auto`/`fast`: this machine's default); a ValueError for
    a value that is not one, or a path this PyTorch lacks."""
    value = choice.strip().lower() or "auto"
    if value not in CHOICES:
        raise ValueError(f"{SWITCH}={choice!r} is not one of {', '.join(CHOICES)}")
    if value in ("auto", "fast"):
        return default_path()
    if value not in available():
        lacks = {"onednn": "this PyTorch has no oneDNN linear kernel",
                 "openblas": "numpy's BLAS is not OpenBLAS (or threadpoolctl is missing)"}
        raise ValueError(f"{SWITCH}={choice!r}: {lacks[value]}; use one of "
                         f"{', '.join(available())}")
    return value


def _from_environment() -> str:
    try:
        return resolve(os.environ.get(SWITCH, "auto"))
    except ValueError as error:
        warnings.warn(f"{error}; using auto", stacklevel=3)
        return default_path()


_PATH: str | None = None  # resolved on first use: importing this package imports no torch


def path() -> str:
    """The path in use: "reference", "mkl", "onednn" or "openblas"."""
    global _PATH
    if _PATH is None:
        _PATH = _from_environment()
    return _PATH


def fast() -> bool:
    """Whether the fast kernels are on (every path but `reference`)."""
    return path() != "reference"


def use(choice: str) -> str:
    """Switch to a path (any value of `CHOICES`) from now on, in this process; returns it."""
    global _PATH
    _PATH = resolve(choice)
    return _PATH


@contextlib.contextmanager
def using(choice: str) -> Iterator[str]:
    """`use(choice)` for a block, the previous path back after it."""
    before = path()
    try:
        yield use(choice)
    finally:
        use(before)
