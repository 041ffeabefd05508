"""kgreason.stats: bootstrap coverage, paired tests against scipy on golden cases."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from kgreason.stats import (binom_two_sided_half, bootstrap_ci, bootstrap_ci_many, bootstrap_ci_matrix,
                            mcnemar_exact, paired_bootstrap)


def test_bootstrap_interval_covers_true_mean_at_nominal_rate():
    """500 synthetic 'runs' of 200 questions of 0/1 outcomes with true mean 0.3: the 95 %
    percentile interval covers 0.3 in >= 93 % of them (and is not trivially wide: <= 99 %)."""
    rng = np.random.default_rng(123)
    true = 0.3
    samples = (rng.random((500, 200)) < true).astype(float)
    ci = bootstrap_ci_many(samples, B=1000, level=0.95, seed=7)
    covered = ((ci[:, 0] <= true) & (true <= ci[:, 1])).mean()
    assert 0.93 <= covered <= 0.99, covered
    width = (ci[:, 1] - ci[:, 0]).mean()
    assert width == pytest.approx(2 * 1.96 * np.sqrt(true * (1 - true) / 200), rel=0.1)


def test_bootstrap_ci_basic_and_seeded():
    v = [0, 1] * 50
    a = bootstrap_ci(v, B=2000, seed=0)
    b = bootstrap_ci(v, B=2000, seed=0)
    assert a == b and a.mean == 0.5 and a.n == 100
    assert a.lo < 0.5 < a.hi and a.hi - a.lo == pytest.approx(0.196, abs=0.03)
    assert bootstrap_ci([0.7] * 10).lo == pytest.approx(0.7)  # no spread, no width
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_ci([1.0, float("nan")])
    with pytest.raises(ValueError, match="level"):
        bootstrap_ci(v, level=95)


def test_matrix_resamples_questions_not_seeds():
    """Three seeds that agree on every question: the interval is the one-seed interval (the
    seeds add no information about questions), not a narrower one from 3 × n draws."""
    rng = np.random.default_rng(0)
    one = (rng.random(100) < 0.5).astype(float)
    m = np.vstack([one, one, one])
    assert bootstrap_ci_matrix(m, seed=3) == bootstrap_ci(one, seed=3)


@pytest.mark.parametrize("b,c", [(0, 0), (1, 0), (5, 1), (3, 3), (10, 2), (40, 25), (0, 12), (123, 150)])
def test_mcnemar_exact_matches_scipy_binomtest(b, c):
    x = [1] * b + [0] * c + [1] * 7 + [0] * 4
    y = [0] * b + [1] * c + [1] * 7 + [0] * 4
    p, bb, cc = mcnemar_exact(x, y)
    assert (bb, cc) == (b, c)
    want = 1.0 if b + c == 0 else sps.binomtest(min(b, c), b + c, 0.5).pvalue
    assert p == pytest.approx(want, rel=1e-12, abs=1e-300)
    assert binom_two_sided_half(max(b, c), b + c) == pytest.approx(want)


def test_mcnemar_rejects_non_binary():
    with pytest.raises(ValueError, match="0/1"):
        mcnemar_exact([0.5, 1], [0, 1])


def test_paired_bootstrap_golden():
    """x beats y on 30 of 100 questions and loses on 10: diff 0.2, interval excludes 0,
    McNemar p = binomtest(10, 40).pvalue; an identical pair gives diff 0 and p = 1."""
    x = np.array([1] * 30 + [0] * 10 + [1] * 20 + [0] * 40, dtype=float)
    y = np.array([0] * 30 + [1] * 10 + [1] * 20 + [0] * 40, dtype=float)
    r = paired_bootstrap(x, y, B=4000, seed=1)
    assert r.diff == pytest.approx(0.2) and r.excludes_zero and r.lo > 0
    assert r.mcnemar_p == pytest.approx(sps.binomtest(10, 40, 0.5).pvalue) and (r.b, r.c) == (30, 10)
    assert r.p < 0.01  # paired bootstrap agrees: a clear difference
    # a normal-theory check of the bootstrap p on the same data: paired t-test p ~ 0.0015
    assert r.p == pytest.approx(sps.ttest_rel(x, y).pvalue, abs=0.01)
    same = paired_bootstrap(x, x)
    assert same.diff == 0 and same.p == 1.0 and not same.excludes_zero and same.mcnemar_p == 1.0
    cont = paired_bootstrap(x * 0.5, y * 0.5 + 0.01)
    assert cont.mcnemar_p is None  # not 0/1: no McNemar
    with pytest.raises(ValueError, match="differ in length"):
        paired_bootstrap([1, 0], [1])
