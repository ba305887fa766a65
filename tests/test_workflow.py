"""The experiment workflow a user goes through: sweep a grid, re-run it, compare the variants, render, and the
one-line errors (exit code 2) for the mistakes users make on the way."""

from __future__ import annotations

import csv
import json
import shutil
import sys
import types
from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import pytest
import yaml

from hypermappo.cli import main
from hypermappo.logging import RunLogger
from hypermappo.report import stats
from hypermappo.report.compare import compare
from hypermappo.sweep import parse_grid, split_values

TIMING_COLUMNS = {"train_sps", "collect_s", "update_s", "diagnostics_s", "wall_s"}  # wall-clock, never reproducible
TINY = ["num_envs=4", "rollout_length=10", "ppo.ppo_epoch=2", "eval_episodes=4", "torch_threads=1",
        "log.tensorboard=false"]


def metrics_without_timing(run_dir: Path) -> list[dict]:
    with (run_dir / "metrics.csv").open(newline="") as f:
        return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in csv.DictReader(f)]


def one_error_line(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hypermappo {command}: error: "), err
    return err[0]


# ----------------------------------------------------------------------------- sweep


def test_grid_syntax_lists_ranges_and_bracketed_list_values():
    fixed, axes = parse_grid(["algo=mappo,ippo", "seed=1..3,10", "model.hidden_sizes=[64,64]",
                              "critic.hidden_sizes=[32],[64,64]", "env_kwargs={a: 1, b: 2}", 'env="x,y",z'])
    assert fixed == ["model.hidden_sizes=[64,64]", "env_kwargs={a: 1, b: 2}"]
    assert axes == [("algo", ["mappo", "ippo"]), ("seed", ["1", "2", "3", "10"]),
                    ("critic.hidden_sizes", ["[32]", "[64,64]"]), ("env", ["x,y", "z"])]
    assert split_values("seed", "-1..1") == ["-1", "0", "1"]


def test_sweep_runs_2_variants_x_2_seeds_skips_finished_runs_and_compare_reports_each_variant(tmp_path, capsys):
    out = tmp_path / "sweep"
    args = ["sweep", "matrix/climbing", "algo=mappo,ippo", "seed=0..1", *TINY, "total_env_steps=120",
            "checkpoint_interval=2", "eval_interval=1", "--workers", "2", "--out", str(out)]
    assert main(args) == 0
    names = ["algo=ippo,seed=0", "algo=ippo,seed=1", "algo=mappo,seed=0", "algo=mappo,seed=1"]
    assert sorted(p.name for p in out.iterdir() if (p / "summary.json").exists()) == names
    config = yaml.safe_load((out / "algo=ippo,seed=1" / "config.yaml").read_text())
    assert (config["algo"], config["seed"], config["num_envs"]) == ("ippo", 1, 4)

    # one run interrupted after its checkpoint at update 2; the other three are finished
    interrupted = out / "algo=mappo,seed=1"
    before = metrics_without_timing(interrupted)
    (interrupted / "summary.json").unlink()
    (interrupted / "checkpoints" / "ckpt_0000003.pt").unlink()
    finished = {n: (out / n / "summary.json").stat().st_mtime_ns for n in names if n != interrupted.name}
    capsys.readouterr()
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "3 complete (skipped), 1 to resume, 0 to start" in printed
    assert {n: (out / n / "summary.json").stat().st_mtime_ns for n in finished} == finished  # not run again
    assert metrics_without_timing(interrupted) == before  # resumed exactly where it stopped
    assert main(args) == 0 and "4 complete (skipped), 0 to resume, 0 to start" in capsys.readouterr().out

    report = tmp_path / "report"
    assert main(["compare", str(out), "--out", str(report)]) == 0
    image = imageio.imread(report / "curves.png")
    assert image.ndim == 3 and image.shape[0] > 100
    with (report / "final.csv").open(newline="") as f:
        table = list(csv.DictReader(f))
    assert [(r["algo"], r["n"], r["seeds"]) for r in table] == [("ippo", "2", "0,1"), ("mappo", "2", "0,1")]
    finals = {n: json.loads((out / n / "summary.json").read_text())["eval_return_mean"] for n in names}
    assert float(table[1]["mean"]) == pytest.approx((finals["algo=mappo,seed=0"] + finals["algo=mappo,seed=1"]) / 2)
    md = (report / "final.md").read_text().splitlines()
    assert [line.split("|")[1].strip() for line in md if line.startswith("| ") and "IQM" not in line] == \
        ["ippo", "mappo"]


def _sweep_run_dir(out: Path, preset: str, overrides: list[str], name: str, status: str | None) -> Path:
    """A run directory as the sweep leaves it (its config.yaml), with a summary.json of `status` (None: none)."""
    from hypermappo import config as config_mod
    from hypermappo import run_config

    run = out / name
    (run / "checkpoints").mkdir(parents=True)
    config_mod.save_yaml(run_config.build_config(preset, [*overrides, f"run_dir={run}"]), run / "config.yaml")
    if status is not None:
        (run / "summary.json").write_text(json.dumps({"status": status, "eval_return_mean": None}))
    return run


def test_a_rerun_sweep_reports_a_run_that_failed_on_nan_as_failed_not_done(tmp_path, capsys):
    """A run stopped by non-finite values (summary.json "failed: ...") is no finished run: a re-run of its sweep
    lists it as failed, does not count it as complete and exits 1 (resuming it would repeat the failure)."""
    out = tmp_path / "sweep"
    fixed = [*TINY, "total_env_steps=40"]
    _sweep_run_dir(out, "matrix/climbing", [*fixed, "seed=0"], "seed=0", "finished")
    failed = _sweep_run_dir(out, "matrix/climbing", [*fixed, "seed=1"], "seed=1",
                            "failed: non-finite reward (nan) from env 'matrix:climbing' at update 1")
    args = ["sweep", "matrix/climbing", "seed=0,1", *fixed, "--out", str(out)]
    assert main([*args, "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "1 complete (skipped), 1 failed (skipped), 0 to resume, 0 to start" in printed, printed
    assert "failed   seed=1: failed: non-finite reward (nan)" in printed, printed
    assert main(args) == 1  # the sweep did not complete: one of its runs failed
    printed = capsys.readouterr().out
    assert f"seed=1: FAILED before: non-finite reward (nan) from env 'matrix:climbing' at update 1 (see " \
           f"{failed / 'summary.json'}; delete {failed} to run it again)" in printed, printed
    assert "sweep done: 0 runs completed now, 1 before, 1 failed" in printed, printed


def test_sweep_over_an_unknown_key_is_one_line_exit_2_before_anything_runs(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep", "matrix/climbing", "seed=0..1", "ppo.lr_actr=1e-3,1e-4", "--out", str(out)]) == 2
    assert "unknown config key 'ppo.lr_actr' (did you mean 'ppo.lr_actor'?)" in one_error_line(capsys, "sweep")
    assert main(["sweep", "matrix/climbing", "num_envs=4,many", "--out", str(out)]) == 2
    assert "num_envs: expected an integer, got 'many'" in one_error_line(capsys, "sweep")
    assert main(["sweep", "matrix/climbing", "model.hidden_sizes=64,64", "--out", str(out)]) == 2
    assert "model.hidden_sizes=[64,64]" in one_error_line(capsys, "sweep")
    assert not out.exists()


def test_sweep_dry_run_lists_the_grid_and_takes_overrides_after_options(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep", "matrix/climbing", "--dry-run", "algo=mappo,ippo", "--out", str(out), "seed=1..2"]) == 0
    printed = capsys.readouterr().out
    assert "4 runs" in printed and "algo=ippo,seed=2: train matrix/climbing algo=ippo seed=2" in printed
    assert not out.exists()


def test_sweep_refuses_to_reuse_a_run_directory_holding_another_config(tmp_path, capsys):
    out = tmp_path / "sweep"
    run = out / "seed=0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"env": "staghunt", "seed": 0}))
    assert main(["sweep", "matrix/climbing", "seed=0,1", "--out", str(out)]) == 2
    assert "holds a run with another config" in one_error_line(capsys, "sweep")
    assert (run / "config.yaml").exists()


# ----------------------------------------------------------------------------- compare


def fake_run(path: Path, env: str, algo: str, seed: int, final: float, diagnostics: bool = True) -> Path:
    """A finished run directory with a hand-written metrics.csv (no training needed)."""
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump({"env": env, "algo": algo, "seed": seed, "model": {"gain": 1.0}}))
    cols = ["update", "env_steps", "episode_return_mean", "eval_return_mean"] + (["kl_sum", "snd"] if diagnostics else [])
    with (path / "metrics.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for u in range(1, 11):
            row = [u, 100 * u, final * u / 10, final if u == 10 else ""]
            w.writerow(row + ([0.1 * seed, 2.0] if diagnostics else []))
    (path / "summary.json").write_text(json.dumps({"eval_return_mean": final}))
    return path


def test_compare_table_has_mean_ci_iqm_and_diagnostics_per_variant(tmp_path):
    finals = {"mappo": [1.0, 2.0, 3.0, 100.0], "ippo": [5.0, 5.0, 6.0, 6.0]}
    runs = [fake_run(tmp_path / f"{a}_{s}", "staghunt", a, s, v) for a, vs in finals.items() for s, v in enumerate(vs)]
    result = compare(runs, tmp_path / "report", group_by=["algo"])
    rows = {r["algo"]: r for r in result["table"]}
    assert rows["mappo"]["mean"] == pytest.approx(26.5)
    assert rows["mappo"]["iqm"] == pytest.approx(2.5)  # the outlier seed is trimmed
    assert rows["mappo"]["ci_low"] <= 26.5 <= rows["mappo"]["ci_high"]
    assert rows["ippo"]["kl_sum"] == pytest.approx(0.15) and rows["ippo"]["snd"] == pytest.approx(2.0)
    assert (tmp_path / "report" / "diagnostics.png").exists()
    assert "| kl_sum | snd |" in (tmp_path / "report" / "final.md").read_text()


def test_compare_of_runs_from_different_envs_is_one_line_exit_2(tmp_path, capsys):
    a = fake_run(tmp_path / "a", "staghunt", "mappo", 0, 1.0)
    b = fake_run(tmp_path / "b", "matrix:climbing", "mappo", 0, 1.0)
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "report")]) == 2
    assert "different envs" in one_error_line(capsys, "compare")
    assert main(["compare", str(a), "--group-by", "algoo", "--out", str(tmp_path / "report")]) == 2
    assert "did you mean 'algo'?" in one_error_line(capsys, "compare")
    assert not (tmp_path / "report").exists()


def test_bootstrap_statistics_match_their_definitions():
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 100.0])
    assert stats.iqm(x) == pytest.approx(np.mean([3.0, 4.0, 5.0, 6.0]))
    lo, hi = stats.bootstrap_ci(x)
    assert lo < x.mean() < hi and (lo, hi) == stats.bootstrap_ci(x)  # reproducible
    assert stats.bootstrap_ci(np.full(5, 3.0)) == (3.0, 3.0)


