"""The Bayesian co-player model's member heads (`coplayer.member_heads`): one read-out of the goal policies per
member of the training populations, and the belief over (read-out, goal) hypotheses that marginalises to goals."""

from __future__ import annotations

import math
import shutil

import pytest
import torch
from test_coplayer_bayes import BAYES, _cfg
from test_resume import assert_same, metrics_without_timing

from hypermappo.algos.coplayer_bayes import GoalBelief
from hypermappo.errors import UserError
from hypermappo.experiment import Experiment
from hypermappo.models.coplayer_goal import GoalPolicy

# two hare hunters that walk to the same hare by other moves (rows first, columns first): one goal, two ways
TWO_WAYS = ("groups=[{name: me, agents: [0]}, {name: other, agents: [1], kind: population, sample: episode, "
            "members: [{policy: staghunt_hare, params: {path: rows}}, {policy: staghunt_hare, params: {path: cols}}]}]")


class PlantedMembers:
    """A goal model with member heads whose log pi [E, K, N - 1, (1 + M) * G, A] is set by the test."""

    def __init__(self, log_pi: torch.Tensor, n_goals: int, n_members: int, n_slots: int):
        self.log_pi, self.n_goals, self.n_members, self.n_slots = log_pi, n_goals, n_members, n_slots
        self.n_actions = log_pi.shape[-1]

    def coplayer_log_probs(self, obs, prev, slots):
        return self.log_pi


def test_the_belief_over_read_outs_and_goals_equals_a_hand_computed_bayes_update_and_sums_to_goals():
    """G = 3 goals (2 named + other), M = 1 member: hypotheses (free, g0), (free, g1), (member, g0), (member, g1),
    the member as a whole (its read-out's "other" row), other (the counted moves). The fresh prior spreads each
    named goal's 1/3 evenly over the read-outs and "other"'s over the member as a whole and the counted moves
    (uniform over the six); the member-free read-out's "other" row is never a hypothesis; the goal posterior sums a
    goal's hypotheses, the member as a whole split over the named goals as the member's own goal hypotheses are."""
    rows = torch.tensor([[0.6, 0.4], [0.3, 0.7], [0.5, 0.5],  # free: g0, g1, its "other" (not a hypothesis)
                         [0.9, 0.1], [0.1, 0.9], [0.8, 0.2]])  # member 1: g0, g1, the member as a whole
    log_pi = rows.log().view(1, 1, 1, 6, 2)  # E = 1, K = 1, one co-player
    b = GoalBelief(PlantedMembers(log_pi, 3, 1, 2), torch.tensor([0]), 2, alpha=0.5, hazard=0.0, persistent=True)
    b.start(1, "cpu")
    assert b.H == 6
    fresh = [1 / 6] * 6
    want = list(fresh)
    assert b.log_b[0, 0, 1].exp().tolist() == pytest.approx(want, abs=1e-6)
    counts = [0, 0]
    for a in (0, 0, 1):
        habit = [(c + 1) / (sum(counts) + 2) for c in counts]
        like = [0.6, 0.3, 0.9, 0.1, 0.8, habit[0]] if a == 0 else [0.4, 0.7, 0.1, 0.9, 0.2, habit[1]]
        feats, log_pred = b.begin(torch.zeros(1, 1, 4))
        p0 = sum(w * p for w, p in zip(want, [0.6, 0.3, 0.9, 0.1, 0.8, habit[0]]))
        assert math.isclose(float(log_pred[0, 0, 1, 0].exp()), p0, rel_tol=1e-6)
        split = [want[2] / (want[2] + want[3]), want[3] / (want[2] + want[3])]
        goals = [want[0] + want[2] + want[4] * split[0], want[1] + want[3] + want[4] * split[1], want[5]]
        assert feats[0, 0, 3:6].tolist() == pytest.approx(goals, abs=1e-6), "the policy reads the goal posterior"
        b.observe(torch.tensor([[0, a]]), torch.ones(1, 2, dtype=torch.bool), torch.zeros(1, dtype=torch.bool))
        counts[a] += 1
        post = [w * p for w, p in zip(want, like)]
        want = [p / sum(post) for p in post]
        assert b.log_b[0, 0, 1].exp().tolist() == pytest.approx(want, abs=1e-6)
        split = [want[2] / (want[2] + want[3]), want[3] / (want[2] + want[3])]
        goals = [want[0] + want[2] + want[4] * split[0], want[1] + want[3] + want[4] * split[1], want[5]]
        assert b.goal_log_b()[0, 0, 1].exp().tolist() == pytest.approx(goals, abs=1e-6)
    # a new partner: back to the fresh prior
    b.reset(torch.tensor([True]))
    assert b.log_b[0, 0, 1].exp().tolist() == pytest.approx(fresh, abs=1e-6)


