"""Policy groups (policies/groups.py): config rules, per-group learning, scripted / frozen groups, switches, resume.

The no-groups test compares against metrics.csv files and checkpoint digests written by the code before groups
existed (tests/data/no_groups_reference, made at commit 9c9789b by make_reference.py there).
"""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest
import torch
from test_resume import TIMING_COLUMNS, assert_same

from hypermappo import config as config_mod
from hypermappo import run_config
from hypermappo.errors import UserError
from hypermappo.experiment import Experiment

REFERENCE = Path(__file__).parent / "data" / "no_groups_reference"


def _reference_module():
    spec = importlib.util.spec_from_file_location("make_reference", REFERENCE / "make_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in csv.DictReader(f)]


@pytest.mark.parametrize("case", ["staghunt_mlp", "staghunt_rnn", "staghunt_hyper", "climbing_mlp"])
def test_no_groups_reproduces_the_pre_groups_metrics_and_checkpoint(tmp_path, case, monkeypatch):
    # bit for bit as before groups: the input LayerNorm applied as it then was (folded into the first layer since,
    # the same function to float rounding: tests/test_feature_norm_fold.py)
    monkeypatch.setenv("HYPERMAPPO_FOLD_FEATURE_NORM", "0")
    # and the attention kernel's scalar loops, as then (its float32 vector path: the same to float rounding,
    # tests/test_hyper.py::test_fused_attention_float32_vector_path)
    monkeypatch.setenv("HYPERMAPPO_ATTENTION_VECTOR", "0")
    ref = _reference_module()
    metrics = ref.run_case(case, tmp_path)
    got, want = rows(metrics), rows(REFERENCE / f"{case}.csv")
    assert list(got[0]) == list(want[0])  # same columns in the same order
    exact = _on_the_reference_cpu()
    for g, w in zip(got, want, strict=True):
        if exact:
            assert g == w, f"update {w['update']} differs from the pre-groups run"
            continue
        for k in w:  # another CPU vendor: MKL's products round differently in the 7th digit; counts stay exact
            if _is_float_text(w[k]) and _is_float_text(g[k]) and not w[k].lstrip("-").isdigit():
                assert float(g[k]) == pytest.approx(float(w[k]), rel=1e-4, abs=1e-7), (w["update"], k)
            else:
                assert g[k] == w[k], (w["update"], k)
    if exact:  # the weights' digest holds on the reference's CPU only (the same rounding caveat)
        digest = json.loads((REFERENCE / "checkpoints.json").read_text())[case]
        assert ref.checkpoint_digest(metrics.parent) == digest


def _on_the_reference_cpu() -> bool:
    """The reference was written on an AMD EPYC: bit for bit there; on an Intel CPU MKL takes other kernels, whose
    float sums differ in the 7th digit (seen on a 2-core Intel Xeon, 2026-11-26), so there to float tolerance."""
    cpuinfo = Path("/proc/cpuinfo")
    return cpuinfo.exists() and "AuthenticAMD" in cpuinfo.read_text()


def _is_float_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------- config rules

TINY = ["num_envs=4", "rollout_length=10", "ppo.ppo_epoch=2", "eval_episodes=4", "torch_threads=1",
        "log.tensorboard=false", "log.progress=false", "model.hidden_sizes=[16,16]"]
TWO = "groups=[{name: a, agents: [hunter_0]}, {name: b, agents: [1], kind: scripted, policy: random}]"


def test_groups_from_the_command_line_and_a_preset_style_mapping():
    cfg = config_mod.build_config("staghunt/default", [*TINY, TWO])
    assert [g["name"] for g in cfg.groups] == ["a", "b"]
    cfg2 = config_mod.build_config(None, base={"env": "staghunt", "groups": [{"name": "a", "agents": ["hunter_*"],
                                                                               "ppo": {"lr_actor": 3e-4}}]})
    from hypermappo.policies.groups import group_specs
    assert group_specs(cfg2)[0].cfg.ppo.lr_actor == 3e-4 and cfg2.ppo.lr_actor == 7e-4


@pytest.mark.parametrize("groups, expected", [
    ("[{name: a, agents: [0], kind: robot}]", "groups[0] (a).kind: 'robot' is not one of"),
    ("[{name: a, agents: []}]", "groups[0] (a).agents: expected a non-empty list"),
    ("[{name: a, agents: [0]}, {name: a, agents: [1]}]", "groups[1].name: 'a' is the name of an earlier group"),
    ("[{name: 'a b', agents: [0]}]", "groups[0].name: expected a name of letters"),
    ("[{name: a, agents: [0], kind: scripted}]", "a scripted group needs policy"),
    ("[{name: a, agents: [0], kind: scripted, policy: nope}]", "unknown scripted policy 'nope'"),
    ("[{name: a, agents: [0], kind: scripted, policy: random, actor: hyper}]", "groups[0] (a).actor: only a learner"),
    ("[{name: a, agents: [0], policy: random}]", "groups[0] (a).policy: only a scripted group takes it"),
    ("[{name: a, agents: [0], kind: frozen}]", "a frozen group needs run_dir"),
    ("[{name: a, agents: [0], kind: frozen, run_dir: /nonexistent}]", "is not a run directory"),
    ("[{name: a, agents: [0], kind: scripted, policy: random}]", "groups: no group learns"),
    ("[{name: a, agents: [0], colour: red}]", "groups[0]: unknown key 'colour'"),
    ("[{name: a, agents: [0], ppo: {lr_actor: 2.0}}]", "groups[0] (a).ppo.lr_actor: expected a value <= 1.0"),
    ("[{name: a, agents: [0], hyper: {hidden: 8}}]", "groups[0] (a): hyper.hidden=8 has no effect"),
    ("[{name: a, agents: [0], switch: [{at_step: 10, kind: scripted, policy: random}, {at_step: 5}]}]",
     "switch[1].at_step: 5 is not after the previous switch (10)"),
    ("[{name: a, agents: [0], switch: [{kind: learner}]}]", "switch[0]: expected a mapping like {at_step"),
])
def test_group_config_mistakes_are_one_line_errors(groups, expected):
    with pytest.raises(UserError) as e:
        run_config.build_config("staghunt/default", [*TINY, f"groups={groups}"])
    assert expected in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("groups, expected", [
    ([{"name": "a", "agents": ["hunter_7"]}], "'hunter_7' matches no agent of this env"),
    ([{"name": "a", "agents": [5]}], "slot 5 does not exist"),
    ([{"name": "a", "agents": ["hunter_*"]}, {"name": "b", "agents": [1]}], "slot 1 (hunter_1) is in two groups, 'a' "
                                                                             "and 'b'"),
    ([{"name": "a", "agents": [0]}], "agent slot(s) ['hunter_1'] are in no group"),
])
def test_group_slot_mistakes_are_one_line_errors(groups, expected):
    from hypermappo.envs.registry import make_env
    from hypermappo.policies.groups import group_specs, resolve_slots

    cfg = config_mod.build_config(None, base={"env": "staghunt", "groups": groups})
    env = make_env("staghunt", 2, torch.device("cpu"))
    with pytest.raises(UserError) as e:
        resolve_slots(group_specs(cfg), env.spec)
    assert expected in str(e.value), str(e.value)


def test_patterns_and_names_resolve_to_slots_in_the_given_order():
    from hypermappo.envs.registry import make_env
    from hypermappo.policies.groups import group_specs, resolve_slots

    cfg = config_mod.build_config(None, base={"env": "staghunt", "env_kwargs": {"n_hunters": 3}, "groups": [
        {"name": "a", "agents": ["hunter_2", 0]}, {"name": "b", "agents": ["hunter_[1]"]}]})
    env = make_env("staghunt", 2, torch.device("cpu"), n_hunters=3)
    assert resolve_slots(group_specs(cfg), env.spec) == [[2, 0], [1]]


# --------------------------------------------------------------------------- learning per group

def _experiment(tmp_path: Path, name: str, groups: str, extra=()) -> Experiment:
    cfg = config_mod.build_config("staghunt/default", [*TINY, "total_env_steps=160", groups, *extra])
    return Experiment(cfg, tmp_path / name, quiet=True)


def test_a_group_learns_only_from_its_own_agents_rewards(tmp_path):
    """Perturbing group b's rewards changes b's update and leaves a's bit for bit unchanged."""
    groups = "groups=[{name: a, agents: [0]}, {name: b, agents: [1]}]"
    results = []
    for perturb in (False, True):
        exp = _experiment(tmp_path, f"p{perturb}", groups)
        exp._start_episodes()
        if perturb:
            step = exp.env.step

            def noisy(actions, step=step):
                out = step(actions)
                out.reward = out.reward.clone()
                out.reward[:, 1] += torch.linspace(-3, 3, out.reward.shape[0])
                return out

            exp.env.step = noisy
        exp.collect()
        for g in exp.groups:
            g.learner.algo.update(g.learner.buffer, g.learner.batch_generator)
        results.append({g.name: {**g.learner.actor.state_dict(), **{f"critic.{k}": v for k, v in
                                                                      g.learner.critic.state_dict().items()}}
                        for g in exp.groups})
        exp.run_lock.release()
    clean, noisy_run = results
    assert all(torch.equal(v, noisy_run["a"][k]) for k, v in clean["a"].items())
    assert not all(torch.equal(v, noisy_run["b"][k]) for k, v in clean["b"].items())


def test_scripted_and_frozen_groups_have_no_optimiser_and_never_change(tmp_path):
    source = tmp_path / "source"
    cfg = config_mod.build_config("staghunt/default", [*TINY, "total_env_steps=80"])
    Experiment(cfg, source, quiet=True).run()
    groups = (f"groups=[{{name: a, agents: [0]}}, {{name: b, agents: [1], kind: frozen, run_dir: {source}}}]")
    exp = _experiment(tmp_path, "frozen", groups)
    frozen = exp.groups[1]
    actor = frozen.frozen[0]
    saved = torch.load(sorted((source / "checkpoints").glob("*.pt"))[-1], weights_only=False)["actor"]
    assert all(torch.equal(v, saved[k]) for k, v in actor.state_dict().items())  # loaded from the source run
    assert frozen.learner is None and not any(p.requires_grad for p in actor.parameters())
    probe = torch.randn(8, 1, exp.spec.obs_dim)
    before_out = actor(probe, None, None, None).dist.params().clone()
    learner_before = [p.detach().clone() for p in exp.groups[0].learner.actor.parameters()]
    exp.run()
    assert all(torch.equal(v, saved[k]) for k, v in actor.state_dict().items())
    assert torch.equal(actor(probe, None, None, None).dist.params(), before_out)
    assert not all(torch.equal(a, b) for a, b in zip(learner_before, exp.groups[0].learner.actor.parameters()))
    scripted = _experiment(tmp_path, "scripted", TWO).groups[1]
    assert scripted.learner is None and scripted.kind == "scripted"
    scripted_ids = {id(p) for g in (exp.groups[0],) for p in g.learner.actor.parameters()}
    assert not scripted_ids & {id(p) for p in actor.parameters()}
    scripted_run = Experiment(config_mod.build_config("staghunt/default", [*TINY, "total_env_steps=80", TWO]),
                              tmp_path / "scripted2", quiet=True)
    scripted_run.run()
    with (scripted_run.run_dir / "metrics.csv").open() as f:
        header = next(csv.reader(f))
    assert "a/policy_loss" in header and not any(c.startswith("b/") and "loss" in c for c in header)
    # a frozen group can load a named learner group of a run with groups
    frozen_a = (f"groups=[{{name: me, agents: [0]}}, {{name: other, agents: [1], kind: frozen, "
                f"run_dir: {scripted_run.run_dir}, group: a}}]")
    other = _experiment(tmp_path, "frozen_a", frozen_a).groups[1].frozen[0]
    trained = scripted_run.groups[0].learner.actor.state_dict()
    assert all(torch.equal(v, trained[k]) for k, v in other.state_dict().items())
    with pytest.raises(UserError, match="has no learner group of that name"):
        _experiment(tmp_path, "frozen_b", frozen_a.replace("group: a", "group: b"))


def test_eval_of_a_run_with_groups_plays_every_group_as_training_evaluated_it(tmp_path, capsys):
    """`hypermappo eval` of a finished run with groups gives the final evaluation of training back (same seed and
    episode count: every group in its final phase, the learner's weights from the last checkpoint)."""
    from hypermappo.cli import main

    groups = "groups=[{name: a, agents: [0]}, {name: b, agents: [1], kind: scripted, policy: staghunt_stag}]"
    _experiment(tmp_path, "run", groups).run()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "run"), "--episodes", "4", "--quiet"]) == 0  # TINY: eval_episodes=4
    out = json.loads(capsys.readouterr().out)
    assert out["return_mean"] == pytest.approx(summary["eval_return_mean"], rel=1e-6)
    for name in ("a", "b"):
        assert out["group_returns"][name] == pytest.approx(summary["groups"][name]["eval_return_mean"], rel=1e-6)
    assert main(["eval", str(tmp_path / "run"), "--episodes", "2", "--quiet", "--render", str(tmp_path / "x.gif")]) == 0
    rendered = json.loads(capsys.readouterr().out)
    assert rendered["frames"] > 1 and (tmp_path / "x.gif").stat().st_size > 0


