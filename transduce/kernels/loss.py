"""The label-smoothed loss (section 5.4) and R-Drop's, fused: fewer passes over (N, V) memory.

With smoothing epsilon the target distribution is (1 - eps) on the reference token plus eps
spread evenly over the V tokens of the vocabulary, so per position

    loss = (1 - eps) * (-log p[y]) + eps * mean_v(-log p[v])
         = logsumexp(z) - (1 - eps) * z[y] - eps * mean_v(z[v])

for logits z, which needs no (N, V) log-probabilities in the forward pass; the backward pass
writes the gradient softmax(z) - (1 - eps) * onehot(y) - eps / V in place. The same value and
gradient as `F.cross_entropy(..., label_smoothing=eps)`, with fewer passes over (N, V) memory.
With the output projection fused in as well, the (N, V) logits never exist whole. The plain
definitions, and the arguments' meaning, are in `transduce.training.loss`, which calls these.
"""

from __future__ import annotations

import torch
from torch import Tensor

_ROWS = 64  # positions per chunk on a CPU: a chunk of logits stays in cache across its passes


class _LabelSmoothedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, weight: Tensor, epsilon: float) -> Tensor:
        """logits (N, V), target (N,), weight (N,): each position's share of the loss."""
        n, vocab = logits.shape
        lse = torch.empty(n, dtype=torch.float32, device=logits.device)
        total = torch.empty_like(lse)
        # one scratch chunk reused throughout: fresh large temporaries cost page faults on CPU
        scratch = lse.new_empty(min(n, _rows(logits)), vocab)
        for rows in _chunks(n, _rows(logits)):
            z, work = logits[rows], scratch[: rows.stop - rows.start]
            top = z.amax(dim=-1, keepdim=True).float()
            torch.sub(z, top, out=work).exp_()
            torch.sum(work, dim=-1, out=lse[rows])
            lse[rows] = lse[rows].log_().add_(top.squeeze(1))  # logsumexp, stable
            torch.sum(z, dim=-1, dtype=torch.float32, out=total[rows])
        z_target = logits.gather(1, target[:, None]).squeeze(1).float()
        loss = lse - (1 - epsilon) * z_target - epsilon / vocab * total
        ctx.save_for_backward(logits, lse, target, weight)
        ctx.epsilon = epsilon
        return (loss * weight).sum()

    @staticmethod
    def backward(ctx, grad: Tensor):
        logits, lse, target, weight = ctx.saved_tensors
        n, vocab = logits.shape
        eps = ctx.epsilon
        scale = (weight * grad)[:, None]
        g = torch.empty_like(logits)
        fp32 = logits.dtype == torch.float32
        step = _rows(logits)
        scratch = None if fp32 else lse.new_empty(min(n, step), vocab)
        smoothing = torch.full((min(n, step), 1), eps - 1, device=logits.device)
        for rows in _chunks(n, step):
            # softmax - eps / V - (1 - eps) onehot, weighted; computed in fp32 whatever the logits
            size = rows.stop - rows.start
            chunk = g[rows] if fp32 else scratch[:size]
            torch.sub(logits[rows], lse[rows, None], out=chunk).exp_().sub_(eps / vocab)
            chunk.scatter_add_(1, target[rows, None], smoothing[:size])
            chunk.mul_(scale[rows])
            if not fp32:
                g[rows] = chunk
        return g, None, None, None


def _rows(logits: Tensor) -> int:
    """Positions per chunk: on a CPU, few enough for the chunk to stay in cache; on a GPU, as
    many as _GPU_CHUNK_BYTES hold (its caches are small beside the logits either way, and each
    chunk is a dozen kernel launches)."""
    if logits.device.type == "cpu":
        return _ROWS
    return max(1, _GPU_CHUNK_BYTES // (4 * logits.shape[1]))


def _chunks(n: int, rows: int) -> list[slice]:
    return [slice(i, min(i + rows, n)) for i in range(0, n, rows)]


def label_smoothed_cross_entropy(logits: Tensor, target: Tensor, weight: Tensor,
                                 epsilon: float) -> Tensor:
    """Sum of each position's loss times its weight: logits (N, V), target (N,) valid ids
    (padding's any id, its weight zero), weight (N,)."""
    return _LabelSmoothedCrossEntropy.apply(logits, target, weight, float(epsilon))


_CHUNK_BYTES = 8 << 20  # float32 logits per chunk: the fastest size measured (docs/speed.md)
_GPU_CHUNK_BYTES = 1 << 30  # on a GPU: a batch of 4,096 positions over 37,000 tokens is 1 chunk


def _chunk_bytes(device: torch.device) -> int:
    return _CHUNK_BYTES if device.type == "cpu" else _GPU_CHUNK_BYTES


def _product_dtype(hidden: Tensor, weight: Tensor) -> torch.dtype:
    """The dtype of the output layer's products: autocast's where it is on, as a layer's."""
    device = hidden.device.type
    return (torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device)
            else torch.promote_types(hidden.dtype, weight.dtype))


