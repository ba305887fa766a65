"""The Bayesian co-player model (models/coplayer_goal.py, algos/coplayer_bayes.py): the belief arithmetic against
hand-computed Bayes updates, its memory rules (episode prior, partner switch, deaths), the oracle, what the
predictions read, exact resume, and equivalence to MAPPO when nothing reaches the policy."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from test_resume import TINY, assert_same, metrics_without_timing, resume_matches_uninterrupted

from hypermappo import config as config_mod
from hypermappo.algos.coplayer_bayes import GoalBelief, calibration
from hypermappo.errors import UserError
from hypermappo.experiment import Experiment
from hypermappo.models.coplayer_goal import bayes_update, carry, coplayer_seats, predictive, switch

BAYES = ["coplayer.enabled=true", "coplayer.hidden=16", "model.hidden_sizes=[16,16]", "coplayer.replay_size=512",
         "coplayer.steps=2", "coplayer.batch_size=64"]


def _cfg(extra=(), steps: int = 160):
    return config_mod.build_config("staghunt/default", [*TINY, f"total_env_steps={steps}", *extra])


class Planted:
    """A goal model whose log pi [E, K, N, G, A] is set by the test."""

    def __init__(self, log_pi: torch.Tensor):
        self.log_pi = log_pi
        self.n_goals, self.n_actions, self.n_slots = log_pi.shape[-2], log_pi.shape[-1], log_pi.shape[2]

    def all_coplayers(self, obs, prev, slots):
        return self.log_pi

    def coplayer_log_probs(self, obs, prev, slots):  # what GoalBelief reads: the co-players' seats
        k = torch.arange(slots.numel()).unsqueeze(-1)
        return self.log_pi[:, k, coplayer_seats(slots, self.n_slots)]


# --------------------------------------------------------------------------- the arithmetic


def _normalised(xs):
    s = sum(xs)
    return [x / s for x in xs]


def test_belief_update_equals_a_hand_computed_bayes_update_with_switch_carry_and_partner_reset():
    """Three goals, two observed actions, the episode's end with alpha, then a partner switch in one env. The last
    goal ("other") plays the Dirichlet(1) predictive of the moves counted so far: (count(a) + 1) / (n + A)."""
    # pi(a | g) for 2 actions, the same at both steps: goal 0 plays a0 w.p. 0.7, goal 1 w.p. 0.2; goal 2 (planted
    # 0.5, replaced by the counts) 1/2 before any move, 2/3 after seeing a0
    pi = torch.tensor([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]])
    log_pi = pi.log().view(1, 1, 1, 3, 2).expand(2, 1, 2, 3, 2).clone()  # E=2, K=1 (slot 0), N=2
    alpha, hazard = 0.25, 0.1
    b = GoalBelief(Planted(log_pi), torch.tensor([0]), 2, alpha=alpha, hazard=hazard, persistent=True)
    b.start(2, "cpu")
    active = torch.ones(2, 2, dtype=torch.bool)
    no_end = torch.zeros(2, dtype=torch.bool)

    prior = [1 / 3] * 3
    want = prior
    counts = [0, 0]
    for step, a in enumerate([0, 1]):
        pi = pi.clone()
        pi[2] = torch.tensor([(c + 1) / (sum(counts) + 2) for c in counts])
        feats, log_pred = b.begin(torch.zeros(2, 1, 4))
        # the predictive distribution before the move: sum_g b(g) pi(a | g)
        p_a0 = sum(w * float(pi[g, 0]) for g, w in enumerate(want))
        assert math.isclose(float(log_pred[0, 0, 1, 0].exp()), p_a0, rel_tol=1e-6)
        # features: [b(slot 0), b(slot 1)] (3 each), then [p(a | slot 0), p(a | slot 1)] (2 each)
        assert torch.equal(feats[0, 0, :3], torch.zeros(3)) and torch.equal(feats[0, 0, 6:8], torch.zeros(2)), \
            "the learner's own slot carries no belief"
        assert feats[0, 0, 3:6].tolist() == pytest.approx(want, abs=1e-6)
        b.observe(torch.tensor([[0, a], [0, a]]), active, no_end)
        counts[a] += 1
        post = _normalised([w * float(pi[g, a]) for g, w in enumerate(want)])
        want = [(1 - hazard) * p + hazard * q for p, q in zip(post, prior)]  # a goal change drawn from the prior
        got = b.log_b[0, 0, 1].exp().tolist()
        assert got == pytest.approx(want, abs=1e-6), f"step {step + 1}"
        assert sum(got) == pytest.approx(1.0, abs=1e-6)
    # the episode ends in env 0 only: its next prior is alpha * prior + (1 - alpha) * posterior
    b.observe(torch.tensor([[0, 0], [0, 0]]), torch.zeros(2, 2, dtype=torch.bool), torch.tensor([True, False]))
    carried = [alpha * q + (1 - alpha) * p for p, q in zip(want, prior)]
    assert b.prior[0, 0, 1].tolist() == pytest.approx(carried, abs=1e-6)
    assert b.log_b[0, 0, 1].exp().tolist() == pytest.approx(carried, abs=1e-6), "the new episode starts at its prior"
    assert b.prior[1, 0, 1].tolist() == pytest.approx(prior, abs=1e-6), "env 1's episode goes on"
    assert b.log_b[1, 0, 1].exp().tolist() == pytest.approx(want, abs=1e-6), "nobody alive: no update"
    assert b.episode_index.tolist() == [1, 0]
    # a new partner in env 0: back to the uniform prior; env 1 keeps its belief
    b.reset(torch.tensor([True, False]))
    assert b.log_b[0, 0, 1].exp().tolist() == pytest.approx(prior, abs=1e-6)
    assert b.prior[0, 0, 1].tolist() == pytest.approx(prior, abs=1e-6)
    assert b.log_b[1, 0, 1].exp().tolist() == pytest.approx(want, abs=1e-6)
    assert b.counts[0].sum() == 0 and b.counts[1, 0, 1].tolist() == [1.0, 1.0], "the counts: reset with the partner"
    assert b.counts[1, 0, 0].sum() == 0, "the learner's own moves are not counted as a co-player's"


def test_a_tempered_belief_takes_each_move_to_the_power_of_the_evidence_weight():
    """coplayer.evidence_weight = w: b_t(g) ∝ b_{t-1}(g) * pi(a | g)^w (by hand, two moves, no hazard); w = 1 is
    Bayes' rule itself, to the bit."""
    pi = torch.tensor([[0.7, 0.3], [0.2, 0.8], [0.5, 0.5]])
    log_pi = pi.log().view(1, 1, 1, 3, 2).expand(1, 1, 2, 3, 2).clone()
    beliefs = {}
    for w in (0.5, 1.0):
        b = GoalBelief(Planted(log_pi), torch.tensor([0]), 2, alpha=0.5, hazard=0.0, persistent=True,
                       evidence_weight=w)
        b.start(1, "cpu")
        want = [1 / 3] * 3
        for a in (0, 0):
            seen = b.counts[0, 0, 1]  # the "other" goal: the Dirichlet(1) predictive of the moves counted so far
            lik = [float(pi[0, a]), float(pi[1, a]), (seen[a].item() + 1) / (seen.sum().item() + 2)]
            b.begin(torch.zeros(1, 1, 4))
            b.observe(torch.tensor([[1, a]]), torch.ones(1, 2, dtype=torch.bool), torch.zeros(1, dtype=torch.bool))
            want = _normalised([p * q ** w for p, q in zip(want, lik)])
            assert b.log_b[0, 0, 1].exp().tolist() == pytest.approx(want, abs=1e-6), w
        beliefs[w] = b.log_b[0, 0, 1].clone()
    # two moves that goal 0 explains best: the tempered belief is less sure of it than Bayes' rule
    assert beliefs[0.5].exp()[0] < beliefs[1.0].exp()[0]
    b = GoalBelief(Planted(log_pi), torch.tensor([0]), 2, alpha=0.5, hazard=0.0, persistent=True)
    assert b.evidence_weight == 1.0, "Bayes' rule by default"
    lb, lik = torch.tensor([0.5, 0.25, 0.25]).log(), torch.tensor([0.1, 0.4, 0.2]).log()
    assert torch.equal(bayes_update(lb, lik, 1.0), bayes_update(lb, lik))
    assert bayes_update(lb, lik, 0.5).exp().tolist() == pytest.approx(
        _normalised([0.5 * 0.1 ** 0.5, 0.25 * 0.4 ** 0.5, 0.25 * 0.2 ** 0.5]))


