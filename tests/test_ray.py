"""`hypermappo sweep --ray`: the grid runs as Ray tasks on a local Ray instance the sweep starts (num_cpus=2)."""

from __future__ import annotations

import json

import pytest

from hypermappo import sweep
from hypermappo.cli import main

pytest.importorskip("ray", reason="Ray is not installed (pip install 'hypermappo[ray]')")


def test_sweep_runs_its_grid_as_ray_tasks_and_skips_them_when_done(tmp_path, capsys, monkeypatch):
    import ray

    monkeypatch.setattr(sweep, "run_local", lambda *a: pytest.fail("--ray ran the grid as local processes"))
    out = tmp_path / "sweep"
    args = ["sweep", "matrix/climbing", "seed=0,1", "num_envs=4", "rollout_length=10", "total_env_steps=40",
            "ppo.ppo_epoch=1", "eval_episodes=2", "log.tensorboard=false", "torch_threads=1",
            "--ray", "--workers", "2", "--out", str(out)]
    assert main(args) == 0
    assert not ray.is_initialized()  # the sweep shut down the Ray instance it started
    for seed in (0, 1):
        summary = json.loads((out / f"seed={seed}" / "summary.json").read_text())
        assert summary["seed"] == seed and summary["updates"] == 1
        assert "hypermappo train: env=matrix:climbing" in (out / "logs" / f"seed={seed}.log").read_text()
    assert "2 runs completed now" in capsys.readouterr().out
    assert main(args) == 0  # everything finished: Ray is not even started
    assert "2 complete (skipped)" in capsys.readouterr().out


def test_unreachable_ray_address_is_one_line_exit_2(tmp_path, capsys):
    assert main(["sweep", "matrix/climbing", "seed=0,1", "--ray-address", "127.0.0.1:1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot reach a Ray head" in err[0]
