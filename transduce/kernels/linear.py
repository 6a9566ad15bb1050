"""Linear layers whose float32 inference products run on MKL, on oneDNN or on OpenBLAS, as chosen.

PyTorch multiplies float32 matrices on a CPU with MKL, and MKL runs its AVX2 code on AMD
processors. oneDNN, which PyTorch ships as well, uses AVX-512 there when the CPU has it. The path
is chosen at run time (`transduce.kernels`: the CPU picks the default, TRANSDUCE_KERNELS or
`kernels.use` any path); every path has the same contract, `out=` included. On the oneDNN path
a layer goes to oneDNN when its weight has `ONEDNN_FROM` elements or more (a 128 x 1,024
layer), multiplied by a copy of the weight in oneDNN's own blocked layout (`packed`: reordered
once, not at every call), and a smaller one stays with MKL: oneDNN's fixed cost of ~20 us a call
made it the slower for a `tiny` model's 128-wide layers at every row count a search meets, and
the faster, 1.2-2.6x packed, from a 512 x 512 layer and for every output layer (docs/speed.md,
"oneDNN for large layers, packed once"). Results are equal or within float32 rounding (another
order of summation). The oneDNN kernel has no backward pass, so training, and anything else that
needs gradients, keeps `F.linear`; bfloat16 and float16 already reach oneDNN through it. Inside a
region `torch.compile` traces, a layer that would go to oneDNN is the custom operator
`transduce::onednn_linear` (Inductor calls it as it is; it cannot lower oneDNN's own op), the
others `F.linear`, which Inductor lowers. On the OpenBLAS path an output layer (`FROM_FEATURES`
output features or more) goes to OpenBLAS, the rest stays with MKL (transduce.kernels.openblas;
in a compiled region the operator `transduce::openblas_linear`).

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
from transduce.kernels import openblas, weight_copies

# weight elements from which the oneDNN path multiplies on oneDNN (see the module)
ONEDNN_FROM = 1 << 17


def onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def on_onednn(weight: Tensor, features: slice | None = None) -> bool:
    """Whether a float32 inference product with these rows of the weight (all: None) goes to
    oneDNN (the path's choice and their size; `linear` checks the rest)."""
    if kernels.path() != "onednn":
        return False
    start, stop = _span(weight, features)
    return (stop - start) * weight.shape[1] >= ONEDNN_FROM


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None,
           features: slice | None = None) -> Tensor:
    """`F.linear(x, weight[features], bias[features])` (all of them: features None), on OpenBLAS
    or oneDNN for float32 CPU tensors when the path and the layer's size say so (`on_openblas`,
    `on_onednn`) and no gradient is due (and autocast does not ask for another precision)."""
    if on_openblas(weight, features) and _inference_float32(x, weight):
        if torch.compiler.is_compiling():
            return torch.ops.transduce.openblas_linear(x, weight, bias)
        return openblas.linear(x, weight, bias)
    if on_onednn(weight, features) and _inference_float32(x, weight):
        start, stop = _span(weight, features)
        if torch.compiler.is_compiling():
            return torch.ops.transduce.onednn_linear(x, weight, bias, start, stop)
        return _on_onednn(x, weight, bias, start, stop)
    return F.linear(x, *_rows(weight, bias, features))


def on_openblas(weight: Tensor, features: slice | None = None) -> bool:
    """Whether a float32 inference product with the whole weight (`features` None) goes to
    OpenBLAS (the path's choice and its output features; `linear` checks the rest)."""
    return kernels.path() == "openblas" and features is None and openblas.pays(weight)


def _inference_float32(x: Tensor, weight: Tensor) -> bool:
    """A float32 CPU product with no gradient due (training leaves at the first test) that
    autocast does not ask in another precision: what oneDNN's and OpenBLAS's paths take."""
    return (not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
            and x.dtype == weight.dtype == torch.float32 and x.device.type == "cpu"
            and not torch.is_autocast_enabled("cpu"))


def _span(weight: Tensor, features: slice | None) -> tuple[int, int]:
    """The first and the end of the weight's rows `features` (all: None)."""
    if features is None:
        return 0, len(weight)
    start, stop, _ = features.indices(len(weight))
    return start, stop


