"""Population groups (policies/population.py): config rules, one member per env selected per env, resampling per
episode or fixed per env from the run seed, frozen members, evaluation, checkpoint / resume."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from test_groups import TINY, rows
from test_resume import assert_same

from hypermappo import config as config_mod
from hypermappo.errors import UserError
from hypermappo.experiment import Experiment
from hypermappo.policies import population as population_mod
from hypermappo.policies.groups import Phase, group_specs, load_frozen_actor, sub_spec

FIXED3 = "[{policy: fixed, params: {action: 1}}, {policy: fixed, params: {action: 2}}, {policy: fixed, params: {action: 3}}]"


def pop_groups(members: str = FIXED3, extra: str = "") -> str:
    return (f"groups=[{{name: learner, agents: [0]}}, {{name: partner, agents: [1], kind: population, "
            f"members: {members}{extra}}}]")


def _experiment(tmp_path: Path, name: str, groups: str, extra=()) -> Experiment:
    keys = {o.split("=")[0] for o in extra}
    cfg = config_mod.build_config("staghunt/default", [*(o for o in TINY if o.split("=")[0] not in keys), groups,
                                                       *extra])
    return Experiment(cfg, tmp_path / name, quiet=True)


@pytest.mark.parametrize("groups, expected", [
    (pop_groups("[]"), "groups[1] (partner).members: a population group needs a non-empty list"),
    (pop_groups("{policy: random}"), "groups[1] (partner).members: a population group needs a non-empty list"),
    (pop_groups(extra=", sample: often"), "groups[1] (partner).sample: 'often' is not one of ['episode', 'fixed']"),
    (pop_groups(extra=", draw: team"), "groups[1] (partner).draw: 'team' is not one of ['env', 'slot']"),
    (pop_groups(extra=", episodes_per_draw: 0"), "groups[1] (partner).episodes_per_draw: 0 is invalid; expected an "
                                                 "integer >= 1"),
    (pop_groups(extra=", episodes_per_draw: 2.5"), "groups[1] (partner).episodes_per_draw: 2.5 is invalid"),
    (pop_groups(extra=", sample: fixed, episodes_per_draw: 3"), "episodes_per_draw: 3 needs sample: episode"),
    ("groups=[{name: a, agents: [0], episodes_per_draw: 2}]", "groups[0] (a).episodes_per_draw: only a population"),
    ("groups=[{name: a, agents: [0], draw: slot}]", "groups[0] (a).draw: only a population group takes it"),
    (pop_groups("[{policy: random, run_dir: runs/x}]"), "members[0]: give either policy"),
    (pop_groups("[{params: {action: 1}}]"), "members[0]: a member is scripted (policy: NAME) or frozen"),
    (pop_groups("[{policy: random, colour: red}]"), "members[0]: unknown key 'colour'"),
    (pop_groups("[{policy: nope}]"), "unknown scripted policy 'nope'"),
    (pop_groups("[{run_dir: /nonexistent}]"), "members[0].run_dir: '/nonexistent' is not a run directory"),
    (pop_groups("[random]"), "members[0]: expected a mapping like {policy: staghunt_stag}"),
    (pop_groups(extra=", switch: [{at_step: 10, kind: learner}]"), "a population group takes no switch schedule"),
    ("groups=[{name: a, agents: [0], members: [{policy: random}]}]", "groups[0] (a).members: only a population"),
    ("groups=[{name: a, agents: [0], sample: fixed}]", "groups[0] (a).sample: only a population group takes it"),
    ("groups=[{name: a, agents: [0], switch: [{at_step: 10, kind: population}]}, {name: b, agents: [1]}]",
     "switch[0].kind: a population is a group's kind from the start"),
])
def test_population_config_mistakes_are_one_line_errors(groups, expected):
    with pytest.raises(UserError, match=None) as info:
        group_specs(config_mod.build_config("staghunt/default", [groups]))
    assert expected in str(info.value) and "\n" not in str(info.value)


def _play(tmp_path: Path, name: str, groups: str, steps: int, extra=()) -> tuple[Experiment, torch.Tensor, torch.Tensor]:
    """Train a tiny run; return it, the actions sent to the env [T, E, N] and partner_id before each step [T, E]."""
    exp = _experiment(tmp_path, name, groups, [f"total_env_steps={steps}", *extra])
    partner = exp.groups[1]
    actions, ids = [], []
    step = exp.env.step
    exp.env.step = lambda a: (actions.append(a.clone()), ids.append(partner.partner_id.clone()), step(a))[2]
    exp.run()
    return exp, torch.stack(actions), torch.stack(ids)


def test_each_env_plays_its_own_member_and_draws_a_new_one_when_its_episode_ends(tmp_path):
    """4 envs x 100 steps (4 episodes of 25): the partner slot gets member partner_id[e]'s action (1 + id) in
    every env; partner_id changes only at episode starts, and across episodes every member plays."""
    exp, actions, ids = _play(tmp_path, "run", pop_groups(), 400)
    assert torch.equal(actions[..., 1], ids + 1)
    t = torch.arange(ids.shape[0])
    within = (t % 25 != 0) & (t > 0)
    assert torch.equal(ids[within], ids[within.nonzero().squeeze(-1) - 1])  # constant within an episode
    starts = ids[t % 25 == 0]  # [4, E]: the member of each episode
    assert (starts[1:] != starts[:-1]).any()  # resampled at episode ends
    assert set(ids.unique().tolist()) == {0, 1, 2}
    assert exp.groups[1].phases[0].describe() == "population[scripted:fixed, scripted:fixed, scripted:fixed]"


def test_a_draw_plays_episodes_per_draw_consecutive_episodes_then_the_next_is_drawn(tmp_path):
    """episodes_per_draw: 3, 4 envs x 9 episodes of 25 steps: partner_id is constant over episodes 1-3, 4-6, 7-9
    of each env and redrawn between them (some env changes member at a block start); episode 1 draws as with
    episodes_per_draw 1 (the same generator, the same first draw); the record counts every episode."""
    exp, actions, ids = _play(tmp_path, "run", pop_groups(extra=", episodes_per_draw: 3"), 900)
    _, _, one = _play(tmp_path, "one", pop_groups(), 100)
    assert torch.equal(actions[..., 1], ids + 1)
    starts = ids[torch.arange(ids.shape[0]) % 25 == 0][:9]  # [9, E]: the member of each episode
    blocks = starts.view(3, 3, -1)
    assert (blocks == blocks[:, :1]).all()  # one member per block of 3 episodes
    assert (blocks[1:, 0] != blocks[:-1, 0]).any()  # redrawn between blocks
    assert torch.equal(starts[0], one[0])
    assert sum(exp.groups[1].member_record().values()) == 4 * 9


def test_member_draws_follow_the_run_seed(tmp_path):
    _, _, a = _play(tmp_path, "a", pop_groups(), 200)
    _, _, b = _play(tmp_path, "b", pop_groups(), 200)
    _, _, c = _play(tmp_path, "c", pop_groups(), 200, ["seed=1"])
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_fixed_sampling_keeps_one_member_per_env_balanced_over_envs(tmp_path):
    _, actions, ids = _play(tmp_path, "run", pop_groups(extra=", sample: fixed"), 600, ["num_envs=6"])
    assert (ids == ids[0]).all()  # 4 episodes, never resampled
    assert sorted(ids[0].tolist()) == [0, 0, 1, 1, 2, 2]
    assert torch.equal(actions[..., 1], ids + 1)


def _resume_before_the_last_checkpoint(tmp_path: Path, overrides: list, total_env_steps: int = 280) -> tuple[dict, dict]:
    """Updates of 40 steps (4 envs x 10; 7 of them at the default 280 steps: episodes end inside rollouts, the
    checkpoint at update 6 is mid-episode), then the same run resumed from the checkpoint before its last (update 6,
    or 3 for 5 updates): its metrics must equal the uninterrupted run's. -> both final checkpoints."""
    cfg = config_mod.build_config("staghunt/default", [*TINY, f"total_env_steps={total_env_steps}",
                                                       "checkpoint_interval=3", *overrides])
    last = f"ckpt_{total_env_steps // 40:07d}.pt"
    full = tmp_path / "full"
    Experiment(cfg, full, quiet=True).run()
    resumed = tmp_path / "resumed"
    shutil.copytree(full, resumed)
    (resumed / "checkpoints" / last).unlink()
    (resumed / "summary.json").unlink()
    Experiment(config_mod.from_run_dir(resumed), resumed, resume=True, quiet=True).run()
    assert rows(resumed / "metrics.csv") == rows(full / "metrics.csv")
    return tuple(torch.load(run / "checkpoints" / last, weights_only=False) for run in (resumed, full))