def _switch_rows(tmp_path: Path, name: str, at_step: int) -> list[dict]:
    groups = (f"groups=[{{name: a, agents: [0]}}, {{name: b, agents: [1], kind: scripted, policy: fixed, "
              f"params: {{action: 0}}, switch: [{{at_step: {at_step}, kind: learner}}]}}]")
    # 4 rollouts starting at env steps 0, 40, 80, 120; several episodes per env, each agent its own reward
    _experiment(tmp_path, name, groups, ["env_kwargs={episode_length: 4, shared_reward: false}"]).run()
    with (tmp_path / name / "metrics.csv").open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("at_step, first_update", [(40, 2), (41, 3)])
def test_a_switch_takes_effect_at_the_first_rollout_after_its_step(tmp_path, at_step, first_update):
    rows_ = _switch_rows(tmp_path, "s", at_step)
    assert [r["switch"] for r in rows_] == ["b->learner" if int(r["update"]) == first_update else "" for r in rows_]
    assert [r["b/policy_loss"] != "" for r in rows_] == [int(r["update"]) >= first_update for r in rows_]
    ended = [r for r in rows_ if int(r["episodes"])]
    assert ended  # per-group returns: with one agent per group their mean is the all-agents return
    assert any(r["a/episode_return_mean"] != r["b/episode_return_mean"] for r in ended)
    for r in ended:
        mean = (float(r["a/episode_return_mean"]) + float(r["b/episode_return_mean"])) / 2
        assert mean == pytest.approx(float(r["episode_return_mean"]), abs=1e-6)
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summary["groups"]["b"]["kind"] == "learner" and "b/eval_return_mean" in rows_[-1]


