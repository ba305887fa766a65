"""MAPPO trains end to end on every env backend: short smoke runs through `Experiment(cfg).run()`.

Each run takes 3 updates (the live-component audit's default point) with tiny E and T and checks the
run-directory contract: metrics.csv has one row per update with finite losses, summary.json has the
keys other tooling reads, and the audit passed. Optional backends (lbforaging, JAX/SMAX) are skipped
when not installed.
"""

from __future__ import annotations

import csv
import json
import math

import pytest

from hypermappo.config import build_config
from hypermappo.experiment import Experiment

UPDATES = 3
SUMMARY_KEYS = ("algo", "env", "seed", "env_steps", "wall_s", "train_sps", "eval_return_mean", "eval_return_std",
                "eval_episodes")
LOSSES = ("policy_loss", "value_loss", "entropy", "grad_norm_actor")


def train(tmp_path, env: str, overrides=(), env_kwargs=None, num_envs: int = 4, rollout_length: int = 5,
          eval_episodes: int = 2) -> tuple[dict, list[dict]]:
    """UPDATES updates on `env`; returns (summary.json, metrics.csv rows) after checking the contract."""
    run_dir = tmp_path / "run"
    cfg = build_config(None, [
        f"env={env}", f"num_envs={num_envs}", f"rollout_length={rollout_length}",
        f"total_env_steps={UPDATES * num_envs * rollout_length}", f"eval_episodes={eval_episodes}",
        "ppo.ppo_epoch=2", "log.tensorboard=false", "log.progress=false", "checkpoint_interval=0",
        "torch_threads=1", f"run_dir={run_dir}", *overrides], base={"env_kwargs": env_kwargs or {}})
    returned = Experiment(cfg, quiet=True).run()

    summary = json.loads((run_dir / "summary.json").read_text())
    assert returned["eval_return_mean"] == summary["eval_return_mean"]
    missing = [k for k in SUMMARY_KEYS if k not in summary]
    assert not missing, f"summary.json lacks {missing}"
    assert summary["algo"] == cfg.algo and summary["env"] == env and summary["seed"] == cfg.seed
    assert summary["env_steps"] == UPDATES * num_envs * rollout_length
    assert summary["eval_episodes"] == eval_episodes
    for k in ("wall_s", "train_sps", "eval_return_mean", "eval_return_std"):
        assert math.isfinite(summary[k]), f"summary {k} = {summary[k]}"
    assert summary["audit"]["passed"], summary["audit"]
    assert summary["audit"]["after_updates"] == UPDATES

    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["update"]) for r in rows] == list(range(1, UPDATES + 1))
    for r in rows:
        for k in LOSSES:
            assert math.isfinite(float(r[k])), f"update {r['update']}: {k} = {r[k]}"
    assert rows[-1]["eval_return_mean"] != ""  # the final evaluation is logged in the last row
    assert (run_dir / "config.yaml").exists() and list((run_dir / "checkpoints").glob("ckpt_*.pt"))
    return summary, rows


# ------------------------------------------------------------------ one run per backend


def test_matrix_climbing(tmp_path):
    train(tmp_path, "matrix:climbing", env_kwargs={"episode_length": 5})


def test_staghunt_logs_capture_extras(tmp_path):
    summary, rows = train(tmp_path, "staghunt", env_kwargs={"episode_length": 5})
    assert "eval_stag_captures" in summary and "eval_hare_captures" in summary
    assert "stag_captures" in rows[0]  # episodes of 5 steps end inside every 5-step rollout


def test_mpe_torch_simple_spread(tmp_path):
    train(tmp_path, "mpe:simple_spread", env_kwargs={"max_cycles": 5})


def test_mpe2_simple_spread_through_pettingzoo(tmp_path):
    train(tmp_path, "mpe2:simple_spread_v3", env_kwargs={"max_cycles": 5}, num_envs=2)


def test_vmas_navigation(tmp_path):
    pytest.importorskip("vmas")
    train(tmp_path, "vmas:navigation", env_kwargs={"max_steps": 5})


def test_gym_lbforaging(tmp_path):
    pytest.importorskip("lbforaging", reason="lbforaging not installed (optional extra hypermappo[gym])")
    # lbforaging's own limit is 50 steps; a shorter Gymnasium time limit keeps evaluation episodes short
    train(tmp_path, "gym:lbforaging:Foraging-8x8-2p-2f-v3", env_kwargs={"max_episode_steps": 5}, num_envs=2)


def test_smax_deaths_and_action_masks(tmp_path):
    pytest.importorskip("jax")
    pytest.importorskip("jaxmarl")
    # eval_episodes == num_envs: evaluation reuses the jitted step compiled for training (no second compile)
    train(tmp_path, "smax:3m", env_kwargs={"max_steps": 5}, num_envs=2, eval_episodes=2)


# ------------------------------------------------------------------ actors, algorithms, sharing, spaces


def test_rnn_actor(tmp_path):
    train(tmp_path, "matrix:climbing", ["actor=rnn", "ppo.data_chunk_length=5"], env_kwargs={"episode_length": 5})


def test_hyper_actor(tmp_path):
    train(tmp_path, "matrix:specialisation", ["actor=hyper", "hyper.context=agent_id", "hyper.lr=1e-3"],
          env_kwargs={"n_agents": 3, "episode_length": 5})


def test_ippo(tmp_path):
    summary, _ = train(tmp_path, "staghunt", ["algo=ippo"], env_kwargs={"episode_length": 5})
    assert summary["algo"] == "ippo"


def test_separate_parameters(tmp_path):
    train(tmp_path, "mpe:simple_spread", ["model.share_params=false"], env_kwargs={"max_cycles": 5})


def test_pettingzoo_env_with_deaths_masks_and_heterogeneous_spaces(tmp_path):
    # scripted env: agents of different obs/action sizes, one dies at step 2, one leaves at step 4,
    # the runner's action 3 is masked (the env asserts it is never taken), episodes of 2..6 steps
    train(tmp_path, "pettingzoo:envs_for_adapter_tests:make_scripted_env", env_kwargs={"with_state": True})


def test_box_actions_mpe_torch(tmp_path):
    train(tmp_path, "mpe:simple_spread", env_kwargs={"max_cycles": 5, "continuous_actions": True})


def test_box_actions_vmas(tmp_path):
    pytest.importorskip("vmas")
    train(tmp_path, "vmas:navigation", ["algo=ippo"], env_kwargs={"max_steps": 5, "continuous_actions": True})
