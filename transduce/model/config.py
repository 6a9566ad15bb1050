"""Hyper-parameters of the Transformer, with the presets of the paper and of common recipes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from transduce.errors import UserError
from transduce.fields import setting

ACTIVATIONS = ("relu", "gelu", "swish")
POSITIONAL_ENCODINGS = ("sinusoidal", "learned")


@dataclass(frozen=True)
class ModelConfig:
    """Everything that fixes the shape and the behaviour of a `Transformer`."""

    src_vocab_size: int = setting(help=(
        "V of the source side (the shared vocabulary's size when shared)"))
    tgt_vocab_size: int = setting(help="V of the target side")
    d_model: int = setting(512, "D: width of every residual stream, embedding and attention output")
    n_heads: int = setting(8, "H: attention heads; each has Dh = D / H dimensions")
    d_ff: int = setting(2048, "inner width of the position-wise feed-forward network")
    n_encoder_layers: int = setting(6, "N of the paper: encoder layers")
    n_decoder_layers: int = setting(6, "decoder layers")
    dropout: float = setting(0.1, "residual dropout: on embeddings and on every sub-layer's output")
    attention_dropout: float = setting(0.0, "dropout on attention weights (not in the paper)")
    activation_dropout: float = setting(0.0,
        "dropout after the feed-forward activation (not in the paper)")
    source_word_dropout: float = setting(0.0, "zero whole source token vectors (not in the paper)")
    target_word_dropout: float = setting(0.0, "the same on the decoder's input tokens")
    activation: str = setting("relu",
        "'relu' (paper), 'gelu' or 'swish' (x * sigmoid(x): OPUS-MT's)")
    max_positions: int = setting(1024, "longest sequence, in tokens, either side accepts")
    positional: str = setting("sinusoidal",
        "'sinusoidal' (paper) or 'learned' position embeddings")
    norm_first: bool = setting(False,
        "False: the paper's post-norm; True: pre-norm with a final LayerNorm")
    share_embeddings: bool = setting(True,
        "one embedding matrix for source and target (shared vocabulary)")
    tie_output: bool = setting(True,
        "output projection = target embedding matrix (paper section 3.4)")
    output_bias: bool = setting(False,
        "a bias on the output projection (Marian's final_logits_bias)")
    scale_embedding: bool = setting(True, "multiply embeddings by sqrt(D) (paper section 3.4)")
    qkv_init_gain: float = setting(2 ** -0.5,
        "Xavier gain of each of W_Q, W_K, W_V at initialisation: 1/sqrt(2) is Xavier over the "
        "three together (PyTorch's, fairseq's); 1.0 Xavier per matrix (the Multi30k recipe's)")
    layer_norm_eps: float = setting(1e-5, "epsilon of every LayerNorm")
    pad_id: int = setting(1,
        "id of <pad>: transduce's tokenizers use these special ids, an imported model's "
        "tokenizer its own (Marian: eos 0, unk 1, pad = bos = V-1)")
    bos_id: int = setting(2, "id of <bos>, the decoder's first input")
    eos_id: int = setting(3, "id of <eos>, which ends every sequence")
    unk_id: int = setting(0, "id of <unk>, for pieces outside the vocabulary")

    def __post_init__(self) -> None:
        check_model(dataclasses.asdict(self))
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise UserError(
                f"model.share_embeddings needs one vocabulary, but src_vocab_size="
                f"{self.src_vocab_size} and tgt_vocab_size={self.tgt_vocab_size}; "
                "set model.share_embeddings=false for separate vocabularies")
        specials = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id,
                    "unk_id": self.unk_id}
        for name, value in specials.items():
            if not 0 <= value < min(self.src_vocab_size, self.tgt_vocab_size):
                raise UserError(f"model.{name}={value} is outside the vocabulary")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def preset(cls, name: str, **overrides) -> ModelConfig:
        """A named configuration, with any field overridden; vocabulary sizes are required.

        `base` and `big` are Table 3 of the paper, `iwslt` is fairseq's transformer_iwslt_de_en,
        `tiny` is the 4-layer model of Wu et al. (2021) that holds the text-only Multi30k record.
        """
        if name not in PRESETS:
            raise UserError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise UserError(f"unknown model field(s) {unknown}")
        return cls(**{**PRESETS[name], **overrides})


PRESETS: dict[str, dict] = {
    "base": dict(d_model=512, d_ff=2048, n_heads=8, n_encoder_layers=6, n_decoder_layers=6,
                 dropout=0.1),
    "big": dict(d_model=1024, d_ff=4096, n_heads=16, n_encoder_layers=6, n_decoder_layers=6,
                dropout=0.3),
    "iwslt": dict(d_model=512, d_ff=1024, n_heads=4, n_encoder_layers=6, n_decoder_layers=6,
                  dropout=0.3),
    "tiny": dict(d_model=128, d_ff=256, n_heads=4, n_encoder_layers=4, n_decoder_layers=4,
                 dropout=0.3),
}


def check_model(values: dict) -> None:
    """The checks of a model's settings that need no vocabulary (a config file's `model`
    section is checked with them before any tokenizer exists), over the fields' defaults."""
    defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)
                if f.default is not dataclasses.MISSING}
    v = {**defaults, **values}
    for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff",
                 "n_encoder_layers", "n_decoder_layers", "max_positions"):
        if name in v and v[name] <= 0:
            raise UserError(f"model.{name} must be positive, got {v[name]}")
    if v["d_model"] % v["n_heads"]:
        raise UserError(f"model.d_model ({v['d_model']}) must be divisible by "
                        f"model.n_heads ({v['n_heads']})")
    for name in ("dropout", "attention_dropout", "activation_dropout", "source_word_dropout",
                 "target_word_dropout"):
        if not 0.0 <= v[name] < 1.0:
            raise UserError(f"model.{name} must be in [0, 1), got {v[name]}")
    if v["qkv_init_gain"] <= 0:
        raise UserError(f"model.qkv_init_gain must be positive, got {v['qkv_init_gain']}")
    if v["activation"] not in ACTIVATIONS:
        raise UserError(f"model.activation must be one of {ACTIVATIONS}, got {v['activation']!r}")
    if v["positional"] not in POSITIONAL_ENCODINGS:
        raise UserError(f"model.positional must be one of {POSITIONAL_ENCODINGS}, "
                        f"got {v['positional']!r}")