def test_the_evidence_weight_reaches_the_training_and_the_held_out_beliefs(tmp_path, monkeypatch):
    """coplayer.evidence_weight from the run's config into the belief a run trains with and into the one `hypermappo
    adapt` rebuilds from the run directory; the oracle's stays Bayes' rule (the env's own rules are not misspecified)."""
    from hypermappo.adaptation import HeldOutMatch, parse_partner

    groups = ("groups=[{name: learner, agents: [0]}, {name: partner, agents: [1], kind: scripted, "
              "policy: staghunt_stag}]")
    exp = Experiment(_cfg([*BAYES, "coplayer.evidence_weight=0.5", groups], steps=80), tmp_path / "run", quiet=True)
    assert exp.groups[0].learner.coplayer.belief.evidence_weight == 0.5
    exp.run()
    match = HeldOutMatch(tmp_path / "run", None, 4, torch.device("cpu"))
    weights = []
    observe = GoalBelief._observed

    def seen(self, *args):  # which weight each belief's update ran with
        weights.append((self.model is match.coplayer[0].model, self.evidence_weight))
        return observe(self, *args)

    monkeypatch.setattr(GoalBelief, "_observed", seen)
    match.play(parse_partner("scripted:staghunt_hare"), 1, True, 0)
    assert {w for own, w in weights if own} == {0.5}
    assert {w for own, w in weights if not own} == {1.0}, "the oracle's belief: Bayes' rule"


def test_memory_off_restarts_every_episode_from_the_uniform_prior():
    pi = torch.tensor([[0.9, 0.1], [0.1, 0.9]]).log().view(1, 1, 1, 2, 2).expand(1, 1, 2, 2, 2)
    b = GoalBelief(Planted(pi), torch.tensor([0]), 2, alpha=0.0, hazard=0.0, persistent=False)
    b.start(1, "cpu")
    b.begin(torch.zeros(1, 1, 3))
    b.observe(torch.tensor([[0, 0]]), torch.ones(1, 2, dtype=torch.bool), torch.tensor([True]))
    assert b.log_b[0, 0, 1].exp().tolist() == pytest.approx([0.5, 0.5])
    assert b.counts.sum() == 0, "nor the moves counted for the 'other' goal"


