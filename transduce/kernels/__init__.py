"""Hardware fast paths, kept apart from the paper's modules, and the switch that turns them off.

The model, the loss and the search compute what the paper says with plain PyTorch; where a faster
kernel computes the same thing on some hardware, they call this package instead:

- `linear`: float32 inference on oneDNN on AMD CPUs (`Linear` is an `nn.Linear` using it);
- `dropout`: a dropout mask drawn four elements per random number on CPU (`Dropout`);
- `attention`: PyTorch's fused scaled-dot-product kernel, where it pays;
- `loss`: the output projection and the label-smoothed loss (and R-Drop's) fused, a chunk of
  positions at a time, with their gradients written by hand.

Set the environment variable TRANSDUCE_KERNELS=reference before starting Python to run the plain
PyTorch reference paths instead (`F.linear`, `F.dropout`, attention written out, the loss from
the logits): slower, and the same results up to float rounding and other dropout masks.
"""

from __future__ import annotations

import os
import warnings

SWITCH = "TRANSDUCE_KERNELS"
_CHOICES = ("fast", "reference")


def _read_switch() -> bool:
    value = os.environ.get(SWITCH, "fast").strip().lower() or "fast"
    if value not in _CHOICES:
        warnings.warn(f"{SWITCH}={value!r} is not one of {', '.join(_CHOICES)}; using fast",
                      stacklevel=2)
    return value != "reference"


_FAST = _read_switch()


def fast() -> bool:
    """Whether the fast paths are on (the default), read from TRANSDUCE_KERNELS at import."""
    return _FAST
