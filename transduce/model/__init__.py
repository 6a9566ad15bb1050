"""The Transformer model, one small module per part of the paper."""

from typing import TYPE_CHECKING

from transduce.exports import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "transduce.model.attention": ("MultiHeadAttention", "attention", "attention_with_weights"),
    "transduce.model.cache": ("DecoderCache", "KVCache", "LayerCache"),
    "transduce.model.static_cache": ("StaticDecoderCache",),
    "transduce.model.config": ("PRESETS", "ModelConfig"),
    "transduce.model.embeddings": ("sinusoidal_encoding",),
    "transduce.model.masks": ("causal_mask", "padding_mask"),
    "transduce.model.steps": ("DecoderSteps",),
    "transduce.model.transformer": ("Decoder", "Encoder", "Transformer"),
})

if TYPE_CHECKING:
    from transduce.model.attention import MultiHeadAttention, attention, attention_with_weights
    from transduce.model.cache import DecoderCache, KVCache, LayerCache
    from transduce.model.config import PRESETS, ModelConfig
    from transduce.model.embeddings import sinusoidal_encoding
    from transduce.model.masks import causal_mask, padding_mask
    from transduce.model.static_cache import StaticDecoderCache
    from transduce.model.steps import DecoderSteps
    from transduce.model.transformer import Decoder, Encoder, Transformer

__all__ = [
    "Decoder", "DecoderCache", "DecoderSteps", "Encoder", "KVCache", "LayerCache", "ModelConfig",
    "MultiHeadAttention", "PRESETS", "StaticDecoderCache", "Transformer", "attention",
    "attention_with_weights", "causal_mask", "padding_mask", "sinusoidal_encoding",
]
