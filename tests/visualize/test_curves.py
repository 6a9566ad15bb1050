import json

import pytest

from transduce.cli import main
from transduce.errors import UserError
from transduce.visualize.curves import plot_training


def test_plot_writes_a_png_of_the_curves(tmp_path):
    with open(tmp_path / "metrics.jsonl", "w") as f:
        for update in range(1, 50, 5):
            f.write(json.dumps({"split": "train", "update": update, "train_loss": 5 / update,
                                "lr": 1e-3, "tokens_per_s": 1000}) + "\n")
        for update in (20, 40):
            f.write(json.dumps({"split": "valid", "update": update, "valid_loss": 1.0,
                                "valid_ppl": 2.7, "valid_bleu": update / 2}) + "\n")
    assert main(["plot", str(tmp_path)]) == 0
    png = (tmp_path / "curves.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_plot_of_a_directory_without_metrics_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="no metrics here"):
        plot_training(tmp_path)
