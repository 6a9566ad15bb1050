import math

import pytest

from transduce.config import load_config
from transduce.errors import UserError
from transduce.training.schedule import constant, cosine, inverse_sqrt, noam


def test_noam_matches_the_papers_formula_and_peaks_at_warmup():
    d, w = 512, 4000
    for step in (1, 100, 3999, 4000, 4001, 100_000):
        expected = d**-0.5 * min(step**-0.5, step * w**-1.5)
        assert noam(step, d_model=d, warmup=w) == pytest.approx(expected)
    assert noam(4000, d_model=d, warmup=w) == pytest.approx(512**-0.5 * 4000**-0.5)  # 7.0e-4
    assert noam(4000, d_model=d, warmup=w) > noam(3999, d_model=d, warmup=w)
    assert noam(4000, d_model=d, warmup=w) > noam(4001, d_model=d, warmup=w)
    assert noam(2, d_model=d, warmup=w) == pytest.approx(2 * noam(1, d_model=d, warmup=w))


def test_inverse_sqrt_warms_up_linearly_then_decays():
    lr = dict(peak_lr=5e-3, warmup=2000)
    assert inverse_sqrt(1000, **lr) == pytest.approx(2.5e-3)
    assert inverse_sqrt(2000, **lr) == pytest.approx(5e-3)
    assert inverse_sqrt(8000, **lr) == pytest.approx(5e-3 * math.sqrt(2000 / 8000))  # 2.5e-3
    assert inverse_sqrt(1, peak_lr=1.0, warmup=10, warmup_init_lr=1e-7) == pytest.approx(
        1e-7 + (1 - 1e-7) / 10)


def test_constant_with_and_without_warmup():
    assert constant(5, peak_lr=1e-4) == 1e-4
    assert constant(5, peak_lr=1e-4, warmup=10) == pytest.approx(5e-5)
    assert constant(50, peak_lr=1e-4, warmup=10) == 1e-4


def test_cosine_warms_up_then_falls_to_zero_at_the_last_update():
    lr = dict(peak_lr=5e-3, warmup=2000, total=9000)
    assert cosine(1000, **lr) == pytest.approx(2.5e-3)
    assert cosine(2000, **lr) == pytest.approx(5e-3)
    assert cosine(5500, **lr) == pytest.approx(2.5e-3)  # half way down
    assert cosine(9000, **lr) == pytest.approx(0.0, abs=1e-12)
    assert cosine(9500, **lr) == pytest.approx(0.0, abs=1e-12)
    rates = [cosine(step, **lr) for step in range(2000, 9001, 250)]
    assert rates == sorted(rates, reverse=True) and len(set(rates)) == len(rates)


def test_cosine_needs_max_updates_beyond_the_warmup():
    with pytest.raises(UserError, match="train.max_updates"):
        load_config(overrides=["train.lr_schedule=cosine", "train.max_updates=0"])


def test_the_configured_schedule_is_the_named_function():
    from transduce.training.config import TrainConfig
    from transduce.training.schedule import from_config

    for name, expected in (("noam", lambda u: noam(u, d_model=64, warmup=10, scale=2.0)),
                           ("inverse_sqrt", lambda u: inverse_sqrt(u, peak_lr=0.01, warmup=10)),
                           ("cosine", lambda u: cosine(u, peak_lr=0.01, warmup=10, total=50)),
                           ("constant", lambda u: constant(u, peak_lr=0.01, warmup=10))):
        config = TrainConfig(lr_schedule=name, lr=0.01, lr_scale=2.0, warmup=10, max_updates=50)
        schedule = from_config(config, d_model=64)
        assert [schedule(u) for u in (1, 10, 30, 60)] == [expected(u) for u in (1, 10, 30, 60)]
