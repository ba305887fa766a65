"""The co-player model (models/coplayer.py, algos/coplayer.py): own observations only, memory, labels, exact
equivalence to MAPPO when nothing reaches the policy, Hyper-MAPPO on the belief, audit, checkpoint/resume."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import pytest
import torch
from test_resume import TINY, assert_same, metrics_without_timing, resume_matches_uninterrupted

from hypermappo import config as config_mod
from hypermappo import experiment as experiment_mod
from hypermappo.algos.coplayer import hindsight_goals, subgoal_at_reward, subgoal_targets
from hypermappo.envs.registry import make_env
from hypermappo.errors import UserError
from hypermappo.experiment import Experiment

# the recurrent predictor (coplayer.model=gru); the Bayesian model's tests are in test_coplayer_bayes.py
ON = ["coplayer.enabled=true", "coplayer.model=gru", "coplayer.hidden=16", "model.hidden_sizes=[16,16]"]


def _cfg(extra=(), steps: int = 160):
    return config_mod.build_config("staghunt/default", [*TINY, f"total_env_steps={steps}", *extra])


def _rows(run_dir: Path) -> list[dict]:
    with (run_dir / "metrics.csv").open(newline="") as f:
        return list(csv.DictReader(f))


# --------------------------------------------------------------------------- what the model reads


def test_predictions_use_only_the_learners_own_observations(tmp_path):
    """Changing agent 1's (a co-player's private) observation leaves agent 0's belief and predictions unchanged;
    agent 1's own belief does change (the check is not vacuous)."""
    exp = Experiment(_cfg([*ON, "coplayer.feed=policy"]), tmp_path / "run", quiet=True)
    exp._start_episodes()
    g, s = exp.groups[0], exp.last
    other = dataclasses.replace(s, obs=s.obs.clone())
    other.obs[:, 1] += torch.randn(other.obs[:, 1].shape, generator=torch.Generator().manual_seed(3))
    beliefs = []
    for step in (s, other):
        g.start(step)
        exp._learner_act(g, step, 0)
        beliefs.append(g.learner.coplayer.memory.clone())  # [E, K, H]
    assert torch.equal(beliefs[0][:, 0], beliefs[1][:, 0])
    assert not torch.allclose(beliefs[0][:, 1], beliefs[1][:, 1])
    pred = [g.learner.coplayer.model.predict(b)["action"] for b in beliefs]
    assert torch.equal(pred[0][:, 0], pred[1][:, 0])
    # and the belief is what the actor got, after its own observation
    assert torch.equal(g.learner.buffer.obs[0, :, :, exp.spec.obs_dim:], beliefs[1])


# --------------------------------------------------------------------------- memory


def _memory_learner(tmp_path, memory: str):
    exp = Experiment(_cfg([*ON, f"coplayer.memory={memory}"]), tmp_path / memory, quiet=True)
    exp._start_episodes()
    return exp.groups[0].learner.coplayer, exp.last.obs


@pytest.mark.parametrize("memory", ["episode", "persistent"])
def test_memory_persists_across_episodes_only_when_on_and_resets_on_a_partner_switch(tmp_path, memory):
    cp, obs = _memory_learner(tmp_path, memory)
    E, K = obs.shape[:2]
    none = torch.zeros(E, K, dtype=torch.bool)
    partner = torch.zeros(E, 2, dtype=torch.long)
    cp.act(0, obs, none, partner)  # the fresh start resets everything once
    assert cp.reset[0].all()
    cp.act(1, obs, none, partner)
    assert not cp.reset[1].any()
    new_episode = none.clone()
    new_episode[0] = True  # env 0's agents start a new episode
    before = cp.memory.clone()
    cp.act(2, obs, new_episode, partner)
    kept = cp.memory.clone()
    assert cp.reset[2, 0].all() == (memory == "episode") and not cp.reset[2, 1:].any()
    zero_h = cp.model.step(obs, new_episode, torch.zeros_like(before), torch.ones_like(none))
    assert torch.allclose(kept[0], zero_h[0]) == (memory == "episode")
    switched = partner.clone()
    switched[1, 1] = 3  # the partner of env 1 changes
    cp.act(3, obs, none, switched)
    assert cp.reset[3, 1].all() and not cp.reset[3, 0].any() and not cp.reset[3, 2:].any()
    cp.act(4, obs, none, switched)  # the same partner again: no further reset
    assert not cp.reset[4].any()