def test_resume_in_the_middle_of_a_draw_keeps_its_age(tmp_path):
    """episodes_per_draw: 2, 25-step episodes, 5 updates of 10 steps; resumed from update 3 (step 30: the draw has
    played one episode, its age is 1): the resumed run redraws at step 50 as the uninterrupted one does, so their
    metrics and final states (member draws, draw ages) are equal."""
    groups = pop_groups("[{policy: random}, {policy: staghunt_stag}, {policy: staghunt_hare}]",
                        ", episodes_per_draw: 2")
    got, want = _resume_before_the_last_checkpoint(tmp_path, [groups], total_env_steps=200)
    at_3 = torch.load(tmp_path / "full" / "checkpoints" / "ckpt_0000003.pt", weights_only=False)
    assert at_3["groups"]["partner"]["population"]["draw_age"].tolist() == [1, 1, 1, 1]
    assert want["groups"]["partner"]["population"]["draw_age"].tolist() == [0, 0, 0, 0]  # redrawn at step 50
    assert_same(got["groups"], want["groups"], "groups")


def test_resume_of_a_population_run_equals_the_uninterrupted_run(tmp_path):
    """Checkpoint at update 2 mid-episode: the member draws, the members' generator (random) and a frozen-free
    population state resume exactly."""
    groups = pop_groups("[{policy: random}, {policy: staghunt_stag}, {policy: staghunt_hare}]")
    got, want = _resume_before_the_last_checkpoint(tmp_path, [groups])
    assert "population" in want["groups"]["partner"]
    assert_same(got["groups"], want["groups"], "groups")


