"""Several batches searched at once on a CPU, each on a thread of its own with an equal share of
the CPU threads: CTranslate2's `inter_threads` (`Translator.load(..., searches=N)`,
`transduce translate --searches N`).

At a small model's shapes a step's matrix products are too small for two threads to share: the
second mostly waits for the first (in a profile of the compiled greedy search of the trained
Multi30k model, GNU OpenMP's waiting took as many samples as MKL's products). Two searches of
one thread each keep both cores busy with work of their own, as CTranslate2 does with
`inter_threads=2, intra_threads=1`, its fastest setting on two cores (benchmarks/
decode_speed.py, `--searches`; docs/speed.md). The price is latency: each batch takes longer,
so a server, which answers one request's batch at a time, searches one at a time.

PyTorch's CPU operations run on the OpenMP threads of the thread that calls them, as many as
that thread was told (`torch.set_num_threads` sets the calling thread's count, and the count a
thread takes at its first operation). Each search thread here takes its share before its first
operation; the caller's count is set back once they all have theirs. With one thread each (the
default share on a CPU: one search a thread) no search thread has an OpenMP team of its own, so
they cannot crowd the caller's (`transduce.runtime.in_passing_thread` says why that matters).
A compiled search's kernels keep the thread count they were compiled with (Inductor writes it
into their code unless it equals the CPUs): a process compiles on its search threads, with their
share, when it searches compiled with several at once first; and each search calls a copy of
its own of the compiled steps (`enter_search`; transduce.decoding.compiled says why).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import torch

from transduce.decoding import compiled
from transduce.errors import UserError

T = TypeVar("T")

_DONE = object()  # a search thread's last word: no more items for it


def check_searches(searches: int, device: torch.device) -> int:
    """`searches` as a count: 0 is one search per PyTorch CPU thread on a CPU, one elsewhere;
    more than one off the CPU, or fewer than none, is a UserError."""
    if searches < 0:
        raise UserError(f"searches must be 0 (one a CPU thread) or more, got {searches}")
    if device.type != "cpu":
        if searches > 1:
            raise UserError(f"searches {searches}: batches are searched at once on a CPU; a "
                            f"{device.type} device searches one at a time")
        return 1
    return searches or torch.get_num_threads()


def threads_each(searches: int) -> int:
    """The CPU threads of each of `searches` searches at once: the caller's, shared equally
    (at least one each)."""
    return max(1, torch.get_num_threads() // searches)


def take_threads(threads: int) -> None:
    """The calling thread's PyTorch CPU threads, taken now (0: as PyTorch gives a new thread):
    PyTorch takes a thread's count at its first operation (see the module)."""
    if threads:
        torch.set_num_threads(threads)
        torch.get_num_threads()


def enter_search(search: int, threads: int) -> None:
    """What the thread of search `search` (0, 1, ...) of several at once does first: takes its
    CPU threads (`take_threads`) and its own copy of the compiled steps (`compiled.use_copy`:
    Dynamo's guards are not safe to check from two threads at once)."""
    take_threads(threads)
    compiled.use_copy(search)


def at_once(work: Callable[[T, Callable[[object], None]], None], items: Iterable[T],
            searches: int) -> Iterator[object]:
    """`work(item, tell)` for every item, `searches` at a time on threads of their own
    (`threads_each(searches)` CPU threads each): yields, on the caller's thread and as they
    come, what the work passes to `tell`. The first error a work raises is raised here, after
    the other searches have finished the item they were on (no new item is started); if the
    caller stops (an error, Ctrl-C, the iterator closed), the search threads take no new item
    and are left to end the one they are on (daemon threads: they do not hold up the exit)."""
    todo: queue.SimpleQueue = queue.SimpleQueue()
    for item in items:
        todo.put(item)
    told: queue.SimpleQueue = queue.SimpleQueue()
    stop = threading.Event()
    share = threads_each(searches)
    ready = threading.Barrier(searches + 1)

    def run(search: int) -> None:
        enter_search(search, share)
        ready.wait()
        try:
            while not stop.is_set():
                try:
                    item = todo.get_nowait()
                except queue.Empty:
                    break
                work(item, told.put)
        except BaseException as error:  # noqa: BLE001 - raised again on the caller's thread
            stop.set()
            told.put(_Failed(error))
        finally:
            told.put(_DONE)

    caller = torch.get_num_threads()
    threads = [threading.Thread(target=run, args=(n,), name=f"transduce-search-{n}",
                                daemon=True) for n in range(searches)]
    for thread in threads:
        thread.start()
    ready.wait()
    torch.set_num_threads(caller)  # every search thread has its share: the caller's count back
    running, failure = searches, None
    try:
        while running:
            message = told.get()
            if message is _DONE:
                running -= 1
            elif isinstance(message, _Failed):
                failure = failure or message.error
            elif failure is None:
                yield message
    finally:
        stop.set()
    if failure is not None:
        raise failure


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error
