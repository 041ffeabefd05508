"""Uncertainty over questions: percentile bootstrap intervals, paired bootstrap, McNemar's exact test.

Used by ``kgreason tables`` (:mod:`kgreason.tables`) and reusable by the validation runner. All
functions take per-question values (one number per question, already averaged over seeds where a
cell has several) and are seeded, so a table is the same on every run.

* :func:`bootstrap_ci` — the percentile interval of the mean over questions: resample the
  questions with replacement ``B`` times, take the mean of each resample, report the
  ``(1-level)/2`` and ``(1+level)/2`` quantiles (Efron & Tibshirani 1993, ch. 13).
* :func:`bootstrap_ci_matrix` — the same for a ``seeds × questions`` matrix: the *same* question
  index is drawn for every seed, and each resample's value is the mean over seeds and questions
  (questions are the unit resampled; the seed spread is reported apart by the caller).
* :func:`paired_bootstrap` — the mean of ``x - y`` over the same questions, its percentile
  interval, and a two-sided p-value from the null distribution of the centred resampled means
  (``p = (1 + #{|d* - d̄| >= |d̄|}) / (B + 1)``).
* :func:`mcnemar_exact` — McNemar's exact test for paired 0/1 outcomes: the two-sided binomial
  test of the discordant pairs ``b`` (x right, y wrong) against ``c`` (x wrong, y right) at 1/2,
  ``p = min(1, 2 · P[Bin(b + c, 1/2) <= min(b, c)])`` (the same as
  ``scipy.stats.binomtest(min(b, c), b + c, 0.5).pvalue``; computed here with exact integers).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import comb
from typing import Sequence

import numpy as np

DEFAULT_B = 2000
DEFAULT_LEVEL = 0.95
DEFAULT_SEED = 0
_CHUNK = 1 << 22  # resample index elements per block: bounds memory for large B × n


@dataclass(frozen=True)
class Interval:
    mean: float
    lo: float
    hi: float
    n: int          # questions
    level: float
    B: int


@dataclass(frozen=True)
class Paired:
    diff: float     # mean(x - y)
    lo: float
    hi: float
    p: float        # two-sided paired-bootstrap p-value
    n: int
    level: float
    B: int
    mcnemar_p: float | None = None  # for 0/1 outcomes
    b: int | None = None            # x = 1, y = 0
    c: int | None = None            # x = 0, y = 1

    @property
    def excludes_zero(self) -> bool:
        return self.lo > 0 or self.hi < 0


def _check(level: float, B: int) -> None:
    if not 0 < level < 1:
        raise ValueError(f"ci level must be in (0, 1), got {level}")
    if int(B) < 1:
        raise ValueError(f"bootstrap resamples B must be >= 1, got {B}")


def _resampled_means(m: np.ndarray, B: int, rng: np.random.Generator) -> np.ndarray:
    """``B`` bootstrap means of a ``k × n`` matrix, resampling its columns (questions)."""
    k, n = m.shape
    col_mean = m.mean(axis=0)  # mean over seeds per question: the same draw for every seed
    out = np.empty(B)
    step = max(1, _CHUNK // max(n, 1))
    for s in range(0, B, step):
        b = min(step, B - s)
        idx = rng.integers(0, n, size=(b, n))
        out[s:s + b] = col_mean[idx].mean(axis=1)
    return out


def _quantiles(draws: np.ndarray, level: float) -> tuple[float, float]:
    a = (1 - level) / 2
    lo, hi = np.quantile(draws, [a, 1 - a])
    return float(lo), float(hi)


def bootstrap_ci_matrix(values, B: int = DEFAULT_B, level: float = DEFAULT_LEVEL,
                        seed: int = DEFAULT_SEED) -> Interval:
    """Percentile interval of the mean of a ``seeds × questions`` matrix (no NaN), resampling
    questions (the same resampled question for every seed)."""
    _check(level, B)
    m = np.asarray(values, dtype=float)
    if m.ndim == 1:
        m = m[None, :]
    if m.size == 0 or m.shape[1] == 0:
        raise ValueError("no per-question values to bootstrap")
    if np.isnan(m).any():
        raise ValueError("per-question values contain NaN: drop unscored questions first")
    draws = _resampled_means(m, int(B), np.random.default_rng(seed))
    lo, hi = _quantiles(draws, level)
    return Interval(float(m.mean()), lo, hi, m.shape[1], level, int(B))


def bootstrap_ci(values: Sequence[float], B: int = DEFAULT_B, level: float = DEFAULT_LEVEL,
                 seed: int = DEFAULT_SEED) -> Interval:
    """Percentile bootstrap interval of the mean of per-question ``values``."""
    return bootstrap_ci_matrix(np.asarray(values, dtype=float)[None, :], B, level, seed)


def bootstrap_ci_many(values: np.ndarray, B: int = DEFAULT_B, level: float = DEFAULT_LEVEL,
                      seed: int = DEFAULT_SEED) -> np.ndarray:
    """Intervals for many independent samples at once: ``values`` is ``R × n`` (R samples of n
    questions); returns an ``R × 2`` array of ``(lo, hi)``. Vectorised (used by the coverage
    simulation test); same definition as :func:`bootstrap_ci`."""
    _check(level, B)
    v = np.asarray(values, dtype=float)
    r, n = v.shape
    rng = np.random.default_rng(seed)
    out = np.empty((r, 2))
    a = (1 - level) / 2
    for i in range(r):
        draws = v[i][rng.integers(0, n, size=(int(B), n))].mean(axis=1)
        out[i] = np.quantile(draws, [a, 1 - a])
    return out


def mcnemar_exact(x: Sequence[float], y: Sequence[float]) -> tuple[float, int, int]:
    """McNemar's exact test on paired 0/1 outcomes: ``(p, b, c)`` with ``b = #(x=1, y=0)``,
    ``c = #(x=0, y=1)``; ``p = 1`` when there is no discordant pair."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired outcomes differ in length: {x.shape} vs {y.shape}")
    if not (np.isin(x, (0.0, 1.0)).all() and np.isin(y, (0.0, 1.0)).all()):
        raise ValueError("McNemar's test needs 0/1 outcomes")
    b = int(((x == 1) & (y == 0)).sum())
    c = int(((x == 0) & (y == 1)).sum())
    return binom_two_sided_half(min(b, c), b + c), b, c