@pytest.fixture(scope="module")
def frozen_run(tmp_path_factory) -> Path:
    """A tiny run with two learner groups (b on slot 1 is the frozen member)."""
    run = tmp_path_factory.mktemp("frozen") / "run"
    cfg = config_mod.build_config("staghunt/default", [*TINY, "total_env_steps=80", "actor=rnn",
                                                       "groups=[{name: a, agents: [0]}, {name: b, agents: [1]}]"])
    Experiment(cfg, run, quiet=True).run()
    return run


def test_a_frozen_member_acts_as_its_actor_and_only_in_its_own_envs(frozen_run):
    from hypermappo.envs.staghunt import StagHuntVecEnv

    env = StagHuntVecEnv(6)
    spec = sub_spec(env.spec, [1])
    members = [Phase(0, "scripted", policy="fixed", params={"action": 4}), Phase(0, "frozen", run_dir=str(frozen_run),
                                                                                  group="b")]
    pop = population_mod.Population(members, spec, torch.tensor([1]), torch.device("cpu"))
    actor = load_frozen_actor(members[1], spec, torch.device("cpu"))
    partner_id = torch.tensor([0, 1, 1, 0, 1, 0])
    state = pop.new_state(6)
    s = env.reset(seed=3)
    h = torch.zeros(6, 1, actor.hidden_size)
    reset = torch.ones(6, 1, dtype=torch.bool)
    for _ in range(30):  # across an episode end (25 steps): the frozen member's recurrent state restarts
        a, goal = pop.act(s, env, state, partner_id, torch.Generator().manual_seed(0), deterministic=True)
        out = actor(s.obs[:, [1]], None, h, reset, active=s.active[:, [1]])
        h, want = out.hidden, out.dist.mode()
        assert torch.equal(a[partner_id == 1], want[partner_id == 1])
        assert (a[partner_id == 0] == 4).all() and goal is None  # neither member writes a goal
        s = env.step(torch.cat([torch.zeros(6, 1, dtype=torch.long), a], 1))
        pop.observe(state, s.done[:, [1]])
        reset = s.done[:, [1]]


def _goal_rule(step, ctx):
    """Test policy: writes goal 5 + slot and stays."""
    E = step.obs.shape[0]
    ctx.goal = (5 + ctx.slots).expand(E, -1).clone()
    return torch.zeros(E, ctx.slots.numel(), dtype=torch.long)


def test_a_population_reports_the_goal_of_the_scripted_member_playing_in_each_env():
    from hypermappo.envs.staghunt import StagHuntVecEnv

    env = StagHuntVecEnv(4)
    members = [Phase(0, "scripted", policy="test_population:_goal_rule"),
               Phase(0, "scripted", policy="fixed", params={"action": 0}), Phase(0, "scripted", policy="random")]
    pop = population_mod.Population(members, sub_spec(env.spec, [1]), torch.tensor([1]), torch.device("cpu"))
    _, goal = pop.act(env.reset(seed=0), env, pop.new_state(4), torch.tensor([0, 1, 2, 1]), torch.Generator())
    # fixed writes none (the co-player model's labels use hindsight); random writes -1: it pursues no goal
    assert goal.tolist() == [[6], [-2], [-1], [-2]]


def test_evaluation_of_a_population_run_lets_the_members_take_turns_over_episodes(tmp_path, monkeypatch):
    seen = []
    act = population_mod.Population.act

    def spy(self, step, env, state, partner_id, generator, deterministic=False):
        seen.append(partner_id.clone())
        return act(self, step, env, state, partner_id, generator, deterministic)

    monkeypatch.setattr(population_mod.Population, "act", spy)
    exp = _experiment(tmp_path, "run", pop_groups(), ["total_env_steps=40", "eval_episodes=7"])
    seen.clear()
    stats = exp.evaluate()
    assert seen and all(torch.equal(p, torch.tensor([0, 1, 2, 0, 1, 2, 0])) for p in seen)
    assert set(stats["group_returns"]) == {"learner", "partner"}