def test_the_pure_functions():
    lb = torch.tensor([0.5, 0.25, 0.25]).log()
    lik = torch.tensor([0.1, 0.4, 0.2]).log()
    assert bayes_update(lb, lik).exp().tolist() == pytest.approx([0.05 / 0.2, 0.1 / 0.2, 0.05 / 0.2])
    prior = torch.tensor([0.2, 0.3, 0.5])
    assert switch(lb, prior, 0.5).exp().tolist() == pytest.approx([0.35, 0.275, 0.375])
    assert carry(prior, lb, 0.8).tolist() == pytest.approx([0.8 * 0.2 + 0.2 * 0.5, 0.8 * 0.3 + 0.05, 0.8 * 0.5 + 0.05])
    lpi = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]]).log()
    assert predictive(lb, lpi).exp().tolist() == pytest.approx([0.45 + 0.05 + 0.125, 0.05 + 0.2 + 0.125])


def test_calibration_brier_and_ece_by_hand():
    prob = torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7]])
    label = torch.tensor([0, 1, 1])
    brier, ece = calibration(prob, label, torch.ones(3, dtype=torch.bool))
    assert float(brier) == pytest.approx(((0.1 ** 2 * 2) + (0.6 ** 2 * 2) + (0.3 ** 2 * 2)) / 3)
    # bins: 0.9 (right), 0.6 (wrong), 0.7 (right): |0.9 - 1| + |0.6 - 0| + |0.7 - 1| over 3
    assert float(ece) == pytest.approx((0.1 + 0.6 + 0.3) / 3)


# --------------------------------------------------------------------------- the oracle


def test_with_oracle_goal_policies_the_belief_concentrates_on_a_scripted_partners_true_goal():
    from hypermappo.algos.coplayer_oracle import OracleGoalPolicy
    from hypermappo.envs.staghunt import StagHuntVecEnv
    from hypermappo.policies.scripted import ScriptedContext, get_scripted

    for rule, goal in (("staghunt_stag", 0), ("staghunt_hare", 1), ("staghunt_follow", 2)):
        env = StagHuntVecEnv(32, observation="partial", view_radius=4)
        oracle = OracleGoalPolicy(env, floor=0.05)
        b = GoalBelief(oracle, torch.tensor([0]), 2, alpha=0.5, hazard=0.02, persistent=True)
        b.start(32, "cpu")
        s = env.reset(seed=1)
        gen = torch.Generator().manual_seed(0)
        for _ in range(10):
            oracle.set_step(s)
            b.begin(s.obs[:, :1])
            partner = get_scripted(rule)(s, ScriptedContext(env, torch.tensor([1]), gen, {}))
            me = torch.randint(5, (32, 1), generator=gen)
            actions = torch.cat([me, partner], 1)
            nxt = env.step(actions)
            b.observe(actions, s.active, nxt.terminated | nxt.truncated)
            s = nxt
        posterior = b.log_b[:, 0, 1].exp()  # [E, G]
        assert (posterior.argmax(-1) == goal).float().mean() >= 0.9, rule
        assert float(posterior[:, goal].mean()) > 0.8, rule


# --------------------------------------------------------------------------- in a run


def test_predictions_use_only_the_learners_own_observation_and_public_actions(tmp_path):
    """Changing agent 1's (a co-player's private) observation leaves agent 0's belief features and predictions
    unchanged; agent 1's do change (the check is not vacuous)."""
    exp = Experiment(_cfg([*BAYES, "coplayer.feed=policy"]), tmp_path / "run", quiet=True)
    exp._start_episodes()
    g, s = exp.groups[0], exp.last
    other = dataclasses.replace(s, obs=s.obs.clone())
    other.obs[:, 1] += torch.randn(other.obs[:, 1].shape, generator=torch.Generator().manual_seed(3))
    got = []
    for step in (s, other):
        g.start(step)
        exp._learner_act(g, step, 0)
        got.append((g.learner.coplayer.log_pred[0].clone(), g.learner.buffer.obs[0].clone()))
    assert torch.equal(got[0][0][:, 0], got[1][0][:, 0])
    assert not torch.allclose(got[0][0][:, 1], got[1][0][:, 1])
    D = exp.spec.obs_dim
    assert torch.equal(got[0][1][:, 0, D:], got[1][1][:, 0, D:]), "the features agent 0's actor reads"


def test_a_partner_switch_resets_only_that_envs_belief(tmp_path):
    exp = Experiment(_cfg(BAYES), tmp_path / "run", quiet=True)
    exp._start_episodes()
    cp, obs = exp.groups[0].learner.coplayer, exp.last.obs
    E = obs.shape[0]
    partner = torch.zeros(E, 2, dtype=torch.long)
    cp.act(0, obs, torch.zeros(E, 2, dtype=torch.bool), partner)
    cp.belief.log_b = torch.log_softmax(torch.randn(cp.belief.log_b.shape), -1)  # some evidence
    before = cp.belief.log_b.clone()
    switched = partner.clone()
    switched[1, 1] = 3
    cp.act(1, obs, torch.zeros(E, 2, dtype=torch.bool), switched)
    uniform = torch.full_like(before[1], 1.0 / cp.G)
    assert torch.allclose(cp.belief.log_b[1].exp(), uniform)
    assert torch.equal(cp.belief.log_b[0], before[0]) and torch.equal(cp.belief.log_b[2:], before[2:])


def test_scripted_labels_and_a_fixed_partner_is_learnt(tmp_path):
    groups = ("groups=[{name: me, agents: [0]}, {name: other, agents: [1], kind: scripted, policy: staghunt_hare}]")
    cfg = [o for o in BAYES if not o.startswith("coplayer.steps")]
    exp = Experiment(_cfg([*cfg, groups, "coplayer.lr=0.01", "coplayer.steps=20"], steps=400), tmp_path / "run",
                     quiet=True)
    exp.run()
    cp = exp.groups[0].learner.coplayer
    label = cp.labels()
    assert (label[:, :, 1] == 1).all(), "the hare rule's own target labels every one of its steps"
    rows = metrics_without_timing(tmp_path / "run")
    fit = [float(r["me/coplayer_fit_acc"]) for r in rows]
    # one update's fit swings by 0.1 or more (a rollout's states; measured 0.43-0.70 over updates 5-10): the last three
    late = sum(fit[-3:]) / 3
    assert late > 0.55 and late > fit[0] + 0.3, fit


