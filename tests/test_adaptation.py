"""Held-out-partner evaluation (adaptation.py, `hypermappo adapt`): K consecutive episodes per partner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_groups import TINY

from hypermappo import config as config_mod
from hypermappo.adaptation import HeldOutMatch, adapt, parse_partner
from hypermappo.cli import main
from hypermappo.errors import UserError
from hypermappo.experiment import Experiment

GROUPS = ("groups=[{name: learner, agents: [0]}, {name: partner, agents: [1], kind: scripted, "
          "policy: staghunt_stag}]")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A tiny trained run: a learner on slot 0, a scripted stag hunter on slot 1 (shared team reward)."""
    run = tmp_path_factory.mktemp("adapt") / "run"
    cfg = config_mod.build_config("staghunt/default", [*TINY, "total_env_steps=80", GROUPS])
    exp = Experiment(cfg, run, quiet=True)
    exp.run()
    (run / "eval16.json").write_text(json.dumps(exp.evaluate(episodes=16)))  # its own evaluation, 16 episodes
    return run


def test_the_first_episode_is_the_runs_own_evaluation_and_later_ones_continue_the_envs(run):
    """Against the partner it trained with, episode 1 of every env is what the run's evaluation played (same env
    seed, learner mode, deterministic partner); the K = 3 curve is the K = 2 curve plus one episode."""
    cfg = config_mod.from_run_dir(run)
    want = json.loads((run / "eval16.json").read_text())["group_returns"]["learner"]
    match = HeldOutMatch(run, None, 16, torch.device("cpu"))
    partner = parse_partner("scripted:staghunt_stag")
    seed = cfg.seed + 1_000_003
    three = match.play(partner, 3, True, seed)
    two = match.play(partner, 2, True, seed)
    assert three["return"].shape == (16, 3)
    assert float(three["return"][:, 0].mean()) == pytest.approx(want)
    assert torch.equal(three["return"][:, :2], two["return"])
    assert torch.equal(three["return"], three["team"])  # shared reward: the learner's return is the team's
    assert three["return"].sum() > 0 and not torch.equal(three["return"][:, 1], three["return"][:, 0])


