import pytest
import torch
from torch import nn

from transduce.model.transformer import Transformer

from ..conftest import PAD, random_tokens, small_model


def _copy_attention(ours, ref: nn.MultiheadAttention):
    ref.in_proj_weight.copy_(ours.in_proj.weight)
    ref.in_proj_bias.copy_(ours.in_proj.bias)
    ref.out_proj.weight.copy_(ours.out_proj.weight)
    ref.out_proj.bias.copy_(ours.out_proj.bias)


def _copy_ffn(ours, ref):
    ref.linear1.load_state_dict(ours.ffn.w1.state_dict())
    ref.linear2.load_state_dict(ours.ffn.w2.state_dict())


def reference_transformer(model: Transformer) -> nn.Transformer:
    """torch.nn.Transformer holding our weights."""
    c = model.config
    ref = nn.Transformer(c.d_model, c.n_heads, c.n_encoder_layers, c.n_decoder_layers, c.d_ff,
                         dropout=0.0, batch_first=True, norm_first=c.norm_first,
                         layer_norm_eps=c.layer_norm_eps)
    with torch.no_grad():
        for ours, theirs in zip(model.encoder.layers, ref.encoder.layers, strict=True):
            _copy_attention(ours.self_attn, theirs.self_attn)
            _copy_ffn(ours, theirs)
            theirs.norm1.load_state_dict(ours.attn_block.norm.state_dict())
            theirs.norm2.load_state_dict(ours.ffn_block.norm.state_dict())
        for ours, theirs in zip(model.decoder.layers, ref.decoder.layers, strict=True):
            _copy_attention(ours.self_attn, theirs.self_attn)
            _copy_attention(ours.cross_attn, theirs.multihead_attn)
            _copy_ffn(ours, theirs)
            theirs.norm1.load_state_dict(ours.self_attn_block.norm.state_dict())
            theirs.norm2.load_state_dict(ours.cross_attn_block.norm.state_dict())
            theirs.norm3.load_state_dict(ours.ffn_block.norm.state_dict())
        if c.norm_first:
            ref.encoder.norm.load_state_dict(model.encoder.norm.state_dict())
            ref.decoder.norm.load_state_dict(model.decoder.norm.state_dict())
        else:  # nn.Transformer always adds a final LayerNorm; the paper's post-norm model has none
            ref.encoder.norm = None
            ref.decoder.norm = None
    return ref.eval()


def _padded_batch(lengths, max_length):
    tokens = random_tokens(len(lengths), max_length)
    for row, length in enumerate(lengths):
        tokens[row, length:] = PAD
    return tokens


@pytest.mark.filterwarnings("ignore:.*nested")
@pytest.mark.parametrize("norm_first", [False, True])
def test_equals_torch_nn_transformer_with_the_same_weights(norm_first):
    model = small_model(norm_first=norm_first)
    ref = reference_transformer(model)
    src, tgt = _padded_batch([9, 5, 7], 9), _padded_batch([6, 8, 3], 8)
    with torch.no_grad():
        src_x, tgt_x = model.encoder.embedding(src), model.decoder.embedding(tgt)
        hidden = ref(src_x, tgt_x, src_key_padding_mask=src == PAD,
                     memory_key_padding_mask=src == PAD,
                     tgt_mask=nn.Transformer.generate_square_subsequent_mask(8), tgt_is_causal=True)
        expected = model.output(hidden)
        logits = model(src, tgt)
    real = tgt != PAD
    torch.testing.assert_close(logits[real], expected[real], atol=1e-5, rtol=1e-4)


def test_causality_logits_at_t_ignore_later_tokens():
    model = small_model()
    src, tgt = random_tokens(2, 7), random_tokens(2, 9)
    changed = tgt.clone()
    changed[:, 5:] = random_tokens(2, 4)
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :5], b[:, :5])
    assert not torch.allclose(a[:, 5:], b[:, 5:])  # the change is visible where it should be


@pytest.mark.parametrize("norm_first", [False, True])
def test_appending_padding_does_not_change_real_positions(norm_first):
    model = small_model(norm_first=norm_first)
    src, tgt = random_tokens(3, 6), random_tokens(3, 5)
    padded_src = torch.cat([src, torch.full((3, 4), PAD)], dim=1)
    padded_tgt = torch.cat([tgt, torch.full((3, 3), PAD)], dim=1)
    with torch.no_grad():
        expected = model(src, tgt)
        torch.testing.assert_close(model(padded_src, tgt), expected)
        torch.testing.assert_close(model(src, padded_tgt)[:, :5], expected)
        torch.testing.assert_close(model(padded_src, padded_tgt)[:, :5], expected)


