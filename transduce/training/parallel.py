"""How the processes training together share the work: PyTorch's own engines.

- `Local`: one process; the objective as it is.
- `DataParallel` (`train.parallel: ddp`, the default): `torch.nn.parallel.
  DistributedDataParallel`. Every process holds the whole model; gradients are summed in
  buckets while the backward pass is still running, and only after an update's last batch
  (`no_sync()` for the others).
- `FullyShardedParallel` (`train.parallel: fsdp`): FSDP2, `torch.distributed.fsdp.
  fully_shard`, each encoder and decoder layer a unit and the rest in the root: every process
  holds 1/N of the weights, of their gradients and of the optimiser's state, and gathers a
  layer's weights only while it computes with it, for models that do not fit one device.

Either way the gradients are summed over the processes, not averaged (the loss is already
normalised by the update's target tokens together), so N processes accumulating k batches each
take the update of one process accumulating N*k (tests/training/test_distributed.py).
Checkpoints are written whole, in the layout of one process (safetensors weights, the optimiser's
state by parameter index): any of the three resumes any checkpoint. With FSDP that means the
main process gathers the weights to write them and to validate them.
"""

from __future__ import annotations

import contextlib
import inspect
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from transduce.runs import checkpoint as ckpt
from transduce.training.objective import Objective


class Local:
    """One process."""

    name = "one process"

    def __init__(self, objective: Objective, device: torch.device) -> None:
        self.objective = objective  # what computes the loss (for the engines: their wrapper)
        self.model = objective.model
        self.device = device

    def sync(self, last: bool):
        """The context of a batch's backward pass: gradients are summed over the processes
        only after an update's `last` batch."""
        return contextlib.nullcontext()

    def sum(self, value: float) -> float:
        """`value` summed over the processes."""
        return value

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """Clip the gradients' norm (over all processes' shards) to `max_norm`; the norm."""
        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)

    def whole_model(self) -> nn.Module | None:
        """The model with all its weights, to validate and write (every process calls this;
        the main process gets it)."""
        return self.model

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict:
        """The optimiser's whole state as one process's `state_dict()` (every process calls
        this; what the others get is not to be used)."""
        return optimizer.state_dict()

    def load_weights(self, path: Path, weights: dict) -> None:
        ckpt.load_weights(self.model, path, weights)

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        optimizer.load_state_dict(state)


def no_buffer_sync(engine) -> dict[str, bool]:
    """The argument that stops DistributedDataParallel from sending the buffers at each forward
    pass (they are the same in each process): `forward_sync_buffers` from PyTorch 2.13 on,
    which deprecates `broadcast_buffers`, the name before it (a GPU machine's 2.11 refused the
    new one)."""
    if "forward_sync_buffers" in inspect.signature(engine.__init__).parameters:
        return {"forward_sync_buffers": False}
    return {"broadcast_buffers": False}


class DataParallel(Local):
    """DistributedDataParallel: the whole model in every process."""

    name = "DistributedDataParallel"

    def __init__(self, objective: Objective, device: torch.device) -> None:
        super().__init__(objective, device)
        self.objective = nn.parallel.DistributedDataParallel(
            objective, device_ids=[device.index] if device.type == "cuda" else None,
            gradient_as_bucket_view=True, **no_buffer_sync(nn.parallel.DistributedDataParallel))
        self.objective.register_comm_hook(None, _sum_hook)

    def sync(self, last: bool):
        return contextlib.nullcontext() if last else self.objective.no_sync()

    def sum(self, value: float) -> float:
        return _sum(value, self.device)


class FullyShardedParallel(Local):
    """FSDP2: each process holds a shard of every weight."""

    name = "FSDP (fully_shard)"

    def __init__(self, objective: Objective, device: torch.device) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FSDPModule, fully_shard

        super().__init__(objective, device)
        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        for layer in [*self.model.encoder.layers, *self.model.decoder.layers]:
            fully_shard(layer, mesh=mesh)
        fully_shard(objective, mesh=mesh)  # the root: embeddings, norms, output projection
        for module in objective.modules():
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)  # summed, as the loss is normalised
                module.set_force_sum_reduction_for_comms(True)  # gloo has no scaled sum
        self._copy: nn.Module | None = None  # the main process's whole model

    def sync(self, last: bool):
        self.objective.set_requires_gradient_sync(last)
        return contextlib.nullcontext()

    def sum(self, value: float) -> float:
        return _sum(value, self.device)

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        norm = super().clip_grad_norm(max_norm)
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm

    def whole_model(self) -> nn.Module | None:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        weights = get_model_state_dict(self.objective, options=_whole())
        if dist.get_rank():
            return None
        if self._copy is None:
            self._copy = _plain(self.model, self.device)
        self._copy.load_state_dict({k.removeprefix("model."): v for k, v in weights.items()})
        self._copy.train(self.model.training)
        return self._copy

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        state = get_optimizer_state_dict(self.objective, optimizer, options=_whole())
        if dist.get_rank():
            return {}
        index = {name: i for i, name in enumerate(self._names())}  # by name -> by index
        return {"state": {index[name]: value for name, value in state["state"].items()},
                "param_groups": [{**group, "params": [index[n] for n in group["params"]]}
                                 for group in state["param_groups"]]}

    def load_weights(self, path: Path, weights: dict) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
        )

        plain = _plain(self.model, torch.device("cpu"))  # checks the keys as one process does
        ckpt.load_weights(plain, path, weights)
        set_model_state_dict(self.objective, {f"model.{k}": v for k, v in  # ties once
                                              ckpt.model_state(plain).items()},
                             options=StateDictOptions(full_state_dict=True, strict=False))

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

        names = self._names()
        by_name = {"state": {names[i]: value for i, value in state["state"].items()},
                   "param_groups": [{**group, "params": [names[i] for i in group["params"]]}
                                    for group in state["param_groups"]]}
        set_optimizer_state_dict(self.objective, optimizer, by_name,
                                 options=StateDictOptions(full_state_dict=True))

    def _names(self) -> list[str]:
        """The parameters' names (in the root, the objective) in the order of
        `model.parameters()`, the optimiser's."""
        return [name for name, _ in self.objective.named_parameters()]


def parallelize(objective: Objective, processes: int, how: str,
                device: torch.device) -> Local:
    """The engine for `processes` processes training `objective` (the process group joined)."""
    if processes == 1:
        return Local(objective, device)
    return {"ddp": DataParallel, "fsdp": FullyShardedParallel}[how](objective, device)


def _plain(model: nn.Module, device: torch.device) -> nn.Module:
    """A model of `model`'s kind and shape, unsharded; made without touching the random state
    (the run's dropout masks must not depend on it)."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        return type(model)(model.config).to(device)


def _sum_hook(group, bucket):  # no annotations: DDP checks them, and these would be strings
    """DDP's communication hook: the bucket (a dist.GradBucket) summed; DDP's own averages."""
    work = dist.all_reduce(bucket.buffer(), group=group, async_op=True)
    return work.get_future().then(lambda future: future.value()[0])


def _sum(value: float, device: torch.device) -> float:
    total = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(total)
    return float(total)


def _whole():
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True)
