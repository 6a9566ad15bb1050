import math

import pytest
import torch
import torch.nn.functional as F

from transduce import kernels
from transduce.kernels import loss as loss_module
from transduce.training.loss import (
    label_smoothed_cross_entropy,
    nll_loss,
    projected_label_smoothed_cross_entropy,
    r_drop_loss,
)

PAD = 1


def test_a_hand_computed_case():
    logits = torch.tensor([[[2.0, 0.0, 1.0], [0.0, 0.0, 0.0]]])  # V = 3
    target = torch.tensor([[0, PAD]])  # the second position is padding
    eps = 0.1
    log_p = [2 - math.log(math.exp(2) + 1 + math.e), -math.log(math.exp(2) + 1 + math.e),
             1 - math.log(math.exp(2) + 1 + math.e)]
    expected = (1 - eps) * -log_p[0] + eps * -sum(log_p) / 3
    loss = label_smoothed_cross_entropy(logits, target, epsilon=eps, ignore_index=PAD)
    assert loss.item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_equals_torch_cross_entropy_in_value_and_gradient(eps, reduction):
    logits = torch.randn(4, 7, 50, requires_grad=True)
    target = torch.randint(0, 50, (4, 7))
    target[0, 3:] = PAD
    target[2, 5:] = PAD
    ours = label_smoothed_cross_entropy(logits, target, epsilon=eps, ignore_index=PAD,
                                        reduction=reduction)
    (g_ours,) = torch.autograd.grad(ours * 3.0, logits)
    ref = F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=PAD,
                          label_smoothing=eps, reduction=reduction)
    (g_ref,) = torch.autograd.grad(ref * 3.0, logits)
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(g_ours, g_ref)
    assert (g_ours[0, 3:] == 0).all()  # padding positions get no gradient


def test_mean_is_per_real_target_token():
    logits = torch.randn(2, 5, 10)
    target = torch.randint(2, 10, (2, 5))
    target[1, 2:] = PAD
    total = label_smoothed_cross_entropy(logits, target, ignore_index=PAD)
    mean = label_smoothed_cross_entropy(logits, target, ignore_index=PAD, reduction="mean")
    torch.testing.assert_close(mean, total / 7)


def test_bf16_logits_get_a_bf16_gradient_computed_in_fp32():
    logits = torch.randn(6, 40).to(torch.bfloat16).requires_grad_()
    target = torch.randint(0, 40, (6,))
    loss = label_smoothed_cross_entropy(logits, target, ignore_index=PAD)
    loss.backward()
    assert loss.dtype == torch.float32 and logits.grad.dtype == torch.bfloat16
    ref = F.cross_entropy(logits.detach().float(), target, label_smoothing=0.1,
                          ignore_index=PAD, reduction="sum")
    torch.testing.assert_close(loss, ref)


def test_nll_for_perplexity_ignores_padding():
    logits = torch.randn(3, 20)
    target = torch.tensor([4, PAD, 7])
    expected = -(logits.log_softmax(-1)[0, 4] + logits.log_softmax(-1)[2, 7])
    torch.testing.assert_close(nll_loss(logits, target, ignore_index=PAD), expected)


@pytest.fixture(params=[False, True], ids=["one chunk", "chunks of 3 rows"])
def chunking(request, monkeypatch):
    if request.param:
        monkeypatch.setattr(loss_module, "_CHUNK_BYTES", 3 * 4 * 50)  # V = 50


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_projected_loss_equals_projecting_then_torch_cross_entropy(eps, reduction, chunking):
    hidden = torch.randn(4, 7, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 50, (4, 7))
    target[0, 3:] = PAD
    target[2, 5:] = PAD
    ours = projected_label_smoothed_cross_entropy(hidden, weight, target, epsilon=eps,
                                                  ignore_index=PAD, reduction=reduction)
    g_ours = torch.autograd.grad(ours * 3.0, (hidden, weight))
    ref = F.cross_entropy((hidden @ weight.T).flatten(0, 1), target.flatten(), ignore_index=PAD,
                          label_smoothing=eps, reduction=reduction)
    g_ref = torch.autograd.grad(ref * 3.0, (hidden, weight))
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(g_ours, g_ref)
    assert (g_ours[0][0, 3:] == 0).all()  # padding positions get no gradient


@pytest.fixture(params=[True, False], ids=["fused", "reference"])
def kernel_path(request, monkeypatch):
    """The fused kernel, or the plain PyTorch reference path (TRANSDUCE_KERNELS=reference)."""
    from transduce import kernels

    monkeypatch.setattr(kernels, "fast", lambda: request.param)


