"""Data-parallel training: one process per GPU (NCCL) or per share of the CPU cores (gloo).

Each process trains on its share of every update's batches, through PyTorch's engines
(transduce.training.parallel: DistributedDataParallel, or FSDP2 with `train.parallel: fsdp`);
the gradients (and the loss) are summed over the processes, so every process takes the same
optimiser step. An update of N processes with `accumulate` k is the update of one process with
`accumulate` N*k: the same batches, the same loss normalised by their target tokens together
(tests/training/test_distributed.py). This module is the processes' place among each other:
ranks, the process group, what they agree on, and `launch` for `transduce train --nproc`.

On one CPU it does not pay: PyTorch already spreads a step over the cores, so one thread does
its half of the forward and backward passes in about the time two threads do the whole, and
summing the gradients adds to each update (docs/training.md, `python
benchmarks/data_parallel.py --from-run RUN`).

`transduce train --nproc N` starts the N processes (through `torch.distributed.run`); `torchrun
--nproc-per-node N -m transduce train ...` does the same, and runs across machines too.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import NoReturn

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    """This process's place among those training together (one process: rank 0 of 1)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0  # among the processes on this machine: which GPU is its own

    @classmethod
    def from_env(cls) -> World:
        """The world `torchrun` describes in RANK, WORLD_SIZE and LOCAL_RANK, else one process."""
        size = int(os.environ.get("WORLD_SIZE", 1))
        if size == 1:
            return cls()
        return cls(int(os.environ["RANK"]), size, int(os.environ.get("LOCAL_RANK", 0)))

    @property
    def main(self) -> bool:
        """The process that validates, logs and writes checkpoints."""
        return self.rank == 0

    def start(self, device: torch.device) -> None:
        """Join the process group (NCCL for GPUs, gloo for CPUs); nothing for one process."""
        if self.size > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                    device_id=device if device.type == "cuda" else None)
            atexit.register(self.close)  # left open, gloo aborts the process as it exits

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier()

    @contextlib.contextmanager
    def main_first(self):
        """The main process runs the block first, the others after it (to reuse its files)."""
        if not self.main:
            self.barrier()
        yield
        if self.main:
            self.barrier()

    def gather(self, obj) -> list:
        """`obj` of every process, in rank order."""
        if self.size == 1:
            return [obj]
        gathered = [None] * self.size
        dist.all_gather_object(gathered, obj)
        return gathered

    def from_main(self, obj):
        """The main process's `obj`, in every process."""
        if self.size == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def close(self) -> None:
        """Leave the process group, on CPUs all together: a process that tears gloo down while
        another still talks to it can abort that one as it exits. A process whose peers have
        already failed waits no more than a few seconds for them."""
        if self.size > 1 and dist.is_initialized():
            if dist.get_backend() == "gloo":
                with contextlib.suppress(RuntimeError):
                    dist.monitored_barrier(timeout=timedelta(seconds=10))
            dist.destroy_process_group()


def exit_if_joined(code: int) -> None | NoReturn:
    """End a process that trained among others with exit status `code`: what Python runs at
    exit (leaving the process group together, flushing the logs), then out, without tearing
    the interpreter down. PyTorch's gloo backend keeps its threads past
    `destroy_process_group` (the engines still hold the group); torn down with the interpreter,
    one that still holds a tensor of Python's can abort the finished process ("terminate called
    without an active exception", exit -6: twice in CI, with FSDP; pytorch#190489, #179291).
    A process that joined no group returns."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    atexit._run_exitfuncs()  # World.close among them
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def launch(nproc: int, argv: list[str]) -> int:
    """Run `python -m transduce ARGV` as `nproc` processes on this machine (torchrun's
    standalone mode); returns the exit status, that of the first process to fail if one did.
    On a CPU each process gets an equal share of the cores as its threads (unless
    OMP_NUM_THREADS or train.threads say otherwise)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (cores or 1) // nproc)))
    args = get_args_parser().parse_args(
        ["--standalone", f"--nproc-per-node={nproc}", "--module", "transduce"])
    args.training_script_args = list(argv)  # not through torchrun's parser, which would take
    #                                         e.g. --nproc as its --nproc-per-node
    try:
        run(args)
    except ChildFailedError as error:
        _, failure = error.get_first_failure()
        return failure.exitcode or 1
    except SignalException as stop:  # Ctrl-C or SIGTERM: the processes have saved and stopped
        return 128 + stop.sigval
    return 0