@pytest.mark.parametrize("extra", [["coplayer.action_weight=0"], []])
def test_without_a_belief_fed_to_the_policy_the_run_equals_plain_mappo(tmp_path, extra):
    Experiment(_cfg(["model.hidden_sizes=[16,16]"]), tmp_path / "plain", quiet=True).run()
    Experiment(_cfg([*BAYES, *extra]), tmp_path / "cp", quiet=True).run()
    plain, cp = metrics_without_timing(tmp_path / "plain"), metrics_without_timing(tmp_path / "cp")
    for p, c in zip(plain, cp, strict=True):
        assert {k: v for k, v in c.items() if not k.startswith("coplayer_")} == p
    got = torch.load(tmp_path / "cp" / "checkpoints" / "ckpt_0000004.pt", weights_only=False)
    want = torch.load(tmp_path / "plain" / "checkpoints" / "ckpt_0000004.pt", weights_only=False)
    for key in ("actor", "critic", "algo", "rng"):
        assert_same(got[key], want[key], key)


def test_resume_mid_episode_with_the_belief_fed_equals_the_uninterrupted_run(tmp_path):
    resume_matches_uninterrupted(tmp_path, "staghunt/default", [*BAYES, "coplayer.feed=policy"])
    got = torch.load(tmp_path / "resumed" / "checkpoints" / "ckpt_0000004.pt", weights_only=False)
    want = torch.load(tmp_path / "full" / "checkpoints" / "ckpt_0000004.pt", weights_only=False)
    assert_same(got["coplayer"], want["coplayer"], "coplayer")


def test_hyper_context_reads_the_goal_belief_and_passes_the_audit(tmp_path):
    import json

    run = tmp_path / "run"
    Experiment(_cfg([*BAYES, "actor=hyper", "hyper.context=[coplayer]", "hyper.hidden=16"], steps=200), run,
               quiet=True).run()
    audit = json.loads((run / "summary.json").read_text())["audit"]
    assert audit["passed"], audit


@pytest.mark.parametrize("overrides, expected", [
    (["coplayer.enabled=true", "coplayer.goal_weight=1"], r"coplayer.goal_weight=1.0 has no effect: it is read by "
                                                         r"coplayer.model=gru"),
    (["coplayer.enabled=true", "coplayer.model=gru", "coplayer.hazard=0.1"], r"coplayer.hazard=0.1 has no effect"),
    (["coplayer.enabled=true", "coplayer.memory=episode", "coplayer.prior_weight=0.9"],
     r"coplayer.prior_weight=0.9 has no effect: it weighs the prior carried across episodes"),
])
def test_bayes_config_mistakes_are_one_line_errors(overrides, expected):
    with pytest.raises(UserError, match=expected):
        config_mod.build_config("staghunt/default", overrides)


def test_an_env_without_public_actions_is_a_one_line_error(tmp_path):
    with pytest.raises(UserError, match=r"coplayer.model=bayes: env 'mpe:simple_spread' does not declare public"):
        Experiment(config_mod.build_config("mpe/simple_spread", [*TINY, "total_env_steps=40", *BAYES]),
                   tmp_path / "run", quiet=True)


def test_the_partner_model_does_not_read_who_is_observing():
    """The env's identity features (the stag hunt's one-hot own id) are not an input: the same view from the other
    seat gives the same goal policies."""
    from hypermappo.envs.staghunt import StagHuntVecEnv
    from hypermappo.models.coplayer_goal import GoalPolicy

    env = StagHuntVecEnv(3, observation="partial", view_radius=4)
    obs = env.reset(seed=0).obs[:, :1]  # [E, 1, D]
    swapped = obs.clone()
    ids = env.spec.identity_features
    swapped[..., ids] = swapped[..., ids].flip(-1)  # "I am hunter 1"
    torch.manual_seed(0)
    model = GoalPolicy(env.spec.obs_dim, 2, 5, 4, 16, 0.05, ids)
    prev = torch.full((3, 2), 5)
    slots = torch.tensor([0])
    assert torch.equal(model.all_coplayers(obs, prev, slots), model.all_coplayers(swapped, prev, slots))
    other = obs.clone()
    other[..., -5] += 1.0  # a change in the window is read
    assert not torch.equal(model.all_coplayers(obs, prev, slots), model.all_coplayers(other, prev, slots))


def test_hindsight_labels_reach_back_only_within_the_window_and_the_episode():
    from hypermappo.algos.coplayer import hindsight_goals as hindsight_within

    event = torch.tensor([-1, -1, -1, 1, -1, 0, -1, -1]).view(8, 1, 1)  # goal 1 at t=3, goal 0 at t=5
    end = torch.tensor([0, 0, 0, 0, 0, 0, 1, 0]).bool().view(8, 1)  # the episode ends after t=6
    assert hindsight_within(event, end, 2).flatten().tolist() == [-1, -1, 1, 1, 0, 0, -1, -1]
    assert hindsight_within(event, end, 0).flatten().tolist() == [1, 1, 1, 1, 0, 0, -1, -1]