# ----------------------------------------------------------------------------- user errors, logging


def test_user_mistakes_are_one_line_with_exit_code_2(tmp_path, capsys):
    assert main(["train", "staghunt/defualt"]) == 2
    assert "did you mean staghunt/default" in one_error_line(capsys, "train")
    assert main(["train", "staghunt/default", "num_env=4"]) == 2
    assert "did you mean 'num_envs'?" in one_error_line(capsys, "train")
    assert main(["train", "staghunt/default", "num_envs=four"]) == 2
    assert "num_envs: expected an integer, got 'four'" in one_error_line(capsys, "train")
    existing = tmp_path / "run"
    existing.mkdir()
    (existing / "notes.txt").write_text("keep me")
    assert main(["train", "staghunt/default", f"run_dir={existing}"]) == 2
    assert "already exists" in one_error_line(capsys, "train")
    assert (existing / "notes.txt").read_text() == "keep me"
    assert main(["resume", str(tmp_path)]) == 2
    one_error_line(capsys, "resume")


def test_wandb_run_is_continued_on_resume(tmp_path, monkeypatch):
    calls = []
    fake = types.SimpleNamespace(util=types.SimpleNamespace(generate_id=lambda: f"id{len(calls)}"),
                                 init=lambda **kw: calls.append(kw) or types.SimpleNamespace(finish=lambda: None))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    RunLogger(tmp_path, tensorboard=False, wandb=True).close()
    RunLogger(tmp_path, tensorboard=False, wandb=True, resume_rows=0).close()
    assert calls[0]["id"] == calls[1]["id"] == "id0" and calls[1]["resume"] == "allow"


