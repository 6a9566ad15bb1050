"""Data-parallel training (`transduce train --nproc N`): two one-thread processes, on gloo."""

import inspect
import os
import subprocess
import sys

import pytest
import torch

from tests.training.test_trainer import FAST, _config, _weights
from transduce.runs import checkpoint as ckpt
from transduce.training.start import resume_run, start_run

pytestmark = pytest.mark.slow  # trains in several processes


def _train(*args, expect=0):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    done = subprocess.run([sys.executable, "-m", "transduce", "train", "--nproc", "2", *args],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == expect, done.stderr[-3000:]
    return done


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_processes_take_the_update_of_one_accumulating_two_batches(tmp_path, parallel):
    """Same batches, same loss normalisation: the same weights, to the bit (a + b is b + a;
    clipping off, as FSDP sums the squares of the gradients' norm shard by shard)."""
    extra = ["model.dropout=0.0", "train.max_updates=6", "train.clip_norm=0"]
    _train(*FAST, *extra, f"train.parallel={parallel}", "--run-dir", str(tmp_path / "two"))
    one = start_run(_config(*extra, "train.accumulate=2", "train.threads=1"), tmp_path / "one")
    one.train()
    a, b = _weights(tmp_path / "two"), _weights(tmp_path / "one")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    initial = start_run(_config(*extra), tmp_path / "untrained").model.state_dict()
    assert all(not torch.equal(a[k], initial[k]) for k in a)  # each parameter was trained
    log = (tmp_path / "two" / "train.log").read_text()
    engine = {"ddp": "DistributedDataParallel", "fsdp": "FSDP, weights sharded"}[parallel]
    assert f"data parallel: 2 processes on cpu, 2 batches of 600 tokens each per update " \
        f"({engine})" in log
    state = torch.load(ckpt.latest_checkpoint(tmp_path / "two") / ckpt.STATE,
                       weights_only=False)
    assert state["progress"]["tokens"] == one.progress.tokens  # the same batches
    mine = torch.load(ckpt.latest_checkpoint(tmp_path / "one") / ckpt.STATE, weights_only=False)
    _assert_same_optimizer_state(state["optimizer"], mine["optimizer"])


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_accumulating_in_each_process_is_accumulating_in_one(tmp_path, parallel):
    """2 processes x 2 batches = 1 x 4, to float tolerance only: each process sums its own two
    batches' gradients before the processes' sums are added, another order of summation."""
    extra = ["model.dropout=0.0", "train.max_updates=4"]
    _train(*FAST, *extra, "train.accumulate=2", f"train.parallel={parallel}", "--run-dir",
           str(tmp_path / "two"))
    start_run(_config(*extra, "train.accumulate=4", "train.threads=1"), tmp_path / "one").train()
    a, b = _weights(tmp_path / "two"), _weights(tmp_path / "one")
    for key in a:
        if key.endswith("in_proj.bias"):  # the keys' bias has a zero gradient (softmax does
            # not see a constant added to every score): rounding noise, which Adam turns into
            # whole steps of the learning rate, each way: at most twice the 4 updates' rates
            keys = slice(32, 64)  # model.d_model=32
            steps = sum(0.003 * update / 10 for update in range(1, 5))  # lr 0.003, warmup 10
            torch.testing.assert_close(a[key][keys], b[key][keys], rtol=0, atol=2 * steps)
            a[key][keys] = b[key][keys]
        torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5, msg=key)


def _assert_same_optimizer_state(a: dict, b: dict) -> None:
    assert a["param_groups"] == b["param_groups"]
    assert a["state"].keys() == b["state"].keys()
    for index, state in a["state"].items():
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(b["state"][index][name]))


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_a_two_process_run_resumes_to_the_bit(tmp_path, parallel):
    """Dropout on: each process's random state is in the checkpoint, and comes back."""
    engine = f"train.parallel={parallel}"
    _train(*FAST, engine, "train.max_updates=8", "--run-dir", str(tmp_path / "a"))
    _train(*FAST, engine, "train.max_updates=4", "--run-dir", str(tmp_path / "b"))
    _train("--resume", str(tmp_path / "b"), "train.max_updates=8")
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    for key in a:
        assert torch.equal(a[key], b[key]), key
    state = torch.load(ckpt.latest_checkpoint(tmp_path / "b") / ckpt.STATE, weights_only=False)
    assert len(state["rng"]["processes"]) == 1  # rank 1's, beside rank 0's
    assert not torch.equal(state["rng"]["torch"], state["rng"]["processes"][0]["torch"])