def test_eval_of_a_fed_run_plays_the_belief_as_training_evaluated_it(tmp_path, capsys, monkeypatch):
    """`hypermappo eval` rebuilds the goal belief from the checkpoint and updates it on everyone's moves, as the
    run's own evaluation did: the same returns."""
    import json

    from hypermappo.cli import main

    run = tmp_path / "run"
    summary = Experiment(_cfg([*BAYES, "coplayer.feed=policy"]), run, quiet=True).run()
    updates = []
    observe = GoalBelief.observe
    monkeypatch.setattr(GoalBelief, "observe", lambda self, *a: (updates.append(1), observe(self, *a))[1])
    assert main(["eval", str(run), "--episodes", "4", "--quiet"]) == 0
    assert len(updates) == 25, "the belief sees every step's moves (4 envs, one 25-step episode each)"
    out = json.loads(capsys.readouterr().out)
    assert out["return_mean"] == pytest.approx(summary["eval_return_mean"], rel=1e-6)


@pytest.mark.parametrize("name, kwargs", [("staghunt", {"observation": "partial", "view_radius": 4}),
                                          ("staghunt", {"observation": "full", "n_hunters": 3}),
                                          ("coingame", {})])
def test_the_coplayer_view_is_the_coplayers_own_observation(name, kwargs):
    """EnvSpec.coplayer_view re-expresses observer i's observation from co-player j's position: where i's
    observation shows everything j's does (the egocentric presets, full observations, the coin game) it equals j's
    own observation, for every pair and every state of a random walk; rel 0 is the observation itself."""
    from hypermappo.envs.registry import make_env

    env = make_env(name, 64, **kwargs)
    view, n = env.spec.coplayer_view, env.spec.num_agents
    step, g = env.reset(seed=0), torch.Generator().manual_seed(0)
    for _ in range(12):
        for i in range(n):
            mine = step.obs[:, i]
            assert torch.equal(view(mine, torch.zeros(64, dtype=torch.long)), mine)
            for j in range(n):
                if j != i:
                    got = view(mine, torch.full((64,), (j - i) % n))
                    torch.testing.assert_close(got, step.obs[:, j], msg=f"{name}: {i} seeing {j}")
        step = env.step(torch.randint(0, 5, (64, n), generator=g))


def test_a_partial_window_view_keeps_what_the_observer_cannot_see_empty():
    """view_radius 1 on a 5x5 grid: a partner out of sight leaves the observation as it is; one in sight is
    re-centred (the observer appears at the mirrored offset in the partner's hunter channel)."""
    from hypermappo.envs.staghunt import StagHuntVecEnv

    env = StagHuntVecEnv(1, observation="partial", view_radius=1)
    env.reset(seed=0)
    view, lead, w = env.spec.coplayer_view, 2 + 2 + 1, 3
    env.hunters[0] = torch.tensor([[0, 0], [4, 4]])
    obs = env.observe()[0][0, 0]
    assert torch.equal(view(obs, torch.tensor(1)), obs)  # out of sight
    env.hunters[0] = torch.tensor([[2, 2], [2, 3]])  # partner one column to the right
    obs = env.observe()[0]
    got = view(obs[0, 0], torch.tensor(1))
    hunters = got[lead:lead + w * w].view(w, w)
    assert hunters[1, 0] == 1 and hunters.sum() == 1  # the observer, one column to the partner's left
    torch.testing.assert_close(got[:2], obs[0, 1, :2])  # the partner's own position


def test_with_the_coplayer_view_one_goal_policy_serves_every_seat():
    """The goal policy of the partner computed from the learner's observation equals the goal policy of the learner
    computed from its own observation, when both look at the same world from the same position: the learner's
    own transitions teach the model of its partner (HOP's self as a model of others)."""
    from hypermappo.envs.coingame import CoinGameVecEnv
    from hypermappo.models.coplayer_goal import GoalPolicy

    env = CoinGameVecEnv(8)
    obs = env.reset(seed=1).obs  # [E, 2, D]
    torch.manual_seed(0)
    model = GoalPolicy(env.spec.obs_dim, 2, 5, 3, 16, 0.05, env.spec.identity_features, env.spec.coplayer_view)
    prev = torch.randint(0, 6, (8, 2), generator=torch.Generator().manual_seed(2))
    seen_by_0 = model.all_coplayers(obs[:, :1], prev, torch.tensor([0]))[:, 0, 1]  # player 1 seen by player 0
    # training (log_probs, from the replay) reads the same view as acting (all_coplayers)
    torch.testing.assert_close(model.log_probs(obs[:, 0], torch.ones(8, dtype=torch.long), prev[:, 1]), seen_by_0)
    # the co-player embedding differs (relative slot 1 vs 0); with it zeroed the two must agree
    with torch.no_grad():
        model.target_in.weight.zero_()
    seen_by_0 = model.all_coplayers(obs[:, :1], prev, torch.tensor([0]))[:, 0, 1]
    as_self = model.log_probs(obs[:, 1], torch.zeros(8, dtype=torch.long), prev[:, 1])
    torch.testing.assert_close(seen_by_0, as_self)
    blind = GoalPolicy(env.spec.obs_dim, 2, 5, 3, 16, 0.05, env.spec.identity_features, None)
    blind.load_state_dict(model.state_dict())
    assert not torch.allclose(blind.all_coplayers(obs[:, :1], prev, torch.tensor([0]))[:, 0, 1], as_self)


