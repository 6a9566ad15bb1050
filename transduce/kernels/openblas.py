"""Float32 inference products of a vocabulary's many output features on OpenBLAS, numpy's BLAS.

On an AVX2-only AMD EPYC, MKL's product with an output layer (8,000 x 128 or x 512) copied the
weight into its own blocks at every call for about as long as it multiplied (`sgemm_scopy`,
under `perf`), and ran at 24-37 GFLOP/s at a search's row counts; OpenBLAS, which numpy ships,
given the weight transposed once, ran the same products 1.2-2.2x as fast on one thread (16
to 256 rows), and the narrower layers at 0.66-1.39x of MKL's speed (docs/speed.md). So on the
`openblas` kernel path (transduce.kernels) a layer of `FROM_FEATURES` output features or more
is multiplied here, the others on MKL: greedy search 1.17x as fast there, eager and compiled,
beam search (five times the rows) unchanged.

OpenBLAS keeps threads of its own, which would contend with PyTorch's: a product comes here
only from a caller on one thread (`torch.get_num_threads() == 1`: each of `translate`'s
searches, a one-worker server's), else it stays with MKL; and the first product sets numpy's
OpenBLAS to one thread for the process (threadpoolctl), numpy's own products in the process
included. Results are those of `F.linear` up to float32 rounding (another order of summation).
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from transduce.kernels import weight_copies

FROM_FEATURES = 4096  # output features from which a layer is multiplied here (see the module)


@functools.cache
def available() -> bool:
    """Whether numpy's BLAS is OpenBLAS (numpy's wheels for Linux and Windows; not its macOS
    wheels, which use Accelerate) and threadpoolctl can set its threads."""
    return bool(_openblas())


@functools.cache
def _openblas():
    """threadpoolctl's handle on the OpenBLAS libraries loaded (numpy's), or None."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    found = ThreadpoolController().select(internal_api="openblas")
    return found if found.lib_controllers else None


@functools.cache
def _one_thread() -> None:
    """numpy's OpenBLAS on one thread from now on (once a process)."""
    _openblas().limit(limits=1)


def pays(weight: Tensor, features: int | None = None) -> bool:
    """Whether a layer of this weight (its `features` rows, else all) has the output features
    to be multiplied here."""
    return (len(weight) if features is None else features) >= FROM_FEATURES


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, out: Tensor | None = None
           ) -> Tensor:
    """`F.linear(x, weight, bias)` for float32 CPU tensors, on OpenBLAS when the caller runs on
    one thread (else `F.linear`); with `out` (rows, features) for a 2-D x, written there."""
    if not x.numel() or torch.get_num_threads() != 1 or weight.is_inference():
        result = F.linear(x, weight, bias)  # (an inference tensor: no version to keep a copy by)
        return result if out is None else out.copy_(result)
    _one_thread()
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    into = (out if out is not None and out.is_contiguous()
            else torch.empty(len(rows), len(weight)))  # NumPy writes only contiguous arrays
    np.matmul(rows.numpy(), transposed(weight), out=into.numpy())
    if bias is not None:
        into += bias
    if out is None:
        return into.view(*x.shape[:-1], len(weight))
    return out if into is out else out.copy_(into)


def transposed(weight: Tensor) -> np.ndarray:
    """The weight (features, in) as a contiguous (in, features) array, made at the first product
    and kept (transduce.kernels.weight_copies)."""
    return weight_copies.kept(weight, "openblas", lambda w: w.t().contiguous().numpy())


@torch.library.custom_op("transduce::openblas_linear", mutates_args=())
def _compiled(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """`linear` as an operator a compiled graph calls (Inductor cannot lower a NumPy call)."""
    return linear(x, weight, bias)


@_compiled.register_fake
def _(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    return x.new_empty(*x.shape[:-1], len(weight))
