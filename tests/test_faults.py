"""Runs that fail loudly and survive faults: non-finite values, env exceptions, corrupt checkpoints, signals.

Every failure is one line on stderr with its own exit code (see `hypermappo.cli`), and the last
checkpoint a failing run leaves behind is intact and finite.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_resume import TINY, checkpoint_updates, metric_rows, metrics_without_timing

from hypermappo import config as config_mod
from hypermappo.algos import mappo
from hypermappo.checkpoint import first_nonfinite, read_checkpoint
from hypermappo.cli import main
from hypermappo.envs.staghunt import StagHuntVecEnv
from hypermappo.errors import NonFiniteError, RunInterrupted
from hypermappo.experiment import Experiment

FAULTY = "pettingzoo:envs_for_fault_tests:make_faulty_env"
# seed 7, E=4: env 2 is seeded 9; T=5, so its 12th step is rollout step 2 of update 3 (env step 48)
FAULT_RUN = ["seed=7", "num_envs=4", "rollout_length=5", "total_env_steps=200", "checkpoint_interval=1",
             "ppo.ppo_epoch=2", "eval_episodes=4", "torch_threads=1", "log.tensorboard=false"]


def faulty_env(fault: str, vectorizer: str = "inprocess") -> list[str]:
    return [f"env={FAULTY}",
            f"env_kwargs={{fault: {fault}, after: 12, faulty_seed: 9, agent: 1, vectorizer: {vectorizer}}}"]


def stderr_lines(capsys) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


def assert_finite_checkpoints(run: Path, updates: list[int]) -> None:
    assert checkpoint_updates(run) == updates
    for u in updates:
        sd = read_checkpoint(run / "checkpoints" / f"ckpt_{u:07d}.pt", "cpu")  # size, checksum, keys, finite
        assert sd["update"] == u


# ---------------------------------------------------------------------------------------------------- non-finite


@pytest.mark.parametrize(("fault", "quantity", "vectorizer", "at"), [
    ("reward", "reward", "inprocess", "rollout step 2, env step 48"),
    ("reward", "reward", "subprocess", "rollout step 2, env step 48"),
    ("observation", "observation", "inprocess", "rollout step 2, env step 48"),
    ("final_observation", "final observation", "inprocess", "rollout step 5, env step 60"),  # its episode's end
])
def test_nonfinite_env_data_stops_with_one_line_and_keeps_the_finite_checkpoints(tmp_path, capsys, fault, quantity,
                                                                                   vectorizer, at):
    run = tmp_path / "run"
    code = main(["train", "staghunt/default", *faulty_env(fault, vectorizer), *FAULT_RUN, f"run_dir={run}", "--quiet"])
    assert code == 3
    err = stderr_lines(capsys)
    assert len(err) == 1, err
    assert err[0].startswith(f"hypermappo train: error: non-finite {quantity} (nan) from env '{FAULTY}' "
                             f"at update 3, {at}: env 2, agent slot 1 (a1)"), err[0]
    assert "ckpt_0000002.pt" in err[0]
    assert_finite_checkpoints(run, [1, 2])  # update 3 wrote none, so none was rotated away
    assert metric_rows(run) == 2
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"].startswith(f"failed: non-finite {quantity} (nan)")
    assert summary["eval_return_mean"] is None and summary["eval_return_std"] is None

    assert main(["resume", str(run)]) == 2  # it would fail the same way
    err = stderr_lines(capsys)
    assert len(err) == 1 and "stopped (failed: non-finite" in err[0] and "delete" in err[0], err


def test_infinite_reward_counts_as_nonfinite(tmp_path, capsys):
    env = [f"env={FAULTY}", "env_kwargs={fault: reward, after: 12, faulty_seed: 9, agent: 0, value: -inf}"]
    assert main(["train", "staghunt/default", *env, *FAULT_RUN, f"run_dir={tmp_path / 'run'}", "--quiet"]) == 3
    assert "non-finite reward (-inf)" in stderr_lines(capsys)[0]


@pytest.mark.parametrize("vectorizer", ["inprocess", "subprocess"])
def test_env_exception_stops_with_one_line_and_the_run_stays_resumable(tmp_path, capsys, vectorizer):
    run = tmp_path / "run"
    code = main(["train", "staghunt/default", *faulty_env("raise", vectorizer), *FAULT_RUN, f"run_dir={run}", "--quiet"])
    assert code == 4
    err = stderr_lines(capsys)
    assert len(err) == 1, err
    assert err[0].startswith(f"hypermappo train: error: env '{FAULTY}' raised RuntimeError: boom at step 12 "
                             "(at update 3, rollout step 2, env step 48"), err[0]
    assert f"hypermappo resume {run}" in err[0]
    assert_finite_checkpoints(run, [1, 2])
    assert not (run / "summary.json").exists()  # not finished: resume may continue it
    log = (run / "error.log").read_text()
    assert "RuntimeError: boom at step 12" in log and "envs_for_fault_tests.py" in log  # the env's own frame

    assert main(["resume", str(run), "--quiet"]) == 4  # continues from update 2, and the env raises again
    err = stderr_lines(capsys)
    assert err[0] == f"resume: continuing from {run / 'checkpoints' / 'ckpt_0000002.pt'} (update 2, env step 40)"
    assert len(err) == 2 and "raised RuntimeError" in err[1]


# 6 updates of 2 optimiser steps; no diagnostics, so every loss / backward call is the update's
STAGHUNT = ["env=staghunt", "seed=3", "total_env_steps=240", "checkpoint_interval=1", "diagnostics.every=0", *TINY]


def with_overrides(base: list[str], overrides) -> list[str]:
    """`base` with the keys set again in `overrides` replaced (a key given twice is a user error)."""
    keys = {o.split("=", 1)[0] for o in overrides}
    return [o for o in base if o.split("=", 1)[0] not in keys] + list(overrides)


def staghunt_experiment(run: Path, overrides=()) -> Experiment:
    cfg = config_mod.build_config("staghunt/default", [*with_overrides(STAGHUNT, overrides), f"run_dir={run}"])
    return Experiment(cfg, quiet=True)


def test_nonfinite_reward_of_a_builtin_env(tmp_path, monkeypatch, capsys):
    step, calls = StagHuntVecEnv.step, []

    def nan_on_the_25th_call(self, actions):
        out = step(self, actions)
        calls.append(1)
        if len(calls) == 25:  # update 3, rollout step 5
            out.reward[1, 0] = float("nan")
        return out

    monkeypatch.setattr(StagHuntVecEnv, "step", nan_on_the_25th_call)
    run = tmp_path / "run"
    assert main(["train", "staghunt/default", *STAGHUNT, f"run_dir={run}", "--quiet"]) == 3
    err = stderr_lines(capsys)
    assert len(err) == 1 and "non-finite reward (nan) from env 'staghunt' at update 3, rollout step 5" in err[0]
    assert "env 1, agent slot 0" in err[0]
    assert_finite_checkpoints(run, [1, 2])


def test_nonfinite_value_loss_never_reaches_the_weights(tmp_path, monkeypatch):
    loss, calls = mappo.MAPPO.loss, []

    def nan_value_loss_in_update_3(self, batch, adv_mean, adv_std):
        actor_loss, value_loss, stats = loss(self, batch, adv_mean, adv_std)
        calls.append(1)
        if len(calls) == 6:  # 2 epochs x 1 mini-batch per update: update 3, epoch 2
            value_loss = value_loss + float("nan")  # a NaN loss whose gradients stay finite: only the loss check sees it
            stats["value_loss"] = value_loss
        return actor_loss, value_loss, stats

    monkeypatch.setattr(mappo.MAPPO, "loss", nan_value_loss_in_update_3)
    exp = staghunt_experiment(tmp_path / "run")
    before = {k: v.clone() for k, v in exp.critic.state_dict().items()}
    with pytest.raises(NonFiniteError, match=r"non-finite value_loss \(nan\) in PPO epoch 2, mini-batch 1 of "
                                             r"update 3 \(env step 120\) on env 'staghunt'"):
        exp.run()
    assert first_nonfinite({"actor": exp.actor.state_dict(), "critic": exp.critic.state_dict(),
                            "algo": exp.algo.state_dict()}) is None
    assert any(not torch.equal(v, before[k]) for k, v in exp.critic.state_dict().items())  # it did train before
    assert_finite_checkpoints(tmp_path / "run", [1, 2])


def test_nonfinite_gradient_norm_never_reaches_the_weights(tmp_path):
    exp = staghunt_experiment(tmp_path / "run")
    weight = next(exp.actor.parameters())
    backward_calls = []

    def nan_gradient_in_update_2(grad):
        backward_calls.append(1)
        return grad * float("nan") if len(backward_calls) == 3 else grad  # update 2, epoch 1

    weight.register_hook(nan_gradient_in_update_2)
    with pytest.raises(NonFiniteError, match=r"non-finite grad_norm_actor \(nan\) in PPO epoch 1, mini-batch 1 "
                                             r"of update 2"):
        exp.run()
    assert first_nonfinite({"actor": exp.actor.state_dict(), "algo": exp.algo.state_dict()}) is None
    assert_finite_checkpoints(tmp_path / "run", [1])


def test_nonfinite_weights_are_never_checkpointed(tmp_path, monkeypatch, capsys):
    update = mappo.MAPPO.update

    def corrupt_weights_in_update_4(self, buf, generator=None):
        metrics = update(self, buf, generator)
        if self.actor_opt.state_dict()["state"][0]["step"] == 8:  # 2 optimiser steps per update
            with torch.no_grad():
                next(self.critic.parameters()).view(-1)[0] = float("inf")
        return metrics

    monkeypatch.setattr(mappo.MAPPO, "update", corrupt_weights_in_update_4)
    run = tmp_path / "run"
    assert main(["train", "staghunt/default", *STAGHUNT, f"run_dir={run}", "--quiet"]) == 3
    err = stderr_lines(capsys)
    assert len(err) == 1 and "non-finite critic." in err[0] and "before the checkpoint of update 4" in err[0], err
    assert_finite_checkpoints(run, [2, 3])
    assert json.loads((run / "summary.json").read_text())["status"].startswith("failed: non-finite critic.")


def test_nonfinite_evaluation_return_writes_no_eval_number(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(Experiment, "evaluate", lambda self, *a, **k: {"return_mean": float("nan"),
                                                                        "return_std": 0.0, "episodes": 4})
    run = tmp_path / "run"
    assert main(["train", "staghunt/default", *STAGHUNT, f"run_dir={run}", "--quiet"]) == 3
    assert "non-finite evaluation return (nan) after update 6" in stderr_lines(capsys)[0]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"].startswith("failed: non-finite evaluation return")
    assert summary["eval_return_mean"] is None
    assert_finite_checkpoints(run, [4, 5])


def test_a_finished_run_says_so(tmp_path):
    run = tmp_path / "run"
    short = [o for o in STAGHUNT if not o.startswith("total_env_steps")]
    assert main(["train", "staghunt/default", *short, "total_env_steps=40", f"run_dir={run}", "--quiet"]) == 0
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"


# ---------------------------------------------------------------------------------------------------- checkpoints


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def resave(path: Path, edit) -> None:
    """Rewrite a checkpoint (with a matching sidecar, so only the content check can catch it)."""
    import zlib

    sd = torch.load(path, weights_only=False)
    edit(sd)
    torch.save(sd, path)
    data = path.read_bytes()
    path.with_name(path.name + ".crc32").write_text(f"{len(data)} {zlib.crc32(data):08x}\n")


def nan_weight(sd):
    next(iter(sd["actor"].values())).view(-1)[0] = float("nan")


CORRUPTIONS = {
    "truncated": (truncate, "truncated: "),
    "flipped byte": (flip_a_byte, "checksum mismatch"),
    "no sidecar, garbage": (lambda p: (p.write_bytes(b"not a checkpoint"), p.with_name(p.name + ".crc32").unlink()),
                            "does not load"),
    "missing key": (lambda p: resave(p, lambda sd: sd.pop("rng")), "lacks rng"),
    "non-finite weight": (lambda p: resave(p, nan_weight), "non-finite actor."),
}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """matrix/climbing, 4 updates, checkpoints 2 and 4 (cheap: the fallback tests copy it)."""
    run = tmp_path_factory.mktemp("finished") / "run"
    assert main(["train", "matrix/climbing", "total_env_steps=160", "checkpoint_interval=2", *TINY,
                 f"run_dir={run}", "--quiet"]) == 0
    return run


def unfinished_copy(finished_run: Path, tmp_path: Path) -> Path:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (run / "summary.json").unlink()
    return run


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_resume_falls_back_to_the_newest_intact_checkpoint(finished_run, tmp_path, capsys, kind):
    run = unfinished_copy(finished_run, tmp_path)
    corrupt, reason = CORRUPTIONS[kind]
    latest = run / "checkpoints" / "ckpt_0000004.pt"
    corrupt(latest)
    capsys.readouterr()
    assert main(["resume", str(run), "--quiet"]) == 0
    err = stderr_lines(capsys)
    assert len(err) == 1, err
    assert err[0].startswith(f"resume: ckpt_0000004.pt is unusable ({reason}"), err[0]
    assert err[0].endswith(f"continuing from {run / 'checkpoints' / 'ckpt_0000002.pt'} (update 2, env step 80)")
    assert (run / "checkpoints" / "ckpt_0000004.pt.corrupt").exists()  # set aside, out of the rotation
    assert_finite_checkpoints(run, [2, 4])  # update 4 written again by the resumed run
    assert metrics_without_timing(run) == metrics_without_timing(finished_run)


def test_resume_with_no_intact_checkpoint_is_a_one_line_error(finished_run, tmp_path, capsys):
    run = unfinished_copy(finished_run, tmp_path)
    size = (run / "checkpoints" / "ckpt_0000004.pt").stat().st_size
    truncate(run / "checkpoints" / "ckpt_0000004.pt")
    flip_a_byte(run / "checkpoints" / "ckpt_0000002.pt")
    capsys.readouterr()
    assert main(["resume", str(run)]) == 2
    assert stderr_lines(capsys) == [f"hypermappo resume: error: {run}: no intact checkpoint to resume from "
                                    f"(ckpt_0000004.pt: truncated: {size // 2} of {size} bytes; "
                                    "ckpt_0000002.pt: checksum mismatch)"]
    assert checkpoint_updates(run) == [2, 4]  # nothing renamed when nothing is usable


def test_eval_of_a_corrupt_checkpoint_is_a_one_line_error(finished_run, tmp_path, capsys):
    run = unfinished_copy(finished_run, tmp_path)
    flip_a_byte(run / "checkpoints" / "ckpt_0000004.pt")
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "2"]) == 2
    assert stderr_lines(capsys) == [f"hypermappo eval: error: eval: {run / 'checkpoints' / 'ckpt_0000004.pt'} is "
                                    "unusable (checksum mismatch)"]


def test_resume_says_where_it_continues(finished_run, tmp_path, capsys):
    run = unfinished_copy(finished_run, tmp_path)
    capsys.readouterr()
    assert main(["resume", str(run), "--quiet"]) == 0
    assert stderr_lines(capsys) == [f"resume: continuing from {run / 'checkpoints' / 'ckpt_0000004.pt'} "
                                    "(update 4, env step 160)"]


# ---------------------------------------------------------------------------------------------------- signals

SIGNAL_RUN = ["env=staghunt", "seed=7", "total_env_steps=800", "checkpoint_interval=4", *TINY]  # 20 updates


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("reference") / "run"
    assert main(["train", "staghunt/default", *SIGNAL_RUN, f"run_dir={run}", "--quiet"]) == 0
    return run


def train_process(run: Path, overrides: list[str], **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hypermappo.cli", "train", "staghunt/default", *overrides,
                             f"run_dir={run}", "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **popen)


def wait_for_rows(proc: subprocess.Popen, run: Path, rows: int) -> None:
    deadline = time.monotonic() + 60
    while metric_rows(run) < rows:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "the training subprocess made no progress"
        time.sleep(0.005)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_saves_a_checkpoint_and_resume_equals_the_uninterrupted_run(tmp_path, capsys, uninterrupted, signum,
                                                                           code):
    run = tmp_path / "run"
    proc = train_process(run, SIGNAL_RUN)
    wait_for_rows(proc, run, 5)  # mid-interval: checkpoint 4 on disk
    os.kill(proc.pid, signum)
    _, err = proc.communicate(timeout=60)
    err = err.decode().strip().splitlines()
    assert proc.returncode == code, err
    stopped = metric_rows(run)
    assert 5 <= stopped < 20
    assert checkpoint_updates(run)[-1] == stopped  # the update under way was finished and saved: nothing lost
    assert err[-1] == (f"hypermappo train: interrupted by {signum.name} after update {stopped} "
                       f"(env step {40 * stopped:,}); saved {run / 'checkpoints' / f'ckpt_{stopped:07d}.pt'}; "
                       f"continue with: hypermappo resume {run}")
    assert not (run / "summary.json").exists()

    assert main(["resume", str(run), "--quiet"]) == 0
    assert stderr_lines(capsys)[0] == (f"resume: continuing from {run / 'checkpoints' / f'ckpt_{stopped:07d}.pt'} "
                                       f"(update {stopped}, env step {40 * stopped:,})")
    assert metrics_without_timing(run) == metrics_without_timing(uninterrupted)
    final, reference = (torch.load(r / "checkpoints" / "ckpt_0000020.pt", weights_only=False)
                        for r in (run, uninterrupted))
    for part in ("actor", "critic"):
        for name, tensor in reference[part].items():
            assert torch.equal(final[part][name], tensor), (part, name)


def test_ctrl_c_to_the_process_group_with_env_worker_processes(tmp_path):
    """Ctrl-C reaches the workers too: they must keep serving so the trainer can finish its update and save."""
    run = tmp_path / "run"
    overrides = ["env=pettingzoo:hypermappo.envs.staghunt:StagHuntParallelEnv", "env_kwargs={vectorizer: subprocess}",
                 "seed=7", "total_env_steps=4000", "checkpoint_interval=50", *TINY]
    proc = train_process(run, overrides, start_new_session=True)
    wait_for_rows(proc, run, 3)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert checkpoint_updates(run) == [metric_rows(run)]
    assert err.decode().strip().splitlines()[-1].endswith(f"continue with: hypermappo resume {run}")


def signals_during_collection(at: int, signals: list[int], gap: float = 0.0, then=None):
    """StagHuntVecEnv.step that sends `signals` to this process at its `at`-th call, `gap` seconds apart (and then
    raises `then`, if given)."""
    step, calls = StagHuntVecEnv.step, []

    def signalling_step(env, actions):
        calls.append(1)
        if len(calls) == at:
            for i, signum in enumerate(signals):
                time.sleep(gap if i else 0.0)
                os.kill(os.getpid(), signum)
            if then is not None:
                raise then
        return step(env, actions)

    return signalling_step


def test_first_signal_finishes_the_update_and_restores_the_handlers(tmp_path, monkeypatch):
    monkeypatch.setattr(StagHuntVecEnv, "step", signals_during_collection(at=23, signals=[signal.SIGTERM]))
    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    exp = staghunt_experiment(tmp_path / "run", ["checkpoint_interval=10"])
    with pytest.raises(RunInterrupted, match=r"interrupted by SIGTERM after update 3 \(env step 120\)") as info:
        exp.run()
    assert info.value.exit_code == 143
    assert checkpoint_updates(tmp_path / "run") == [3]
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == previous


def test_second_signal_aborts_at_once_and_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    from hypermappo.runtime import signals as signals_mod

    monkeypatch.setattr(signals_mod, "REPEAT_S", 0.05)  # a second signal: after the first's repeat window
    monkeypatch.setattr(StagHuntVecEnv, "step", signals_during_collection(at=23, signals=[signal.SIGINT, signal.SIGINT],
                                                                          gap=0.1))
    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    run = tmp_path / "run"
    exp = staghunt_experiment(run, ["checkpoint_interval=2"])
    with pytest.raises(RunInterrupted, match=r"aborted by a second SIGINT; the last checkpoint \(.*ckpt_0000002.pt\) "
                                             r"is unchanged") as info:
        exp.run()
    assert info.value.exit_code == 130
    assert exp.update == 2 and metric_rows(run) == 2  # stopped inside update 3's collection
    assert_finite_checkpoints(run, [2])
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == previous


def test_one_signal_delivered_twice_at_once_counts_once(tmp_path, monkeypatch):
    """`timeout` (and Slurm, container runtimes) sends its SIGTERM to the process and to its process group: the run
    gets it twice at once. That is one signal: the update finishes and is checkpointed, nothing aborts."""
    monkeypatch.setattr(StagHuntVecEnv, "step", signals_during_collection(at=23, signals=[signal.SIGTERM] * 2))
    exp = staghunt_experiment(tmp_path / "run", ["checkpoint_interval=10"])
    with pytest.raises(RunInterrupted, match=r"interrupted by SIGTERM after update 3 \(env step 120\)") as info:
        exp.run()
    assert info.value.exit_code == 143
    assert checkpoint_updates(tmp_path / "run") == [3]


def test_a_failure_after_the_first_signal_is_reported_as_the_signal(tmp_path, monkeypatch):
    """The update under way fails after a SIGTERM sent to the process group (a child process it started got the signal
    too, e.g. a compiler started outside the shield): one line says the signal stopped the run in that update, with
    the failure and its traceback in error.log; the last checkpoint is unchanged and resume continues from it."""
    killed = subprocess.CalledProcessError(-signal.SIGTERM, ["g++", "kernel.cpp"])
    monkeypatch.setattr(StagHuntVecEnv, "step", signals_during_collection(at=23, signals=[signal.SIGTERM], then=killed))
    run = tmp_path / "run"
    exp = staghunt_experiment(run, ["checkpoint_interval=2"])
    with pytest.raises(RunInterrupted) as info:
        exp.run()
    assert info.value.exit_code == 143
    assert str(info.value) == (
        f"interrupted by SIGTERM in update 3, which did not finish (CalledProcessError: Command '['g++', "
        f"'kernel.cpp']' died with <Signals.SIGTERM: 15>.; traceback in {run / 'error.log'}); the last checkpoint "
        f"({run / 'checkpoints' / 'ckpt_0000002.pt'}) is unchanged; continue with: hypermappo resume {run}")
    assert "CalledProcessError" in (run / "error.log").read_text()
    assert_finite_checkpoints(run, [2])


def test_sigterm_to_the_process_group_during_the_first_compiled_update_saves_it(tmp_path):
    """GNU `timeout` sends SIGTERM to the run and to its process group while the first compiled update compiles: the
    compiler child processes (here a stand-in, tests/slow_compile.py) get it too. The compile must not fail for it
    (no compiler traceback) and the one signal counts once: the update finishes, is checkpointed, one line says so."""
    run, started = tmp_path / "run", tmp_path / "compiling"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
               SLOW_COMPILE_S="3", SLOW_COMPILE_STARTED=str(started))
    proc = subprocess.Popen([sys.executable, "-c", "import slow_compile; slow_compile.main()", "train",
                             "staghunt/default", *SIGNAL_RUN, "ppo.compile=on", f"run_dir={run}", "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while not started.exists():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline, "the training subprocess never compiled"
        time.sleep(0.01)
    time.sleep(0.5)  # the stand-in compiler is running
    os.kill(proc.pid, signal.SIGTERM)  # as timeout does: the process, then its whole group
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    err = err.decode().strip().splitlines()
    assert proc.returncode == 143, err
    assert err == [f"hypermappo train: interrupted by SIGTERM after update 1 (env step 40); saved "
                   f"{run / 'checkpoints' / 'ckpt_0000001.pt'}; continue with: hypermappo resume {run}"], err
    assert checkpoint_updates(run) == [1] == [metric_rows(run)]


def test_compare_skips_failed_runs(finished_run, tmp_path, capsys):
    import shutil

    from hypermappo.report.compare import compare

    good, failed = tmp_path / "good", tmp_path / "failed"
    shutil.copytree(finished_run, good)
    shutil.copytree(finished_run, failed)
    summary = json.loads((failed / "summary.json").read_text())
    summary.update(status="failed: non-finite reward (nan)", eval_return_mean=None)
    (failed / "summary.json").write_text(json.dumps(summary))
    compare([good, failed], tmp_path / "report")
    assert f"compare: skipping {failed} (failed: non-finite reward (nan))" in capsys.readouterr().out
    assert "| 1 |" in (tmp_path / "report" / "final.md").read_text()  # n = 1: the failed run is left out