def test_each_sentence_is_independent_of_its_batch_neighbours():
    model = small_model()
    src, tgt = _padded_batch([8, 3, 6], 8), _padded_batch([4, 7, 2], 7)
    with torch.no_grad():
        batched = model(src, tgt)
        for i in range(3):
            alone = model(src[i : i + 1, : (src[i] != PAD).sum()], tgt[i : i + 1])
            torch.testing.assert_close(batched[i : i + 1, : 7], alone, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("options", [dict(norm_first=False), dict(norm_first=True),
                                     dict(positional="learned", activation="gelu")])
def test_cached_incremental_decoding_equals_full_decoding(options):
    model = small_model(**options)
    src, tgt = _padded_batch([7, 4, 6], 7), random_tokens(3, 10)
    with torch.no_grad():
        src_mask = model.src_mask(src)
        memory = model.encode(src, src_mask)
        full = model.decode(tgt, memory, src_mask)
        cache = model.new_cache()
        steps = [model.decode(tgt[:, t : t + 1], memory, src_mask, cache=cache) for t in range(10)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-4)
    assert cache.length == 10


def test_cached_decoding_after_a_forced_prefix_equals_full_decoding():
    model = small_model()
    src, tgt = random_tokens(2, 5), random_tokens(2, 9)
    with torch.no_grad():
        memory = model.encode(src)
        full = model.decode(tgt, memory, None)
        cache = model.new_cache()
        prefix = model.decode(tgt[:, :4], memory, None, cache=cache)  # several positions at once
        rest = [model.decode(tgt[:, t : t + 1], memory, None, cache=cache) for t in range(4, 9)]
    torch.testing.assert_close(torch.cat([prefix, *rest], dim=1), full, atol=1e-5, rtol=1e-4)


def test_cache_select_follows_reordered_beams():
    model = small_model()
    src, tgt = random_tokens(3, 5), random_tokens(3, 6)
    order = torch.tensor([2, 0, 0])
    with torch.no_grad():
        memory, src_mask = model.encode(src), model.src_mask(src)
        cache = model.new_cache()
        model.decode(tgt[:, :3], memory, src_mask, cache=cache)
        cache.select(order)
        step = model.decode(tgt[order, 3:4], memory[order], src_mask[order], cache=cache)
        full = model.decode(tgt[order, :4], memory[order], src_mask[order])
    torch.testing.assert_close(step[:, 0], full[:, 3], atol=1e-5, rtol=1e-4)


def test_decode_with_attention_gives_the_same_logits_and_normalised_weights():
    model = small_model()
    src, tgt = _padded_batch([6, 3], 6), random_tokens(2, 4)
    with torch.no_grad():
        memory, src_mask = model.encode(src), model.src_mask(src)
        logits, weights = model.decode_with_attention(tgt, memory, src_mask)
        torch.testing.assert_close(logits, model.decode(tgt, memory, src_mask))
    assert weights.shape == (3, 2, 4, 4, 6)  # (L, B, H, T, S)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 2, 4, 4))
    assert (weights[:, 1, :, :, 3:] == 0).all()  # padding of the shorter source gets no attention


def test_training_mode_applies_dropout_and_trains():
    model = small_model(dropout=0.3).train()
    src, tgt = random_tokens(4, 6), random_tokens(4, 5)
    a, b = model(src, tgt), model(src, tgt)
    assert not torch.allclose(a, b)
    loss = nn.functional.cross_entropy(a.flatten(0, 1), random_tokens(4, 5).flatten())
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is not None and g.isfinite().all() for g in grads.values())


def test_too_long_input_is_a_clear_error():
    model = small_model()
    with pytest.raises(ValueError, match="max_positions=64"):
        model.encode(random_tokens(1, 65))


def test_bf16_autocast_gives_close_logits_and_finite_gradients():
    model = small_model(dropout=0.0).train()  # train mode, no dropout noise between the two
    src, tgt = _padded_batch([7, 5], 7), random_tokens(2, 6)
    expected = model(src, tgt)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(src, tgt)
    torch.testing.assert_close(logits.float(), expected, atol=0.1, rtol=0.05)
    logits.float().sum().backward()
    assert all(p.grad.isfinite().all() for p in model.parameters())



def test_decode_next_gives_the_newest_position_of_decode_into_out_when_given():
    model = small_model()
    src, tgt = _padded_batch([5, 3], 5), random_tokens(2, 4)
    with torch.no_grad():
        memory, src_mask = model.encode(src), model.src_mask(src)
        expected = model.decode(tgt, memory, src_mask)[:, -1]
        out = torch.full_like(expected, float("nan"))
        written = model.decode_next(tgt, memory, src_mask, out=out)
        torch.testing.assert_close(model.decode_next(tgt, memory, src_mask), expected)
    assert written.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, expected)
