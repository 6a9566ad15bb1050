"""The Transformer model, one small module per part of the paper."""

from transduce.model.attention import MultiHeadAttention, attention, attention_with_weights
from transduce.model.cache import DecoderCache, KVCache, LayerCache
from transduce.model.config import PRESETS, ModelConfig
from transduce.model.embeddings import sinusoidal_encoding
from transduce.model.masks import causal_mask, padding_mask
from transduce.model.transformer import Decoder, Encoder, Transformer

__all__ = [
    "PRESETS", "DecoderCache", "Decoder", "Encoder", "KVCache", "LayerCache", "ModelConfig",
    "MultiHeadAttention", "Transformer", "attention", "attention_with_weights", "causal_mask",
    "padding_mask", "sinusoidal_encoding",
]