def test_resume_across_a_switch_equals_the_uninterrupted_run(tmp_path):
    """Checkpoint at update 2; b plays scripted random in update 3 (its generator must resume) and switches to a
    learner at the rollout of update 4."""
    import shutil

    groups = ("groups=[{name: a, agents: [0], actor: rnn, ppo: {data_chunk_length: 5}}, {name: b, agents: [1], "
              "kind: scripted, policy: random, switch: [{at_step: 120, kind: learner}]}]")
    cfg = config_mod.build_config("staghunt/default", [*TINY, "total_env_steps=160", "checkpoint_interval=2",
                                                       "ppo.num_mini_batch=2", groups])
    full = tmp_path / "full"
    Experiment(cfg, full, quiet=True).run()
    resumed = tmp_path / "resumed"
    shutil.copytree(full, resumed)
    (resumed / "checkpoints" / "ckpt_0000004.pt").unlink()
    (resumed / "summary.json").unlink()
    Experiment(config_mod.from_run_dir(resumed), resumed, resume=True, quiet=True).run()
    got, want = rows(resumed / "metrics.csv"), rows(full / "metrics.csv")
    assert [r["switch"] for r in want] == ["", "", "", "b->learner"]
    assert got == want
    final_got = torch.load(resumed / "checkpoints" / "ckpt_0000004.pt", weights_only=False)
    final_want = torch.load(full / "checkpoints" / "ckpt_0000004.pt", weights_only=False)
    assert_same(final_got["groups"], final_want["groups"], "groups")


