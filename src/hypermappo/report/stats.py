"""Aggregate statistics over seeds: interquartile mean and percentile-bootstrap confidence intervals.

The definitions follow rliable (Agarwal et al., 2021, "Deep RL at the edge of the statistical
precipice"), written out here with numpy instead of depending on rliable and its dependencies:
- IQM, the interquartile mean: the mean of the middle 50% of the runs' scores (25% trimmed from
  each end, `scipy.stats.trim_mean(x, 0.25)`); robust to one outlier seed, unlike the mean, and
  less wasteful than the median.
- 95% CI: stratified percentile bootstrap (none, NaN, from fewer than 2 runs: resampling one run
  gives a zero-width interval that says nothing). Each resample draws the runs of every stratum (one
  task, i.e. one env, per comparison here, so one stratum) with replacement, the statistic is
  recomputed, and the interval is the 2.5th and 97.5th percentile of the resampled statistics.
  A fixed generator seed makes a report reproducible.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import trim_mean

BOOTSTRAP_RESAMPLES = 2000
MIN_RUNS_FOR_CI = 2  # below this no interval is given
RELIABLE_RUNS = 5  # below this a report warns that its intervals are unreliable


def iqm(scores: np.ndarray, axis: int = 0) -> np.ndarray:
    return trim_mean(scores, 0.25, axis=axis)


def bootstrap_ci(scores, statistic=np.mean, resamples: int = BOOTSTRAP_RESAMPLES, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile-bootstrap CI of `statistic` over the runs in `scores` [runs]; NaN with fewer than 2 runs."""
    x = np.asarray(scores, dtype=float)
    if x.size < MIN_RUNS_FOR_CI:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))  # [B, runs] resampled run indices
    stats = statistic(x[idx], axis=1)  # [B]
    alpha = (1 - level) / 2
    return float(np.quantile(stats, alpha)), float(np.quantile(stats, 1 - alpha))


def bootstrap_curve_ci(curves: np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES, level: float = 0.95,
                       seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise CI of the mean curve over runs; `curves` [runs, grid] -> (low [grid], high [grid]).

    Whole curves are resampled (a run's points stay together), as seeds are the unit of replication.
    NaN with fewer than 2 runs."""
    if curves.shape[0] < MIN_RUNS_FOR_CI:
        nan = np.full(curves.shape[1], np.nan)
        return nan, nan.copy()
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, curves.shape[0], size=(resamples, curves.shape[0]))  # [B, runs]
    means = curves[idx].mean(axis=1)  # [B, grid]
    alpha = (1 - level) / 2
    return np.quantile(means, alpha, axis=0), np.quantile(means, 1 - alpha, axis=0)


def summarize(scores) -> dict:
    """n, mean, its 95% CI, IQM and its 95% CI of one variant's final scores [runs]."""
    x = np.asarray(scores, dtype=float)
    lo, hi = bootstrap_ci(x, np.mean)
    iqm_lo, iqm_hi = bootstrap_ci(x, iqm)
    return {"n": int(x.size), "mean": float(x.mean()), "ci_low": lo, "ci_high": hi,
            "iqm": float(iqm(x)), "iqm_ci_low": iqm_lo, "iqm_ci_high": iqm_hi}
