"""Few-shot adaptation curves against held-out partners: normalised returns, steps to recognise a goal, and their
aggregation over seeds and folds (IQM with bootstrap CIs, as in report/stats.py).

Normalised return of the focal learner in episode k against a held-out mix of co-players:

    (return_k - random) / (oracle - random)

- random: the return a uniformly random policy in the focal seats gets against the same mix (the lower bound of
  that partner, as JaxAHT's per-partner bounds);
- oracle: the return of a learner trained against that held-out mix alone with the focal learner's budget (the best
  response the budget buys). 0 is a random focal player, 1 the oracle's return; values outside [0, 1] are kept (a
  learner can beat a budget-limited oracle, e.g. one that never found the stag without a partner that waits on it).
  A mix where the oracle does not beat the random player by more than twice the standard error of their difference
  (over the evaluation envs) and by more than a tenth of its own return has no scale: NaN. That happens where the
  focal seat matters little to its own return: a predator sharing its team's reward among two others, a snowdrift
  player whose co-players clear every drift anyway (doing nothing is the best response, and random play is close to
  it).

Steps to recognise (per episode): the first step t at which the belief's argmax is the partner's true goal and
stays so for every labelled step until the episode ends; an episode where that never holds does not count towards
the mean and lowers the recognised fraction.
"""

from __future__ import annotations

import numpy as np

from hypermappo.report.stats import bootstrap_ci, iqm


def normalised_return(returns, random: float, oracle: float, resolved: bool = True) -> np.ndarray:
    """returns [..., K] -> (returns - random) / (oracle - random); NaN where oracle == random or the scale is not
    `resolved` (see `scale_is_resolved`)."""
    r = np.asarray(returns, dtype=float)
    scale = float(oracle) - float(random)
    if not resolved or scale == 0.0 or not np.isfinite(scale):
        return np.full_like(r, np.nan)
    return (r - float(random)) / scale


def scale_is_resolved(bounds: dict, z: float = 2.0, relative: float = 0.1) -> bool:
    """Does the oracle beat the random focal player by more than `z` standard errors of their difference and by
    more than `relative` of the oracle's own return (in magnitude)? The second clause matters where returns are
    nearly deterministic: a gap of 1.2 on returns of 60 is resolved statistically but scales every difference
    fiftyfold. bounds: {"oracle", "random", "oracle_sem", "random_sem"} (means and standard errors over envs)."""
    gap = bounds["oracle"] - bounds["random"]
    noise = z * float(np.hypot(bounds["oracle_sem"], bounds["random_sem"]))
    return bool(gap > noise and gap > relative * abs(bounds["oracle"]))


def steps_to_recognise(correct: np.ndarray, labelled: np.ndarray) -> np.ndarray:
    """correct, labelled [..., T] bool (the belief's argmax equals the true goal / the step has a label), one row per
    episode -> the first step from which every labelled step is correct [...] (float; NaN: never recognised, or no
    labelled step). Unlabelled steps neither break nor start a run of correct steps."""
    correct = np.asarray(correct, dtype=bool)
    labelled = np.asarray(labelled, dtype=bool)
    wrong = labelled & ~correct
    T = correct.shape[-1]
    t = np.arange(T)
    # the last wrong labelled step; recognition starts at the first labelled step after it
    last_wrong = np.where(wrong, t, -1).max(-1)  # [...]
    after = labelled & (t > last_wrong[..., None])
    first = np.where(after, t, T).min(-1)
    return np.where(first < T, first, np.nan).astype(float)


def curve_summary(curves) -> dict:
    """curves [runs, K] (one row per seed x fold) -> per episode index k: IQM and mean with 95% bootstrap CIs over
    the runs (whole rows resampled per k; NaN rows, e.g. a fold without a scale, are left out)."""
    x = np.asarray(curves, dtype=float)
    out = {"iqm": [], "iqm_ci": [], "mean": [], "mean_ci": [], "runs": []}
    for k in range(x.shape[1]):
        col = x[:, k][np.isfinite(x[:, k])]
        out["runs"].append(int(col.size))
        out["iqm"].append(float(iqm(col)) if col.size else float("nan"))
        out["mean"].append(float(col.mean()) if col.size else float("nan"))
        out["iqm_ci"].append(list(bootstrap_ci(col, iqm)))
        out["mean_ci"].append(list(bootstrap_ci(col, np.mean)))
    return out


def paired_difference(a, b) -> dict:
    """Mean of a - b over paired runs (same seed and fold) with its 95% bootstrap CI: does a beat b?"""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    d = d[np.isfinite(d)]
    lo, hi = bootstrap_ci(d, np.mean)
    return {"mean": float(d.mean()) if d.size else float("nan"), "ci": [lo, hi], "runs": int(d.size)}