def test_csv_header_grows_when_a_column_first_appears_later(tmp_path):
    log = RunLogger(tmp_path, tensorboard=False)
    log.log({"update": 1, "env_steps": 10, "loss": 0.5})
    log.log({"update": 2, "env_steps": 20, "loss": 0.25, "eval_return_mean": 3.0})
    log.close()
    with (tmp_path / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows == [{"update": "1", "env_steps": "10", "loss": "0.5", "eval_return_mean": ""},
                    {"update": "2", "env_steps": "20", "loss": "0.25", "eval_return_mean": "3.0"}]


# ----------------------------------------------------------------------------- rendering


@pytest.mark.parametrize("preset", ["staghunt/default", "mpe/simple_spread", "mpe2/simple_spread"])
def test_eval_render_writes_an_animated_gif(tmp_path, preset, capsys):
    run = tmp_path / "run"
    assert main(["train", preset, *TINY, "total_env_steps=40", f"run_dir={run}", "--quiet"]) == 0
    capsys.readouterr()
    gif = tmp_path / "episode.gif"
    assert main(["eval", str(run), "--episodes", "2", "--render", str(gif)]) == 0
    assert json.loads(capsys.readouterr().out)["render"] == str(gif)
    frames = imageio.mimread(gif)
    assert len(frames) > 2 and frames[0].shape[-1] in (3, 4) and min(frames[0].shape[:2]) >= 100
    assert not all(np.array_equal(frames[0], f) for f in frames[1:])  # something moves
    shutil.rmtree(run)