def test_a_phase_switch_changes_the_partner_id_and_resets_the_memory_of_a_persistent_learner(tmp_path):
    groups = ("groups=[{name: me, agents: [0]}, {name: other, agents: [1], kind: scripted, policy: fixed, "
              "params: {action: 0}, switch: [{at_step: 40, kind: scripted, policy: fixed, params: {action: 2}}]}]")
    exp = Experiment(_cfg([*ON, "coplayer.memory=persistent", groups], steps=80), tmp_path / "run", quiet=True)
    resets = []
    update = exp.groups[0].learner.coplayer.update
    exp.groups[0].learner.coplayer.update = lambda: (resets.append(exp.groups[0].learner.coplayer.reset.clone()),
                                                     update())[1]
    exp.run()
    assert exp.groups[1].partner_id.tolist() == [1] * 4
    first, second = resets  # rollouts of 10 steps, episodes of 25: no episode ended in between
    assert first[0].all() and not first[1:].any()  # the run's start only
    assert second[0].all() and not second[1:].any()  # the switch, at the next rollout's first step


# --------------------------------------------------------------------------- labels


def test_hindsight_goal_is_the_next_goal_completed_in_the_same_episode():
    ev = torch.tensor([-1, -1, 1, -1, -1, 0, -1]).view(7, 1, 1)  # [T, E=1, N=1]
    end = torch.tensor([0, 0, 0, 1, 0, 0, 0], dtype=torch.bool).view(7, 1)  # the episode ends after step 3
    assert hindsight_goals(ev, end).flatten().tolist() == [1, 1, 1, -1, 0, 0, -1]


def test_subgoal_target_is_the_observation_h_steps_ahead_within_the_episode():
    obs = torch.arange(6.0).view(6, 1, 1, 1)  # [T, E, N, D]
    end = torch.tensor([0, 0, 1, 0, 0, 0], dtype=torch.bool).view(6, 1)  # ends after step 2
    target, valid = subgoal_targets(obs, end, 2)
    assert valid.flatten().tolist() == [True, False, False, True, False, False]
    assert target[0].item() == 2.0 and target[3].item() == 5.0


def test_subgoal_at_reward_is_the_observation_at_the_next_rewarded_step_within_the_episode():
    obs = torch.arange(6.0).view(6, 1, 1, 1)
    reward = torch.tensor([0, 1.0, 0, 0, 0, 2.0]).view(6, 1, 1)
    end = torch.tensor([0, 0, 0, 1, 0, 0], dtype=torch.bool).view(6, 1)  # ends after step 3
    target, valid = subgoal_at_reward(obs, reward, end)
    assert valid.flatten().tolist() == [True, True, False, False, True, True]
    assert target.flatten()[[0, 1, 4, 5]].tolist() == [1.0, 1.0, 5.0, 5.0]


def test_a_run_trains_either_subgoal(tmp_path):
    for at in ("horizon", "reward"):
        Experiment(_cfg([*ON, "coplayer.subgoal_weight=1.0", f"coplayer.subgoal_at={at}"]), tmp_path / at,
                   quiet=True).run()
        audit = json.loads((tmp_path / at / "summary.json").read_text())["audit"]
        assert audit["passed"] and audit["loss_terms"]["coplayer_subgoal_loss"] == "non-zero"


class GoalStagHunt:
    """Staghunt with two goals: a hunter 'completes' goal a when it plays action a < 2 (a learnable label)."""

    def __init__(self, env):
        self.env = env
        self.spec = dataclasses.replace(env.spec, goal_names=["stay", "up"])

    def __getattr__(self, name):
        return getattr(self.env, name)

    def step(self, actions):
        s = self.env.step(actions)
        s.extras["goal_event"] = torch.where(actions < 2, actions, torch.full_like(actions, -1))
        return s


def _goal_env(monkeypatch):
    monkeypatch.setattr(experiment_mod, "make_env", lambda *a, **k: GoalStagHunt(make_env(*a, **k)))


