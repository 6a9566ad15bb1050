"""Training curves of a run directory, from its metrics.jsonl."""

from __future__ import annotations

from pathlib import Path

from transduce.errors import UserError
from transduce.training import records
from transduce.training.records import METRICS


def read_metrics(run_dir: Path) -> tuple[list[dict], list[dict]]:
    """The train and valid records of a run, in order (a last line cut short by a kill is left
    out, as a resumed run leaves it out)."""
    path = Path(run_dir) / METRICS
    if not path.is_file():
        raise UserError(f"{path}: no metrics here (is {run_dir} a run directory of "
                        "transduce train?)")
    rows = records.read_metrics(path)
    return ([r for r in rows if r.get("split") != "valid"],
            [r for r in rows if r.get("split") == "valid"])


def plot_training(run_dir: Path, out: Path | None = None) -> Path:
    """Loss (train and valid), validation BLEU, learning rate and speed against updates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train, valid = read_metrics(run_dir)
    out = Path(out or Path(run_dir) / "curves.png")
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), constrained_layout=True)
    (loss_ax, bleu_ax), (lr_ax, speed_ax) = axes

    def series(records, key):
        pairs = [(r["update"], r[key]) for r in records if r.get(key) is not None]
        return [u for u, _ in pairs], [v for _, v in pairs]

    loss_ax.plot(*series(train, "train_loss"), label="train (label-smoothed)")
    loss_ax.plot(*series(valid, "valid_loss"), "o-", label="valid (label-smoothed)")
    loss_ax.set(title="loss per target token", xlabel="update")
    loss_ax.legend()
    updates, bleu = series(valid, "valid_bleu")
    if bleu:
        bleu_ax.plot(updates, bleu, "o-", color="tab:green")
        best = max(range(len(bleu)), key=bleu.__getitem__)
        bleu_ax.annotate(f"best {bleu[best]:.2f}", (updates[best], bleu[best]),
                         textcoords="offset points", xytext=(0, 8), ha="center")
    bleu_ax.set(title="validation BLEU", xlabel="update")
    lr_ax.plot(*series(train, "lr"), color="tab:purple")
    lr_ax.set(title="learning rate", xlabel="update")
    speed_ax.plot(*series(train, "tokens_per_s"), color="tab:orange")
    speed_ax.set(title="target tokens / s", xlabel="update")
    fig.suptitle(str(run_dir))
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
