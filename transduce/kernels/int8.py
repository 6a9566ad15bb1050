"""int8 inference: linear layers with int8 weights and activations quantized on the fly.

A weight matrix is stored as int8 with one scale per output feature (symmetric: w = scale * q,
|q| <= 127). At each call every input row is scaled by its own largest magnitude, so that it
lies in [-1, 1], and quantized with one fixed scale; the int8 product runs on fbgemm (PyTorch's
x86 quantized engine) and the result is scaled back per row. Quantizing per row, as CTranslate2
does, rather than with one range over the whole batch keeps a sentence's result independent of
the sentences batched with it (batch invariance), at the cost of two small element-wise passes.
The activations use 7 bits (0..127 around 64): CPUs without VNNI add pairs of 8-bit products in
16 bits, which 8-bit activations could overflow (PyTorch's `reduce_range`).

Quantizing the activations costs a few passes over them, more than int8 saves on a small matrix
(`tiny`'s 128 x 384 q/k/v weight), while large ones (`base`'s feed-forward layers, any output
projection) multiply faster in int8 (docs/speed.md). So a layer with fewer than `MIN_INT8_WEIGHTS`
weights multiplies in float32, by its int8 weights dequantized: the same weights either way, only
the activations are then not rounded. Embeddings, LayerNorm and attention stay in float32.

PyTorch has deprecated the quantized tensors fbgemm's packed weights are made from (torch 2.13
warns; transduce pins it); only `_pack` touches them.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ACTIVATION_SCALE = 1 / 63  # a row scaled into [-1, 1] maps to 1..127 around the zero point
ACTIVATION_ZERO = 64
MIN_INT8_WEIGHTS = 1 << 18  # smaller layers multiply in float32 (see above)


def quantize_weight(weight: Tensor) -> tuple[Tensor, Tensor]:
    """(out, in) float weights -> int8 (out, in) and float32 scales (out,), per output row."""
    scale = weight.detach().float().abs().amax(dim=1).clamp(min=1e-12) / 127
    q = torch.round(weight.detach().float() / scale[:, None]).clamp_(-127, 127)
    return q.to(torch.int8), scale


class Int8Linear(nn.Module):
    """`x W^T + b` with W in int8 (buffers `weight`, int8, and `scale`, per output feature) and
    each row of x quantized to 7 bits on the fly; float32 in and out, CPU only. Drop-in for
    `transduce.kernels.linear.Linear`, including its `features` argument."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.int8))
        self.register_buffer("scale", torch.ones(out_features))
        self.register_buffer("bias", torch.zeros(out_features) if bias else None)
        self._packed: dict[tuple, object] = {}  # fbgemm's packed weights, per feature slice
        self._float: tuple[tuple, Tensor] | None = None  # a small layer's dequantized weights

    @classmethod
    def quantize(cls, linear: nn.Linear) -> Int8Linear:
        """The int8 version of a float linear layer."""
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None)
        layer.weight, layer.scale = quantize_weight(linear.weight)
        if linear.bias is not None:
            layer.bias = linear.bias.detach().float().clone()
        return layer

    def forward(self, x: Tensor, features: slice | None = None, *,
                out: Tensor | None = None) -> Tensor:
        """x (..., in) -> (..., out), or only the output features `features`. `out` is accepted
        for `Linear`'s sake and not used: the result is always new memory."""
        features = features or slice(0, self.out_features)
        if self.in_features * self.out_features < MIN_INT8_WEIGHTS:
            bias = None if self.bias is None else self.bias[features]
            return F.linear(x, self._dequantized()[features], bias)
        rows = x.reshape(-1, x.shape[-1])
        magnitude = rows.abs().amax(dim=1, keepdim=True).clamp_(min=1e-30)  # zeros stay zeros
        y = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
            rows / magnitude, ACTIVATION_SCALE, ACTIVATION_ZERO, self._pack(features))
        y = (y.mul_(magnitude) if self.bias is None
             else torch.addcmul(self.bias[features], y, magnitude))
        return y.view(*x.shape[:-1], y.shape[-1])

    def _dequantized(self) -> Tensor:
        """The weights in float32, scale * q, made on first use and kept (as `_pack`)."""
        key = (self.weight.data_ptr(), self.weight._version, self.scale._version)
        if self._float is None or self._float[0] != key:
            self._float = key, self.weight.float() * self.scale[:, None]
        return self._float[1]

    def _pack(self, features: slice):
        """fbgemm's packed form of the weight rows `features`, made on first use and kept while
        the weight stays the same tensor, unchanged."""
        key = (features.start, features.stop, self.weight.data_ptr(), self.weight._version,
               self.scale._version)
        packed = self._packed.get(key)
        if packed is None:
            scale = self.scale[features].double()
            with warnings.catch_warnings():  # quantized tensors: deprecated, see above
                warnings.simplefilter("ignore")
                weight = torch._make_per_channel_quantized_tensor(
                    self.weight[features].contiguous(), scale,
                    torch.zeros(len(scale), dtype=torch.long), 0)
                packed = torch.ops.quantized.linear_prepack(weight, None)
            self._packed = {k: v for k, v in self._packed.items() if k[2:] == key[2:]}
            self._packed[key] = packed
        return packed

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, int8")


def quantize_linear_layers(model: nn.Module, *, empty: bool = False) -> nn.Module:
    """Replace every `nn.Linear` of `model` (in place) by an `Int8Linear`: its weights
    quantized, or with `empty` left unset, to be loaded from a quantized checkpoint. Other
    parameters (embeddings, including one tied to the output layer, LayerNorm) stay as they
    are. Returns `model`."""
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear):
                setattr(module, name, Int8Linear(child.in_features, child.out_features,
                                                 child.bias is not None) if empty
                        else Int8Linear.quantize(child))
    return model


def is_int8(model: nn.Module) -> bool:
    """Whether `model` has int8 linear layers."""
    return any(isinstance(m, Int8Linear) for m in model.modules())
