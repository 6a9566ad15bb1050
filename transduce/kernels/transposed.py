"""Linear layers' weights stored transposed in memory, for MKL's plain product.

A linear layer's weight is (out, in), stored a row of `in` after another: `F.linear(x, W)` (and
a compiled graph's `mm(x, W.t())`) asks MKL for x times the transposed operand. Stored the other
way, a column after another (strides (1, out): the same parameter, shape and values), W.t() is a
plain row-major matrix and the product is MKL's plain one, which on an AMX Xeon was the faster
at the rows a search multiplies: 1.4-2.0x at 5-16 rows for every layer of `tiny`, 1.09-1.30x at
80, level at 320, and `base`'s likewise but its output layer at 5 and 16 rows (0.77x, 0.85x)
(benchmarks/weight_layout.py). Whole compiled searches of a Multi30k model (`tiny`) there: 1.08x
greedy and 1.09x beam 5 at 16 sentences a batch (a server's), 1.05x and 1.02x at 64, a sentence
alone 0.97x greedy (its graph's products are Inductor's loops, not MKL's) and 1.09x beam 5; the
eager search 1.02-1.04x (benchmarks/stored_transposed.py, docs/speed.md). Nothing else changes:
the state dict (saved contiguous), weights loaded in place (`copy_` keeps the layout), a packed
QKV's `features` (column blocks of the stored matrix, which MKL reads with their stride),
oneDNN's packed copies and OpenBLAS's transposed one (made from it as from any weight), a tied
embedding (its rows read with a stride: a gather, not a product). Results are those of the
row-major weight up to float32 rounding (another order of summation).

`Translator.load` stores a float32 CPU model's weights this way on the `mkl` kernel path, where
it was measured (an Intel CPU's default); the AMD CPUs' paths (`onednn`, `openblas`) keep the
row-major layout until measured there. Every path computes the same with either layout
(tests/kernels/test_transposed.py).
"""

from __future__ import annotations

import torch
from torch import nn

from transduce import kernels
from transduce.kernels.linear import Linear


def pays(device: torch.device, dtype: str) -> bool:
    """Whether a model searched on `device` in `dtype` is stored transposed (see the module)."""
    return device.type == "cpu" and dtype == "float32" and kernels.path() == "mkl"


def store_where_it_pays(model: nn.Module, device: torch.device, dtype: str) -> nn.Module:
    """`store(model)` where it `pays` for a model on `device` in `dtype`; returns the model."""
    return store(model) if pays(device, dtype) else model


def store(model: nn.Module) -> nn.Module:
    """Every `Linear` weight of the model stored transposed, in place (the same parameters,
    their version advanced, so that copies kept of them are made again); returns the model."""
    with torch.no_grad():
        for layer in model.modules():
            if isinstance(layer, Linear) and not stored(layer.weight):
                layout = layer.weight.detach().t().contiguous().t()
                layer.weight.set_(layout.untyped_storage(), 0, layout.shape, layout.stride())
    return model


def stored(weight: torch.Tensor) -> bool:
    """Whether a 2-D weight is stored transposed (a column after another)."""
    return weight.t().is_contiguous() and not weight.is_contiguous()