def test_compare_plots_a_groups_return_and_marks_the_switch(tmp_path):
    from hypermappo.report.compare import compare, load_run

    _experiment(tmp_path, "run", TWO.replace("policy: random", "policy: random, switch: [{at_step: 40, kind: learner}]"))\
        .run()
    result = compare([tmp_path / "run"], tmp_path / "cmp", metric="a/episode_return_mean")
    assert result["metric"] == "a/episode_return_mean" and (tmp_path / "cmp" / "curves.png").exists()
    assert load_run(tmp_path / "run").switches == [(40.0, "b->learner")]  # the rollout that started at step 40
    import matplotlib.axes

    drawn = []
    original = matplotlib.axes.Axes.set_title
    matplotlib.axes.Axes.set_title = lambda ax, title, *a, **k: (drawn.append(title), original(ax, title, *a, **k))[1]
    try:
        compare([tmp_path / "run"], tmp_path / "cmp2", metric="b/episode_return_mean")
    finally:
        matplotlib.axes.Axes.set_title = original
    assert "b/episode_return_mean" in drawn  # the chosen group's return has its own panel


def _slot_as_action(step, ctx):
    """Test policy: each slot plays its own index (so a misplaced action shows)."""
    return ctx.slots.expand(step.obs.shape[0], -1).clone()