def test_member_read_outs_start_as_the_member_free_one():
    torch.manual_seed(0)
    model = GoalPolicy(6, 2, 5, 3, 16, 0.05, n_members=2)
    out = model.log_probs(torch.randn(7, 6), torch.ones(7, dtype=torch.long), torch.zeros(7, dtype=torch.long))
    assert out.shape == (7, 9, 5)
    assert torch.equal(out[:, 3:6], out[:, :3]) and torch.equal(out[:, 6:9], out[:, :3])


def _two_members_trained(tmp_path, goal: int):
    """A Bayesian learner with member heads whose replay holds only planted samples of two members that make
    opposite moves (member 1 moves up where a feature is positive, down otherwise; member 2 the other way round),
    every sample with goal `goal` (-1: not known, like a frozen learner's move far from any goal event), trained by
    the model's own update. -> (the co-player model, the feature, a generator, samples(n, member))."""
    mine = ("coplayer.hidden=", "coplayer.steps=", "coplayer.replay_size=")
    exp = Experiment(_cfg([*(o for o in BAYES if not o.startswith(mine)), TWO_WAYS, "coplayer.member_heads=true",
                           "coplayer.view=own", "coplayer.hidden=32", "coplayer.steps=50", "coplayer.lr=0.01",
                           "coplayer.replay_size=4096",
                           "coplayer.symmetries=off"],  # the planted members' ways are not the game's: no reflections
                          steps=40), tmp_path / "run", quiet=True)
    exp.run()
    cp = exp.groups[0].learner.coplayer
    feature = next(i for i in range(cp.D) if i not in set(exp.env.spec.identity_features or []))
    gen = torch.Generator().manual_seed(0)

    def samples(n: int, member: int) -> dict:
        obs = torch.randn(n, cp.D, generator=gen)
        up = obs[:, feature] > 0
        action = torch.where(up == (member == 1), 1, 2)
        return {"obs": obs, "target": torch.ones(n, dtype=torch.long), "prev": torch.randint(cp.A + 1, (n,), generator=gen),
                "action": action, "goal": torch.full((n,), goal), "known": torch.full((n,), goal >= 0),
                "member": torch.full((n,), member)}

    cp.replay_fill = cp.replay_pos = 0  # only the planted samples
    for member in (1, 2):
        cp._push(samples(2048, member))
    cp.active_all.zero_()  # the rollout adds no pairs: the update trains on the planted samples only
    for _ in range(6):
        cp.update()
    return cp, feature, gen, samples


def _belief_shown_member_2(cp, feature, gen) -> tuple[torch.Tensor, list[float]]:
    """The belief of learner slot 0 about slot 1, shown member 2's moves for 8 steps in 64 envs -> (its posterior
    mass per member, 0 being the member-free read-out: [3], its action accuracy per step)."""
    b = GoalBelief(cp.model, torch.tensor([0]), 2, alpha=0.5, hazard=0.0, persistent=True)
    b.start(64, "cpu")
    obs = torch.zeros(64, 1, cp.D)
    hits = []
    with torch.no_grad():
        for _ in range(8):
            x = torch.randn(64, cp.D, generator=gen)
            obs[:, 0] = x
            _, log_pred = b.begin(obs)
            move = torch.where(x[:, feature] > 0, 2, 1)  # member 2
            hits.append((log_pred[:, 0, 1].argmax(-1) == move).float().mean().item())
            b.observe(torch.stack([torch.zeros(64, dtype=torch.long), move], 1), torch.ones(64, 2, dtype=torch.bool),
                      torch.zeros(64, dtype=torch.bool))
    p = b.log_b[:, 0, 1].exp()  # [E, H]: 3 read-outs x named goals, members 1 and 2 as a whole, counted moves
    named = 3 * (cp.G - 1)
    mass = p[:, :named].unflatten(-1, (3, cp.G - 1)).sum(-1) + torch.cat([torch.zeros(64, 1), p[:, named:-1]], -1)
    return mass.mean(0), hits


