"""Sync-free collection (runtime/sync_free.py, auto: on CUDA): no host synchronisation per env step, the same run.

Tested on the CPU with HYPERMAPPO_SYNC_FREE=1: a dispatch mode sees every op that reads a device value back
(`aten._local_scalar_dense`: .item(), bool(), float(); `aten.nonzero`: .nonzero(); indexing by a boolean mask) and none may
run during the rollout's steps; the statistics, buffer and weights equal the per-step path's; a non-finite env
output is named as the per-step check names it."""

from __future__ import annotations

import csv

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hypermappo import config as config_mod
from hypermappo.envs.mpe_torch import SimpleSpreadVecEnv
from hypermappo.errors import NonFiniteError, UserError
from hypermappo.experiment import Experiment
from hypermappo.runtime import sync_free
from hypermappo.runtime.nonfinite_watch import NonFiniteWatch, unravel
from hypermappo.storage.episode_log import EpisodeLog

TINY = ["num_envs=6", "rollout_length=30", "model.hidden_sizes=[16,16]", "eval_episodes=2", "log.tensorboard=false",
        "log.progress=false", "ppo.compile=off"]
READS = {"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.masked_select.default",
         "aten.is_nonzero.default"}
# indexing by a boolean mask (x[mask], x[mask] = v): the number of selected elements is counted on the host (on a
# CPU inside the op, so it is no nonzero op of its own here)
MASK_INDEXING = {"aten.index.Tensor", "aten.index_put_.default", "aten.index_put.default"}