def test_checkpoints_of_fsdp_and_ddp_are_one_layout(tmp_path):
    """A sharded run's checkpoint is written whole: DDP continues it exactly as FSDP does,
    and one process continues it too."""
    extra = ["model.dropout=0.0", "train.clip_norm=0"]
    _train(*FAST, *extra, "train.parallel=fsdp", "train.max_updates=6", "--run-dir",
           str(tmp_path / "fsdp"))
    _train(*FAST, *extra, "train.parallel=fsdp", "train.max_updates=3", "--run-dir",
           str(tmp_path / "mixed"))
    _train("--resume", str(tmp_path / "mixed"), "train.max_updates=6", "train.parallel=ddp")
    a, b = _weights(tmp_path / "fsdp"), _weights(tmp_path / "mixed")
    for key in a:
        assert torch.equal(a[key], b[key]), key
    alone = resume_run(tmp_path / "mixed", ["train.max_updates=7", "train.threads=1"])
    alone.train()
    assert alone.progress.update == 7


def test_nproc_under_torchrun_is_refused(monkeypatch, capsys):
    from transduce.cli import main

    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["train", "--nproc", "2", *FAST]) == 2
    assert "under torchrun leave it out" in capsys.readouterr().err


def test_nproc_below_one_is_refused(capsys):
    from transduce.cli import main

    assert main(["train", "--nproc", "0", *FAST]) == 2
    assert "--nproc must be at least 1, got 0" in capsys.readouterr().err


def test_the_relaunched_command_is_the_given_one_without_nproc():
    from transduce.cli import _without_nproc

    for nproc in (["--nproc", "2"], ["--nproc=2"], ["--npr", "2"], ["--np=2"]):
        argv = ["train", "c.yaml", *nproc, "--run-dir", "r", "train.lr=0.1", "--nothing"]
        assert _without_nproc(argv) == ["train", "c.yaml", "--run-dir", "r", "train.lr=0.1",
                                        "--nothing"]


def test_two_machines_by_torchrun_train_as_two_processes_on_one(tmp_path):
    """`torchrun --nnodes 2 --rdzv-backend c10d`, two "machines" on 127.0.0.1 sharing the run
    directory (as on a cluster's shared filesystem), one process each: the same weights, to
    the bit, as `--nproc 2` on one machine."""
    import socket

    extra = [*FAST, "train.max_updates=4"]
    _train(*extra, "--run-dir", str(tmp_path / "one"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    machines = [subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
         "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "t",
         "--module", "transduce", "train", *extra, "--run-dir", str(tmp_path / "two")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)]
    for machine in machines:
        output, _ = machine.communicate(timeout=300)
        assert machine.returncode == 0, output[-3000:]
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert "data parallel: 2 processes on cpu" in (tmp_path / "two" / "train.log").read_text()


def test_buffers_are_not_synced_under_either_name_of_the_argument():
    """PyTorch 2.13 calls it forward_sync_buffers; 2.11 (a GPU machine's) only broadcast_buffers
    and refused the new name: the argument given is the one this PyTorch's engine takes."""
    from transduce.training.parallel import no_buffer_sync

    class Before213:
        def __init__(self, module, broadcast_buffers=True):
            pass

    class From213:
        def __init__(self, module, broadcast_buffers=None, forward_sync_buffers=None):
            pass

    assert no_buffer_sync(Before213) == {"broadcast_buffers": False}
    assert no_buffer_sync(From213) == {"forward_sync_buffers": False}
    engine = torch.nn.parallel.DistributedDataParallel
    [name] = no_buffer_sync(engine)
    assert name in inspect.signature(engine.__init__).parameters


def test_a_process_of_several_runs_its_exit_functions_and_skips_the_teardown(tmp_path):
    """gloo's threads outlive the process group; torn down with the interpreter they can abort
    a finished process. One that joined a group leaves it, flushes what it printed, and exits
    with its status before the interpreter's teardown (no finalizer runs); one that did not
    returns."""
    script = f"""
import atexit
import torch.distributed as dist
from transduce.training.distributed import World, exit_if_joined

class Held:
    def __del__(self):  # at the interpreter's teardown
        print("torn down")

exit_if_joined(5)  # no group yet: returns
held = Held()
dist.init_process_group("gloo", init_method="file://{tmp_path / 'store'}", rank=0, world_size=1)
atexit.register(lambda: print("left the group:", not dist.is_initialized()))
atexit.register(World(0, 2).close)  # runs first
print("trained", end="")  # in the buffer still
exit_if_joined(3)
print("not reached")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 3, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["trainedleft the group: True"]
