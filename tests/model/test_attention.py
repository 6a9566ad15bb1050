import math

import pytest
import torch

from transduce.model.attention import MultiHeadAttention, attention, attention_with_weights
from transduce.model.cache import KVCache
from transduce.model.masks import causal_mask


def _qkv(batch=3, heads=2, n_q=5, n_k=7, head_dim=8):
    return (torch.randn(batch, heads, n_q, head_dim), torch.randn(batch, heads, n_k, head_dim),
            torch.randn(batch, heads, n_k, head_dim))


def _key_mask(batch=3, n_k=7):
    mask = torch.ones(batch, 1, 1, n_k, dtype=torch.bool)
    mask[0, ..., 4:] = False
    mask[1, ..., 6:] = False
    return mask


def test_attention_matches_the_formula():
    q, k, v = _qkv()
    mask = _key_mask()
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    expected = scores.masked_fill(~mask, -math.inf).softmax(-1) @ v
    torch.testing.assert_close(attention(q, k, v, mask), expected)


@pytest.mark.parametrize("causal", [False, True])
def test_explicit_path_equals_fused_path(causal):
    q, k, v = _qkv(n_q=7, n_k=7)
    mask = _key_mask()
    out, _ = attention_with_weights(q, k, v, mask, causal=causal)
    torch.testing.assert_close(out, attention(q, k, v, mask, causal=causal))


def test_causal_with_cached_keys_equals_explicit_mask():
    q, k, v = _qkv(n_q=3, n_k=7)
    expected = attention(q, k, v, causal_mask(3, 7))
    torch.testing.assert_close(attention(q, k, v, causal=True), expected)
    torch.testing.assert_close(attention_with_weights(q, k, v, causal=True)[0], expected)


def test_weights_sum_to_one_over_unmasked_keys_and_zero_on_masked():
    q, k, v = _qkv()
    mask = _key_mask()
    _, weights = attention_with_weights(q, k, v, mask)
    assert weights.shape == (3, 2, 5, 7)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 2, 5))
    assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()


@pytest.mark.parametrize("n_q", [1, 5])  # one query: the decoding step's own path
def test_attention_matches_the_formula_with_and_without_mask(n_q):
    q, k, v = _qkv(n_q=n_q)
    for mask in (_key_mask(), None):
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, -math.inf)
        torch.testing.assert_close(attention(q, k, v, mask), scores.softmax(-1) @ v)
        torch.testing.assert_close(attention(q, k, v, mask, causal=True),
                                   attention_with_weights(q, k, v, mask, causal=True)[0])


@pytest.mark.parametrize("n_q", [1, 5])
def test_fully_masked_rows_give_zeros_not_nan(n_q):
    q, k, v = _qkv(n_q=n_q)
    mask = _key_mask()
    mask[2] = False  # a sentence with no key at all
    for out in (attention(q, k, v, mask), attention_with_weights(q, k, v, mask)[0]):
        assert not out.isnan().any()
        assert (out[2] == 0).all()
    assert (attention_with_weights(q, k, v, mask)[1][2] == 0).all()


def test_fully_masked_rows_have_finite_gradients():
    q, k, v = (t.requires_grad_() for t in _qkv())
    mask = _key_mask()
    mask[2] = False
    attention(q, k, v, mask).sum().backward()
    assert all(t.grad.isfinite().all() for t in (q, k, v))


def test_multi_head_attention_equals_torch_multihead_attention():
    d_model, heads = 16, 4
    ours = MultiHeadAttention(d_model, heads).eval()
    ref = torch.nn.MultiheadAttention(d_model, heads, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.in_proj.weight)
        ref.in_proj_bias.copy_(ours.in_proj.bias)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    x, memory = torch.randn(2, 5, d_model), torch.randn(2, 7, d_model)
    key_mask = _key_mask(2, 7)
    out, weights = ours(x, memory, mask=key_mask, need_weights=True)
    ref_out, ref_weights = ref(x, memory, memory, key_padding_mask=~key_mask[:, 0, 0],
                               average_attn_weights=False)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_weights)
    torch.testing.assert_close(ours(x)[0], ref(x, x, x, need_weights=False)[0])


