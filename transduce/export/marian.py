"""Our Transformer as a Hugging Face model with the same function: `MarianMTModel` for the
paper's post-norm arrangement, `PegasusForConditionalGeneration` for pre-norm.

Both are the paper's Transformer (Pegasus with pre-norm layers and a LayerNorm after each stack,
as ours with norm_first). Two layouts differ: they put the sinusoids' sines in the first half of
each position vector and the cosines in the second, where we interleave them as the paper writes
PE(pos, 2i) and PE(pos, 2i+1); and they keep Q, K, V in separate matrices. Permuting the
coordinates of the residual stream by the same permutation everywhere (embeddings, every matrix
that reads or writes the stream, LayerNorms) turns one layout into the other without changing
any output, so the converted model uses its own positional table and survives
`save_pretrained` / `from_pretrained` and conversion to CTranslate2 unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from transduce.data.tokenizer import Tokenizers
from transduce.decoding.config import DecodeConfig
from transduce.errors import UserError
from transduce.model.transformer import Transformer


def residual_permutation(d_model: int) -> torch.Tensor:
    """Index p with marian_vector = our_vector[p]: even coordinates first, then odd."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


# Our parameters and Hugging Face Marian's (and Pegasus's), one table read both ways: import
# (transduce.importers.marian) and export (`to_huggingface`). Each layer's, by (ours, theirs,
# kind); the kind says how the residual stream's permutation applies: "reads" to a Linear's
# input columns, "writes" to its output rows, "norm" to a LayerNorm's features, "attention" to
# the q/k/v projections (packed in ours, three in theirs) and the output projection.
LAYERS = {
    "encoder": (("self_attn", "self_attn", "attention"),
                ("attn_block.norm", "self_attn_layer_norm", "norm"),
                ("ffn.w1", "fc1", "reads"), ("ffn.w2", "fc2", "writes"),
                ("ffn_block.norm", "final_layer_norm", "norm")),
    "decoder": (("self_attn", "self_attn", "attention"),
                ("self_attn_block.norm", "self_attn_layer_norm", "norm"),
                ("cross_attn", "encoder_attn", "attention"),
                ("cross_attn_block.norm", "encoder_attn_layer_norm", "norm"),
                ("ffn.w1", "fc1", "reads"), ("ffn.w2", "fc2", "writes"),
                ("ffn_block.norm", "final_layer_norm", "norm")),
}


def parameter_names(config) -> list[tuple[str, str, str]]:
    """(our name, their name, kind) of every parameter group of a model of `config`: the
    layers' (LAYERS), the embeddings ("embedding": columns permuted), a pre-norm model's final
    LayerNorms, the output bias ("bias": (V,) ours, (1, V) theirs). Embeddings: ours are shared
    and tied (export needs it); an imported model's may be neither."""
    if config.share_embeddings:
        names = [("encoder.embedding.tokens", "model.shared", "embedding")]
    else:
        names = [("encoder.embedding.tokens", "model.encoder.embed_tokens", "embedding"),
                 ("decoder.embedding.tokens", "model.decoder.embed_tokens", "embedding")]
    if not config.tie_output:
        names.append(("output", "lm_head", "embedding"))
    for stack, layers in (("encoder", config.n_encoder_layers),
                          ("decoder", config.n_decoder_layers)):
        for i in range(layers):
            names += [(f"{stack}.layers.{i}.{ours}", f"model.{stack}.layers.{i}.{theirs}", kind)
                      for ours, theirs, kind in LAYERS[stack]]
        if config.norm_first:
            names.append((f"{stack}.norm", f"model.{stack}.layer_norm", "norm"))
    if config.output_bias:
        names.append(("output.bias", "final_logits_bias", "bias"))
    return names


