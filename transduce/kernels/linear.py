"""Linear layers whose float32 inference products run on MKL or on oneDNN, as chosen.

PyTorch multiplies float32 matrices on a CPU with MKL, and MKL runs its AVX2 code on AMD
processors. oneDNN, which PyTorch ships as well, uses AVX-512 there when the CPU has it: on a
2-core AMD EPYC with AVX-512 its linear kernel was faster at every shape of the decoder, with the
same results (equal or within float32 rounding: another order of summation). The path is chosen
at run time (`transduce.kernels`: the CPU picks the default, TRANSDUCE_KERNELS or
`kernels.use` any path); every path has the same contract, `out=` included. The oneDNN kernel
has no backward pass, so training, and anything else that needs gradients, keeps `F.linear`;
bfloat16 and float16 already reach oneDNN through it. Inside a region `torch.compile` traces,
`F.linear` too: Inductor lowers it (with its own choice of kernel) and cannot lower oneDNN's op.

A product written into a buffer (a search step's logits) with many output features, the output
layer of a large vocabulary, is computed a block of features at a time: MKL's single product
of a few dozen rows with a 58,101 x 512 weight ran 1.2-1.3x slower here than the same product in
blocks of 2,048 features, whose results stay in the cache (docs/speed.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transduce import kernels


def onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """`F.linear(x, weight, bias)`, on oneDNN for float32 CPU tensors when no gradient is due
    (and autocast does not ask for another precision)."""
    if (kernels.path() == "onednn"  # training leaves at the second test: gradients are due
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
            and not torch.compiler.is_compiling()
            and x.dtype == weight.dtype == torch.float32 and x.device.type == "cpu" and x.numel()
            and not torch.is_autocast_enabled("cpu")):
        rows = x.reshape(-1, x.shape[-1])
        n = len(rows)
        padding = -n % row_bucket(n)
        if padding:
            out = onednn_linear(torch.cat([rows, rows.new_zeros(padding, rows.shape[1])]),
                                weight, bias)[:n]
        else:
            out = onednn_linear(rows, weight, bias)
        return out.view(*x.shape[:-1], weight.shape[0])
    return F.linear(x, weight, bias)


def row_bucket(rows: int) -> int:
    """oneDNN builds a kernel for each input shape it meets (JIT compilation, milliseconds) and
    keeps it (up to 1,024 of them); a search meets every row count from the batch
    down to 1 as sentences finish. Rows are padded to a multiple of this (16, or an eighth to a
    sixteenth of their number), so that few shapes occur (40 for 1 to 2,048 rows), for at most
    15 rows or 1/8 more work."""
    return max(16, 1 << max(0, rows.bit_length() - 4))


BLOCK = 2048  # output features per product, for a layer of at least BLOCKED_FROM of them
BLOCKED_FROM = 16384


def linear_into(x: Tensor, weight: Tensor, bias: Tensor | None, out: Tensor) -> Tensor:
    """`F.linear(x, weight, bias)` for a 2-D x, written into `out` (rows, features); a large
    layer's features BLOCK at a time (see above)."""
    if len(weight) < BLOCKED_FROM or not kernels.fast():
        return _product_into(x, weight, bias, out)
    for start in range(0, len(weight), BLOCK):
        block = slice(start, start + BLOCK)
        _product_into(x, weight[block], None if bias is None else bias[block], out[:, block])
    return out


def _product_into(x: Tensor, weight: Tensor, bias: Tensor | None, out: Tensor) -> Tensor:
    if bias is None:
        return torch.mm(x, weight.t(), out=out)
    return torch.addmm(bias, x, weight.t(), out=out)


class Linear(nn.Linear):
    """`nn.Linear` (same parameters and state dict) whose forward is `linear`."""

    def forward(self, x: Tensor, features: slice | None = None, *,
                out: Tensor | None = None) -> Tensor:
        """x (..., in) -> (..., out), or only the output features `features` (rows of the
        weight: the queries of a packed [W_Q; W_K; W_V], say). With `out`, a (rows, features)
        buffer for a 2-D x, the result is written there (computed there where it can be; on
        oneDNN, which cannot, copied there) and returned."""
        weight, bias = self.weight, self.bias
        if features is not None:
            weight, bias = weight[features], None if bias is None else bias[features]
        if out is None:
            return linear(x, weight, bias)
        if (x.dim() == 2 and out.dtype == x.dtype
                and (kernels.path() != "onednn" or torch.compiler.is_compiling())):
            return linear_into(x, weight, bias, out)
        return out.copy_(linear(x, weight, bias))


def writes_into(layer: nn.Module) -> bool:
    """Whether `layer(x, out=buffer)` computes its result in the buffer (so that a caller keeping
    one from call to call saves fresh memory; on oneDNN it would be a copy more)."""
    return isinstance(layer, Linear) and kernels.path() != "onednn"