def test_hindsight_labels_weigh_hindsight_weight(tmp_path):
    """Self-play: every goal label is a hindsight guess. With coplayer.hindsight_weight=0 they teach the model
    nothing (its weights stay at their init); with the default they do (the check is not vacuous)."""
    after = []
    for weight in ("0", "0.25"):
        extra = [*BAYES, f"coplayer.hindsight_weight={weight}", "diagnostics.audit_updates=0"]
        exp = Experiment(_cfg(extra, steps=320), tmp_path / weight, quiet=True)
        before = {k: v.clone() for k, v in exp.groups[0].learner.coplayer.model.state_dict().items()}
        exp.run()
        cp = exp.groups[0].learner.coplayer
        assert cp.replay_fill > 0 and not cp.replay["known"][:cp.replay_fill].any(), "hindsight labels only"
        after.append(all(torch.equal(before[k], v) for k, v in cp.model.state_dict().items()))
    assert after == [True, False]


def test_the_online_correction_is_one_normalised_logistic_regression_step_per_observed_move():
    """With coplayer.online_lr = lr, each observed move of co-player j adds lr * (onehot(a) - p) h / (|h|^2 + 1) to
    its correction W [A, H] (h: the goal network's last hidden layer, p: the predicted move distribution), which
    then shifts every goal's logits by W h; W is reset with the partner, and at each episode's end with memory off."""
    from hypermappo.models.coplayer_goal import GoalPolicy

    torch.manual_seed(0)
    model = GoalPolicy(obs_dim=6, n_slots=2, n_actions=3, n_goals=3, hidden=8, floor=0.0)
    lr = 0.5
    b = GoalBelief(model, torch.tensor([0]), 2, alpha=0.5, hazard=0.0, persistent=True, online_lr=lr)
    b.start(2, "cpu")
    assert b.W.shape == (2, 1, 1, 3, 8), "one correction per (env, learner agent, co-player): the own slot has none"
    obs = torch.randn(2, 1, 6)

    def hidden_of_coplayer():  # the goal network's last hidden layer for co-player slot 1 seen by learner slot 0
        seen = []
        plain = model.all_coplayers(obs, b.prev, b.slots, lambda lp, h: seen.append(h) or lp)
        return plain, seen[0][:, 0, 0]  # [E, H]

    with torch.no_grad():
        _, log_pred = b.begin(obs)
        plain, h = hidden_of_coplayer()
    # b.log_pi holds the co-players' seats only ([E, K, N - 1, G, A]): learner 0's seat 0 is env slot 1
    assert torch.allclose(b.log_pi[:, :, 0, :-1], plain[:, :, 1, :-1]), "W = 0: the policies as the network gives them"
    p = log_pred[:, 0, 1].exp()  # [E, A]
    b.observe(torch.tensor([[0, 2], [0, 1]]), torch.ones(2, 2, dtype=torch.bool), torch.zeros(2, dtype=torch.bool))
    for e, a in ((0, 2), (1, 1)):
        want = lr * (F.one_hot(torch.tensor(a), 3) - p[e]).unsqueeze(-1) * h[e] / (h[e].square().sum() + 1.0)
        torch.testing.assert_close(b.W[e, 0, 0], want)
    with torch.no_grad():
        b.begin(obs)
        plain, h = hidden_of_coplayer()
    shift = torch.einsum("eh,eah->ea", h, b.W[:, 0, 0])  # every goal's logits move by W h
    torch.testing.assert_close(b.log_pi[:, 0, 0, :-1], (plain[:, 0, 1, :-1] + shift.unsqueeze(1)).log_softmax(-1))
    b.reset(torch.tensor([True, False]))
    assert b.W[0].abs().sum() == 0 and b.W[1].abs().sum() > 0, "a new partner starts uncorrected; the other env keeps W"
    off = GoalBelief(model, torch.tensor([0]), 2, alpha=0.0, hazard=0.0, persistent=False, online_lr=lr)
    off.start(1, "cpu")
    with torch.no_grad():
        off.begin(obs[:1])
    off.observe(torch.tensor([[0, 2]]), torch.ones(1, 2, dtype=torch.bool), torch.tensor([True]))
    assert off.W.abs().sum() == 0, "memory off: the correction does not cross the episode's end"


@pytest.mark.parametrize("corrected", [True, False])
def test_the_goal_evidence_is_the_corrected_or_the_models_own_policies_while_predictions_stay_corrected(corrected):
    """coplayer.goal_evidence: with `corrected` the Bayes update multiplies the belief by the corrected goal
    policies' probability of the observed move; with `model`, by the goal model's own (the correction W h left out),
    while the predicted moves are the corrected policies' in both."""
    from hypermappo.models.coplayer_goal import GoalPolicy

    torch.manual_seed(0)
    model = GoalPolicy(obs_dim=6, n_slots=2, n_actions=3, n_goals=3, hidden=8, floor=0.0)
    b = GoalBelief(model, torch.tensor([0]), 2, alpha=0.5, hazard=0.0, persistent=True, online_lr=2.0,
                   corrected_evidence=corrected)
    b.start(1, "cpu")
    obs = torch.randn(1, 1, 6)
    moves = torch.tensor([[0, 2]])
    with torch.no_grad():
        b.begin(obs)
    b.observe(moves, torch.ones(1, 2, dtype=torch.bool), torch.zeros(1, dtype=torch.bool))  # W is no longer 0
    assert b.W.abs().sum() > 0
    before = b.log_b[0, 0, 1].clone()
    with torch.no_grad():
        _, log_pred = b.begin(obs)
        plain = model.all_coplayers(obs, b.prev, b.slots)[0, 0, 1]  # [G, A]: the model's own, uncorrected
    corrected_pi = b.log_pi[0, 0, 0]  # [G, A], "other" last
    assert not torch.allclose(corrected_pi[:-1], plain[:-1])
    torch.testing.assert_close(log_pred[0, 0, 1], torch.logsumexp(before.unsqueeze(-1) + corrected_pi, 0))
    b.observe(moves, torch.ones(1, 2, dtype=torch.bool), torch.zeros(1, dtype=torch.bool))
    evidence = corrected_pi if corrected else torch.cat([plain[:-1], corrected_pi[-1:]])  # "other": the counts
    torch.testing.assert_close(b.log_b[0, 0, 1], bayes_update(before, evidence[:, 2]))