def convert(state: dict[str, torch.Tensor], config, *, to_theirs: bool) -> dict[str, torch.Tensor]:
    """A state dict in the other's names and layout: ours to theirs (`to_theirs`), or theirs
    to ours, by `parameter_names`."""
    p = residual_permutation(config.d_model)
    if not to_theirs:
        p = torch.argsort(p)  # the inverse: our_vector = marian_vector[argsort(p)]
    d = config.d_model
    out: dict[str, torch.Tensor] = {}

    def move(source: str, target: str, kind: str) -> None:
        weight, bias = state.get(f"{source}.weight"), state.get(f"{source}.bias")
        if kind in ("reads", "embedding"):
            out[f"{target}.weight"] = weight[:, p]
        elif kind in ("writes", "norm"):
            out[f"{target}.weight"] = weight[p]
        if kind in ("reads", "writes", "norm") and bias is not None:
            out[f"{target}.bias"] = bias if kind == "reads" else bias[p]

    for ours, theirs, kind in parameter_names(config):
        if kind == "bias":
            out[theirs if to_theirs else ours] = (state[ours][None] if to_theirs
                                                  else state[theirs].reshape(-1))
        elif kind == "attention":
            projections = [f"{theirs}.{name}" for name in ("q_proj", "k_proj", "v_proj")]
            if to_theirs:
                w, b = state[f"{ours}.in_proj.weight"], state[f"{ours}.in_proj.bias"]
                for i, name in enumerate(projections):
                    out[f"{name}.weight"] = w[i * d : (i + 1) * d][:, p]
                    out[f"{name}.bias"] = b[i * d : (i + 1) * d]
            else:
                out[f"{ours}.in_proj.weight"] = torch.cat(
                    [state[f"{name}.weight"][:, p] for name in projections])
                out[f"{ours}.in_proj.bias"] = torch.cat(
                    [state[f"{name}.bias"] for name in projections])
            move(*((f"{ours}.out_proj", f"{theirs}.out_proj") if to_theirs
                   else (f"{theirs}.out_proj", f"{ours}.out_proj")), "writes")
        else:
            move(*((ours, theirs) if to_theirs else (theirs, ours)), kind)
    return out


def _check(model: Transformer) -> None:
    c = model.config
    if c.positional != "sinusoidal" or not c.share_embeddings or not c.tie_output:
        raise UserError("Hugging Face export needs sinusoidal positions and shared, tied "
                        "embeddings")
    if c.layer_norm_eps != 1e-5:
        raise UserError(f"Hugging Face export needs model.layer_norm_eps 1e-5, got "
                        f"{c.layer_norm_eps}")


def huggingface_types(model: Transformer) -> tuple[type, type]:
    """(config class, model class): Marian for post-norm, Pegasus for pre-norm."""
    try:
        import transformers
    except ImportError:
        raise UserError("exporting needs Hugging Face transformers, an optional dependency: "
                        "pip install 'transduce[export]'") from None

    if model.config.norm_first:
        return transformers.PegasusConfig, transformers.PegasusForConditionalGeneration
    return transformers.MarianConfig, transformers.MarianMTModel


def hf_config(model: Transformer):
    """MarianConfig (post-norm) or PegasusConfig (pre-norm) for our model's shape."""
    _check(model)
    c = model.config
    kwargs = dict(
        vocab_size=c.tgt_vocab_size, d_model=c.d_model,
        encoder_layers=c.n_encoder_layers, decoder_layers=c.n_decoder_layers,
        encoder_attention_heads=c.n_heads, decoder_attention_heads=c.n_heads,
        encoder_ffn_dim=c.d_ff, decoder_ffn_dim=c.d_ff, activation_function=c.activation,
        max_position_embeddings=c.max_positions, scale_embedding=c.scale_embedding, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, pad_token_id=c.pad_id,
        eos_token_id=c.eos_id, bos_token_id=c.bos_id, decoder_start_token_id=c.bos_id,
        forced_eos_token_id=None, tie_word_embeddings=True, is_encoder_decoder=True)
    if not c.norm_first:  # Marian's own keys
        kwargs.update(decoder_vocab_size=c.tgt_vocab_size, share_encoder_decoder_embeddings=True)
    elif c.output_bias or not c.scale_embedding:
        raise UserError("a pre-norm model exports as Pegasus, which has no output bias and "
                        "always scales its embeddings")
    return huggingface_types(model)[0](**kwargs)


def to_marian(model: Transformer):
    """A MarianMTModel computing the same logits as the post-norm `model` (eval mode)."""
    if model.config.norm_first:
        raise UserError("only post-norm models (model.norm_first=false) convert to Marian; "
                        "pre-norm ones convert to Pegasus (to_huggingface)")
    return to_huggingface(model)


