import math

import pytest

from transduce.training.schedule import constant, inverse_sqrt, noam


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
