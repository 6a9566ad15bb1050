"""Token embeddings scaled by sqrt(d_model) plus position encodings (sections 3.4 and 3.5)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from transduce.kernels.dropout import Dropout


def sinusoidal_encoding(n_positions: int, d_model: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(pos / 10000^(2i/D)): (P, D)."""
    position = torch.arange(n_positions, dtype=torch.float64)[:, None]
    frequency = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angle = position * frequency  # (P, ceil(D/2))
    encoding = torch.zeros(n_positions, d_model, dtype=torch.float64)
    encoding[:, 0::2] = torch.sin(angle)
    encoding[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return encoding.float()


class SinusoidalPositions(nn.Module):
    """The paper's fixed encoding; not a parameter, recomputed rather than stored."""

    def __init__(self, max_positions: int, d_model: int) -> None:
        super().__init__()
        self.register_buffer("table", sinusoidal_encoding(max_positions, d_model), persistent=False)

    def forward(self, length: int, offset: int | Tensor = 0) -> Tensor:
        """Encodings of positions offset .. offset+length-1: (length, D)."""
        return _rows(self.table, length, offset)


class LearnedPositions(nn.Module):
    """One learned vector per position (the paper's alternative, Table 3 row E)."""

    def __init__(self, max_positions: int, d_model: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.empty(max_positions, d_model))
        nn.init.normal_(self.table, std=d_model**-0.5)

    def forward(self, length: int, offset: int | Tensor = 0) -> Tensor:
        return _rows(self.table, length, offset)


def _rows(table: Tensor, length: int, offset: int | Tensor) -> Tensor:
    """Rows offset .. offset+length-1 of a table of positions. A tensor offset (a static cache's
    position: transduce.model.cache) is read on the device, never as a number, so a compiled
    step stays one graph; its searches keep within the table. A tensor of offsets (B,), one per
    row (rows that joined a search later: `KVCache.join`), gives (B, length, D)."""
    if isinstance(offset, Tensor):
        steps = torch.arange(length, device=table.device)
        if offset.dim() == 1:
            return table[offset[:, None] + steps]
        return table.index_select(0, offset + steps)
    if offset + length > table.shape[0]:
        raise ValueError(f"sequence of {offset + length} tokens exceeds model.max_positions="
                         f"{table.shape[0]}")
    return table[offset : offset + length]


class TransformerEmbedding(nn.Module):
    """dropout(sqrt(D) * E[token] + PE[position]); E may be shared with other modules.

    With word dropout p, training also zeroes each token's whole vector E[token] with probability
    p (its position encoding stays) and scales the others by 1 / (1 - p): the word dropout of
    Sennrich and Zhang (2019, "Revisiting Low-Resource Neural Machine Translation"), a
    regulariser for small corpora.
    """

    def __init__(self, tokens: nn.Embedding, positions: nn.Module, dropout: float,
                 word_dropout: float = 0.0, *, scale: bool = True) -> None:
        super().__init__()
        self.tokens = tokens
        self.positions = positions
        self.scale = math.sqrt(tokens.embedding_dim) if scale else 1.0
        self.dropout = Dropout(dropout)
        self.word_dropout = Dropout(word_dropout)  # applied to one scale per token

    def forward(self, ids: Tensor, offset: int | Tensor = 0) -> Tensor:
        """ids (B, T) -> (B, T, D); the first id is at position `offset` (incremental decoding)."""
        x = self.tokens(ids) * self.scale
        if self.training and self.word_dropout.p:
            x = x * self.word_dropout(x.new_ones(*ids.shape, 1))
        return self.dropout(x + self.positions(ids.shape[1], offset))


def token_embedding(vocab_size: int, d_model: int, pad_id: int) -> nn.Embedding:
    """An embedding matrix drawn from N(0, D^-1/2), the pad row zero and never trained."""
    embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
    nn.init.normal_(embedding.weight, std=d_model**-0.5)
    with torch.no_grad():
        embedding.weight[pad_id].zero_()
    return embedding