def test_a_non_finite_coplayer_step_is_reported_with_its_step(tmp_path):
    """The co-player model's Adam steps are checked once per update: a non-finite loss raises NonFiniteError naming
    the first bad step (a NaN planted in the network makes it the first)."""
    from hypermappo.errors import NonFiniteError

    exp = Experiment(_cfg([*BAYES, "diagnostics.audit_updates=0"], steps=160), tmp_path, quiet=True)
    exp._start_episodes()
    exp.collect()
    cp = exp.groups[0].learner.coplayer
    cp.update()  # finite: no error
    with torch.no_grad():
        cp.model.body[-1].bias.fill_(float("nan"))
    exp.collect()
    with pytest.raises(NonFiniteError, match="co-player step 1$"):
        cp.update()


# --------------------------------------------------------------------------- the goal read-out (goal_readout=state)


def test_the_goal_pursued_now_is_the_belief_times_the_state_read_out_by_hand():
    """current_goal: b = (0.7, 0.2, 0.1) over (goal 1, goal 2, other), q = (0.1, 0.6, 0.3): "other" keeps 0.1, the
    named goals share 0.9 as 0.7 x 0.1 : 0.2 x 0.6 = 0.07 : 0.12."""
    from hypermappo.models.coplayer_goal import current_goal

    got = current_goal(torch.tensor([0.7, 0.2, 0.1]).log(), torch.tensor([0.1, 0.6, 0.3]).log()).exp()
    torch.testing.assert_close(got, torch.tensor([0.9 * 0.07 / 0.19, 0.9 * 0.12 / 0.19, 0.1]))
    # a partner whose moves no goal explains stays "other" whatever the state's read-out says
    got = current_goal(torch.tensor([0.02, 0.02, 0.96]).log(), torch.tensor([0.9, 0.09, 0.01]).log()).exp()
    assert got.argmax() == 2 and torch.isclose(got.sum(), torch.tensor(1.0))


@pytest.mark.parametrize("online_lr", [0.0, 2.0])
@pytest.mark.parametrize("compiled", [False, True])
def test_with_the_goal_read_out_the_goal_predictions_are_the_belief_times_q_and_the_moves_are_unchanged(
        online_lr, compiled):
    """A belief over a model with the goal read-out: at the co-players' slots its goal predictions (what is scored
    and fed to the policy) are current_goal(b, q(hidden)), the learner's own slot keeps b; the predicted moves and
    the Bayes update are those of the same model without the read-out (eager and as the compiled learner's graph,
    traced; with and without the online correction)."""
    from hypermappo.models.coplayer_goal import GoalPolicy, current_goal

    torch.manual_seed(0)
    with_q = GoalPolicy(obs_dim=6, n_slots=3, n_actions=4, n_goals=3, hidden=8, floor=0.05, goal_readout=True)
    without = GoalPolicy(obs_dim=6, n_slots=3, n_actions=4, n_goals=3, hidden=8, floor=0.05)
    without.load_state_dict({k: v for k, v in with_q.state_dict().items() if not k.startswith("goal_out")})
    beliefs = []
    for model in (with_q, without):
        b = GoalBelief(model, torch.tensor([0, 2]), 3, alpha=0.5, hazard=0.1, persistent=True, online_lr=online_lr)
        if compiled:
            b.graph = torch.compile(b.predict_from_views, backend="eager", dynamic=False)
        b.start(2, "cpu")
        beliefs.append(b)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        obs = torch.randn(2, 2, 6, generator=g)
        moves = torch.randint(0, 4, (2, 3), generator=g)
        outs, prev_seen = [], beliefs[0].prev.clone()
        for b in beliefs:
            with torch.no_grad():
                features, log_pred = b.begin(obs)
            outs.append((features, log_pred, b.goal_probs.clone(), b.log_b.clone()))
            b.observe(moves, torch.ones(2, 3, dtype=torch.bool), torch.zeros(2, dtype=torch.bool))
        (f1, p1, g1, b1), (f0, p0, g0, b0) = outs
        torch.testing.assert_close(p1, p0, rtol=0, atol=0)  # the same moves predicted
        torch.testing.assert_close(b1, b0, rtol=0, atol=0)  # the same posterior
        torch.testing.assert_close(g0, b0.exp())  # without the read-out: the posterior
        with torch.no_grad():
            seen, target, prev = with_q.coplayer_inputs(obs, prev_seen, beliefs[0].slots)
            _, hidden = with_q.net(seen, target, prev)
            log_q = with_q.goal_log_q(hidden)  # [E, K, N - 1, G]
        seat = coplayer_seats(torch.tensor([0, 2]), 3)
        k = torch.arange(2).unsqueeze(-1)
        torch.testing.assert_close(g1[:, k, seat], current_goal(b1[:, k, seat], log_q).exp())
        torch.testing.assert_close(g1[:, 0, 0], b1[:, 0, 0].exp())  # the learners' own slots: the posterior
        torch.testing.assert_close(g1[:, 1, 2], b1[:, 1, 2].exp())
        assert not torch.allclose(g1, g0)
        G = 3
        assert torch.equal(f1[..., 3 * G:], f0[..., 3 * G:])  # the fed moves: the same
        torch.testing.assert_close(f1[..., :3 * G].unflatten(-1, (3, G))[:, k, seat], g1[:, k, seat])