def test_member_heads_learn_each_members_own_way_and_the_belief_names_the_member(tmp_path):
    """Two members pursue the same goal by opposite moves. Each member's read-out predicts its member's moves while
    the member-free read-out, which sees both, cannot; and the belief, shown member 2's moves, puts its mass on
    member 2 and predicts its next moves."""
    cp, feature, gen, samples = _two_members_trained(tmp_path, goal=0)
    test = {k: torch.cat([a, b]) for (k, a), b in zip(samples(200, 1).items(), samples(200, 2).values())}
    with torch.no_grad():
        _, free, member, _, _, _ = cp._losses(test)
    free_hit, member_hit = free.float().mean().item(), member.float().mean().item()
    assert member_hit > 0.9 and free_hit < 0.65, (member_hit, free_hit)
    with torch.no_grad():  # each member's own read-out on the goal (row member * G + 0) predicts its moves
        log_pi = cp.model.log_probs(test["obs"], test["target"], test["prev"])  # [400, 3 * G, A]
    own_goal = log_pi[torch.arange(400), test["member"] * cp.G].argmax(-1) == test["action"]
    assert own_goal.float().mean() > 0.9, own_goal.float().mean()
    mass, hits = _belief_shown_member_2(cp, feature, gen)
    assert mass[2] > 0.9, mass
    assert sum(hits[-3:]) / 3 > 0.9 and hits[-1] > hits[0], hits


def test_a_frozen_member_is_learnt_as_a_whole_and_recognised(tmp_path):
    """A frozen learner in the training population writes no goal, and most of its moves are far from any goal
    event (no hindsight label): its every move trains its read-out's "other" row (the member as a whole), those of
    no known goal nothing else; and the belief, shown member 2's moves, names member 2 and predicts its moves as it
    would a training partner's (the in-distribution case). A member whose goals a rule gives has no whole row to
    learn (its goal rows are it)."""
    cp, feature, gen, samples = _two_members_trained(tmp_path, goal=-1)
    test = {k: torch.cat([a, b]) for (k, a), b in zip(samples(200, 1).items(), samples(200, 2).values())}
    with torch.no_grad():
        nll, free, member, _, _, whole = cp._losses(test)
        loss = cp.step_loss(test, cp.model.normed_inputs(test["obs"], test["target"]))
        log_pi = cp.model.log_probs(test["obs"], test["target"], test["prev"])  # [400, 3 * G, A]
    own_other = -log_pi[torch.arange(400), test["member"] * cp.G + cp.OTHER, test["action"]]
    assert not free.any() and (nll == 0).all(), "no goal is known: nothing for the goal policies to learn"
    assert torch.allclose(whole, own_other) and torch.isclose(loss, own_other.mean()), \
        "the loss is the members' whole rows alone"
    assert member.float().mean().item() > 0.9, member.float().mean()
    mass, hits = _belief_shown_member_2(cp, feature, gen)
    assert mass[2] > 0.9, mass
    assert sum(hits[-3:]) / 3 > 0.9, hits
    ruled = {**test, "goal": torch.zeros_like(test["goal"]), "known": torch.ones_like(test["known"])}
    with torch.no_grad():
        assert (cp._losses(ruled)[-1] == 0).all(), "a member whose rule gives its goal: no whole row term"


def test_member_heads_resume_exactly(tmp_path):
    extra = [*BAYES, TWO_WAYS, "coplayer.member_heads=true", "checkpoint_interval=2"]
    cfg = _cfg(extra, steps=160)
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    exp = Experiment(cfg, full, quiet=True)
    exp.run()
    member = exp.groups[0].learner.coplayer.member  # [T, E, N]: the population's members are read-outs 1 and 2
    assert (member[:, :, 0] == 0).all(), "the learner's own slot is no member"
    assert ((member[:, :, 1] >= 1) & (member[:, :, 1] <= 2)).all() and member[-1, :, 1].tolist() == \
        (exp.groups[1].partner_id + 1).tolist()
    shutil.copytree(full, resumed)
    (resumed / "checkpoints" / "ckpt_0000004.pt").unlink()
    (resumed / "summary.json").unlink()
    Experiment(cfg, resumed, resume=True, quiet=True).run()
    assert metrics_without_timing(resumed) == metrics_without_timing(full)
    got = torch.load(resumed / "checkpoints" / "ckpt_0000004.pt", weights_only=False)
    want = torch.load(full / "checkpoints" / "ckpt_0000004.pt", weights_only=False)
    assert "member" in want["groups"]["me"]["learner"]["coplayer"]["replay"]
    assert_same(got["groups"], want["groups"], "groups")


