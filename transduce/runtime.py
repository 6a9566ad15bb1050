"""Process-wide memory settings that make CPU work faster, the thread that loads a server's
models (`in_passing_thread`), and what the hardware computes natively.

Training and decoding allocate and free the same large tensors (logits, activations, key/value
buffers) every step. Left to their defaults, the kernel takes that memory back when it is freed
and faults it in again, page by page, at the next step. `tune()` applies the two settings below;
importing transduce does not, since they change the whole process. The `transduce` command,
`transduce.train`, `transduce.resume` and `Translator.load` call it; a program with its own loop
calls it once at its start, before its first tensor (PyTorch reads the huge-page setting at its
first allocation). Both leave a user's own choice alone: set the variable yourself to override.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import threading

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD_MAX = 32 << 20  # the largest glibc accepts on 64-bit systems
_TRIM_THRESHOLD = 1 << 30


def tune() -> None:
    """Huge pages for large CPU tensors and freed memory kept for reuse (see above); calling it
    again does nothing more."""
    use_huge_pages()
    _keep_freed_memory_once()


@functools.cache
def _keep_freed_memory_once() -> bool:
    return keep_freed_memory()


def use_huge_pages() -> None:
    """Back PyTorch's large CPU tensors with transparent huge pages: a fraction of the page
    faults (a faster training step: docs/speed.md). PyTorch reads
    THP_MEM_ALLOC_ENABLE at its first CPU allocation: after it, this changes nothing."""
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed memory for reuse instead of returning it to the kernel:
    blocks up to 32 MiB come from the heap rather than from a fresh mapping each, and the heap is
    trimmed only past 1 GiB free. Search then takes no page faults for its per-step tensors, and
    runs faster (docs/speed.md). The price: a process stays at its peak memory. Skipped where the
    allocator is not glibc's or MALLOC_TRIM_THRESHOLD_ / MALLOC_MMAP_THRESHOLD_ are set; returns
    whether it applied."""
    if os.environ.keys() & {"MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"}:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
    except (OSError, TypeError):
        return False
    if not hasattr(libc, "gnu_get_libc_version"):  # not glibc: musl, macOS, Windows
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
                and libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))


def in_passing_thread(work, /, *args, **kwargs):
    """`work(*args, **kwargs)` on a thread of its own that ends with it (its result returned,
    its exception raised here): for PyTorch work before a long-lived thread takes over all of
    it (a server's loading and warming before its search thread). PyTorch's CPU operations run
    on the OpenMP threads of the thread that calls them, and GNU OpenMP keeps a thread's team for
    as long as that thread lives; once two threads' teams together hold more threads than there
    are CPUs, every team's idle threads stop spinning and sleep at once, and each parallel
    operation then waits for them to wake. A server that loaded its model on the main thread
    and searched on another ran its search 1.5-2x slower with two threads than the same search
    on the main thread (benchmarks/serve.md, "One thread with PyTorch's CPU threads").
    A passing thread's team ends with it."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["result"] = work(*args, **kwargs)
        except BaseException as error:  # noqa: BLE001 - raised again on the caller's thread
            outcome["error"] = error

    # a daemon thread, not an executor's: Ctrl-C while it loads ends the process at once, where
    # an executor's thread is waited for at exit
    thread = threading.Thread(target=run, name="transduce-load", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def native_bf16(device) -> bool:
    """Whether `device` (a torch.device) multiplies bf16 matrices in hardware: a GPU that supports
    bf16, or a CPU with AVX512-BF16 or AMX. Elsewhere PyTorch emulates bf16, so bf16 is slower
    than fp32, not faster: many times slower for training and search (docs/speed.md)."""
    import torch  # here, not above: tune() needs nothing of torch

    if device.type == "cuda":
        return torch.cuda.is_bf16_supported(including_emulation=False)
    if device.type == "cpu":
        return any(getattr(torch.cpu, probe, lambda: False)()
                   for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))
    return False


def resolve_device(name: str, *, setting: str = "--device"):
    """A device name as a torch.device: "auto" (a GPU when there is one, else the CPU), "cpu",
    "cuda", "cuda:1", "mps", ...; a name PyTorch does not know, or a device this machine lacks,
    is a `UserError` naming `setting`."""
    import torch

    from transduce.errors import UserError

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise UserError(f"{setting}: {name!r} is not a device; use auto, cpu, cuda or cuda:N"
                        ) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            why = ("this PyTorch is built without CUDA" if not torch.backends.cuda.is_built()
                   else "no GPU is visible")
            raise UserError(f"{setting}: {name}, but {why}; use cpu or auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(f"{setting}: {name}, but this machine has {torch.cuda.device_count()} "
                            f"GPU(s), numbered from 0")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"{setting}: {name}, but MPS is not available here; use cpu or auto")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"{setting}: {name}, but transduce runs on cpu, cuda or mps")
    return device