@torch.no_grad()
def to_huggingface(model: Transformer):
    """A MarianMTModel (post-norm) or PegasusForConditionalGeneration (pre-norm) computing the
    same logits as `model` (eval mode)."""
    hf_type = huggingface_types(model)[1]
    hf = hf_type(hf_config(model)).eval()
    state = convert(model.state_dict(), model.config, to_theirs=True)
    missing, unexpected = hf.load_state_dict(
        {k: v.detach().clone() for k, v in state.items()}, strict=False)
    left = [k for k in missing if not k.endswith(("embed_positions.weight", "embed_tokens.weight",
                                                  "lm_head.weight", "final_logits_bias"))]
    if left or unexpected:
        raise RuntimeError(f"{hf_type.__name__} conversion left {left} unset and {unexpected} "
                           f"unknown")
    hf.tie_weights()
    return hf


def longest_output(decode: DecodeConfig, max_positions: int) -> int:
    """The most tokens before </s> an output of any source may have under `decode`: a * length
    + b grows with the source, which no fixed limit can say, so then the model's maximum (as
    our search clamps it: max_positions - 2)."""
    most = max_positions - 2
    return min(decode.max_len_b, most) if decode.max_len_a == 0 else most


EARLY_STOPPING = {"early": False, "finished": True, "exact": "never"}  # ours: Hugging Face's


def search_settings(decode: DecodeConfig, max_positions: int) -> dict:
    """`decode` as Hugging Face generation settings: max_new_tokens counts the </s> that our
    search forces at the limit (forced_eos_token_id), min_length the decoder's start token;
    its length_penalty divides by length ** alpha, our `power` normalisation (for `gnmt` the
    default, 1.0, is the nearest); early_stopping False is its heuristic, our `early`, True
    our `finished`, and "never" its exact search."""
    settings = dict(num_beams=decode.beam_size, renormalize_logits=decode.renormalize,
                    max_new_tokens=longest_output(decode, max_positions) + 1,
                    min_length=decode.min_len + 1)
    if decode.beam_size > 1:  # Hugging Face refuses beam settings for a greedy search
        settings["early_stopping"] = EARLY_STOPPING[decode.stopping]
        if decode.length_normalization == "power":
            settings["length_penalty"] = decode.length_penalty
    return settings


def save_huggingface(model: Transformer, tokenizers: Tokenizers, out_dir: Path, *,
                     decode: DecodeConfig | None = None, languages: tuple[str, str] | None = None,
                     ) -> Path:
    """A Hugging Face model directory (Marian or Pegasus weights and config, a MarianTokenizer
    over our SentencePiece model or an imported Marian model's own, and a generation config
    that searches as `decode` says), loadable with from_pretrained and convertible by
    CTranslate2."""
    from transformers import GenerationConfig, MarianTokenizer

    out_dir = Path(out_dir)
    if tokenizers.src.kind == "marian":
        if tokenizers.src.vocab != tokenizers.tgt.vocab:
            raise UserError("Hugging Face export of separate source and target vocabularies "
                            "is not supported")
        special = {f"{k}_token": tokenizers.src.tokens[k] for k in ("eos", "unk", "pad")}
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "source.spm").write_bytes(tokenizers.src.model_proto)
        (out_dir / "target.spm").write_bytes(tokenizers.tgt.model_proto)
        vocab = tokenizers.src.vocab
    elif tokenizers.shared and tokenizers.src.kind == "sentencepiece":
        special = {"eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"}
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in ("source.spm", "target.spm"):
            tokenizers.src.save(out_dir / name)
        pieces = tokenizers.src.pieces(range(tokenizers.src.vocab_size))
        vocab = {p: i for i, p in enumerate(pieces)}
    else:
        raise UserError("Hugging Face export needs a shared SentencePiece vocabulary")
    hf = to_huggingface(model)
    c = model.config
    generation = dict(decoder_start_token_id=c.bos_id, eos_token_id=c.eos_id,
                      pad_token_id=c.pad_id, bos_token_id=c.bos_id, forced_eos_token_id=c.eos_id,
                      bad_words_ids=[[i] for i in sorted({c.pad_id, c.bos_id})])
    if decode is not None:
        generation.update(search_settings(decode, c.max_positions))
    hf.generation_config = GenerationConfig(**generation)
    hf.save_pretrained(out_dir)
    (out_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    source_lang, target_lang = languages or (None, None)
    MarianTokenizer(str(out_dir / "source.spm"), str(out_dir / "target.spm"),
                    str(out_dir / "vocab.json"), source_lang=source_lang, target_lang=target_lang,
                    **special).save_pretrained(out_dir)
    return out_dir
