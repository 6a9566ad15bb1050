"""Top-k and argmax over the rows of a large vocabulary, in two stages.

PyTorch's CPU kernels for these scan each row in one pass that vectorises poorly, while `amax`
is many times faster (docs/speed.md). So both first take the maximum of each chunk of about 64
columns, then look only inside the chunks that can hold the answer. The results are exact.
Inside a compiled graph too (greedy search's block of steps, transduce.decoding.compiled), where
Inductor's own argmax over a row was the slower: greedy search 1.06x with the two stages at 16
sentences a batch, 1.09x at 64, 1.01x alone (benchmarks/greedy_argmax.py, docs/speed.md). On a
GPU, torch's own kernels do each in one launch, where the two stages take a dozen, and a search
step there waits on its launches (docs/speed.md): tensors not on a CPU go to them.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor


def top_k(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """`x.topk(k, dim=1)` for x (n, V): the k best columns within the k chunks with the largest
    maxima (which hold the k best values). The same values; among equal values the indices may
    differ. On a CPU faster than torch.topk for a beam search's rows (docs/speed.md)."""
    n, vocab = x.shape
    width = _width(x)
    if width is None or vocab // width < 4 * k:
        return x.topk(k, dim=1)
    count = vocab // width
    best = x.view(n, count, width).amax(dim=2).topk(k, dim=1).indices  # (n, k) chunks
    # the chunks copied whole, as rows of (n * count, width): the top-k 1.16-1.4x faster at
    # a beam search's 160-320 rows than gathering them element by element (docs/speed.md)
    rows = (best + torch.arange(0, n * count, count, device=x.device)[:, None]).view(-1)
    candidates = x.view(n * count, width).index_select(0, rows).view(n, k * width)
    values, where = candidates.topk(k, dim=1)
    return values, best.gather(1, where // width) * width + where % width


def argmax(x: Tensor) -> Tensor:
    """`x.argmax(dim=1)` for x (n, V), exactly (the first of equal maxima, as torch's): the
    first chunk with the largest maximum, then the first maximum within it. Faster than
    torch.argmax for a greedy search's rows on a CPU (docs/speed.md)."""
    n, vocab = x.shape
    width = _width(x)
    if width is None:
        return x.argmax(dim=1)
    chunks = x.view(n, vocab // width, width)
    best = chunks.amax(dim=2).argmax(dim=1)  # (n,)
    inside = chunks.gather(1, best[:, None, None].expand(n, 1, width)).squeeze(1).argmax(dim=1)
    return best * width + inside


def _width(x: Tensor) -> int | None:
    """The chunk width of the two stages for x's columns; None off a CPU or without one."""
    if x.device.type != "cpu":
        return None
    # in a graph being traced, the function itself (Dynamo warns of a cache it would skip)
    width = _chunk_width.__wrapped__ if torch.compiler.is_compiling() else _chunk_width
    return width(x.shape[1])


@functools.cache
def _chunk_width(vocab: int) -> int | None:
    """The divisor of `vocab` between 32 and 128 nearest 64, if there is one."""
    widths = [w for w in range(32, 129) if vocab % w == 0]
    return min(widths, key=lambda w: abs(w - 64)) if widths else None
