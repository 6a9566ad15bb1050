"""Linear layers that run float32 inference on oneDNN on an AMD CPU with AVX-512.

PyTorch multiplies float32 matrices on a CPU with MKL, and MKL runs its AVX2 code on AMD
processors. oneDNN, which PyTorch ships as well, uses AVX-512 there when the CPU has it: on a
2-core AMD EPYC with AVX-512 its linear kernel was faster at every shape of the decoder, with the
same results (equal or within float32 rounding: another order of summation). On an AMD EPYC with
AVX2 only, oneDNN's kernel is the slower one, and on Intel processors MKL runs its own AVX-512
code and is as fast or faster, so there `F.linear` stays (docs/speed.md). The oneDNN kernel has
no backward pass, so training, and anything else that needs gradients, keeps `F.linear`; bfloat16
and float16 already reach oneDNN through it.

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


def cpu_vendor() -> str:
    return cpu_info("vendor_id")


ONEDNN_AVAILABLE = (torch.backends.mkldnn.is_available()
                    and hasattr(torch.ops.mkldnn, "_linear_pointwise"))
# see above: MKL's AVX2 against oneDNN's AVX-512 on AMD; the reference paths
# (TRANSDUCE_KERNELS=reference) use F.linear
ONEDNN = (ONEDNN_AVAILABLE and cpu_vendor() == "AuthenticAMD"
          and "avx512f" in cpu_info("flags").split() and kernels.fast())


def onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """`F.linear(x, weight, bias)`, on oneDNN for float32 CPU tensors when no gradient is due
    (and autocast does not ask for another precision)."""
    if (ONEDNN  # the training step leaves at the first test: gradients are due there
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
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
        float32 buffer for a 2-D x, the result is written there when `F.linear` would compute it
        (not on oneDNN); either way the result is returned."""
        weight, bias = self.weight, self.bias
        if features is not None:
            weight, bias = weight[features], None if bias is None else bias[features]
        if out is not None and not ONEDNN and x.dim() == 2 and out.dtype == x.dtype:
            return linear_into(x, weight, bias, out)
        return linear(x, weight, bias)


def writes_into(layer: nn.Module) -> bool:
    """Whether `layer(x, out=buffer)` writes its result into the buffer (so that a caller
    keeping one from call to call saves fresh memory)."""
    return isinstance(layer, Linear) and not ONEDNN