def test_projections_are_initialised_as_torch_multihead_attention():
    d_model = 64
    mha = MultiHeadAttention(d_model, 4)
    ref = torch.nn.MultiheadAttention(d_model, 4)  # Xavier over the packed (3D, D) block
    ref_bound = ref.in_proj_weight.abs().max()
    for w in mha.in_proj.weight.chunk(3):
        assert w.abs().max() <= math.sqrt(6 / (4 * d_model)) and w.abs().max() > 0.9 * ref_bound
    out_bound = math.sqrt(6 / (2 * d_model))
    assert 0.9 * out_bound < mha.out_proj.weight.abs().max() <= out_bound


def test_qkv_init_gain_one_is_xavier_per_matrix_on_the_same_draw():
    torch.manual_seed(3)
    packed = MultiHeadAttention(64, 4)
    torch.manual_seed(3)
    per_matrix = MultiHeadAttention(64, 4, init_gain=1.0)
    torch.testing.assert_close(per_matrix.in_proj.weight, packed.in_proj.weight * math.sqrt(2))
    torch.testing.assert_close(per_matrix.out_proj.weight, packed.out_proj.weight)
    bound = math.sqrt(6 / (2 * 64))  # Xavier of one (D, D) matrix
    assert 0.9 * bound < per_matrix.in_proj.weight.abs().max() <= bound


def test_cached_self_attention_step_by_step_equals_causal_over_the_whole_sequence():
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 6, 16)
    full, _ = mha(x, causal=True)
    cache = KVCache()
    steps = [mha(x[:, t : t + 1], causal=True, cache=cache)[0] for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


def test_cross_attention_cache_projects_memory_once():
    mha = MultiHeadAttention(16, 4).eval()
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 7, 16)
    cache = KVCache()
    first, _ = mha(x, memory, cache=cache)
    again, _ = mha(x, torch.full_like(memory, float("nan")), cache=cache)  # memory not re-read
    torch.testing.assert_close(again, first)
    assert len(cache) == 7


def test_training_under_bf16_autocast_attends_in_fp32(kernel_path):
    if kernel_path == "reference":
        pytest.skip("a property of the fast kernel, off on the reference path")
    q, k, v = (t.to(torch.bfloat16).requires_grad_() for t in _qkv())
    mask = _key_mask()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attention(q, k, v, mask)
    assert out.dtype == torch.bfloat16
    expected = attention(q.detach().float(), k.detach().float(), v.detach().float(), mask)
    torch.testing.assert_close(out, expected.to(torch.bfloat16))
    out.float().sum().backward()
    assert q.grad.dtype == torch.bfloat16 and q.grad.isfinite().all()


@pytest.mark.parametrize("n_q", [1, 4])
@pytest.mark.parametrize("need_weights", [False, True])
def test_cross_attention_to_one_memory_row_per_group_equals_repeating_it(n_q, need_weights):
    # beam search keeps a source's encoder output once for its k beams
    attn = MultiHeadAttention(16, 2).eval()
    beams, x = 3, torch.randn(6, n_q, 16)  # 2 sources x 3 beams
    memory, mask = torch.randn(2, 7, 16), _key_mask(batch=2)
    cache = KVCache()
    with torch.no_grad():
        grouped = attn(x, memory, mask=mask, cache=cache, need_weights=need_weights)
        again = attn(x, memory, mask=mask, cache=cache, need_weights=need_weights)  # cached
        repeated = attn(x, memory.repeat_interleave(beams, 0), mask=mask.repeat_interleave(
            beams, 0), need_weights=need_weights)
    assert cache.keys.shape[0] == 2
    for out in (grouped, again):
        torch.testing.assert_close(out[0], repeated[0])
        if need_weights:
            torch.testing.assert_close(out[1], repeated[1])
