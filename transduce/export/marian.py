"""Our Transformer as a Hugging Face `MarianMTModel` with the same function.

Marian's architecture is the paper's post-norm Transformer too. Two layouts differ: Marian puts
the sinusoids' sines in the first half of each position vector and the cosines in the second,
where we interleave them as the paper writes PE(pos, 2i) and PE(pos, 2i+1); and it keeps Q, K, V
in separate matrices. Permuting the coordinates of the residual stream by the same
permutation everywhere (embeddings, every matrix that reads or writes the stream, LayerNorms)
turns one layout into the other without changing any output, so the converted model uses
Marian's own positional table and survives `save_pretrained` / `from_pretrained` and conversion
to CTranslate2 unchanged.
"""

from __future__ import annotations

from pathlib import Path

import torch

from transduce.data.tokenizer import Tokenizers
from transduce.errors import UserError
from transduce.model.transformer import Transformer


def residual_permutation(d_model: int) -> torch.Tensor:
    """Index p with marian_vector = our_vector[p]: even coordinates first, then odd."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def marian_config(model: Transformer):
    from transformers import MarianConfig

    c = model.config
    if c.norm_first:
        raise UserError("only post-norm models (model.norm_first=false) convert to Marian")
    if c.positional != "sinusoidal" or not c.share_embeddings or not c.tie_output:
        raise UserError("Marian export needs sinusoidal positions and shared, tied embeddings")
    return MarianConfig(
        vocab_size=c.tgt_vocab_size, decoder_vocab_size=c.tgt_vocab_size, d_model=c.d_model,
        encoder_layers=c.n_encoder_layers, decoder_layers=c.n_decoder_layers,
        encoder_attention_heads=c.n_heads, decoder_attention_heads=c.n_heads,
        encoder_ffn_dim=c.d_ff, decoder_ffn_dim=c.d_ff, activation_function=c.activation,
        max_position_embeddings=c.max_positions, scale_embedding=True, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, pad_token_id=c.pad_id,
        eos_token_id=c.eos_id, bos_token_id=c.bos_id, decoder_start_token_id=c.bos_id,
        forced_eos_token_id=None, share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True, is_encoder_decoder=True)


@torch.no_grad()
def to_marian(model: Transformer):
    """A MarianMTModel computing the same logits as `model` (eval mode)."""
    from transformers import MarianMTModel

    marian = MarianMTModel(marian_config(model)).eval()
    p = residual_permutation(model.config.d_model)
    d = model.config.d_model
    state = {}

    def reads(name: str, weight, bias):  # a Linear that reads the residual stream
        state[f"{name}.weight"], state[f"{name}.bias"] = weight[:, p], bias

    def writes(name: str, weight, bias):  # a Linear that writes into the residual stream
        state[f"{name}.weight"], state[f"{name}.bias"] = weight[p], bias[p]

    def norm(name: str, layer_norm):
        state[f"{name}.weight"], state[f"{name}.bias"] = layer_norm.weight[p], layer_norm.bias[p]

    def attention(name: str, mha):
        w, b = mha.in_proj.weight, mha.in_proj.bias
        for i, proj in enumerate(("q_proj", "k_proj", "v_proj")):
            reads(f"{name}.{proj}", w[i * d : (i + 1) * d], b[i * d : (i + 1) * d])
        writes(f"{name}.out_proj", mha.out_proj.weight, mha.out_proj.bias)

    def ffn(name: str, layer):
        reads(f"{name}.fc1", layer.ffn.w1.weight, layer.ffn.w1.bias)
        writes(f"{name}.fc2", layer.ffn.w2.weight, layer.ffn.w2.bias)

    state["model.shared.weight"] = model.encoder.embedding.tokens.weight[:, p]
    for i, layer in enumerate(model.encoder.layers):
        prefix = f"model.encoder.layers.{i}"
        attention(f"{prefix}.self_attn", layer.self_attn)
        norm(f"{prefix}.self_attn_layer_norm", layer.attn_block.norm)
        ffn(prefix, layer)
        norm(f"{prefix}.final_layer_norm", layer.ffn_block.norm)
    for i, layer in enumerate(model.decoder.layers):
        prefix = f"model.decoder.layers.{i}"
        attention(f"{prefix}.self_attn", layer.self_attn)
        norm(f"{prefix}.self_attn_layer_norm", layer.self_attn_block.norm)
        attention(f"{prefix}.encoder_attn", layer.cross_attn)
        norm(f"{prefix}.encoder_attn_layer_norm", layer.cross_attn_block.norm)
        ffn(prefix, layer)
        norm(f"{prefix}.final_layer_norm", layer.ffn_block.norm)
    missing, unexpected = marian.load_state_dict(
        {k: v.detach().clone() for k, v in state.items()}, strict=False)
    left = [k for k in missing if not k.endswith(("embed_positions.weight", "embed_tokens.weight",
                                                  "lm_head.weight", "final_logits_bias"))]
    if left or unexpected:
        raise RuntimeError(f"Marian conversion left {left} unset and {unexpected} unknown")
    marian.tie_weights()
    return marian


def save_marian(model: Transformer, tokenizers: Tokenizers, out_dir: Path) -> Path:
    """A Hugging Face model directory (weights, config and a MarianTokenizer over our
    SentencePiece model), loadable with from_pretrained and convertible by CTranslate2."""
    import json

    from transformers import MarianTokenizer

    if not tokenizers.shared or tokenizers.src.kind != "sentencepiece":
        raise UserError("Marian export needs a shared SentencePiece vocabulary")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    to_marian(model).save_pretrained(out_dir)
    for name in ("source.spm", "target.spm"):
        tokenizers.src.save(out_dir / name)
    pieces = tokenizers.src.pieces(range(tokenizers.src.vocab_size))
    (out_dir / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)},
                                                   ensure_ascii=False))
    MarianTokenizer(str(out_dir / "source.spm"), str(out_dir / "target.spm"),
                    str(out_dir / "vocab.json"), unk_token="<unk>", pad_token="<pad>",
                    eos_token="<eos>").save_pretrained(out_dir)
    return out_dir