def goal_writer(step, ctx):
    """Test policy: plays action 2 and names goal 1 as its target (a scripted partner's true goal)."""
    ctx.goal = torch.ones(step.obs.shape[0], len(ctx.slots), dtype=torch.long)
    return torch.full((step.obs.shape[0], len(ctx.slots)), 2, dtype=torch.long)


def test_goal_labels_come_from_the_scripted_partner_else_from_hindsight(tmp_path, monkeypatch):
    _goal_env(monkeypatch)
    groups = ("groups=[{name: me, agents: [0]}, {name: other, agents: [1], kind: scripted, "
              "policy: 'test_coplayer:goal_writer'}]")
    exp = Experiment(_cfg([*ON, "coplayer.goal_weight=1.0", groups], steps=40), tmp_path / "run", quiet=True)
    exp.run()
    cp = exp.groups[0].learner.coplayer
    assert (cp.scripted_goal[:, :, 1] == 1).all() and (cp.scripted_goal[:, :, 0] == -2).all()
    assert (cp.goal_event[:, :, 1] == -1).all()  # the partner never 'completes' a goal: only its own label counts
    row = _rows(tmp_path / "run")[-1]
    assert float(row["me/coplayer_goal_labelled"]) == 1.0 and 0.0 <= float(row["me/coplayer_goal_acc"]) <= 1.0


def test_goal_loss_learns_hindsight_goals_of_a_partner_that_writes_none(tmp_path, monkeypatch):
    """A fixed partner playing 1 completes goal 1 at every step (it names no goal itself): labels come from
    its goal_event, and the model learns them."""
    _goal_env(monkeypatch)
    groups = ("groups=[{name: me, agents: [0]}, {name: other, agents: [1], kind: scripted, policy: fixed, "
              "params: {action: 1}}]")
    Experiment(_cfg([*ON, groups, "coplayer.goal_weight=1.0", "coplayer.action_weight=0", "coplayer.epochs=5",
                     "coplayer.lr=0.01"], steps=200), tmp_path / "run", quiet=True).run()
    rows = _rows(tmp_path / "run")
    assert "me/coplayer_action_acc" not in rows[-1]
    loss = [float(r["me/coplayer_goal_loss"]) for r in rows]
    assert loss[-1] < loss[0] / 4 and float(rows[-1]["me/coplayer_goal_acc"]) == 1.0