class DeviceReads(TorchDispatchMode):
    """Counts the ops that copy a device value to the host (a sync on CUDA)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func) in READS or (str(func) in MASK_INDEXING and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or []))):
            self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def rows(run_dir):
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


def test_the_switch_takes_auto_0_or_1_and_auto_is_on_for_cuda_only(monkeypatch):
    monkeypatch.delenv(sync_free.VAR, raising=False)
    assert sync_free.decide(torch.device("cpu")) == (
        False, "host syncs in collection: per env step (auto: device cpu; a sync costs nothing on a CPU)")
    assert sync_free.decide(torch.device("cuda")) == (True, "host syncs in collection: once per rollout (auto: "
                                                            "device cuda)")
    monkeypatch.setenv(sync_free.VAR, "1")
    assert sync_free.decide(torch.device("cpu"))[0]
    monkeypatch.setenv(sync_free.VAR, "yes")
    with pytest.raises(UserError, match="HYPERMAPPO_SYNC_FREE='yes': expected auto, 0 or 1"):
        sync_free.decide(torch.device("cpu"))


def test_episode_log_selects_what_the_per_step_bookkeeping_selected():
    g = torch.Generator().manual_seed(0)
    log, returns, extras, group = EpisodeLog(), [], [], []
    for _ in range(40):
        done = torch.rand(7, generator=g) < 0.2
        ret, extra, grp = torch.randn(7, generator=g), torch.randn(7, generator=g), torch.randn(7, generator=g)
        log.add(done, ret, {"captures": extra, "goal_event": torch.zeros(7, 2)}, {"team": grp})
        if done.any():
            returns.append(ret[done])
            extras.append(extra[done])
            group.append(grp[done])
        ret.add_(100.0)  # an env that updates its tensors in place: the log kept the step's values
    r, groups, ex = log.finish()
    assert torch.equal(r, torch.cat(returns)) and r.numel() > 10
    assert torch.equal(groups["team"], torch.cat(group)) and torch.equal(ex["captures"], torch.cat(extras))
    assert "goal_event" not in ex  # per-agent extras are no episode statistics
    assert log.finish() == (None, {}, {})  # cleared


def test_nonfinite_watch_finds_the_first_bad_element_of_the_first_bad_step():
    w = NonFiniteWatch()
    a, b = torch.zeros(3, 2, 4), torch.zeros(3, 5)
    w.watch(0, (("reward", a.clone()), ("state", b.clone())))
    bad = a.clone()
    bad[2, 1, 3], bad[1, 0, 2] = float("inf"), float("nan")
    w.watch(1, (("reward", a.clone()), ("state", b.clone())))
    w.watch(2, (("reward", bad), ("state", b.clone())))
    w.watch(3, (("reward", a.clone()), ("state", b.clone() / 0)))
    t, name, index, value, count = w.first()
    assert (t, name, index, count) == (2, "reward", [1, 0, 2], 2) and value != value  # nan
    assert w.first() is None  # cleared
    assert unravel(23, (3, 2, 4)) == [2, 1, 3]


def graphs_traced_not_compiled(monkeypatch) -> None:
    """ppo.compile's graphs traced by Dynamo and run as traced (backend "eager"): the compiled path's Python (which
    graph is called when, what runs between them) in seconds, without Inductor."""
    import hypermappo.compile as compile_pkg
    import hypermappo.experiment as experiment_mod
    from hypermappo.compile import decision

    def traced(fn, **_):
        return torch.compile(fn, backend="eager", dynamic=False)

    for module in (compile_pkg, decision, experiment_mod):
        monkeypatch.setattr(module, "compile_fn", traced)


@pytest.mark.parametrize("preset", ["staghunt/default", "mpe/simple_spread", "mpe/simple_spread compiled"])
def test_no_device_value_is_read_during_the_rollouts_steps(tmp_path, monkeypatch, preset):
    """The default learner's collection: MAPPO's actor and critic, the env step (simple_spread's auto-reset with
    masks), the rollout buffer, the truncation bootstrap, the checks; the reads at the rollout's end are few.
    Compiled: the collection graph's steps and chunks of steps (their checks, and how many steps end no episode,
    known on the host)."""
    monkeypatch.setenv(sync_free.VAR, "1")
    preset, *compiled = preset.split()
    overrides = [*TINY, "total_env_steps=360"]
    if compiled:  # two episodes of 25 steps in the rollout
        graphs_traced_not_compiled(monkeypatch)
        overrides = [o for o in overrides if o.split("=")[0] not in ("ppo.compile", "rollout_length")] + [
            "ppo.compile=on", "rollout_length=50"]
    exp = Experiment(config_mod.build_config(preset, overrides), tmp_path / "r", quiet=True)
    assert (exp.collect_graph is not None) == bool(compiled)
    exp._start_episodes()
    steps, end = DeviceReads(), DeviceReads()
    collect_steps = exp._collect_steps

    def watched():
        with steps:
            return collect_steps()

    monkeypatch.setattr(exp, "_collect_steps", watched)
    with end:
        exp.collect()
    assert steps.seen == [], steps.seen
    assert 0 < len([r for r in end.seen if r not in steps.seen]) <= 12, end.seen  # read once per rollout
    if compiled:  # steps 0-7, 8-15, 16-23 as chunks, 24 ends the episodes, then 25-32, 33-40, 41-48, and 49
        assert exp.collect_graph.chunks_run == 6
        assert exp.env._t_host.tolist() == exp.env.t.tolist() == [0] * 6
    exp.logger.close()


def test_sync_free_run_equals_the_per_step_run(tmp_path, monkeypatch):
    """An env that resets as it always does (the stag hunt): same statistics, rollouts and weights, truncations
    bootstrapped in both."""
    runs = {}
    for flag in ("0", "1"):
        monkeypatch.setenv(sync_free.VAR, flag)
        exp = Experiment(config_mod.build_config("staghunt/default", [*TINY, "total_env_steps=720"]),
                         tmp_path / flag, quiet=True)
        assert (exp.watch is not None) == (flag == "1")
        summary = exp.run()
        runs[flag] = (rows(tmp_path / flag), summary, {k: v.clone() for k, v in exp.actor.state_dict().items()},
                      exp.buffer.rewards.clone())
    (r0, _, w0, b0), (r1, s1, w1, b1) = runs["0"], runs["1"]
    assert len(r0) == 4 and any(float(r["episodes"]) > 0 for r in r0)
    def untimed(row):
        return {k: v for k, v in row.items() if not (k.endswith("_s") or k.endswith("sps"))}

    for a, b in zip(r0, r1):
        assert untimed(a) == untimed(b)
    assert torch.equal(b0, b1)
    for k in w0:
        assert torch.equal(w0[k], w1[k]), k
    assert s1["host_sync"].startswith("host syncs in collection: once per rollout")


def test_masked_auto_reset_restarts_exactly_the_ended_envs():
    """simple_spread's sync-free reset: the ended envs get new starts (from one draw for every env), at rest, step
    0; the others are untouched."""
    env = SimpleSpreadVecEnv(num_envs=5, device=torch.device("cpu"))
    env.reset(seed=3)
    for _ in range(3):
        env.step(torch.randint(0, 5, (5, env.n_agents)))
    pos, vel, t = env._pos.clone(), env._vel.clone(), env.t.clone()
    ended = torch.tensor([False, True, False, False, True])
    draw = torch.Generator().set_state(env.generator.get_state())
    fresh = torch.rand(pos.shape[0], 2, 5, generator=draw) * 2 - 1
    env._respawn(ended)
    assert torch.equal(env._pos[..., ended], fresh[..., ended]) and torch.equal(env._pos[..., ~ended], pos[..., ~ended])
    assert torch.equal(env._vel[..., ended], torch.zeros_like(vel[..., ended]))
    assert torch.equal(env._vel[..., ~ended], vel[..., ~ended])
    assert env.t.tolist() == [3, 0, 3, 3, 0] and t.tolist() == [3] * 5


def test_a_nonfinite_reward_found_at_the_rollouts_end_is_named_as_the_per_step_check_names_it(tmp_path, monkeypatch):
    """NaN reward of env 1 at episode step 11, simple_spread: the per-step check stops there; the sync-free one at
    the rollout's end, with the same message (step, env, slot, value, count), also where the NaN made the rollout
    fail later (an actor that refuses non-finite input)."""
    from test_compiled import nan_reward_at_step_11

    nan_reward_at_step_11(monkeypatch)
    messages = {}
    for flag in ("0", "1", "1-later"):
        monkeypatch.setenv(sync_free.VAR, flag[0])
        exp = Experiment(config_mod.build_config("mpe/simple_spread", [*TINY, "total_env_steps=360"]),
                         tmp_path / flag, quiet=True)
        if flag == "1-later":
            def refuses_at_step_20(g, s, t, act=exp._learner_act):
                if t == 19:
                    raise ValueError("the NaN reached something that refuses it")
                return act(g, s, t)

            monkeypatch.setattr(exp, "_learner_act", refuses_at_step_20)
        with pytest.raises(NonFiniteError) as error:
            exp.run()
        messages[flag] = str(error.value).replace(str(tmp_path / flag), "RUN_DIR")
        if flag == "1-later":  # the later failure is kept as the cause
            causes, e = [], error.value
            while e is not None:
                causes.append(type(e))
                e = e.__cause__
            assert ValueError in causes, causes
    assert messages["0"] == messages["1"] == messages["1-later"]
    assert "non-finite reward (nan) from env 'mpe:simple_spread' at update 1, rollout step 11" in messages["0"]
    assert "env 1, agent slot 0" in messages["0"] and "(non-finite values: 3)" in messages["0"]


def test_a_nonfinite_reward_inside_a_chunk_of_steps_is_named_as_the_per_step_check_names_it(tmp_path, monkeypatch):
    """Sync-free collection through the collection graph's chunks (steps 8-15 hold the NaN of episode step 11): the
    chunk's rewards, observations and states are recorded on the device step by step, and the run stops with the
    message of the uncompiled per-step check."""
    from test_compiled import nan_reward_at_step_11

    nan_reward_at_step_11(monkeypatch)
    messages = {}
    for flag in ("0", "1"):
        monkeypatch.setenv(sync_free.VAR, flag)
        overrides = [*TINY, "total_env_steps=360"]
        if flag == "1":
            graphs_traced_not_compiled(monkeypatch)
            overrides = [o for o in overrides if not o.startswith("ppo.compile")] + ["ppo.compile=on"]
        exp = Experiment(config_mod.build_config("mpe/simple_spread", overrides), tmp_path / flag, quiet=True)
        with pytest.raises(NonFiniteError) as error:
            exp.run()
        if flag == "1":
            # found at the rollout's end: every chunk ran (the NaN in the 2nd)
            assert exp.collect_graph.chunks_run == 3, exp.collect_graph.chunks_run
        messages[flag] = str(error.value).replace(str(tmp_path / flag), "RUN_DIR")
    assert messages["0"] == messages["1"]
    assert "rollout step 11" in messages["0"] and "env 1, agent slot 0" in messages["0"]


def test_watching_a_stack_of_steps_records_what_watching_each_step_records():
    """The chunk path's record (NonFiniteWatch.watch_steps) finds the same first non-finite value as a `watch` per
    step: the earliest step first, within a step the quantities in their order (an observation of step 2 before
    a reward of step 3, a reward before an observation of the same step)."""
    g = torch.Generator().manual_seed(1)
    for bad in ([("obs", 2, (1, 0, 3)), ("reward", 3, (0, 1))], [("reward", 1, (2, 2)), ("obs", 1, (0, 0, 0))], []):
        rewards, obs = torch.randn(4, 3, 3, generator=g), torch.randn(4, 3, 2, 5, generator=g)
        for name, k, index in bad:
            (rewards if name == "reward" else obs)[(k, *index)] = float("inf")
        per_step, stacked = NonFiniteWatch(), NonFiniteWatch()
        for k in range(4):
            per_step.watch(10 + k, (("reward", rewards[k]), ("obs", obs[k])))
        stacked.watch_steps(10, (("reward", rewards), ("obs", obs)))
        assert stacked.entries == per_step.entries
        assert torch.equal(torch.cat(stacked.rows), torch.cat(per_step.rows))
        found = stacked.first()
        assert found == per_step.first()
        if bad:
            name, k, index = min(bad, key=lambda b: (b[1], b[0] != "reward"))
            assert found[:3] == (10 + k, name, list(index)), found
        else:
            assert found is None


def test_simple_spreads_step_counts_on_the_host_follow_the_devices():
    """How many steps end no episode is read from a host copy of the step counts: it follows the device's through
    steps (both reset paths), chunks of steps (`carried`), resets and restored states."""
    for flag in (False, True):
        env = SimpleSpreadVecEnv(num_envs=4, device=torch.device("cpu"), max_cycles=7)
        env.sync_free = flag
        env.reset(seed=0)
        for step in range(20):
            if step % 5 == 3 and env.steps_without_end() >= 2:  # two steps as a chunk would run them
                for _ in range(2):
                    env.carry(*env._advance(torch.randint(0, 5, (4, 3))))
                env.carried(2)
            else:
                env.step(torch.randint(0, 5, (4, 3)))
            assert env._t_host.tolist() == env.t.tolist(), (flag, step)
            assert env.steps_without_end() == 6 - int(env.t.max())
        saved = env.get_state()
        env.reset(seed=1)
        assert env._t_host.tolist() == [0] * 4
        env.set_state(saved)
        assert env._t_host.tolist() == env.t.tolist() == saved["t"].tolist()


@pytest.mark.parametrize("mini_batches", [2, 6])
def test_the_compiled_update_reads_the_device_after_its_last_step_only(tmp_path, monkeypatch, mini_batches):
    """The compiled update's mini-batch steps hand each other whether every earlier step was finite on the device,
    its advantage statistics are taken by masks, and the finite flags and statistics are read once at the update's
    end: no read before the last step returns, and the reads do not grow with the number of steps (2 epochs x 2 or
    6 mini-batches here). Sync-free on, as on CUDA (on a CPU each step's flag is read)."""
    monkeypatch.setenv(sync_free.VAR, "1")
    graphs_traced_not_compiled(monkeypatch)
    overrides = [o for o in TINY if o.split("=")[0] != "ppo.compile"] + [
        "ppo.compile=on", "total_env_steps=360", "ppo.ppo_epoch=2", f"ppo.num_mini_batch={mini_batches}"]
    exp = Experiment(config_mod.build_config("mpe/simple_spread", overrides), tmp_path / "r", quiet=True)
    L = exp.primary
    assert L.algo.fused is not None and L.algo.read_once and not L.algo.adv_by_masks  # (on a CPU: see below)
    L.algo.adv_by_masks = True  # as on CUDA (a CPU keeps the selection: its statistics to the bit)
    exp._start_episodes()
    exp.collect()
    L.algo.update(L.buffer, L.batch_generator)  # compiled (traced) on the first
    exp.collect()
    reads, calls = DeviceReads(), []
    original = L.algo.fused.compiled

    def counted(*args):  # the device reads seen so far, as each step's graph is called and as it returns
        calls.append(len(reads.seen))
        out = original(*args)
        calls.append(len(reads.seen))
        return out

    L.algo.fused.compiled = counted
    with reads:
        L.algo.update(L.buffer, L.batch_generator)
    assert len(calls) == 2 * 2 * mini_batches
    assert set(calls) == {0}, calls  # none from the update's start (its advantage statistics) to the last step's end
    assert len(reads.seen) > calls[0]  # the flags and statistics, read once after the last step
    exp.logger.close()


@pytest.mark.parametrize("active", ["mixed", "none", "one", "all"])
def test_masked_advantage_statistics_equal_the_selected_ones(active):
    from hypermappo.algos.mappo import masked_mean_std

    g = torch.Generator().manual_seed(3)
    x = torch.randn(7, 5, 3, generator=g) * 2 + 0.5
    mask = {"mixed": torch.rand(7, 5, 3, generator=g) < 0.6, "none": torch.zeros(7, 5, 3, dtype=torch.bool),
            "all": torch.ones(7, 5, 3, dtype=torch.bool)}.get(active)
    if mask is None:
        mask = torch.zeros(7, 5, 3, dtype=torch.bool)
        mask[2, 1, 0] = True
    sel = x[mask]
    mean, std = masked_mean_std(x, mask)
    want_mean = sel.mean() if sel.numel() else torch.zeros(())
    want_std = sel.std() if sel.numel() > 1 else torch.ones(())
    torch.testing.assert_close(mean, want_mean, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(std, want_std, rtol=1e-6, atol=1e-6)
