"""Copies of a weight in another library's layout, made at its first product and kept.

oneDNN multiplies by a weight reordered into its blocked layout (transduce.kernels.linear),
OpenBLAS by the weight transposed (transduce.kernels.openblas); making either at every product
would cost about as much as the product. A copy is kept while its weight lives and is not
changed in place: the weight's version counter, which loading new weights into it and an
optimizer's step advance, tells a stale copy, and a copy leaves with its weight. An inference
tensor (made under `torch.inference_mode`) has no version counter: callers do not keep copies
of one.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import TypeVar

from torch import Tensor

Copy = TypeVar("Copy")

# id(weight) -> (a weak reference to it, {what: (its version when copied, the copy)}); an entry
# leaves with its weight
_KEPT: dict[int, tuple[weakref.ref, dict[Hashable, tuple[int, object]]]] = {}


def kept(weight: Tensor, what: Hashable, make: Callable[[Tensor], Copy]) -> Copy:
    """`make(weight)` (given the weight detached), made at the first call with this weight and
    `what` (the layout, and the rows copied), and again after the weight changes in place."""
    key = id(weight)
    held = _KEPT.get(key)
    if held is None or held[0]() is not weight:
        held = _KEPT[key] = (weakref.ref(weight), {})
        weakref.finalize(weight, _KEPT.pop, key, None)
    version, copy = held[1].get(what, (None, None))
    if version != weight._version:
        copy = make(weight.detach())
        held[1][what] = (weight._version, copy)
    return copy


def copies(weight: Tensor) -> set[Hashable]:
    """What copies of this weight are kept (their `what`s)."""
    held = _KEPT.get(id(weight))
    return set(held[1]) if held is not None and held[0]() is weight else set()
