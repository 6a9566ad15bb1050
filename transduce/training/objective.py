"""The training loss of a batch as one module's `forward`: what PyTorch's data-parallel engines
wrap (DistributedDataParallel and FSDP act around a module's forward and backward passes, so
the whole loss, the output projection included, is computed inside one)."""

from __future__ import annotations

from torch import Tensor, nn

from transduce.model.transformer import Transformer
from transduce.training.loss import projected_label_smoothed_cross_entropy, r_drop_loss


class Objective(nn.Module):
    """The summed label-smoothed cross-entropy of a batch (with R-Drop's term when
    `rdrop_alpha` > 0: the batch runs twice and the loss is that of one pass, halved)."""

    def __init__(self, model: Transformer, *, label_smoothing: float,
                 rdrop_alpha: float = 0.0) -> None:
        super().__init__()
        self.model = model
        self.label_smoothing = label_smoothing
        self.rdrop_alpha = rdrop_alpha

    def forward(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor) -> Tensor:
        model, pad = self.model, self.model.config.pad_id
        if self.rdrop_alpha > 0:
            hidden = model.features(src.repeat(2, 1), tgt_in.repeat(2, 1))
            return r_drop_loss(hidden, model.output.weight, tgt_out.repeat(2, 1),
                               epsilon=self.label_smoothing, alpha=self.rdrop_alpha,
                               ignore_index=pad, bias=model.output.bias) / 2
        hidden = model.features(src, tgt_in)
        return projected_label_smoothed_cross_entropy(
            hidden, model.output.weight, tgt_out, epsilon=self.label_smoothing,
            ignore_index=pad, bias=model.output.bias)