def test_adapt_writes_a_curve_per_partner_and_memory_setting(run, tmp_path, capsys):
    assert main(["adapt", str(run), "--partners", "scripted:staghunt_hare", "scripted:fixed@action=0",
                 "--episodes", "4", "--num-envs", "8", "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "adaptation.json").read_text())
    got = [(r["partner"], r["memory"], len(r["return"]["mean"])) for r in report["results"]]
    assert got == [("staghunt_hare", True, 4), ("staghunt_hare", False, 4), ("fixed@action=0", True, 4),
                   ("fixed@action=0", False, 4)]
    assert "| fixed@action=0 | off |" in capsys.readouterr().out


@pytest.mark.parametrize("args, expected", [
    (["--partners", "scripted:nope"], "unknown scripted policy 'nope'"),
    (["--partners", "/nonexistent"], "partner '/nonexistent': expected scripted:NAME[@key=value] or a run directory"),
    (["--partners", "scripted:random", "--episodes", "0"], "--episodes 0 is invalid; expected consecutive episodes"),
    (["--partners", "scripted:random", "--group", "nobody"], "--group 'nobody' is not a group of run"),
    (["--partners", "scripted:random", "--group", "learner"], "neither learn nor are the partner group"),
])
def test_adapt_mistakes_are_one_line_errors(run, args, expected, capsys):
    assert main(["adapt", str(run), *args]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1


def test_a_run_without_a_partner_group_is_refused(tmp_path):
    cfg = config_mod.build_config("staghunt/default", [*TINY, "total_env_steps=40"])
    Experiment(cfg, tmp_path / "plain", quiet=True).run()
    with pytest.raises(UserError, match="has no groups, so no partner slot"):
        adapt(tmp_path / "plain", ["scripted:random"])


def test_sampled_partners_are_reproducible_and_without_a_coplayer_model_memory_changes_nothing(run):
    """A frozen partner samples its actions (as in training), as does the learner with deterministic=False:
    both draw from a generator seeded per call, so the memory settings face the same draws."""
    torch.manual_seed(123)
    report = adapt(run, [f"{run}#learner"], episodes=3, num_envs=8, deterministic=False)
    on, off = report["results"]
    torch.manual_seed(456)  # the caller's random state does not matter
    again = adapt(run, [f"{run}#learner"], episodes=3, num_envs=8, memory=(True,), deterministic=False)
    assert again["results"][0]["return"] == on["return"]
    assert (on["memory"], off["memory"]) == (True, False)
    assert on["return"] == off["return"] and on["team_return"] == off["team_return"]
    assert adapt(run, [f"{run}#learner"], episodes=3, num_envs=8, memory=(True,), deterministic=False,
                 seed=5)["results"][0]["return"] != on["return"]


# --------------------------------------------------------------------------- with a co-player model

@pytest.fixture(scope="module")
def coplayer_run(tmp_path_factory) -> Path:
    """A tiny run whose learner has a co-player model (action + goal heads, belief fed to the policy)."""
    run = tmp_path_factory.mktemp("adapt_cpm") / "run"
    cfg = config_mod.build_config("staghunt/default", [
        *TINY, "total_env_steps=80", "coplayer.enabled=true", "coplayer.model=gru", "coplayer.goal_weight=1.0",
        "coplayer.memory=persistent", "coplayer.feed=policy",
        "groups=[{name: learner, agents: [0]}, {name: partner, agents: [1], kind: population, "
        "members: [{policy: staghunt_stag}, {policy: staghunt_hare}]}]"])
    Experiment(cfg, run, quiet=True).run()
    return run


def test_memory_on_keeps_the_coplayer_memory_across_episodes_and_off_restarts_it(coplayer_run, monkeypatch):
    from hypermappo.models.coplayer import CoplayerModel

    restarts = []
    step = CoplayerModel.step

    def spy(self, obs, new_episode, hidden, reset):
        restarts.append(bool(reset.all()) if reset.any() else False)
        return step(self, obs, new_episode, hidden, reset)

    monkeypatch.setattr(CoplayerModel, "step", spy)
    report = adapt(coplayer_run, ["scripted:staghunt_stag"], episodes=3, num_envs=4)  # memory on, then off
    on, off = restarts[:75], restarts[75:]
    assert len(off) == 75  # 3 episodes of 25 steps each
    assert [t for t, r in enumerate(on) if r] == [0]
    assert [t for t, r in enumerate(off) if r] == [0, 25, 50]
    first = [r["action_accuracy"]["by_episode"][0] for r in report["results"]]
    assert first[0] == first[1]  # episode 1 is the same with and without memory
    assert report["results"][0]["return"]["mean"][0] == report["results"][1]["return"]["mean"][0]


def _constant_prediction(action: int, goal: int):
    def prediction(self, head, partner_slots):
        E, K, P = self.memory.shape[0], self.slots.numel(), partner_slots.numel()
        return torch.full((E, K, P), action if head == "action" else goal, dtype=torch.long)
    return prediction


@pytest.mark.parametrize("partner, action_acc, goal_acc", [
    ("scripted:fixed@action=0", 1.0, "unlabelled"),  # writes no goal and stays put: it never catches anything
    ("scripted:fixed@action=3", 0.0, None),
    ("scripted:staghunt_stag", None, 1.0),  # its own target: the stag (goal 0)
    ("scripted:staghunt_hare", None, 0.0),
])
def test_accuracy_compares_the_prediction_with_the_partners_action_and_goal(coplayer_run, monkeypatch, partner,
                                                                            action_acc, goal_acc):
    from hypermappo import adaptation

    monkeypatch.setattr(adaptation.LearnerSide, "prediction", _constant_prediction(0, 0))
    r = adapt(coplayer_run, [partner], episodes=2, num_envs=4, memory=(True,))["results"][0]
    if action_acc is not None:
        assert r["action_accuracy"]["by_episode"] == [action_acc, action_acc]
        assert r["action_accuracy"]["by_step"] == [action_acc] * 25
    if isinstance(goal_acc, float):
        assert r["goal_accuracy"]["by_episode"] == [goal_acc, goal_acc]
        assert r["goal_accuracy"]["count"] == [100.0, 100.0]  # every step of 4 envs x 25 steps is labelled
    elif goal_acc == "unlabelled":
        assert r["goal_accuracy"]["count"] == [0.0, 0.0]  # nothing labelled: no accuracy (NaN), not 0 or 1
        assert all(x != x for x in r["goal_accuracy"]["by_episode"])


def test_goal_labels_without_a_scripted_target_are_the_next_goal_completed_in_the_same_episode():
    """One env, two episodes of 3 steps; the partner completes goal 1 at step 2 of episode 1 and goal 0 at step 1
    of episode 2; the model always predicts goal 1. Labels: episode 1: 1, 1, -1; episode 2: 0, -1, -1 (within a
    window of 1 step: -1, 1, -1 and 0, -1, -1)."""
    from hypermappo.adaptation import _accuracy

    events = [-1, 1, -1, 0, -1, -1]
    trace = [{"episode": torch.tensor([i // 3]), "t": torch.tensor([i % 3]), "ended": torch.tensor([i % 3 == 2]),
              "action_correct": torch.tensor([[[i % 2 == 0]]]), "goal_pred": torch.tensor([[[1]]]),
              "scripted_goal": None, "goal_event": torch.tensor([[e]])} for i, e in enumerate(events)]
    acc = _accuracy(trace, 2)
    assert acc["goal_accuracy"]["count"].tolist() == [[1, 1, 0], [1, 0, 0]]
    assert acc["goal_accuracy"]["correct"].tolist() == [[1, 1, 0], [0, 0, 0]]
    assert acc["action_accuracy"]["correct"].tolist() == [[1, 0, 1], [0, 1, 0]]
    near = _accuracy(trace, 2, window=1)  # as the Bayesian model's training labels: only a goal completed this step
    assert near["goal_accuracy"]["count"].tolist() == [[0, 1, 0], [1, 0, 0]]
    given = [dict(x, scripted_goal=torch.tensor([[g]])) for x, g in zip(trace, [-2, -2, 1, -1, 0, -2])]
    acc = _accuracy(given, 2)  # a partner's own target (>= -1) wins over hindsight; -2: not given
    assert acc["goal_accuracy"]["count"].tolist() == [[1, 1, 1], [0, 1, 0]]
    assert acc["goal_accuracy"]["correct"].tolist() == [[1, 1, 1], [0, 0, 0]]


# --------------------------------------------------------------------------- the Bayesian goal belief

@pytest.fixture(scope="module")
def bayes_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("adapt_bayes") / "run"
    cfg = config_mod.build_config("staghunt/default", [
        *TINY, "total_env_steps=80", "coplayer.enabled=true", "coplayer.feed=policy", "coplayer.hidden=16",
        "coplayer.replay_size=256", "coplayer.steps=2",
        "groups=[{name: learner, agents: [0]}, {name: partner, agents: [1], kind: population, "
        "members: [{policy: staghunt_stag}, {policy: staghunt_hare}]}]"])
    Experiment(cfg, run, quiet=True).run()
    return run


def test_bayes_belief_carries_across_episodes_only_with_memory_and_the_baselines_are_scored(bayes_run):
    report = adapt(bayes_run, ["scripted:staghunt_follow"], episodes=3, num_envs=4)
    on, off = report["results"]
    assert on["memory"] and not off["memory"]
    assert on["action_accuracy"]["by_episode"][0] == off["action_accuracy"]["by_episode"][0]  # the same first episode
    assert on["action_nll"]["by_episode"][0] == off["action_nll"]["by_episode"][0]
    assert on["action_nll"]["by_episode"][1:] != off["action_nll"]["by_episode"][1:]  # the prior carried, or not
    for r in (on, off):
        for name in ("repeat_action_accuracy", "frequent_action_accuracy", "oracle_action_accuracy"):
            assert 0.0 <= r[name]["overall"] <= 1.0
        # the oracle knows the follow rule: it is right nearly always once the belief settles
        assert r["oracle_action_accuracy"]["by_step"][-1] > 0.9
        assert r["goal_accuracy"]["count"][0] > 0  # the follower's own target ("hunter") labels its steps
        # the oracle's goal belief, on the same labels: its follow rule is the goal "hunter"
        assert r["oracle_goal_accuracy"]["count"] == r["goal_accuracy"]["count"]
        assert r["oracle_goal_accuracy"]["by_step"][-1] > 0.9
        # steps to recognise, per episode index: every labelled episode is counted (4 envs each)
        assert r["recognise"]["episodes"] == [4, 4, 4]
        assert len(r["recognise"]["steps"]) == 3 and all(0.0 <= f <= 1.0 for f in r["recognise"]["recognised"])


def test_the_ceiling_is_the_mode_of_a_frozen_partners_own_move_distribution(bayes_run, run):
    """A sampling partner cannot be predicted better than by the most likely move of its own distribution: scored
    where a frozen member played (NaN rows elsewhere), for frozen partners only."""
    from hypermappo.adaptation import _ceiling

    probs = torch.tensor([[[0.1, 0.6, 0.3]], [[0.5, 0.2, 0.3]], [[float("nan")] * 3]])  # [E=3, P=1, A=3]
    out = _ceiling(probs, torch.tensor([[1], [2], [0]]))
    assert out["policy_correct"].flatten().tolist() == [True, False, False]
    assert out["policy_counted"].flatten().tolist() == [True, True, False]
    assert _ceiling(None, torch.zeros(3, 1, dtype=torch.long)) == {}
    frozen, scripted = adapt(bayes_run, [f"{run}#learner", "scripted:staghunt_stag"], episodes=2, num_envs=4,
                             memory=(True,))["results"]
    ceiling = frozen["policy_action_accuracy"]
    assert ceiling["count"][0] > 0 and 0.0 < ceiling["overall"] <= 1.0
    assert "policy_action_accuracy" not in scripted  # a scripted rule's best predictor is the oracle


def test_a_goal_event_moves_the_belief_back_to_the_prior_by_event_reset():
    """b <- (1 - w) b + w prior for the co-player that completed a goal at this step, after the Bayes update."""
    from test_coplayer_bayes import Planted

    from hypermappo.algos.coplayer_bayes import GoalBelief

    pi = torch.tensor([[0.9, 0.1], [0.1, 0.9], [0.5, 0.5]]).log().view(1, 1, 1, 3, 2).expand(2, 1, 2, 3, 2)
    w = 0.75
    b = GoalBelief(Planted(pi), torch.tensor([0]), 2, alpha=0.5, hazard=0.0, persistent=True, event_reset=w)
    b.start(2, "cpu")
    b.begin(torch.zeros(2, 1, 3))
    b.observe(torch.tensor([[0, 0], [0, 0]]), torch.ones(2, 2, dtype=torch.bool), torch.zeros(2, dtype=torch.bool),
              torch.tensor([[-1, 1], [-1, -1]]))  # env 0's co-player completed goal 1; env 1's did not
    post = _normalised_list([0.9, 0.1, 0.5])
    assert b.log_b[1, 0, 1].exp().tolist() == pytest.approx(post, abs=1e-6)
    assert b.log_b[0, 0, 1].exp().tolist() == pytest.approx([(1 - w) * p + w / 3 for p in post], abs=1e-6)


def _normalised_list(xs):
    return [x / sum(xs) for x in xs]


def test_held_out_goal_predictions_are_the_goal_predictions_the_belief_made_before_the_move():
    """`hypermappo adapt` scores the goal predictions of the belief's last `begin` (with coplayer.goal_readout=state
    the goal pursued now, which may differ from the posterior's argmax), and the posterior before any."""
    from types import SimpleNamespace

    from hypermappo.adaptation import LearnerSide

    posterior = torch.tensor([[[[0.6, 0.3, 0.1], [0.6, 0.3, 0.1]]]])  # [E, K, N, G]
    now = torch.tensor([[[[0.2, 0.7, 0.1], [0.2, 0.7, 0.1]]]])
    side = object.__new__(LearnerSide)
    side.belief = SimpleNamespace(goal_probs=now, goal_log_b=lambda: posterior.log())
    side.log_pred = torch.zeros(1, 1, 2, 4)
    partner = torch.tensor([1])
    assert side.prediction("goal", partner).tolist() == [[[1]]]
    torch.testing.assert_close(side.goal_probs(partner), now[:, :, [1]])
    side.belief.goal_probs = None  # no `begin` yet
    assert side.prediction("goal", partner).tolist() == [[[0]]]
