"""Attention masks, all built here.

Shape glossary (whole codebase): B batch, S source length, T target length, H heads,
D d_model, Dh head dim, V vocabulary. Masks are boolean, True = "may attend" (the convention of
`torch.nn.functional.scaled_dot_product_attention`), broadcastable to (B, H, T_q, T_k).
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """Keys that are real tokens: (B, S) ids -> (B, 1, 1, S), True where not padding."""
    return (tokens != pad_id)[:, None, None, :]


def causal_mask(n_queries: int, n_keys: int | None = None, *, device=None) -> Tensor:
    """(T_q, T_k) lower-triangular mask: the i-th of the last T_q positions sees keys 0..T_k-T_q+i.

    With T_q < T_k the queries are the newest positions of a sequence whose earlier keys are
    cached, as in incremental decoding.
    """
    n_keys = n_queries if n_keys is None else n_keys
    ones = torch.ones(n_queries, n_keys, dtype=torch.bool, device=device)
    return ones.tril(diagonal=n_keys - n_queries)