def test_member_heads_without_a_population_is_a_one_line_error(tmp_path):
    with pytest.raises(UserError, match=r"coplayer.member_heads=true: the run has no population group"):
        Experiment(_cfg([*BAYES, "coplayer.member_heads=true"]), tmp_path / "run", quiet=True)


def test_every_move_of_a_member_is_a_sample_whatever_its_goal(tmp_path):
    """The rollout's pairs: with member heads a population member's moves enter the replay even where no goal is
    known (label -1, as a frozen learner's far from any goal event), marked -1; a move of no known goal that no
    member made does not."""
    cfg = _cfg([*BAYES, TWO_WAYS, "coplayer.member_heads=true"], steps=40)
    cp = Experiment(cfg, tmp_path / "run", quiet=True).groups[0].learner.coplayer
    cp.active_all.fill_(True)
    cp.member[:, :, 1] = 2  # the partner's slot: the second member played every step
    cp.scripted_goal.fill_(-2)  # no rule wrote a goal (GOAL_NOT_GIVEN) ...
    cp.goal_event.fill_(-1)  # ... and no goal was completed: nothing is labelled
    pairs = cp._pairs(cp.labels())
    n = cp.T * cp.E  # observer slot 0 about slot 1, every step of every env
    assert pairs["target"].numel() == n and (pairs["goal"] == -1).all() and (pairs["member"] == 2).all()
    cp.member.zero_()  # played by no population member: an unknown goal is no sample
    assert cp._pairs(cp.labels())["target"].numel() == 0


def test_a_belief_saved_with_other_hypotheses_is_a_one_line_error():
    rows = torch.full((1, 1, 1, 6, 2), 0.5).log()
    b = GoalBelief(PlantedMembers(rows, 3, 1, 2), torch.tensor([0]), 2, alpha=0.5, hazard=0.0, persistent=True)
    b.start(1, "cpu")
    old = {**b.state_dict(), "log_b": b.log_b[..., :5], "prior": b.prior[..., :5]}  # (1 + M) * (G - 1) + 1 = 5
    with pytest.raises(UserError, match=r"holds 5 hypotheses per co-player, this model 6"):
        b.load_state_dict(old)


@pytest.mark.parametrize("n_members", [0, 3])
def test_training_reads_its_rows_as_the_whole_output_gives_them(n_members):
    """`rows_log_probs_and_hidden` (training computes only the read-out rows a sample trains) equals gathering
    those rows from the whole output of `log_probs_and_hidden`, member offsets and the floor included, with
    gradients that equal too."""
    torch.manual_seed(0)
    G, A, B = 4, 5, 64
    model = GoalPolicy(12, 2, A, G, 16, 0.05, n_members=n_members)
    if n_members:
        torch.nn.init.normal_(model.member_out.weight, std=0.5)  # zero at the start: make the offsets matter
    obs, target = torch.randn(B, 12), torch.ones(B, dtype=torch.long)
    prev = torch.randint(0, A + 1, (B,))
    rows = torch.randint(0, (1 + n_members) * G, (B, 3))
    normed = model.normed_inputs(obs, target)
    part, hidden = model.rows_log_probs_and_hidden(normed, target, prev, rows)
    whole, hidden_whole = model.log_probs_and_hidden(obs, target, prev)
    want = whole.gather(1, rows.unsqueeze(-1).expand(-1, -1, A))
    assert torch.equal(hidden, hidden_whole)
    assert torch.allclose(part, want, atol=1e-6), (part - want).abs().max()
    grads = [torch.autograd.grad(x.exp().mul(torch.arange(A)).sum(), list(model.parameters()), allow_unused=True)
             for x in (part, want)]
    for a, b in zip(*grads):
        assert (a is None) == (b is None) and (a is None or torch.allclose(a, b, atol=1e-5))