def test_the_goal_read_out_is_trained_on_the_goal_labels(tmp_path):
    """coplayer.goal_readout=state: each Adam step's loss adds the read-out's cross-entropy on the goal labels with
    the samples' weights (checked by hand on a replay batch), the read-out's weights move, and its fit is logged."""
    extra = [*BAYES, "coplayer.goal_readout=state", "diagnostics.audit_updates=0"]
    exp = Experiment(_cfg(extra, steps=320), tmp_path / "r", quiet=True)
    cp = exp.groups[0].learner.coplayer
    before = cp.model.goal_out.weight.clone()
    exp.run()
    assert not torch.equal(before, cp.model.goal_out.weight)
    rows = metrics_without_timing(tmp_path / "r")
    assert 0 <= float(rows[-1]["coplayer_goal_fit_acc"]) <= 1 and float(rows[-1]["coplayer_goal_fit_loss"]) > 0
    batch = {k: v[:64] for k, v in cp.replay.items()}
    normed = cp.model.normed_inputs(batch["obs"].float(), batch["target"])
    with torch.no_grad():
        log_pi, hidden = cp.model.log_probs_and_hidden(None, batch["target"], batch["prev"], normed)
        nll = -log_pi[torch.arange(64), batch["goal"], batch["action"]]
        goal_nll = -cp.model.goal_log_q(hidden)[torch.arange(64), batch["goal"]]
        w = torch.where(batch["known"], 1.0, cp.c.hindsight_weight)
        torch.testing.assert_close(cp.step_loss(batch, normed), ((w * nll).sum() + (w * goal_nll).sum()) / w.sum())


def test_a_partner_reset_by_indices_equals_the_reset_by_masks():
    """`GoalBelief.reset` where reading the device is free (a CPU: the envs that changed partner, by index; nothing at
    a step where none did) leaves the same belief, prior, counts, previous moves, episode index and online
    correction as the sync-free reset by masks (CUDA's), and leaves a state_dict taken before it as it was."""
    from hypermappo.models.coplayer_goal import GoalPolicy

    torch.manual_seed(0)
    model = GoalPolicy(obs_dim=6, n_slots=2, n_actions=3, n_goals=3, hidden=8, floor=0.05)
    beliefs = []
    for read_free in (False, True):
        torch.manual_seed(1)
        b = GoalBelief(model, torch.tensor([0]), 2, alpha=0.5, hazard=0.1, persistent=True, online_lr=0.5)
        b.start(4, "cpu")
        b.read_free = read_free
        for t in range(3):  # some history to forget
            with torch.no_grad():
                b.begin(torch.randn(4, 1, 6))
            b.observe(torch.randint(0, 3, (4, 2)), torch.ones(4, 2, dtype=torch.bool), torch.tensor([t == 1] * 4))
        saved = {k: v.clone() for k, v in b.state_dict().items()}
        held = b.state_dict()
        b.reset(torch.zeros(4, dtype=torch.bool))
        b.reset(torch.tensor([True, False, False, True]))
        for k, v in saved.items():
            if k != "W":  # (a saved W is a copy)
                assert torch.equal(held[k], v), f"{k}: the reset wrote into a state_dict taken before it"
        beliefs.append(b.state_dict())
    masks, indices = beliefs
    assert masks.keys() == indices.keys()
    for k in masks:
        assert torch.equal(masks[k], indices[k]), k
    assert (masks["W"][[0, 3]] == 0).all() and (masks["W"][[1, 2]] != 0).any()
    assert (masks["episode_index"] == torch.tensor([0, 1, 1, 0])).all()


@pytest.mark.parametrize("overrides, want", [
    ([], 64),  # bayes: the goal network's auto width
    (["coplayer.model=gru"], 128),
    (["coplayer.model=subgoal"], 128),
    (["coplayer.hidden=128"], 128),  # an explicit width is kept
    (["coplayer.model=gru", "coplayer.hidden=32"], 32),
])
def test_coplayer_width_defaults_by_model(tmp_path, overrides, want):
    """`coplayer.hidden=0` (auto) is 64 for the goal network of `bayes`, 128 for the recurrent models; the resolved
    width is what the model is built with and what the run's config.yaml records (a resume then builds the same)."""
    from hypermappo.algos.coplayer import build_model
    from hypermappo.algos.coplayer_bayes import build_goal_policy
    from hypermappo.envs.registry import make_env

    cfg = config_mod.build_config("staghunt/default", ["coplayer.enabled=true", *overrides])
    assert cfg.coplayer.hidden == want
    config_mod.save_yaml(cfg, tmp_path / "c.yaml")
    assert config_mod.load_yaml(tmp_path / "c.yaml")["coplayer"]["hidden"] == want
    if cfg.coplayer.model != "subgoal":  # a config built without validate() builds the same width
        explicit = any(o.startswith("coplayer.hidden=") for o in overrides)
        unresolved = dataclasses.replace(cfg, coplayer=dataclasses.replace(cfg.coplayer, hidden=want if explicit else 0))
        built = build_goal_policy if cfg.coplayer.model == "bayes" else build_model
        net = built(unresolved, make_env(cfg.env, 2, **cfg.env_kwargs).spec)
        assert {p.shape[0] for p in net.parameters() if p.dim() == 2} >= {want}
    assert config_mod.build_config("staghunt/default", []).coplayer.hidden == 0  # off: nothing resolved, not "set"