def _biased_projection(rows: int, target_rows: int, length: int):
    """float64 hidden states (rows, length, 16), output weights and bias over 50 tokens, and
    targets (target_rows, length) with padding in the second row."""
    hidden = torch.randn(rows, length, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(50, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 50, (target_rows, length))
    target[1, 2:] = PAD
    return hidden, weight, bias, target


def test_projected_loss_with_a_bias_equals_the_biased_output_layer(kernel_path, chunking):
    hidden, weight, bias, target = _biased_projection(4, 4, 7)
    ours = projected_label_smoothed_cross_entropy(hidden, weight, target, epsilon=0.1,
                                                  ignore_index=PAD, bias=bias)
    g_ours = torch.autograd.grad(ours * 3.0, (hidden, weight, bias))
    ref = F.cross_entropy(F.linear(hidden, weight, bias).flatten(0, 1), target.flatten(),
                          ignore_index=PAD, label_smoothing=0.1, reduction="sum")
    g_ref = torch.autograd.grad(ref * 3.0, (hidden, weight, bias))
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(g_ours, g_ref)


def test_projected_loss_under_bf16_autocast_matches_the_bf16_output_layer(chunking):
    hidden = torch.randn(5, 6, 16, requires_grad=True)
    weight = torch.randn(50, 16, requires_grad=True)
    target = torch.randint(2, 50, (5, 6))
    target[1, 4:] = PAD
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours = projected_label_smoothed_cross_entropy(hidden, weight, target, ignore_index=PAD)
        logits = F.linear(hidden, weight)  # bf16, as the model's output layer under autocast
        ref = label_smoothed_cross_entropy(logits, target, ignore_index=PAD)
    g_ours = torch.autograd.grad(ours, (hidden, weight))
    g_ref = torch.autograd.grad(ref, (hidden, weight))
    assert g_ours[0].dtype == g_ours[1].dtype == torch.float32
    torch.testing.assert_close(ours, ref)
    # both from bf16 products; ours rounds partial sums too
    for a, b in zip(g_ours, g_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2 * b.abs().max().item())


def test_projected_loss_without_gradients_has_the_same_value():
    hidden, weight = torch.randn(3, 4, 8), torch.randn(30, 8)
    target = torch.randint(0, 30, (3, 4))
    with torch.no_grad():
        value = projected_label_smoothed_cross_entropy(hidden, weight, target, ignore_index=PAD)
    expected = label_smoothed_cross_entropy(hidden @ weight.T, target, ignore_index=PAD)
    torch.testing.assert_close(value, expected)


@pytest.mark.skipif(not kernels.fast(), reason="a property of the fast kernel, off")
def test_projected_loss_under_fp16_autocast_keeps_small_gradients():
    # float16 flushes values below 6e-8 to zero: the gradient's products run in float32
    # (without smoothing: with it, every token's gradient is at least about eps / V)
    hidden = torch.randn(8, 16, requires_grad=True)
    weight = (torch.randn(2000, 16) * 3).requires_grad_()  # peaked: most probabilities tiny
    target = torch.randint(2, 2000, (8,))
    with torch.autocast("cpu", dtype=torch.float16):
        ours = projected_label_smoothed_cross_entropy(hidden, weight, target, epsilon=0.0,
                                                      ignore_index=PAD)
    g_ours = torch.autograd.grad(ours, weight)[0]
    ref = F.cross_entropy((hidden @ weight.T).double(), target, reduction="sum")
    g_ref = torch.autograd.grad(ref, weight)[0].float()
    tiny = (g_ref.abs() < 6e-8) & (g_ref != 0)
    assert tiny.any() and (g_ours[tiny] != 0).all()
    torch.testing.assert_close(g_ours, g_ref, rtol=0.05, atol=0.05 * g_ref.abs().max().item())


@pytest.mark.parametrize("alpha", [0.0, 5.0])
def test_r_drop_loss_is_both_passes_cross_entropy_plus_alpha_times_half_kl(alpha, chunking):
    hidden = torch.randn(6, 7, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    target = torch.randint(0, 50, (3, 7))
    target[0, 3:] = PAD
    ours = r_drop_loss(hidden, weight, target.repeat(2, 1), epsilon=0.1, alpha=alpha,
                       ignore_index=PAD)
    g_ours = torch.autograd.grad(ours * 3.0, (hidden, weight))
    logits = hidden @ weight.T
    ce = sum(F.cross_entropy(half.flatten(0, 1), target.flatten(), ignore_index=PAD,
                             label_smoothing=0.1, reduction="sum") for half in logits.chunk(2))
    real = target != PAD
    log_p, log_q = (torch.log_softmax(half[real], dim=-1) for half in logits.chunk(2))
    kl = (F.kl_div(log_q, log_p, log_target=True, reduction="sum")  # KL(p || q)
          + F.kl_div(log_p, log_q, log_target=True, reduction="sum"))
    ref = ce + alpha * kl / 2
    g_ref = torch.autograd.grad(ref * 3.0, (hidden, weight))
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(g_ours, g_ref)
    assert (g_ours[0][0, 3:] == 0).all() and (g_ours[0][3, 3:] == 0).all()  # padding


def test_r_drop_loss_with_a_bias_equals_the_biased_output_layers(kernel_path, chunking):
    hidden, weight, bias, target = _biased_projection(4, 2, 5)
    ours = r_drop_loss(hidden, weight, target.repeat(2, 1), alpha=5.0, ignore_index=PAD,
                       bias=bias)
    g_ours = torch.autograd.grad(ours, (hidden, weight, bias))
    real = (target != PAD).flatten()
    log_p = F.log_softmax(F.linear(hidden, weight, bias).view(2, -1, 50)[:, real], dim=-1)
    y = target.flatten()[real]
    ce = -(0.9 * log_p.gather(2, y.expand(2, -1)[..., None]).sum() + 0.1 / 50 * log_p.sum())
    ref = ce + 5.0 / 2 * ((log_p[0].exp() - log_p[1].exp()) * (log_p[0] - log_p[1])).sum()
    g_ref = torch.autograd.grad(ref, (hidden, weight, bias))
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(g_ours, g_ref)


def test_r_drop_loss_under_bf16_autocast_is_close_to_fp32():
    hidden = torch.randn(6, 5, 16)
    weight = torch.randn(50, 16) / 4
    target = torch.randint(2, 50, (3, 5)).repeat(2, 1)
    exact = r_drop_loss(hidden, weight, target)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        approx = r_drop_loss(hidden, weight, target)
    assert approx.dtype == torch.float32
    torch.testing.assert_close(approx, exact, rtol=2e-2, atol=0)


def test_r_drop_loss_refuses_targets_that_are_not_one_batch_twice():
    target = torch.randint(2, 50, (4, 5))
    with pytest.raises(ValueError, match="the same targets twice"):
        r_drop_loss(torch.randn(4, 5, 8), torch.randn(50, 8), target)
