"""Top-k and argmax over the rows of a large vocabulary, in two stages.

PyTorch's CPU kernels for these scan each row in one pass that vectorises poorly: for 330 rows
of 8,000, `topk(10)` took 2.1 ms and for 66 rows `argmax` 0.5 ms, where `amax` took 0.03 ms.
So both first take the maximum of each chunk of about 64 columns, then look only inside the
chunks that can hold the answer. The results are exact.
"""

from __future__ import annotations

import functools

from torch import Tensor


def top_k(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """`x.topk(k, dim=1)` for x (n, V): the k best columns within the k chunks with the largest
    maxima (which hold the k best values). The same values; among equal values the indices may
    differ. 1.8x faster than torch.topk for 330 rows of 8,000 (1.19 against 2.12 ms)."""
    n, vocab = x.shape
    width = _chunk_width(vocab)
    if width is None or vocab // width < 4 * k:
        return x.topk(k, dim=1)
    chunks = x.view(n, vocab // width, width)
    best = chunks.amax(dim=2).topk(k, dim=1).indices  # (n, k) chunks
    candidates = chunks.gather(1, best[:, :, None].expand(n, k, width)).view(n, k * width)
    values, where = candidates.topk(k, dim=1)
    return values, best.gather(1, where // width) * width + where % width


def argmax(x: Tensor) -> Tensor:
    """`x.argmax(dim=1)` for x (n, V), exactly (the first of equal maxima, as torch's): the
    first chunk with the largest maximum, then the first maximum within it. 8x faster than
    torch.argmax for 66 rows of 8,000 (58 against 502 us)."""
    n, vocab = x.shape
    width = _chunk_width(vocab)
    if width is None:
        return x.argmax(dim=1)
    chunks = x.view(n, vocab // width, width)
    best = chunks.amax(dim=2).argmax(dim=1)  # (n,)
    inside = chunks.gather(1, best[:, None, None].expand(n, 1, width)).squeeze(1).argmax(dim=1)
    return best * width + inside


@functools.lru_cache(maxsize=None)
def _chunk_width(vocab: int) -> int | None:
    """The divisor of `vocab` between 32 and 128 nearest 64, if there is one."""
    widths = [w for w in range(32, 129) if vocab % w == 0]
    return min(widths, key=lambda w: abs(w - 64)) if widths else None