def _rows(weight: Tensor, bias: Tensor | None, features: slice | None
          ) -> tuple[Tensor, Tensor | None]:
    """weight[features] and bias[features] (all of them: features None)."""
    if features is None:
        return weight, bias
    return weight[features], None if bias is None else bias[features]


def _on_onednn(x: Tensor, weight: Tensor, bias: Tensor | None, start: int, stop: int
               ) -> Tensor:
    """x @ weight[start:stop].T + bias[start:stop] on oneDNN, the weight packed, the rows padded
    to a `row_bucket` (an empty x: F.linear's empty result)."""
    if not x.numel():
        return F.linear(x, *_rows(weight, bias, slice(start, stop)))
    rows = x.reshape(-1, x.shape[-1])
    n = len(rows)
    padding = -n % row_bucket(n)
    if padding:
        rows = torch.cat([rows, rows.new_zeros(padding, rows.shape[1])])
    out = onednn_linear(rows, packed(weight, start, stop),
                        None if bias is None else bias[start:stop])[:n]
    return out.view(*x.shape[:-1], stop - start)


def packed(weight: Tensor, start: int = 0, stop: int | None = None) -> Tensor:
    """Rows start:stop of a weight in oneDNN's blocked layout, reordered at the first call and
    kept (transduce.kernels.weight_copies), so that a product does not reorder it every time;
    an inference tensor's (which has no version counter to tell a change by), as it is."""
    stop = len(weight) if stop is None else stop
    if weight.is_inference():
        return weight[start:stop]  # reordered at every product, as unpacked ones are
    return weight_copies.kept(weight, ("onednn", start, stop),
                              lambda w: torch.ops.mkldnn._reorder_linear_weight(w[start:stop]))


@torch.library.custom_op("transduce::onednn_linear", mutates_args=())
def _compiled_on_onednn(x: Tensor, weight: Tensor, bias: Tensor | None, start: int, stop: int
                        ) -> Tensor:
    """`_on_onednn` as an operator a compiled graph calls (given the whole weight, which is
    the parameter itself there, so that its packed copy is found again)."""
    return _on_onednn(x, weight, bias, start, stop)


@_compiled_on_onednn.register_fake
def _(x: Tensor, weight: Tensor, bias: Tensor | None, start: int, stop: int) -> Tensor:
    return x.new_empty(*x.shape[:-1], stop - start)


def row_bucket(rows: int) -> int:
    """oneDNN builds a kernel for each input shape it meets (JIT compilation, 1-2 ms) and
    keeps it (up to 1,024 of them); a search meets every row count from the batch
    down to 1 as sentences finish. Rows are padded to a multiple of this (1 below 16 rows, else
    an eighth to a sixteenth of their number), so that few shapes occur (72 for 1 to 2,048
    rows), for at most 1/8 more work: a product's time grows with its rows (an output layer of
    8,000 x 128: 189 us for 17 rows, 345 for 32, as a minimum of 16 padded them; docs/speed.md)."""
    return max(1, 1 << max(0, rows.bit_length() - 4))


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
        if out is None:
            return linear(x, self.weight, self.bias, features)
        if on_openblas(self.weight, features) and _inference_float32(x, self.weight):
            if torch.compiler.is_compiling():
                return out.copy_(torch.ops.transduce.openblas_linear(x, self.weight, self.bias))
            return openblas.linear(x, self.weight, self.bias, out=out)
        if (x.dim() == 2 and out.dtype == x.dtype
                and (not on_onednn(self.weight, features) or torch.compiler.is_compiling())):
            return linear_into(x, *_rows(self.weight, self.bias, features), out)
        return out.copy_(linear(x, self.weight, self.bias, features))


def writes_into(layer: nn.Module) -> bool:
    """Whether `layer(x, out=buffer)` computes its result in the buffer (so that a caller keeping
    one from call to call saves fresh memory; on oneDNN it would be a copy more)."""
    return isinstance(layer, Linear) and not on_onednn(layer.weight)
