"""Resume after a crash: a SIGKILLed run continued with `hypermappo resume` logs what an uninterrupted run logs.

Only the wall-clock timing columns differ between two runs of the same seed, so they are left out
of every comparison here: train_sps, collect_s, update_s, diagnostics_s.
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

import torch

from hypermappo.cli import main

TIMING_COLUMNS = {"train_sps", "collect_s", "update_s", "diagnostics_s"}  # wall-clock, never reproducible
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
    for name, tensor in final_reference["actor"].items():
        assert torch.equal(final_resumed["actor"][name], tensor), name


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
