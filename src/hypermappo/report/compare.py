"""`hypermappo compare`: learning curves, a final-performance table and diagnostics of runs grouped by variant.

Inputs are run directories, or sweep directories (every run directly inside). Runs are grouped by
the config keys of `--group-by` (dotted keys allowed; default: every key whose value differs
between the runs, except the seed), so the seeds of one variant are aggregated. Written to OUT:
- `curves.png`: mean training episode return against env steps per variant, with a 95% bootstrap
  CI band over seeds, on a common env-steps grid (each run interpolated linearly, never
  extrapolated); a second panel shows the evaluation return when every run evaluated (a marker per
  evaluation when a variant has too few points for a line). The legend states each variant's n.
- `final.md`, `final.csv`: per variant the number of runs n, mean final score with its 95% CI, IQM
  with its 95% CI (see `report/stats.py`), and the final value of every diagnostic column found in
  metrics.csv, side by side. The final score is the last `eval_return_mean` of each run (falling
  back to the mean `episode_return_mean` of the last 10% of updates when a run never evaluated).
- `diagnostics.png`: the diagnostic columns against env steps, when there are any.
Runs from different environments do not compare and are refused; unfinished runs are skipped.
A variant with one run gets no CI (a dash, no band): resampling one seed gives a zero-width interval.
When any variant has fewer than 5 runs, a one-line warning says its CIs are unreliable.
"""

from __future__ import annotations

import csv
import difflib
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from hypermappo.errors import UserError
from hypermappo.report import stats

# metrics.csv columns reported as diagnostics: exact names, or names starting with one of these
DIAGNOSTIC_PREFIXES = ("delta_norm", "kl_", "grad_cos", "snd", "diag_")
IGNORED_GROUP_KEYS = ("seed", "run_dir", "torch_threads", "device", "log.")
GRID_POINTS = 100
FINAL_FRACTION = 0.1  # training metrics are averaged over the last 10% of updates


