"""A run directory belongs to the one process training it, and a sweep's workers die with the sweep.

- `train` / `resume` hold an exclusive lock on RUN_DIR/.lock: a second process gets a one-line error.
- `kill -9` of a `hypermappo sweep` leaves no worker running (they would race the re-run), and the
  re-run resumes the interrupted runs to completion.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from hypermappo import config as config_mod
from hypermappo.cli import main
from hypermappo.experiment import Experiment

TINY = ["num_envs=4", "rollout_length=10", "ppo.ppo_epoch=1", "eval_episodes=2", "torch_threads=1",
        "log.tensorboard=false", "diagnostics.every=0"]


def test_second_train_or_resume_of_a_run_dir_in_use_is_a_one_line_error(tmp_path, capsys):
    run = tmp_path / "run"
    cfg = config_mod.build_config("matrix/climbing", ["total_env_steps=80", "checkpoint_interval=1", *TINY])
    first = Experiment(cfg, run, quiet=True)  # holds the run dir until it ends
    assert main(["train", "matrix/climbing", *TINY, f"run_dir={run}"]) == 2
    first.run()
    (run / "summary.json").unlink()  # as if killed before the end: resumable
    resumer = Experiment(cfg, run, resume=True, quiet=True)
    assert main(["resume", str(run)]) == 2
    err = [ln for ln in capsys.readouterr().err.strip().splitlines() if not ln.startswith("resume: continuing")]
    assert err == [f"hypermappo train: error: run_dir {run} is being trained by another process (pid {os.getpid()})",
                   f"hypermappo resume: error: run_dir {run} is being trained by another process (pid {os.getpid()})"]
    resumer.run()  # the lock goes with the run: the directory is free again afterwards
    (run / "summary.json").unlink()
    assert main(["resume", str(run), "--quiet"]) == 0


def test_a_training_subprocess_keeps_other_processes_out_of_its_run_dir(tmp_path, capsys):
    run = tmp_path / "run"
    trainer = subprocess.Popen([sys.executable, "-m", "hypermappo.cli", "train", "matrix/climbing", *TINY,
                                "total_env_steps=400000", "checkpoint_interval=1", f"run_dir={run}", "--quiet"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not any((run / "checkpoints").glob("ckpt_*.pt")):
            assert trainer.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        assert main(["train", "matrix/climbing", *TINY, f"run_dir={run}"]) == 2
        assert main(["resume", str(run)]) == 2
        busy = f"run_dir {run} is being trained by another process (pid {trainer.pid})"
        assert capsys.readouterr().err.strip().splitlines() == [f"hypermappo train: error: {busy}",
                                                                 f"hypermappo resume: error: {busy}"]
    finally:
        trainer.kill()
        trainer.wait()


def _children(pid: int) -> list[int]:
    """Every descendant of `pid` (from /proc)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError):
                pass
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found += kids
        frontier += kids
    return found


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")  # a zombie has stopped running


def _rows(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open() as f:
        return max(0, sum(1 for line in f if line.endswith("\n")) - 1)


def test_sigkilled_sweep_leaves_no_worker_and_its_rerun_resumes_every_run(tmp_path):
    out = tmp_path / "sweep"
    args = [sys.executable, "-m", "hypermappo.cli", "sweep", "matrix/climbing", "seed=0,1", *TINY,
            "total_env_steps=2000", "checkpoint_interval=2", "--workers", "2", "--out", str(out)]  # 50 updates each
    parent = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = [out / f"seed={s}" / "metrics.csv" for s in (0, 1)]
    deadline = time.monotonic() + 90
    while not all(_rows(m) >= 3 for m in metrics):  # both runs are training, each has a checkpoint
        assert parent.poll() is None, "the sweep ended before it could be killed"
        assert time.monotonic() < deadline, "the sweep's runs made no progress"
        time.sleep(0.01)
    workers = _children(parent.pid)  # the forkserver and the runs it forked
    assert len(workers) >= 3
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while [w for w in workers if _running(w)]:
        assert time.monotonic() < deadline, f"workers still running after the sweep was killed: {workers}"
        time.sleep(0.05)
    assert all((out / f"seed={s}" / "summary.json").exists() is False for s in (0, 1))

    rerun = subprocess.run(args, capture_output=True, text=True, timeout=180)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "0 complete (skipped), 2 to resume, 0 to start" in rerun.stdout
    for m in metrics:
        with m.open(newline="") as f:
            assert [int(r["update"]) for r in csv.DictReader(f)] == list(range(1, 51))


def test_ctrl_c_on_a_local_sweep_saves_the_update_in_progress_of_each_run(tmp_path):
    """Ctrl-C in a terminal sends SIGINT to the sweep and to its runs (one process group): each run finishes the update
    under way and checkpoints it, as a run started by `train` does; the sweep waits for them and passes nothing on
    that its runs would take for a second signal."""
    out = tmp_path / "sweep"
    args = [sys.executable, "-m", "hypermappo.cli", "sweep", "matrix/climbing", "seed=0", *TINY,
            "total_env_steps=200000", "checkpoint_interval=1000", "--workers", "1", "--out", str(out)]
    sweep = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    run = out / "run"
    deadline = time.monotonic() + 90
    while _rows(run / "metrics.csv") < 3:  # training, no checkpoint yet (the first is due at update 1000)
        assert sweep.poll() is None, sweep.stdout.read().decode()
        assert time.monotonic() < deadline, "the sweep's run made no progress"
        time.sleep(0.01)
    os.killpg(sweep.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    sweep.communicate(timeout=60)
    rows = _rows(run / "metrics.csv")
    log = (out / "logs" / "run.log").read_text().strip().splitlines()
    assert log[-1] == (f"hypermappo train: interrupted by SIGINT after update {rows} (env step {40 * rows:,}); saved "
                       f"{run / 'checkpoints' / f'ckpt_{rows:07d}.pt'}; continue with: hypermappo resume {run}"), log
    assert sorted(p.name for p in (run / "checkpoints").glob("ckpt_*.pt")) == [f"ckpt_{rows:07d}.pt"]


def test_sweep_rerun_refuses_a_run_dir_another_process_is_training(tmp_path, capsys):
    from hypermappo.runtime.run_lock import RunDirLock

    out = tmp_path / "sweep"
    (out / "seed=0").mkdir(parents=True)
    lock = RunDirLock(out / "seed=0")  # as a leftover worker would hold it
    assert main(["sweep", "matrix/climbing", "seed=0,1", *TINY, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"hypermappo sweep: error: run_dir {out / 'seed=0'} is being trained by another process "
                   f"(pid {os.getpid()}); stop it or wait for it before re-running this sweep"]
    assert (out / "seed=0").is_dir()  # not cleared for a restart under the other process's feet
    lock.release()


KILLED_RUN_WITH_ENV_WORKERS = """
import os, sys, time, torch
from hypermappo.envs.registry import make_env
env = make_env("pettingzoo:hypermappo.envs.staghunt:StagHuntParallelEnv", 2, "cpu", vectorizer="subprocess",
               num_workers=2)
env.reset(seed=0)
print(" ".join(str(p.pid) for p in env._envs.processes), flush=True)
time.sleep(600)
"""


def test_subprocess_env_workers_die_with_their_killed_run(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN_WITH_ENV_WORKERS], stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(p) for p in proc.stdout.readline().split()]
        assert len(workers) == 2 and all(_running(w) for w in workers)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    deadline = time.monotonic() + 10
    while [w for w in workers if _running(w)]:
        assert time.monotonic() < deadline, f"env workers {workers} outlived their killed run"
        time.sleep(0.05)
