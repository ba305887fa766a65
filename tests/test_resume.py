"""Resume after a crash: a SIGKILLed run continued with `hypermappo resume` logs what an uninterrupted run logs.

Only the wall-clock timing columns differ between two runs of the same seed, so they are left out
of every comparison here: train_sps, collect_s, update_s, diagnostics_s, wall_s.
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from hypermappo import config as config_mod
from hypermappo.cli import main
from hypermappo.experiment import Experiment

TIMING_COLUMNS = {"train_sps", "collect_s", "update_s", "diagnostics_s", "wall_s"}  # wall-clock, never reproducible
TINY = ["num_envs=4", "rollout_length=10", "ppo.ppo_epoch=2", "eval_episodes=4", "torch_threads=1",
        "log.tensorboard=false"]


def metrics_without_timing(run_dir: Path) -> list[dict]:
    with (run_dir / "metrics.csv").open(newline="") as f:
        return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in csv.DictReader(f)]


def checkpoint_updates(run_dir: Path) -> list[int]:
    return sorted(int(p.stem.split("_")[1]) for p in (run_dir / "checkpoints").glob("ckpt_*.pt"))


def metric_rows(run_dir: Path) -> int:
    path = run_dir / "metrics.csv"
    if not path.exists():
        return 0
    with path.open(newline="") as f:
        return max(0, sum(1 for line in f if line.endswith("\n")) - 1)  # complete lines after the header


def test_sigkill_mid_interval_then_resume_equals_uninterrupted_run(tmp_path):
    overrides = ["env=staghunt", "seed=7", "total_env_steps=400", "checkpoint_interval=2", *TINY]  # 10 updates

    # the process to kill: a real `hypermappo train`, killed after update 3 is logged (checkpoint 2 on disk)
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "hypermappo.cli", "train", "staghunt/default", *overrides,
                             f"run_dir={killed}", "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 40
    while metric_rows(killed) < 3:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "the training subprocess made no progress"
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    rows_at_kill, ckpts_at_kill = metric_rows(killed), checkpoint_updates(killed)
    assert ckpts_at_kill and ckpts_at_kill[-1] < rows_at_kill < 10, (ckpts_at_kill, rows_at_kill)  # mid-interval
    assert not (killed / "summary.json").exists()

    assert main(["resume", str(killed), "--quiet"]) == 0

    reference = tmp_path / "reference"
    assert main(["train", "staghunt/default", *overrides, f"run_dir={reference}", "--quiet"]) == 0

    resumed_rows, reference_rows = metrics_without_timing(killed), metrics_without_timing(reference)
    assert [r["update"] for r in resumed_rows] == [str(u) for u in range(1, 11)]
    assert "eval_return_mean" in resumed_rows[0]  # the final evaluation reached the CSV
    for got, want in zip(resumed_rows, reference_rows, strict=True):
        assert got == want, f"update {want['update']} differs after resume"
    final_resumed = torch.load(killed / "checkpoints" / "ckpt_0000010.pt", weights_only=False)
    final_reference = torch.load(reference / "checkpoints" / "ckpt_0000010.pt", weights_only=False)
    assert_same(final_resumed["actor"], final_reference["actor"], "actor")


def test_resume_without_saveable_env_state_starts_fresh_episodes_from_saved_rng(tmp_path):
    """Third-party envs (spec.can_save_state False) restart their episodes on resume; the run stays
    reproducible because every RNG state comes from the checkpoint."""
    env = "env=pettingzoo:hypermappo.envs.staghunt:StagHuntParallelEnv"  # the PettingZoo adapter path
    run = tmp_path / "run"
    assert main(["train", "staghunt/default", env, "total_env_steps=160", "checkpoint_interval=2", *TINY,
                 f"run_dir={run}", "--quiet"]) == 0  # 4 updates of 10 steps, episodes of 25 steps
    ckpt = torch.load(run / "checkpoints" / "ckpt_0000002.pt", weights_only=False)
    assert ckpt["env_state"] is None and ckpt["last_step"] is None
    original = metrics_without_timing(run)

    # a crash after update 4 was logged but before its checkpoint was complete
    (run / "checkpoints" / "ckpt_0000004.pt").unlink()
    (run / "summary.json").unlink()
    twin = tmp_path / "twin"
    shutil.copytree(run, twin)

    assert main(["resume", str(run), "--quiet"]) == 0
    assert main(["resume", str(twin), "--quiet"]) == 0
    resumed = metrics_without_timing(run)
    assert [r["update"] for r in resumed] == ["1", "2", "3", "4"]
    assert resumed[:2] == original[:2]  # rows before the checkpoint are kept as they were
    # update 3 went on from step 21 of the episodes before the crash (an episode ended at step 25);
    # after resume it starts new episodes at step 1, so none ends within its 10 steps
    assert original[2]["episodes"] == "4" and resumed[2]["episodes"] == "0"
    assert resumed == metrics_without_timing(twin)  # same checkpoint, same continuation


def test_tensorboard_keeps_events_before_the_checkpoint_and_hides_the_rest(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    overrides = ["total_env_steps=160", "checkpoint_interval=2", *[o for o in TINY if "tensorboard" not in o]]
    assert main(["train", "matrix/climbing", *overrides, f"run_dir={run}", "--quiet"]) == 0
    (run / "checkpoints" / "ckpt_0000004.pt").unlink()  # crash before update 4's checkpoint
    (run / "summary.json").unlink()
    assert main(["resume", str(run), "--quiet"]) == 0
    acc = EventAccumulator(str(run / "tb"))
    acc.Reload()
    events = acc.Scalars("update")
    assert [(e.step, e.value) for e in events] == [(40, 1.0), (80, 2.0), (120, 3.0), (160, 4.0)]


def test_resume_of_a_directory_without_checkpoint_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["resume", str(tmp_path / "empty")]) == 2
    assert main(["resume", str(tmp_path / "missing")]) == 2
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("env: staghunt\n")
    assert main(["resume", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("hypermappo resume: error:") for line in err)
    assert "no checkpoint" in err[2]


# ------------------------------------------------------------------------------------------------
# In-process resume exactness for every actor: train 4 updates with a checkpoint every 2, continue
# a copy of the run from the checkpoint at update 2, and compare with the uninterrupted run.

def assert_same(got, want, where: str) -> None:
    """Nested checkpoint contents equal bit for bit (tensors, numbers, dicts, lists, numpy RNG state)."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.dtype == want.dtype and torch.equal(got, want), where
    elif isinstance(want, dict):
        assert set(got) == set(want), (where, set(got) ^ set(want))
        for k in want:
            assert_same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
    elif hasattr(want, "__array__"):
        assert (got == want).all(), where
    elif isinstance(want, float) and want != want:  # NaN
        assert got != got, where
    else:
        assert got == want, where


