"""The sinusoidal positional encoding as pictures (section 3.5)."""

from __future__ import annotations

from pathlib import Path

from transduce.model.embeddings import sinusoidal_encoding


def plot_positional(out: Path, *, d_model: int = 128, positions: int = 100) -> Path:
    """Left: PE as a (positions x dimensions) matrix. Right: PE(p) . PE(p + k) against the
    offset k for several p: the same curve whatever p, which is what lets attention read
    relative positions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pe = sinusoidal_encoding(3 * positions, d_model)
    fig, (matrix_ax, dot_ax) = plt.subplots(1, 2, figsize=(13, 4.8), constrained_layout=True)
    image = matrix_ax.imshow(pe[:positions].numpy(), cmap="RdBu", aspect="auto", vmin=-1, vmax=1)
    matrix_ax.set(title=f"PE(pos, i), d_model = {d_model}", xlabel="dimension i",
                  ylabel="position pos")
    fig.colorbar(image, ax=matrix_ax, shrink=0.8)
    offsets = range(-positions // 2, positions // 2 + 1)
    for p in (positions // 2, positions, int(1.5 * positions)):
        dots = [float(pe[p] @ pe[p + k]) for k in offsets]
        dot_ax.plot(list(offsets), dots, label=f"p = {p}")
    dot_ax.set(title="PE(p) · PE(p + k)", xlabel="offset k", ylabel="dot product")
    dot_ax.legend()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return Path(out)