@dataclass
class Run:
    path: Path
    config: dict  # flattened: dotted key -> value
    columns: list[str]
    metrics: dict[str, np.ndarray]  # column -> [updates] float, NaN where empty
    # policy-group switches: (env step at which the switching rollout started, what switched), from `switch`
    switches: list = field(default_factory=list)

    def series(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        """(env_steps, values) of the updates where `column` has a value."""
        if column not in self.metrics:
            return np.empty(0), np.empty(0)
        x, y = self.metrics["env_steps"], self.metrics[column]
        ok = np.isfinite(y)
        return x[ok], y[ok]

    def final(self, column: str) -> float:
        """Last value of an eval_* column; mean over the last 10% of updates of any other column."""
        _, y = self.series(column)
        if y.size == 0:
            return float("nan")
        if column.startswith("eval_"):
            return float(y[-1])
        return float(y[-max(1, math.ceil(FINAL_FRACTION * y.size)):].mean())


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and k != "env_kwargs":
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def _float(s: str) -> float:
    try:
        return float(s)
    except ValueError:
        return float("nan")


def load_run(path: Path) -> Run:
    config = yaml.safe_load((path / "config.yaml").read_text()) or {}
    with (path / "metrics.csv").open(newline="") as f:
        reader = csv.reader(f)
        columns = next(reader, [])
        rows = [r for r in reader if len(r) == len(columns)]
    metrics = {c: np.array([_float(r[i]) for r in rows]) for i, c in enumerate(columns)}
    switches = []
    if "switch" in columns and "env_steps" in columns:
        col, steps = columns.index("switch"), metrics["env_steps"]
        switches = [(float(steps[i - 1]) if i else 0.0, r[col]) for i, r in enumerate(rows) if r[col].strip()]
    return Run(path, flatten(config), columns, metrics, switches)


def find_runs(paths: list[Path]) -> list[Path]:
    """Run directories among `paths`; a directory that is not a run (a sweep) gives the runs inside it."""
    found = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise UserError(f"{str(p)!r} is not a directory")
        if (p / "config.yaml").exists():
            found.append(p)
            continue
        inside = sorted(d for d in p.iterdir() if (d / "config.yaml").exists())
        if not inside:
            raise UserError(f"{str(p)!r} is neither a run directory (config.yaml) nor a sweep holding runs")
        found.extend(inside)
    return list(dict.fromkeys(found))


def group_keys(runs: list[Run], group_by: list[str] | None) -> list[str]:
    known = sorted(set().union(*(r.config for r in runs)))
    if group_by is None:
        return [k for k in known if not any(k == g or k.startswith(g) for g in IGNORED_GROUP_KEYS)
                and len({repr(r.config.get(k)) for r in runs}) > 1]
    for key in group_by:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UserError(f"--group-by: unknown config key {key!r}{hint}")
    return group_by


def _label(keys: list[str], values: tuple) -> str:
    return ", ".join(f"{k}={_show(v)}" for k, v in zip(keys, values)) or "all runs"


def _show(v) -> str:
    return "[" + ",".join(map(str, v)) + "]" if isinstance(v, list) else str(v)


def curves_on_grid(runs: list[Run], column: str, grid: np.ndarray) -> np.ndarray:
    """[runs, grid] values interpolated on the env-steps grid; NaN outside each run's own range."""
    out = np.full((len(runs), grid.size), np.nan)
    for i, run in enumerate(runs):
        x, y = run.series(column)
        if x.size == 0:
            continue
        inside = (grid >= x[0]) & (grid <= x[-1])
        out[i, inside] = np.interp(grid[inside], x, y)
    return out


def shared_points(runs: list[Run], column: str) -> tuple[np.ndarray, np.ndarray]:
    """(env_steps [k], values [runs, k]) at the env steps where every run has a value of `column`."""
    xs = [run.series(column)[0] for run in runs]
    common = np.array(sorted(set.intersection(*(set(x.tolist()) for x in xs))))
    if common.size == 0:
        return common, np.empty((len(runs), 0))
    return common, np.stack([run.series(column)[1][np.isin(run.series(column)[0], common)] for run in runs])


def _legend_label(label: str, n: int) -> str:
    return f"{label} (n={n} seed{'s' if n != 1 else ''}{'' if n >= stats.MIN_RUNS_FOR_CI else ', no CI'})"


def _plot_panel(ax, groups: dict[str, list[Run]], column: str, grid: np.ndarray) -> None:
    for label, runs in groups.items():
        n = len(runs)
        y = curves_on_grid(runs, column, grid)
        covered = np.isfinite(y).all(0)  # points every seed of the variant reached
        if covered.sum() < 2:  # too few for a line (e.g. one evaluation per run): markers at the runs' own points
            x, y_pts = shared_points(runs, column)
            if x.size == 0:
                continue
            mean = y_pts.mean(0)
            lo, hi = stats.bootstrap_curve_ci(y_pts)
            yerr = np.stack([mean - lo, hi - mean]) if n >= stats.MIN_RUNS_FOR_CI else None
            ax.errorbar(x, mean, yerr=yerr, marker="o", capsize=3, label=_legend_label(label, n))
            continue
        mean = np.full(grid.size, np.nan)
        lo, hi = mean.copy(), mean.copy()
        mean[covered] = y[:, covered].mean(0)
        lo[covered], hi[covered] = stats.bootstrap_curve_ci(y[:, covered])
        few = covered.sum() < 3  # two points would hardly show as a line
        line, = ax.plot(grid, mean, marker="o" if few else None, label=_legend_label(label, n))
        if n >= stats.MIN_RUNS_FOR_CI:  # one seed has no interval
            ax.fill_between(grid, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    for x, what in sorted({sw for runs in groups.values() for r in runs for sw in r.switches}):
        ax.axvline(x, color="grey", linestyle="--", linewidth=1)  # a policy group switched here
        ax.annotate(what, (x, 1), xycoords=("data", "axes fraction"), rotation=90, va="top", ha="right",
                    fontsize="x-small", color="grey")
    ax.set_xlabel("env steps")
    ax.set_ylabel(column)
    ax.grid(alpha=0.3)


def _figure(groups: dict[str, list[Run]], columns: list[str], titles: list[str], path: Path, env: str) -> None:
    from matplotlib.figure import Figure  # Agg canvas; no display needed

    all_runs = [r for runs in groups.values() for r in runs]
    steps = np.concatenate([r.metrics["env_steps"] for r in all_runs])
    grid = np.linspace(steps.min(), steps.max(), GRID_POINTS)
    ncols = min(3, len(columns))
    nrows = math.ceil(len(columns) / ncols)
    fig = Figure(figsize=(5.5 * ncols, 4 * nrows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols)).ravel()
    for ax, column, title in zip(axes, columns, titles):
        _plot_panel(ax, groups, column, grid)
        ax.set_title(title)
    for ax in axes[len(columns):]:
        ax.set_visible(False)
    axes[0].legend(fontsize="small")
    one_seed = any(len(runs) < stats.MIN_RUNS_FOR_CI for runs in groups.values())
    fig.suptitle(f"{env}: mean over seeds, 95% bootstrap CI" + (" (none for n = 1)" if one_seed else ""))
    fig.savefig(path, dpi=100)


def diagnostic_columns(runs: list[Run]) -> list[str]:
    cols = dict.fromkeys(c for r in runs for c in r.columns if c.startswith(DIAGNOSTIC_PREFIXES))
    return [c for c in cols if any(r.series(c)[1].size for r in runs)]


def _fmt(v: float) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4g}"


def compare(paths: list[Path], out: Path, group_by: list[str] | None = None, metric: str = "eval_return_mean") -> dict:
    """Group the runs, write curves.png, final.md, final.csv (and diagnostics.png); returns the table rows."""
    run_dirs = find_runs(paths)
    complete = [d for d in run_dirs if (d / "summary.json").exists() and (d / "metrics.csv").exists()]
    for d in sorted(set(run_dirs) - set(complete)):
        print(f"compare: skipping {d} (unfinished: no summary.json)")
    for d in list(complete):  # a failed run's curve stops at the fault; its last evaluation is no final score
        status = str(json.loads((d / "summary.json").read_text()).get("status", "finished"))
        if status.startswith("failed"):
            print(f"compare: skipping {d} ({status})")
            complete.remove(d)
    if not complete:
        raise UserError("no finished runs (with summary.json) among the given directories")
    runs = [load_run(d) for d in complete]
    envs = {}
    for r in runs:
        envs.setdefault(str(r.config.get("env")), []).append(r.path.name)
    if len(envs) > 1:
        listing = "; ".join(f"{env}: {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"
                            for env, names in envs.items())
        raise UserError(f"runs come from different envs ({listing}); compare one env at a time")
    env = next(iter(envs))

    keys = group_keys(runs, group_by)
    groups: dict[str, list[Run]] = {}
    group_values: dict[str, tuple] = {}
    for r in sorted(runs, key=lambda r: tuple(_show(r.config.get(k)) for k in keys)):
        values = tuple(r.config.get(k) for k in keys)
        label = _label(keys, values)
        groups.setdefault(label, []).append(r)
        group_values[label] = values

    if any(r.series(metric)[1].size == 0 for r in runs):  # a user error first: then its line is the only one
        if metric != "eval_return_mean":
            raise UserError(f"--metric: column {metric!r} has no values in some runs' metrics.csv")
        metric = "episode_return_mean"
        print("compare: some runs never evaluated; final score = mean episode_return_mean of the last 10% of updates")

    few = [f"{label}: n={len(members)}" for label, members in groups.items() if len(members) < stats.RELIABLE_RUNS]
    if few:
        print(f"compare: warning: {unreliable_note(few)}", file=sys.stderr)
    diagnostics = diagnostic_columns(runs)

    table = []
    for label, members in groups.items():
        row = {k: _show(v) for k, v in zip(keys, group_values[label])} if keys else {"variant": label}
        row.update(stats.summarize([r.final(metric) for r in members]))
        row["seeds"] = ",".join(str(r.config.get("seed")) for r in members)
        for c in diagnostics:
            finals = [r.final(c) for r in members]
            row[c] = float(np.nanmean(finals)) if np.isfinite(finals).any() else float("nan")
        table.append(row)

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    columns = list(table[0])
    with (out / "final.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(table)
    (out / "final.md").write_text(markdown_table(table, keys or ["variant"], metric, diagnostics, env, few))

    panels, titles = ["episode_return_mean"], ["training episode return"]
    if all(r.series("eval_return_mean")[1].size >= 1 for r in runs):
        panels.append("eval_return_mean")
        titles.append("evaluation return")
    if metric not in panels:  # e.g. a policy group's return, `<group>/episode_return_mean`
        panels.append(metric)
        titles.append(metric)
    _figure(groups, panels, titles, out / "curves.png", env)
    written = [out / "curves.png", out / "final.md", out / "final.csv"]
    if diagnostics:
        _figure(groups, diagnostics, diagnostics, out / "diagnostics.png", env)
        written.append(out / "diagnostics.png")
    return {"env": env, "metric": metric, "group_by": keys, "table": table, "files": written}


def unreliable_note(few: list[str]) -> str:
    return f"CIs from fewer than {stats.RELIABLE_RUNS} seeds are unreliable ({'; '.join(few)})"


def _interval(low: float, high: float) -> str:
    return "–" if math.isnan(low) or math.isnan(high) else f"[{_fmt(low)}, {_fmt(high)}]"


def markdown_table(table: list[dict], keys: list[str], metric: str, diagnostics: list[str], env: str,
                   few: list[str] = ()) -> str:
    """`few`: the variants with fewer than RELIABLE_RUNS runs, as "label: n=k", noted under the table."""
    head = [*keys, "n (seeds)", "mean", "95% CI", "IQM", "IQM 95% CI", *diagnostics]
    title = (f"Final performance on `{env}` ({metric}; 95% CIs: percentile bootstrap over seeds, "
             f"{stats.BOOTSTRAP_RESAMPLES} resamples, none (–) for n < {stats.MIN_RUNS_FOR_CI}; "
             f"IQM = interquartile mean)")
    lines = [title, "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in table:
        cells = [str(row[k]) for k in keys] + [
            str(row["n"]), _fmt(row["mean"]), _interval(row["ci_low"], row["ci_high"]),
            _fmt(row["iqm"]), _interval(row["iqm_ci_low"], row["iqm_ci_high"]),
            *(_fmt(row[c]) for c in diagnostics)]
        lines.append("| " + " | ".join(cells) + " |")
    if few:
        lines += ["", f"Warning: {unreliable_note(few)}."]
    return "\n".join(lines) + "\n"
