"""Cross-attention heatmaps: source tokens x target subwords."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path


def plot_attention(weights, src_pieces: list[str], tgt_pieces: list[str], out: Path, *,
                   title: str = "") -> Path:
    """One heatmap of weights (T, S), or a grid of heads for weights (H, T, S)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = weights[None] if weights.dim() == 2 else weights
    heads = grid.shape[0]
    cols = math.ceil(math.sqrt(heads))  # as square a grid as the heads make: 4 -> 2 x 2
    rows = math.ceil(heads / cols)
    size = (max(4.0, (0.3 * len(src_pieces) + 1.2) * cols + 1.0),
            max(3.0, (0.28 * len(tgt_pieces) + 1.0) * rows + 1.0))
    fig, axes = plt.subplots(rows, cols, figsize=size, squeeze=False, constrained_layout=True)
    for h, ax in enumerate(axes.flat):
        if h >= heads:
            ax.axis("off")
            continue
        image = ax.imshow(grid[h].float().numpy(), cmap="viridis", vmin=0.0, aspect="auto")
        ax.set_xticks(range(len(src_pieces)), src_pieces, rotation=90, fontsize=8)
        ax.set_yticks(range(len(tgt_pieces)), tgt_pieces, fontsize=8)
        if heads > 1:
            ax.set_title(f"head {h + 1}", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8)
    if title:  # wrapped to the figure's width (about 12 characters an inch at 10 points)
        width = max(20, int(size[0] * 12))
        fig.suptitle("\n".join(textwrap.fill(line, width) for line in title.splitlines()),
                     fontsize=10)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def save_attention_maps(translations, directory: Path, *, layer: int = -1,
                        heads: bool = False, first: int = 1) -> int:
    """attention_NNNN.png for each translation that carries attention, numbered from `first`;
    returns how many."""
    directory.mkdir(parents=True, exist_ok=True)
    written = 0
    for n, t in enumerate(translations, start=first):
        if t.attention is None:
            continue
        weights = t.attention[layer]  # (H, T, S)
        weights = weights if heads else weights.mean(0)
        title = f"{t.source}\n-> {t.text}  (layer {layer % t.attention.shape[0] + 1})"
        plot_attention(weights, t.src_pieces, t.tgt_pieces,
                       directory / f"attention_{n:04d}.png", title=title)
        written += 1
    return written
