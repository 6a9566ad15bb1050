"""The encoder-decoder Transformer of "Attention Is All You Need" (section 3)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from transduce.kernels.linear import Linear
from transduce.model.cache import DecoderCache
from transduce.model.config import ModelConfig
from transduce.model.embeddings import (
    LearnedPositions,
    SinusoidalPositions,
    TransformerEmbedding,
    token_embedding,
)
from transduce.model.layers import DecoderLayer, EncoderLayer
from transduce.model.masks import padding_mask
from transduce.model.steps import DecoderSteps


def _embedding(config: ModelConfig, tokens: nn.Embedding,
               word_dropout: float) -> TransformerEmbedding:
    positions_type = SinusoidalPositions if config.positional == "sinusoidal" else LearnedPositions
    positions = positions_type(config.max_positions, config.d_model)
    return TransformerEmbedding(tokens, positions, config.dropout, word_dropout,
                                scale=config.scale_embedding)


def _final_norm(config: ModelConfig) -> nn.Module:
    """Pre-norm leaves the residual stream unnormalised, so the stack ends with a LayerNorm."""
    if config.norm_first:
        return nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
    return nn.Identity()


class Encoder(nn.Module):
    """Embedding, then N self-attention + feed-forward layers."""

    def __init__(self, config: ModelConfig, embedding: TransformerEmbedding) -> None:
        super().__init__()
        self.embedding = embedding
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_encoder_layers))
        self.norm = _final_norm(config)

    def forward(self, src: Tensor, src_mask: Tensor | None) -> Tensor:
        """src (B, S) ids, src_mask (B, 1, 1, S) -> memory (B, S, D)."""
        x = self.embedding(src)
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.norm(x)


class Decoder(nn.Module):
    """Embedding, then N causal self-attention + cross-attention + feed-forward layers."""

    def __init__(self, config: ModelConfig, embedding: TransformerEmbedding) -> None:
        super().__init__()
        self.embedding = embedding
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_decoder_layers))
        self.norm = _final_norm(config)

    def forward(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None, *,
                cache: DecoderCache | None = None,
                need_weights: bool = False) -> tuple[Tensor, list[Tensor]]:
        """tgt (B, T) ids -> hidden states (B, T, D) and the cross-attention weights of each layer
        (B, H, T, S) when need_weights (else an empty list).

        Without a cache, tgt is the whole decoder input. With one, tgt holds only the newest
        positions: earlier ones are read from the cache, which is updated (a static cache's
        position, a tensor, is where they go: transduce.model.cache).
        """
        offset = cache.offset if cache is not None else 0
        x = self.embedding(tgt, offset)
        weights = []
        for i, layer in enumerate(self.layers):
            layer_cache = cache.layers[i] if cache is not None else None
            x, w = layer(x, memory, src_mask, cache=layer_cache, need_weights=need_weights)
            if need_weights:
                weights.append(w)
        if cache is not None:
            cache.advance(tgt.shape[1])
        return self.norm(x), weights


class Transformer(nn.Module):
    """Encoder-decoder with shared embeddings and tied output projection.

    Padding is on the right of each sequence. Target padding needs no mask: with the causal mask
    a real position never attends to a later (padding) one.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        src_tokens = token_embedding(config.src_vocab_size, config.d_model, config.pad_id)
        tgt_tokens = (src_tokens if config.share_embeddings else
                      token_embedding(config.tgt_vocab_size, config.d_model, config.pad_id))
        self.encoder = Encoder(config, _embedding(config, src_tokens, config.source_word_dropout))
        self.decoder = Decoder(config, _embedding(config, tgt_tokens, config.target_word_dropout))
        self.output = Linear(config.d_model, config.tgt_vocab_size, bias=config.output_bias)
        if config.output_bias:
            nn.init.zeros_(self.output.bias)
        if config.tie_output:
            self.output.weight = tgt_tokens.weight
        else:
            nn.init.normal_(self.output.weight, std=config.d_model**-0.5)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: src (B, S), tgt_in (B, T) ids -> logits (B, T, V)."""
        return self.output(self.features(src, tgt_in))

    def features(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing up to the output projection: the decoder's last states (B, T, D)."""
        src_mask = self.src_mask(src)
        hidden, _ = self.decoder(tgt_in, self.encode(src, src_mask), src_mask)
        return hidden

    def src_mask(self, src: Tensor) -> Tensor:
        """(B, S) ids -> (B, 1, 1, S), True on real tokens."""
        return padding_mask(src, self.config.pad_id)

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """src (B, S) ids -> memory (B, S, D); computed once per source for search."""
        return self.encoder(src, self.src_mask(src) if src_mask is None else src_mask)

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None, *,
               cache: DecoderCache | None = None) -> Tensor:
        """tgt (B, T) ids -> logits (B, T, V). With a cache, tgt holds only the new positions."""
        hidden, _ = self.decoder(tgt, memory, src_mask, cache=cache)
        return self.output(hidden)

    def decode_next(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None, *,
                    cache: DecoderCache | None = None, out: Tensor | None = None) -> Tensor:
        """As `decode`, but only the newest position's logits, (B, V): a search step's. With
        `out` (B, V) they are written there where the output layer can (`writes_into`)."""
        hidden, _ = self.decoder(tgt, memory, src_mask, cache=cache)
        return self.output(hidden[:, -1], out=out)

    def decode_with_attention(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None, *,
                              cache: DecoderCache | None = None) -> tuple[Tensor, Tensor]:
        """As `decode`, also returning cross-attention weights (L, B, H, T, S) for inspection."""
        hidden, weights = self.decoder(tgt, memory, src_mask, cache=cache, need_weights=True)
        return self.output(hidden), torch.stack(weights)

    def steps(self, src: Tensor, *, use_cache: bool = True) -> DecoderSteps:
        """The search's view of the model (transduce.decoding.searchable): src (B, S) encoded,
        then next-token log-probabilities one step at a time; without the cache every step
        feeds the whole prefix (for checking the cache)."""
        return DecoderSteps(self, src, use_cache=use_cache)

    def new_cache(self) -> DecoderCache:
        """An empty cache for incremental decoding: pass it to each `decode` call of one search."""
        return DecoderCache.empty(len(self.decoder.layers))

    def num_parameters(self) -> int:
        """Trainable parameters, shared ones counted once."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