def _output_weights(weight: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """The output projection for the logits' products (in `dtype`) and for the gradient's: not
    float16, which flushes probabilities below 6e-8 to zero (the loss is not scaled yet);
    bfloat16 has float32's range."""
    w = weight.to(dtype)
    return w, (weight.to(torch.float32) if dtype == torch.float16 else w)


class _ProjectedLabelSmoothedCrossEntropy(torch.autograd.Function):
    """The output projection and the loss together, a chunk of positions at a time, so that the
    (N, V) logits and their gradient never exist whole: no passes over memory that large and no
    fresh pages for it every step. The loss is a scalar, so its gradients are known in the
    forward pass; they are computed there, chunk by chunk, and backward only scales them."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor,
                row_weight: Tensor, epsilon: float, dtype: torch.dtype) -> Tensor:
        """hidden (N, D), weight (V, D), bias (V,) or None, target (N,), row_weight (N,);
        products in `dtype`."""
        n, vocab = hidden.shape[0], weight.shape[0]
        needs_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        w, w_grad = _output_weights(weight, dtype)
        grad_dtype = w_grad.dtype
        rows = max(1, min(n, _chunk_bytes(hidden.device) // (4 * vocab)))
        work = hidden.new_empty(rows, vocab, dtype=torch.promote_types(dtype, torch.float32))
        loss = hidden.new_zeros((), dtype=work.dtype)
        row_weight = row_weight.to(work.dtype)
        grad_hidden = torch.empty_like(hidden) if needs_grad else None
        grad_weight = torch.zeros_like(weight, dtype=work.dtype) if needs_grad else None
        needs_bias_grad = bias is not None and ctx.needs_input_grad[2]
        grad_bias = bias.new_zeros(vocab, dtype=work.dtype) if needs_bias_grad else None
        for start in range(0, n, rows):
            chunk = slice(start, min(start + rows, n))
            h, y, scale = hidden[chunk].to(dtype), target[chunk, None], row_weight[chunk, None]
            z = work[: len(h)]
            if z.dtype == dtype:
                torch.mm(h, w.t(), out=z)
            else:
                z.copy_(torch.mm(h, w.t()))
            if bias is not None:  # in the products' dtype, as the output layer adds it
                z.add_(bias.to(dtype))
            top = z.amax(dim=1, keepdim=True)
            total = z.sum(dim=1, keepdim=True)
            z_target = z.gather(1, y)
            sums = z.sub_(top).exp_().sum(dim=1, keepdim=True)
            lse = sums.log().add_(top)
            loss += ((lse - (1 - epsilon) * z_target - epsilon / vocab * total) * scale).sum()
            if needs_grad:  # softmax - eps / V - (1 - eps) onehot, per position times its weight
                z.mul_(scale / sums).sub_(scale * (epsilon / vocab))
                z.scatter_add_(1, y, scale * (epsilon - 1))
                if needs_bias_grad:
                    grad_bias += z.sum(dim=0)
                g = z.to(grad_dtype)
                grad_hidden[chunk] = torch.mm(g, w_grad)
                grad_weight += torch.mm(g.t(), h.to(grad_dtype))
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.weight_dtype = weight.dtype
        return loss

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        gh = grad_hidden * grad if ctx.needs_input_grad[0] else None
        gw = (grad_weight * grad).to(ctx.weight_dtype) if ctx.needs_input_grad[1] else None
        gb = (grad_bias * grad).to(ctx.weight_dtype) if grad_bias is not None else None
        return gh, gw, gb, None, None, None, None


def projected_label_smoothed_cross_entropy(hidden: Tensor, weight: Tensor, target: Tensor,
                                           row_weight: Tensor, epsilon: float, *,
                                           bias: Tensor | None = None) -> Tensor:
    """`label_smoothed_cross_entropy(hidden @ weight.T + bias, target, row_weight, epsilon)`:
    hidden (N, D) the real positions' states, weight (V, D), bias (V,) or None. Under autocast
    the products run in its dtype (as the output layer would), the softmax and the loss in
    float32. Faster than projecting, then the loss: the (N, V) logits never exist whole
    (docs/speed.md)."""
    dtype, device = _product_dtype(hidden, weight), hidden.device.type
    with torch.autocast(device, enabled=False):
        return _ProjectedLabelSmoothedCrossEntropy.apply(hidden, weight, bias, target,
                                                         row_weight, float(epsilon), dtype)


class _ProjectedRDrop(torch.autograd.Function):
    """`r_drop_loss`: projection, losses and gradients chunk by chunk, as
    `_ProjectedLabelSmoothedCrossEntropy` does for one pass, into scratch reused throughout."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor,
                epsilon: float, alpha: float, dtype: torch.dtype) -> Tensor:
        """hidden (2, N, D): both passes' states at the N real positions; target (N,)."""
        n, vocab = hidden.shape[1], weight.shape[0]
        needs_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        w, w_grad = _output_weights(weight, dtype)
        grad_dtype = w_grad.dtype
        rows = max(1, min(n, _chunk_bytes(hidden.device) // (8 * vocab)))  # two passes each
        work_dtype = torch.promote_types(dtype, torch.float32)
        log_p = hidden.new_empty(2 * rows, vocab, dtype=work_dtype)  # pass 1 rows, then pass 2
        prob, diff = torch.empty_like(log_p), log_p.new_empty(rows, vocab)
        loss = hidden.new_zeros((), dtype=work_dtype)
        grad_hidden = torch.empty_like(hidden) if needs_grad else None
        grad_weight = torch.zeros_like(weight, dtype=work_dtype) if needs_grad else None
        needs_bias_grad = bias is not None and ctx.needs_input_grad[2]
        grad_bias = bias.new_zeros(vocab, dtype=work_dtype) if needs_bias_grad else None
        smoothing = log_p.new_full((2 * rows, 1), epsilon - 1)
        for start in range(0, n, rows):
            chunk = slice(start, min(start + rows, n))
            m = chunk.stop - chunk.start
            h = hidden[:, chunk].reshape(2 * m, -1).to(dtype)
            y = target[chunk, None].repeat(2, 1)
            z, p, d = log_p[: 2 * m], prob[: 2 * m], diff[:m]
            if z.dtype == dtype:
                torch.mm(h, w.t(), out=z)
            else:
                z.copy_(torch.mm(h, w.t()))
            if bias is not None:
                z.add_(bias.to(dtype))
            z.sub_(z.amax(dim=1, keepdim=True))
            sums = torch.exp(z, out=p).sum(dim=1, keepdim=True)
            p.div_(sums)
            z.sub_(sums.log_())  # log-probabilities
            loss -= (1 - epsilon) * z.gather(1, y).sum() + epsilon / vocab * z.sum()
            torch.sub(z[:m], z[m:], out=d)  # log p1 - log p2
            e1, e2 = (torch.bmm(q.unsqueeze(1), d.unsqueeze(2)).view(m, 1)  # E_p1[d], E_p2[d]
                      for q in (p[:m], p[m:]))
            loss += alpha / 2 * (e1 - e2).sum()  # sum (p1 - p2)(log p1 - log p2)
            if needs_grad:
                # d KL/dz1 = p1 (d - E_p1[d]) + p1 - p2; d KL/dz2 = p2 (E_p2[d] - d) + p2 - p1
                torch.sub(d, e1, out=z[:m])
                torch.sub(e2, d, out=z[m:])
                z.mul_(p)
                torch.sub(p[:m], p[m:], out=d)
                z[:m].add_(d)
                z[m:].sub_(d)
                z.mul_(alpha / 2).add_(p).sub_(epsilon / vocab)  # + the cross-entropy's
                z.scatter_add_(1, y, smoothing[: 2 * m])
                if needs_bias_grad:
                    grad_bias += z.sum(dim=0)
                g = z.to(grad_dtype)
                grad_hidden[:, chunk] = torch.mm(g, w_grad).view(2, m, -1)
                grad_weight += torch.mm(g.t(), h.to(grad_dtype))
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.weight_dtype = weight.dtype
        return loss

    backward = staticmethod(_ProjectedLabelSmoothedCrossEntropy.backward)


def projected_r_drop(hidden: Tensor, weight: Tensor, target: Tensor, *, epsilon: float,
                     alpha: float, bias: Tensor | None = None) -> Tensor:
    """R-Drop's loss from hidden (2, N, D), both passes' states at the N real positions, the
    output projection weight (V, D) and bias (V,) or None, and the targets (N,)."""
    dtype, device = _product_dtype(hidden, weight), hidden.device.type
    with torch.autocast(device, enabled=False):
        return _ProjectedRDrop.apply(hidden, weight, bias, target, float(epsilon), float(alpha),
                                     dtype)
