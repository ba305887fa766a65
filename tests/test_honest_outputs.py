"""Outputs say what they know and no more: compare's CIs and their n, eval's progress line, the training
progress line before any episode ended, and the env steps a run will actually train."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from hypermappo.cli import main
from hypermappo.report import compare as compare_mod
from hypermappo.report.compare import compare

TINY = ["torch_threads=1", "log.tensorboard=false", "ppo.ppo_epoch=1"]


def fake_run(path: Path, algo: str, seed: int, final: float, eval_updates=(10,)) -> Path:
    """A finished run directory (config.yaml, metrics.csv, summary.json) written by hand, evaluated at
    `eval_updates` only: the files `compare` reads, without training."""
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump({"env": "staghunt", "algo": algo, "seed": seed}))
    with (path / "metrics.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["update", "env_steps", "episode_return_mean", "eval_return_mean"])
        for u in range(1, 11):
            w.writerow([u, 100 * u, final * u / 10 + seed, final + seed if u in eval_updates else ""])
    (path / "summary.json").write_text(json.dumps({"eval_return_mean": final}))
    return path


def grid_of(tmp_path: Path, seeds: dict[str, int], **kw) -> list[Path]:
    return [fake_run(tmp_path / f"{algo}_{s}", algo, s, 1.0 if algo == "mappo" else 5.0, **kw)
            for algo, n in seeds.items() for s in range(n)]


# ----------------------------------------------------------------------------- compare


def test_compare_gives_no_interval_for_one_seed_states_n_and_warns_below_5_seeds(tmp_path, capsys):
    runs = grid_of(tmp_path, {"mappo": 1, "ippo": 2})
    result = compare(runs, tmp_path / "report", group_by=["algo"])
    rows = {r["algo"]: r for r in result["table"]}
    assert rows["mappo"]["n"] == 1 and math.isnan(rows["mappo"]["ci_low"]) and math.isnan(rows["mappo"]["iqm_ci_high"])
    assert rows["ippo"]["n"] == 2 and rows["ippo"]["ci_low"] < rows["ippo"]["ci_high"]
    md = (tmp_path / "report" / "final.md").read_text()
    assert "| algo | n (seeds) | mean | 95% CI |" in md
    assert "| mappo | 1 | 1 | – | 1 | – |" in md  # a dash, not a zero-width [1, 1]
    assert "| ippo | 2 | 5.5 | [5, 6] |" in md
    warning = "CIs from fewer than 5 seeds are unreliable (algo=ippo: n=2; algo=mappo: n=1)"
    assert warning in md
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"compare: warning: {warning}"]


def test_compare_with_5_seeds_per_variant_does_not_warn(tmp_path, capsys):
    compare(grid_of(tmp_path, {"mappo": 5, "ippo": 5}), tmp_path / "report", group_by=["algo"])
    assert "unreliable" not in capsys.readouterr().err
    assert "unreliable" not in (tmp_path / "report" / "final.md").read_text()


def panel(groups: dict, column: str):
    from matplotlib.figure import Figure

    ax = Figure().subplots()
    grid = np.linspace(100, 1000, compare_mod.GRID_POINTS)
    compare_mod._plot_panel(ax, groups, column, grid)
    return ax


def test_curve_plot_has_a_band_only_for_variants_with_2_or_more_seeds_and_states_n(tmp_path):
    runs = {p.name: compare_mod.load_run(p) for p in grid_of(tmp_path, {"mappo": 1, "ippo": 3})}
    groups = {"mappo": [runs["mappo_0"]], "ippo": [runs[f"ippo_{s}"] for s in range(3)]}
    ax = panel(groups, "episode_return_mean")
    assert len(ax.collections) == 1  # one CI band: ippo's
    labels = [line.get_label() for line in ax.lines]
    assert labels == ["mappo (n=1 seed, no CI)", "ippo (n=3 seeds)"]


def test_evaluation_panel_is_kept_and_marked_when_runs_evaluated_once(tmp_path, monkeypatch):
    drawn = []
    figure = compare_mod._figure
    monkeypatch.setattr(compare_mod, "_figure", lambda groups, columns, *a: (drawn.append(columns),
                                                                              figure(groups, columns, *a)))
    runs = grid_of(tmp_path, {"mappo": 1, "ippo": 2}, eval_updates=(5,))
    compare(runs, tmp_path / "report", group_by=["algo"])
    assert drawn[0] == ["episode_return_mean", "eval_return_mean"]
    loaded = [compare_mod.load_run(p) for p in runs]
    ax = panel({"mappo": loaded[:1], "ippo": loaded[1:]}, "eval_return_mean")
    points = {}
    for c in ax.containers:  # one errorbar container per variant; c.lines[0] is its data line
        line = c.lines[0]
        points[c.get_label()] = (list(line.get_xdata()), list(line.get_ydata()), line.get_marker(), c.has_yerr)
    assert points["mappo (n=1 seed, no CI)"] == ([500], [1.0], "o", False)
    assert points["ippo (n=2 seeds)"] == ([500], [5.5], "o", True)


# ----------------------------------------------------------------------------- progress lines, run header


@pytest.fixture
def trained_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("run") / "r"
    assert main(["train", "matrix/specialisation", *TINY, "num_envs=2", "rollout_length=10", "total_env_steps=20",
                 "eval_episodes=2", f"run_dir={run}", "--quiet"]) == 0
    return run


def test_eval_shows_episodes_done_on_stderr_unless_quiet(trained_run, capsys):
    capsys.readouterr()
    assert main(["eval", str(trained_run), "--episodes", "7"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["episodes"] == 7  # stdout stays the JSON result
    last = err.rstrip("\n").split("\r")[-1]
    assert last.startswith("eval: 7/7 episodes done  10 env steps  elapsed ") and err.endswith("\n")
    assert main(["eval", str(trained_run), "--episodes", "7", "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_eval_render_of_an_env_that_cannot_render_is_one_line_exit_2(trained_run, capsys):
    assert main(["eval", str(trained_run), "--render", str(trained_run / "x.gif"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["hypermappo eval: error: eval --render: env 'matrix:specialisation' cannot render "
                   "(MatrixGameVecEnv cannot render)"]


def test_training_progress_shows_a_dash_not_nan_before_the_first_episode_ends(tmp_path, capsys):
    # episodes last 10 steps, rollouts 5: no episode ends in the first update
    assert main(["train", "matrix/specialisation", *TINY, "num_envs=2", "rollout_length=5", "total_env_steps=20",
                 "eval_episodes=2", f"run_dir={tmp_path / 'r'}"]) == 0
    lines = [s for s in capsys.readouterr().err.split("\r") if s.strip()]
    assert len(lines) == 2 and "nan" not in "".join(lines)
    assert "return(100)        -  ETA" in lines[0]
    assert "return(100)     " in lines[1] and "return(100)        -" not in lines[1]


@pytest.mark.parametrize("steps, trained, header", [
    (1000, 1024, "steps=1,000 (1,024 trained: 8 updates of 128)"),
    (256, 256, "steps=256 (2 updates of 128)")])
def test_train_header_states_the_env_steps_actually_trained(tmp_path, capsys, steps, trained, header):
    assert main(["train", "matrix/specialisation", *TINY, "num_envs=16", "rollout_length=8", f"total_env_steps={steps}",
                 "eval_episodes=2", "diagnostics.every=0", f"run_dir={tmp_path / 'r'}", "--quiet"]) == 0
    assert f" E=16 T=8 {header} -> " in capsys.readouterr().out.splitlines()[0]
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["env_steps"] == trained