def test_goal_loss_on_an_env_without_goals_is_a_one_line_error(tmp_path):
    cfg = config_mod.build_config("mpe/simple_spread", [*TINY, "total_env_steps=160", *ON, "coplayer.goal_weight=1.0"])
    with pytest.raises(UserError, match=r"coplayer.goal_weight: env 'mpe:simple_spread' labels no goals"):
        Experiment(cfg, tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- training


def test_action_accuracy_is_logged_every_update_and_learns_a_fixed_partner(tmp_path):
    groups = ("groups=[{name: me, agents: [0]}, {name: other, agents: [1], kind: scripted, policy: fixed, "
              "params: {action: 3}}]")
    Experiment(_cfg([*ON, groups, "coplayer.lr=0.01", "coplayer.epochs=5"], steps=200), tmp_path / "run",
               quiet=True).run()
    rows = _rows(tmp_path / "run")
    loss = [float(r["me/coplayer_action_loss"]) for r in rows]
    assert len(loss) == 5 and loss[-1] < loss[0] / 4 and float(rows[-1]["me/coplayer_action_acc"]) == 1.0


@pytest.mark.parametrize("weights", [["coplayer.action_weight=0"], ["coplayer.subgoal_weight=0.5"]])
def test_without_a_belief_fed_to_the_policy_the_run_equals_plain_mappo(tmp_path, weights):
    """Zero loss weight (nothing trains), or a trained model nothing reads: metrics and the checkpoint's actor /
    critic / optimiser are MAPPO's bit for bit (the model's init draws from a forked generator)."""
    Experiment(_cfg(["model.hidden_sizes=[16,16]"]), tmp_path / "plain", quiet=True).run()
    Experiment(_cfg([*ON, *weights]), tmp_path / "cp", quiet=True).run()
    plain, cp = metrics_without_timing(tmp_path / "plain"), metrics_without_timing(tmp_path / "cp")
    for p, c in zip(plain, cp, strict=True):
        assert {k: v for k, v in c.items() if not k.startswith("coplayer_")} == p
    assert "coplayer_subgoal_loss" in cp[-1] or "coplayer_action_loss" not in cp[-1]
    got = torch.load(tmp_path / "cp" / "checkpoints" / "ckpt_0000004.pt", weights_only=False)
    want = torch.load(tmp_path / "plain" / "checkpoints" / "ckpt_0000004.pt", weights_only=False)
    for key in ("actor", "critic", "algo", "rng"):
        assert_same(got[key], want[key], key)


@pytest.mark.parametrize("context", ["[coplayer]", "[agent_id,coplayer]"])
def test_hyper_context_coplayer_trains_passes_the_audit_and_reads_the_belief(tmp_path, context):
    run = tmp_path / "run"
    exp = Experiment(_cfg([*ON, "actor=hyper", f"hyper.context={context}", "hyper.hidden=16"], steps=200), run,
                     quiet=True)
    exp.run()
    audit = json.loads((run / "summary.json").read_text())["audit"]
    assert audit["passed"], audit
    assert audit["components"]["coplayer.gru"] == "live" and audit["loss_terms"]["coplayer_action_loss"] == "non-zero"
    actor, D = exp.actor, exp.spec.obs_dim
    obs = exp.buffer.obs[-1]  # [E, N, D + H]
    moved = obs.clone()
    moved[..., D:] = torch.randn(moved[..., D:].shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = [actor(x).dist.logp_all for x in (obs, moved)]
    assert (logits[0] - logits[1]).abs().max() > 1e-5  # the generated weights depend on the belief


def test_a_dead_coplayer_model_stops_the_run_in_the_audit(tmp_path, monkeypatch):
    from hypermappo.algos import coplayer as cp_mod

    monkeypatch.setattr(cp_mod.CoplayerLearner, "update", lambda self: {"coplayer_action_loss": 0.0})
    from hypermappo.diagnostics import DeadComponentError

    with pytest.raises(DeadComponentError, match="coplayer.gru"):
        Experiment(_cfg(ON), tmp_path / "run", quiet=True).run()


# --------------------------------------------------------------------------- checkpoints


def test_resume_with_a_persistent_fed_belief_equals_the_uninterrupted_run(tmp_path):
    resume_matches_uninterrupted(tmp_path, "staghunt/default", [*ON, "coplayer.feed=policy",
                                                                "coplayer.memory=persistent"])
    got = torch.load(tmp_path / "resumed" / "checkpoints" / "ckpt_0000004.pt", weights_only=False)
    want = torch.load(tmp_path / "full" / "checkpoints" / "ckpt_0000004.pt", weights_only=False)
    assert_same(got["coplayer"], want["coplayer"], "coplayer")


def test_eval_of_a_fed_run_plays_the_belief_as_training_evaluated_it(tmp_path, capsys):
    from hypermappo.cli import main

    run = tmp_path / "run"
    summary = Experiment(_cfg([*ON, "coplayer.feed=policy"]), run, quiet=True).run()
    assert main(["eval", str(run), "--episodes", "4", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["return_mean"] == pytest.approx(summary["eval_return_mean"], rel=1e-6)


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize("overrides, expected", [
    (["coplayer.feed=policy"], r"coplayer.feed='policy' has no effect: it needs coplayer.enabled=true"),
    (["coplayer.enabled=true", "coplayer.subgoal_horizon=3"], r"coplayer.subgoal_horizon=3 has no effect: it needs "
                                                             r"coplayer.model=subgoal, or coplayer.subgoal_weight>0"),
    (["actor=hyper", "hyper.context=[coplayer]"], r"hyper.context: coplayer needs the co-player model"),
    (["coplayer.enabled=true", "coplayer.model=gru", "coplayer.subgoal_weight=1", "coplayer.subgoal_at=reward",
      "coplayer.subgoal_horizon=3"],
     r"coplayer.subgoal_horizon=3 has no effect: it needs coplayer.model=subgoal, or coplayer.subgoal_weight>0 and "
     r"coplayer.subgoal_at=horizon"),
    (["coplayer.enabled=true", "coplayer.memory=forever"], r"coplayer.memory: 'forever' is not one of"),
])
def test_coplayer_config_mistakes_are_one_line_errors(overrides, expected):
    with pytest.raises(UserError, match=expected):
        config_mod.build_config("staghunt/default", overrides)