def test_each_groups_actions_reach_its_own_slots(tmp_path):
    """A group of non-consecutive slots listed out of order ([2, 0]) and a learner on slot 1: env.step gets the
    scripted actions exactly on slots 2 and 0."""
    groups = ("groups=[{name: learn, agents: [hunter_1]}, {name: fix, agents: [hunter_2, hunter_0], kind: scripted, "
              "policy: 'test_groups:_slot_as_action'}]")
    cfg = config_mod.build_config("staghunt/default", [*TINY, "total_env_steps=40", "env_kwargs={n_hunters: 3}",
                                                       groups])
    exp = Experiment(cfg, tmp_path / "run", quiet=True)
    assert exp.groups[1].slots == [2, 0] and torch.equal(exp.groups[1].index, torch.tensor([2, 0]))
    seen = []
    step = exp.env.step
    exp.env.step = lambda actions: (seen.append(actions.clone()), step(actions))[1]
    exp.run()
    actions = torch.stack(seen)  # [T, E, 3]
    assert (actions[..., 0] == 0).all() and (actions[..., 2] == 2).all()
    assert torch.equal(actions[..., 1], exp.buffer.actions[..., 0])  # the learner's sampled actions, on slot 1


def test_a_learner_group_sees_its_own_slots_observations_in_its_own_order(tmp_path):
    """A learner of slots [2, 0] stores slot 2's observations as its agent 0 and slot 0's as its agent 1."""
    groups = ("groups=[{name: learn, agents: [hunter_2, hunter_0]}, {name: fix, agents: [hunter_1], kind: scripted, "
              "policy: random}]")
    cfg = config_mod.build_config("staghunt/egocentric", [*TINY, "total_env_steps=40", "env_kwargs={n_hunters: 3}",
                                                          groups])
    exp = Experiment(cfg, tmp_path / "run", quiet=True)
    seen = []
    reset, step = exp.env.reset, exp.env.step
    exp.env.reset = lambda *a, **k: (lambda s: (seen.append(s.obs.clone()), s)[1])(reset(*a, **k))
    exp.env.step = lambda actions: (lambda s: (seen.append(s.obs.clone()), s)[1])(step(actions))
    exp.run()
    obs = torch.stack(seen[:10])  # [T, E, 3, D]: what the env showed before each of the 10 rollout steps
    stored = exp.groups[0].learner.buffer.obs  # [T, E, 2, D]
    assert not torch.equal(obs[..., 2, :], obs[..., 0, :])  # the two slots see different things
    assert torch.equal(stored[..., 0, :], obs[..., 2, :]) and torch.equal(stored[..., 1, :], obs[..., 0, :])


def test_a_groups_return_is_the_mean_over_its_agents(tmp_path):
    """Two groups of two agents: the all-agents return (mean over 4 slots) is the mean of the two group returns."""
    groups = "groups=[{name: a, agents: [0, 1]}, {name: b, agents: [2, 3], kind: scripted, policy: random}]"
    cfg = config_mod.build_config("matrix/specialisation", [*TINY, "total_env_steps=120", groups])
    Experiment(cfg, tmp_path / "run", quiet=True).run()
    checked = 0
    for r in rows(tmp_path / "run" / "metrics.csv"):
        if r["episodes"] not in ("", "0"):
            a, b = float(r["a/episode_return_mean"]), float(r["b/episode_return_mean"])
            assert float(r["episode_return_mean"]) == pytest.approx((a + b) / 2, rel=1e-5)
            checked += 1
    assert checked >= 2


def test_a_sweep_over_group_settings_trains_each_variant(tmp_path):
    """A grid over two `groups` values (the partner's scripted rule): both runs finish with per-group columns."""
    from hypermappo.cli import main

    variants = ("groups=[{name: a, agents: [0]}, {name: b, agents: [1], kind: scripted, policy: staghunt_stag}],"
                "[{name: a, agents: [0]}, {name: b, agents: [1], kind: scripted, policy: staghunt_hare}]")
    out = tmp_path / "sweep"
    assert main(["sweep", "staghunt/default", variants, "total_env_steps=80", "num_envs=4", "rollout_length=10",
                 "eval_episodes=2", "log.tensorboard=false", "--workers", "1", "--out", str(out)]) == 0
    runs = sorted(d for d in out.iterdir() if (d / "summary.json").exists())
    assert len(runs) == 2
    policies = sorted(json.loads((d / "summary.json").read_text())["groups"]["b"]["phase"] for d in runs)
    assert any("staghunt_hare" in p for p in policies) and any("staghunt_stag" in p for p in policies)
    assert all("b/episode_return_mean" in rows(d / "metrics.csv")[0] for d in runs)