def resume_matches_uninterrupted(tmp_path: Path, preset: str, overrides: list[str]) -> None:
    cfg = config_mod.build_config(preset, ["total_env_steps=160", "checkpoint_interval=2", "ppo.num_mini_batch=2",
                                           "ppo.lr_decay=true", *TINY, *overrides])
    full = tmp_path / "full"
    Experiment(cfg, full, quiet=True).run()  # 4 updates of 4 envs x 10 steps
    resumed_from_update_2_matches(cfg, full, tmp_path / "resumed")


def resumed_from_update_2_matches(cfg, full: Path, resumed: Path) -> None:
    """Run `full` (4 updates, checkpoints at 2 and 4), resumed from its checkpoint at update 2, ends as it did."""
    assert checkpoint_updates(full) == [2, 4]
    # as if the run had stopped right after the checkpoint at update 2
    shutil.copytree(full, resumed)
    (resumed / "checkpoints" / "ckpt_0000004.pt").unlink()
    (resumed / "summary.json").unlink()
    Experiment(cfg, resumed, resume=True, quiet=True).run()

    got, want = metrics_without_timing(resumed), metrics_without_timing(full)
    assert [r["update"] for r in got] == ["1", "2", "3", "4"]
    for g, w in zip(got, want, strict=True):
        assert g == w, f"update {w['update']} differs after resume"
    final_got = torch.load(resumed / "checkpoints" / "ckpt_0000004.pt", weights_only=False)
    final_want = torch.load(full / "checkpoints" / "ckpt_0000004.pt", weights_only=False)
    for key in ("actor", "critic", "algo", "env_state", "last_step", "actor_h", "critic_h", "prev_obs", "rng",
                "diagnostics", "recent_returns", "update", "env_steps", "logger_rows",
                *(["coplayer"] if "coplayer" in final_want else [])):
        if key == "last_step":
            assert_same(vars(final_got[key]), vars(final_want[key]), key)
        else:
            assert_same(final_got[key], final_want[key], key)


HYPER = ["actor=hyper", "hyper.target=hard", "hyper.target_interval=3", "hyper.alpha=0.1", "hyper.beta=0.05"]
ACTORS = {
    "mlp": ["actor=mlp"],
    "rnn": ["actor=rnn", "ppo.data_chunk_length=5"],
    "hyper-id": [*HYPER, "hyper.context=[agent_id]"],
    "hyper-obs-history": [*HYPER, "hyper.context=[obs,history]", "hyper.obs_embed_dim=16", "hyper.history_hidden=16",
                          "ppo.data_chunk_length=5"],
}


@pytest.mark.parametrize("env", ["staghunt/default", "mpe/simple_spread"])
@pytest.mark.parametrize("actor", list(ACTORS))
def test_resume_from_a_checkpoint_equals_the_uninterrupted_run(tmp_path, env, actor):
    """The target hypernetwork syncs at update 3, after the resume (the sync counter must be restored)."""
    hyper_width = ["hyper.hidden=16"] if actor.startswith("hyper") else []  # a hyper.* key with actor=mlp is an error
    resume_matches_uninterrupted(tmp_path, env, ["model.hidden_sizes=[16,16]", *hyper_width, *ACTORS[actor]])