def test_only_envs_whose_episode_ended_draw_a_new_member():
    """Envs end at different steps in general (the stag hunt's do not): the others keep their member."""
    partner_id = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    ended = torch.tensor([True, False, True, False, False, True, False, False])
    g = torch.Generator().manual_seed(0)
    draws = [population_mod.resample_ended(partner_id, ended, 3, g) for _ in range(20)]
    for d in draws:
        assert torch.equal(d[~ended], partner_id[~ended])
    assert len({tuple(d[ended].tolist()) for d in draws}) > 1  # the ended envs do draw
    assert population_mod.resample_ended(partner_id, torch.zeros(8, dtype=torch.bool), 3, g) is partner_id


# ---------------------------------------------------------------- mixes: one member per slot (draw: slot)

FOUR = ["env_kwargs={n_hunters: 4, grid_size: 6}"]


def mix_groups(members: str = FIXED3, extra: str = "") -> str:
    return (f"groups=[{{name: learner, agents: [0]}}, {{name: partner, agents: [1, 2, 3], kind: population, "
            f"members: {members}, draw: slot{extra}}}]")


def test_a_mix_draws_each_slots_member_independently_per_env_and_per_episode(tmp_path):
    """4 hunters, 3 partner slots, 6 envs x 4 episodes: slot k of env e plays member partner_id[e, k] (fixed
    members: action 1 + id); ids change only at episode starts, and within one env and episode the slots differ
    (a mix, not one member for the group), as do envs."""
    exp, actions, ids = _play(tmp_path, "run", mix_groups(), 600, [*FOUR, "num_envs=6"])
    assert ids.shape == (100, 6, 3)
    assert torch.equal(actions[..., 1:], ids + 1)
    t = torch.arange(ids.shape[0])
    within = (t % 25 != 0) & (t > 0)
    assert torch.equal(ids[within], ids[within.nonzero().squeeze(-1) - 1])
    starts = ids[t % 25 == 0]  # [4, E, 3]
    assert (starts[1:] != starts[:-1]).any()
    assert (starts.amin(-1) != starts.amax(-1)).any()  # some env mixes members across its slots
    assert (starts[:, 0] != starts[:, 1]).any()  # envs draw their own
    assert exp.groups[1].phases[0].describe().endswith("per slot")
    # the run's own record: episodes per member over slots (6 envs x 3 slots x 4 episodes), also in summary.json
    record = exp.groups[1].member_record()
    assert sum(record.values()) == 6 * 3 * 4
    counts = torch.bincount(starts.flatten(), minlength=3).tolist()
    assert list(record.values()) == counts
    summary = __import__("json").loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["groups"]["partner"]["member_episodes"] == record


def test_mix_draws_follow_the_run_seed_and_resume_exactly(tmp_path):
    groups = mix_groups("[{policy: random}, {policy: staghunt_stag}, {policy: staghunt_hare}]")
    _, _, a = _play(tmp_path, "a", groups, 200, FOUR)
    _, _, b = _play(tmp_path, "b", groups, 200, FOUR)
    _, _, c = _play(tmp_path, "c", groups, 200, [*FOUR, "seed=1"])
    assert torch.equal(a, b) and not torch.equal(a, c)
    got, want = (x["groups"]["partner"] for x in _resume_before_the_last_checkpoint(tmp_path, [*FOUR, groups]))
    assert want["partner_id"].shape == (4, 3)
    assert torch.equal(got["population"]["member_episodes"], want["population"]["member_episodes"])
    assert_same(got, want, "partner")


def test_member_episode_counts_are_per_ended_env_and_slot():
    counts = torch.zeros(3, dtype=torch.long)
    ids = torch.tensor([[0, 1, 1], [2, 2, 2], [0, 0, 1]])
    got = population_mod.count_member_episodes(counts, ids, torch.tensor([True, False, True]))
    assert got.tolist() == [3, 3, 0]
    flat = population_mod.count_member_episodes(counts, torch.tensor([2, 2, 0]), torch.tensor([True, True, False]))
    assert flat.tolist() == [0, 0, 2]


def test_evaluation_of_a_mix_rotates_members_over_slots_and_episodes():
    from hypermappo.policies.groups import evaluation_members

    assert evaluation_members(3, 2, 4, "slot", "cpu").tolist() == [[0, 1], [2, 3], [0, 1]]
    assert evaluation_members(3, 2, 4, "env", "cpu").tolist() == [0, 1, 2]