def binom_two_sided_half(k: int, n: int) -> float:
    """Two-sided exact binomial p-value of ``k <= n/2`` successes at p = 1/2 (symmetric, so the
    two tails are equal): ``min(1, 2 · sum_{i<=k} C(n, i) / 2^n)``."""
    if n == 0:
        return 1.0
    k = min(k, n - k)
    tail = Fraction(sum(comb(n, i) for i in range(k + 1)), 2 ** n)
    return float(min(Fraction(1), 2 * tail))


def is_binary(*arrays) -> bool:
    return all(np.isin(np.asarray(a, dtype=float), (0.0, 1.0)).all() for a in arrays)


def paired_bootstrap(x, y, B: int = DEFAULT_B, level: float = DEFAULT_LEVEL,
                     seed: int = DEFAULT_SEED) -> Paired:
    """Paired comparison of per-question values ``x`` and ``y`` (aligned: index i is the same
    question in both; each may be a ``seeds × questions`` matrix, averaged over seeds first).

    Returns the mean difference ``x - y``, its percentile bootstrap interval (questions
    resampled, the same draw for both), the two-sided bootstrap p-value of "no difference", and
    for 0/1 outcomes McNemar's exact p-value.
    """
    _check(level, B)
    xa = np.asarray(x, dtype=float)
    ya = np.asarray(y, dtype=float)
    xq = xa.mean(axis=0) if xa.ndim == 2 else xa
    yq = ya.mean(axis=0) if ya.ndim == 2 else ya
    if xq.shape != yq.shape:
        raise ValueError(f"paired values differ in length: {xq.shape[0]} vs {yq.shape[0]} questions")
    if xq.size == 0:
        raise ValueError("no paired questions")
    d = xq - yq
    draws = _resampled_means(d[None, :], int(B), np.random.default_rng(seed))
    lo, hi = _quantiles(draws, level)
    obs = float(d.mean())
    extreme = int((np.abs(draws - obs) >= abs(obs) - 1e-12).sum())
    p = (1 + extreme) / (int(B) + 1)
    mc = b = c = None
    if is_binary(xq, yq):
        mc, b, c = mcnemar_exact(xq, yq)
    return Paired(obs, lo, hi, float(min(1.0, p)), int(d.size), level, int(B), mc, b, c)
