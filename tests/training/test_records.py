"""A resumed run's records equal those of a run never interrupted."""

import pytest

from tests.training.test_trainer import _config
from transduce.runs import checkpoint as ckpt
from transduce.training.records import read_metrics
from transduce.training.start import resume_run, start_run

TIMES = ("tokens_per_s", "elapsed")  # the clock's, not the run's


def _rows(run_dir):
    return [{k: v for k, v in row.items() if k not in TIMES}
            for row in read_metrics(run_dir / "metrics.jsonl")]


def _events(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = list((run_dir / "tensorboard").iterdir())
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return len(files), {tag: [(e.step, e.value) for e in events.Scalars(tag)]
                        for tag in events.Tags()["scalars"] if tag.split("/")[1] not in TIMES}


@pytest.mark.parametrize("log_every", [1, 2])
def test_a_killed_and_resumed_run_records_what_an_uninterrupted_one_does(tmp_path, log_every):
    settings = ["train.max_updates=8", "train.save_every=3", "train.validate_every=4",
                f"train.log_every={log_every}"]
    start_run(_config(*settings), tmp_path / "straight").train()
    run = tmp_path / "killed"
    start_run(_config(*settings), run).train()
    # a kill -9 after update 8 had been logged, before its checkpoint was whole: the resumed
    # run goes on from update 6 and records updates 7 and 8 again
    (ckpt.checkpoint_dir(run) / "update_0000008" / ckpt.STATE).write_bytes(b"")
    resumed = resume_run(run)
    assert resumed.progress.update == 6
    resumed.train()
    assert _rows(run) == _rows(tmp_path / "straight")
    assert [r["update"] for r in _rows(run) if r["split"] == "train"] == (
        list(range(1, 9)) if log_every == 1 else [1, 2, 4, 6, 8])
    assert _events(run) == _events(tmp_path / "straight")
    assert _events(run)[0] == 1  # one event file, not one per resume
