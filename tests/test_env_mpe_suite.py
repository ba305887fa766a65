"""Tests of the batched torch MPE suite (`mpe:simple`, `simple_adversary`, `simple_push`, `simple_tag`,
`simple_world_comm`): equal to mpe2 step for step (obs, state, rewards), keep the VecEnv contract."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest
import torch

from hypermappo.envs.contract import random_actions, run_random
from hypermappo.envs.registry import make_env
from hypermappo.errors import UserError

ATOL = 1e-4
SCENARIOS = ["simple", "simple_adversary", "simple_push", "simple_tag", "simple_world_comm"]
MPE2_MODULE = {"simple": "simple_v3", "simple_adversary": "simple_adversary_v3", "simple_push": "simple_push_v3",
               "simple_tag": "simple_tag_v3", "simple_world_comm": "simple_world_comm_v3"}
# agent names and per-agent (obs size, action count) as mpe2 1.1.1 reports them for the default kwargs
EXPECTED = {
    "simple": (["agent_0"], [4], [5]),
    "simple_adversary": (["adversary_0", "agent_0", "agent_1"], [8, 10, 10], [5, 5, 5]),
    "simple_push": (["adversary_0", "agent_0"], [8, 19], [5, 5]),
    "simple_tag": (["adversary_0", "adversary_1", "adversary_2", "agent_0"], [16, 16, 16, 14], [5, 5, 5, 5]),
    "simple_world_comm": (["leadadversary_0", "adversary_0", "adversary_1", "adversary_2", "agent_0", "agent_1"],
                          [34, 34, 34, 34, 28, 28], [20, 5, 5, 5, 5, 5]),
}


def _mpe2_env(scenario: str, continuous: bool, **kwargs):
    module = importlib.import_module(f"mpe2.{MPE2_MODULE[scenario]}")
    return module.parallel_env(continuous_actions=continuous, **kwargs)


def _world_arrays(ref_envs) -> dict:
    """mpe2's current state as set_world arguments: [E, A, 2] / [E, L, 2] / [E, A, dim_c] (+ goal [E])."""
    worlds = [e.unwrapped.world for e in ref_envs]
    out = {
        "agent_pos": np.stack([[a.state.p_pos for a in w.agents] for w in worlds]),
        "agent_vel": np.stack([[a.state.p_vel for a in w.agents] for w in worlds]),
        "landmark_pos": np.stack([[lm.state.p_pos for lm in w.landmarks] for w in worlds]),
    }
    if worlds[0].dim_c:
        out["agent_comm"] = np.stack([[a.state.c for a in w.agents] for w in worlds])
    if hasattr(worlds[0].agents[0], "goal_a"):
        out["goal"] = np.array([w.landmarks.index(w.agents[0].goal_a) for w in worlds])
    return out


def _touch(a, b) -> bool:
    return float(np.linalg.norm(a.state.p_pos - b.state.p_pos)) < a.size + b.size


def _events(world) -> dict:
    """What happened in one mpe2 world after a step: the comparison must go through each of these."""
    agents, lms = world.agents, world.landmarks
    colliders = [e for e in agents + lms if e.collide]
    adversaries = [a for a in agents if getattr(a, "adversary", False)]
    good = [a for a in agents if not getattr(a, "adversary", False)]
    forests = getattr(world, "forests", [])
    return {
        "contact": sum(_touch(a, b) for i, a in enumerate(colliders) for b in colliders[i + 1:]),
        "obstacle_contact": sum(_touch(a, lm) for a in agents for lm in lms if a.collide and lm.collide),
        "capture": sum(_touch(a, g) for a in adversaries for g in good if a.collide),
        "speed_capped": sum(a.max_speed is not None and abs(np.linalg.norm(a.state.p_vel) - a.max_speed) < 1e-9
                            for a in agents),
        "out_of_bounds": sum(bool((np.abs(a.state.p_pos) > 0.9).any()) for a in good),
        "in_forest": sum(_touch(a, f) for a in agents for f in forests),
        "food": sum(_touch(a, f) for a in good for f in getattr(world, "food", [])),
        "speaks": sum(bool(np.any(a.state.c)) for a in agents if not a.silent),
    }


def _random_actions(rng, sizes: list[int], num_envs: int, continuous: bool) -> np.ndarray:
    """Per-agent actions inside each agent's own space, padded to the slot width (continuous: beyond [0, 1])."""
    if continuous:
        a = rng.uniform(-0.3, 1.3, (num_envs, len(sizes), max(sizes))).astype(np.float32)
        return a
    return np.stack([rng.integers(0, n, num_envs) for n in sizes], 1)


def _compare(scenario: str, continuous: bool, seeds: list[int], steps: int = 25, **kwargs) -> dict:
    """Copy mpe2's start state into ours, step both with the same random actions, compare everything.

    Returns counters of the events the comparison went through (so tests can require that contact,
    capture, forest hiding ... really happened)."""
    ref_envs = [_mpe2_env(scenario, continuous, **kwargs) for _ in seeds]
    names = ref_envs[0].possible_agents
    env = make_env(f"mpe:{scenario}", len(seeds), continuous_actions=continuous, **kwargs)
    assert env.spec.agent_names == names
    ref0 = ref_envs[0]
    sizes = [int(ref0.action_space(n).shape[0]) if continuous else int(ref0.action_space(n).n) for n in names]
    obs_sizes = [ref0.observation_space(n).shape[0] for n in names]
    env.reset(seed=0)
    rng = np.random.default_rng(123)
    seen = {"reward_spread": 0}

    def padded(ref_obs):
        out = np.zeros((len(seeds), len(names), env.spec.obs_dim), np.float32)
        for e, o in enumerate(ref_obs):
            for i, n in enumerate(names):
                out[e, i, : obs_sizes[i]] = o[n]
        return out

    for episode in range(2):  # the second episode starts after our env's own auto-reset
        ref_obs = [e.reset(seed=s + 1000 * episode)[0] for e, s in zip(ref_envs, seeds)]
        step = env.set_world(**_world_arrays(ref_envs))
        np.testing.assert_allclose(step.obs.numpy(), padded(ref_obs), atol=ATOL)
        np.testing.assert_allclose(step.state.numpy(), [e.state() for e in ref_envs], atol=ATOL)
        ref_return = np.zeros(len(seeds))
        for t in range(steps):
            actions = _random_actions(rng, sizes, len(seeds), continuous)
            per_agent = [{n: (a[i, : sizes[i]] if continuous else int(a[i])) for i, n in enumerate(names)}
                         for a in actions]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # mpe2's clip wrapper warns about out-of-range actions
                ref = [e.step(a) for e, a in zip(ref_envs, per_agent)]
            step = env.step(torch.as_tensor(actions))
            ref_obs = padded([r[0] for r in ref])
            ref_reward = np.array([[r[1][n] for n in names] for r in ref])
            np.testing.assert_allclose(step.final_obs.numpy(), ref_obs, atol=ATOL, err_msg=f"obs at t={t}")
            np.testing.assert_allclose(step.final_state.numpy(), [e.state() for e in ref_envs], atol=ATOL)
            np.testing.assert_allclose(step.reward.numpy(), ref_reward, atol=ATOL, err_msg=f"reward at t={t}")
            assert step.truncated.tolist() == [all(r[3].values()) for r in ref]
            assert not step.terminated.any()
            seen["reward_spread"] += int((np.ptp(ref_reward, axis=1) > 1e-6).sum())
            for w in (e.unwrapped.world for e in ref_envs):
                for key, count in _events(w).items():
                    seen[key] = seen.get(key, 0) + count
            ref_return += ref_reward.mean(-1)
        assert step.truncated.all() and (step.episode_length == steps).all()
        np.testing.assert_allclose(step.episode_return.numpy(), ref_return, atol=1e-3)
    return seen



# events each scenario's comparison must go through (with these 8 seeds), so a broken force / reward
# term cannot hide behind a start where it never acts
REQUIRED_EVENTS = {
    "simple": ["out_of_bounds"],
    "simple_adversary": ["reward_spread"],
    "simple_push": ["contact", "reward_spread"],
    "simple_tag": ["contact", "obstacle_contact", "capture", "speed_capped", "out_of_bounds"],
    "simple_world_comm": ["contact", "obstacle_contact", "capture", "speed_capped", "out_of_bounds", "in_forest",
                          "food", "speaks"],
}
SEEDS = list(range(8))


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("continuous", [False, True])
def test_matches_mpe2_step_for_step(scenario, continuous):
    """Same start (copied from mpe2) + same actions -> same obs, state, rewards, truncation, returns."""
    seen = _compare(scenario, continuous, seeds=SEEDS)
    rare = {"food"} if continuous else set()  # food is touched rarely: the discrete run must touch it
    missing = [k for k in REQUIRED_EVENTS[scenario] if not seen[k] and k not in rare]
    assert not missing, f"the comparison never exercised {missing}: {seen}"


@pytest.mark.parametrize("scenario, kwargs", [
    ("simple_adversary", {"N": 3}),
    ("simple_tag", {"num_good": 2, "num_adversaries": 2, "num_obstacles": 1}),
    ("simple_world_comm", {"num_good": 3, "num_adversaries": 2, "num_obstacles": 2, "num_food": 1, "num_forests": 1}),
])
def test_matches_mpe2_with_other_sizes(scenario, kwargs):
    _compare(scenario, False, seeds=[0, 1, 2], steps=25, **kwargs)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_spec_matches_the_mpe2_adapter(scenario):
    """Names, padded widths, state size and action slot as mpe2 / the mpe2 adapter: policy groups by name
    and checkpoints carry over between `mpe2:<scenario>_v3` and `mpe:<scenario>`."""
    names, obs_sizes, action_sizes = EXPECTED[scenario]
    ours = make_env(f"mpe:{scenario}_v3", 2).spec
    theirs = make_env(f"mpe2:{MPE2_MODULE[scenario]}", 1).spec
    assert ours.agent_names == theirs.agent_names == names
    assert ours.obs_dim == theirs.obs_dim == max(obs_sizes)
    assert ours.state_dim == theirs.state_dim == sum(obs_sizes)
    assert ours.action_space == theirs.action_space
    assert ours.has_available_actions == theirs.has_available_actions == (len(set(action_sizes)) > 1)
    assert ours.episode_limit == 25 and ours.can_save_state and ours.can_render and not ours.team_reward


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("continuous", [False, True])
def test_contract_and_auto_reset(scenario, continuous):
    env = make_env(f"mpe:{scenario}", 6, continuous_actions=continuous)
    steps = run_random(env, 55, seed=1)
    assert [t for t, s in enumerate(steps) if s.truncated.any()] == [25, 50]
    returns = torch.stack([s.reward.mean(-1) for s in steps[1:26]]).sum(0)
    assert torch.allclose(steps[25].episode_return, returns, atol=1e-5)
    assert not torch.equal(steps[25].obs, steps[25].final_obs)
    _, obs_sizes, action_sizes = EXPECTED[scenario]
    for i, size in enumerate(obs_sizes):  # padding stays zero
        assert (steps[-1].obs[:, i, size:] == 0).all()
    if env.spec.has_available_actions:
        available = steps[-1].available_actions
        assert available.sum(-1).tolist() == [action_sizes] * 6


def _spread_out(env):
    """world_comm with nothing touching: agents on a row at y=0, landmarks on a row at y=0.8."""
    agents = np.stack([np.linspace(-0.9, 0.9, 6), np.zeros(6)], 1)[None]  # [1, 6, 2]
    landmarks = np.stack([np.linspace(-0.9, 0.9, 5), np.full(5, 0.8)], 1)[None]  # [1, 5, 2]
    return env.set_world(agents, np.zeros((1, 6, 2)), landmarks)


def test_world_comm_leader_speaks_others_are_silent():
    """Only the leader speaks: its 20 actions are move + 5 x message; a padded action of a silent slot acts as
    no-op; continuous message dims 5-8 of silent slots are ignored."""
    env = make_env("mpe:simple_world_comm", 1)
    _spread_out(env)
    step = env.step(torch.tensor([[4 + 5 * 3, 7, 0, 0, 0, 0]]))  # leader: up + message 3; adversary_0: padded 7
    assert step.obs[0, 0, -4:].tolist() == [0.0, 0.0, 0.0, 1.0], "message 3, one-hot, in the leader's comm slot"
    assert step.obs[0, 1, -4:].tolist() == [0.0, 0.0, 0.0, 1.0], "every adversary hears the leader"
    assert torch.allclose(step.obs[0, 0, :2], torch.tensor([0.0, 0.3])), "the leader moved up (accel 3)"
    assert step.obs[0, 1, :2].abs().sum() == 0, "adversary_0's padded action is a no-op"
    env = make_env("mpe:simple_world_comm", 1, continuous_actions=True)
    _spread_out(env)
    a = torch.zeros(1, 6, 9)
    a[0, 0, 4], a[0, 0, 6] = 1.0, 0.5  # leader: up, says [0, 0.5, 0, 0]
    a[0, 1, 5:] = 1.0  # adversary_0's dims past its Box(5) are ignored
    step = env.step(a)
    assert step.obs[0, 1, -4:].tolist() == [0.0, 0.5, 0.0, 0.0] and step.obs[0, 1, :2].abs().sum() == 0


def test_padded_discrete_action_matches_the_adapter_rule():
    """An action past a slot's own space acts as 0 (what the PettingZoo adapter sends)."""
    env, twin = make_env("mpe:simple_world_comm", 2), make_env("mpe:simple_world_comm", 2)
    env.reset(seed=4)
    twin.reset(seed=4)
    a = torch.tensor([[3, 19, 1, 2, 3, 4], [0, 12, 4, 4, 17, 1]])
    b = torch.where(torch.arange(6) == 0, a, torch.where(a < 5, a, torch.zeros_like(a)))
    assert torch.equal(env.step(a).obs, twin.step(b).obs)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_state_round_trip_and_seeding(scenario):
    env = make_env(f"mpe:{scenario}", 5)
    first = env.reset(seed=9)
    assert torch.equal(first.obs, make_env(f"mpe:{scenario}", 5).reset(seed=9).obs)
    assert not torch.equal(first.obs, make_env(f"mpe:{scenario}", 5).reset(seed=10).obs)
    g = torch.Generator().manual_seed(9)
    step = first
    for _ in range(10):
        step = env.step(random_actions(env, step, g))
    saved = env.get_state()
    actions = []
    for _ in range(30):  # crosses an auto-reset, so the generator's state matters too
        actions.append(random_actions(env, step, g))
        step = env.step(actions[-1])
    first_run = [env.step(a) for a in actions]
    env.set_state(saved)
    env.set_state(saved)  # the snapshot does not alias the live env: restoring twice is the same
    env2 = make_env(f"mpe:{scenario}", 5)
    env2.set_state(saved)
    for key in ("pos", "vel"):
        assert torch.equal(env2.get_state()[key], saved[key])
    for a in actions:
        env.step(a)
    second_run = [env.step(a) for a in actions]
    for s1, s2 in zip(first_run, second_run):
        assert torch.equal(s1.obs, s2.obs) and torch.equal(s1.reward, s2.reward)


def test_goal_is_drawn_per_episode():
    """simple_adversary / simple_push: every landmark is sometimes the goal, and it shows in the observations."""
    for scenario, n_goals in (("simple_adversary", 2), ("simple_push", 2)):
        env = make_env(f"mpe:{scenario}", 64)
        env.reset(seed=0)
        counts = torch.bincount(env.extra["goal"], minlength=n_goals)
        assert (counts > 10).all(), counts
    env = make_env("mpe:simple_push", 64)
    obs = env.reset(seed=1).obs[:, 1, 4:7]  # the good agent's own colour tells the goal
    assert torch.equal(obs[:, 1] > obs[:, 2], env.extra["goal"] == 0)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_render(scenario):
    env = make_env(f"mpe:{scenario}", 2)
    env.reset(seed=0)
    frame = env.render(1)
    assert frame.shape == (400, 400, 3) and frame.dtype == np.uint8
    assert (frame != 255).any() and (frame == 255).any()
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) >= 3, "agents and landmarks in their colours"


@pytest.mark.parametrize("scenario, kwargs, match", [
    ("simple_adversary", {"N": 0}, "N must be an integer >= 1, got 0"),
    ("simple_tag", {"num_good": 0}, "num_good"),
    ("simple_tag", {"num_obstacles": 1.5}, "num_obstacles"),
    ("simple_world_comm", {"num_food": 0}, "num_food"),
    ("simple_push", {"max_cycles": 0}, "max_cycles"),
    ("simple", {"N": 3}, "N"),
    ("simple_tag", {"curriculum": True}, "curriculum"),
])
def test_bad_kwargs_are_user_errors(scenario, kwargs, match):
    with pytest.raises(UserError, match=match):
        make_env(f"mpe:{scenario}", 2, **kwargs)


def test_set_world_rejects_unknown_choices():
    env = make_env("mpe:simple_tag", 1)
    with pytest.raises(UserError, match="goal"):
        env.set_world(np.zeros((1, 4, 2)), np.zeros((1, 4, 2)), np.zeros((1, 2, 2)), goal=[0])


def test_auto_reset_is_per_env():
    """Env 1 is put 5 steps from its end: only it restarts, the others continue untouched."""
    env, twin = make_env("mpe:simple_adversary", 4), make_env("mpe:simple_adversary", 4)
    env.reset(seed=3)
    twin.reset(seed=3)
    state = env.get_state()
    state["t"][1] = 20
    state["tracker"]["lengths"][1] = 20
    env.set_state(state)
    g = torch.Generator().manual_seed(0)
    for k in range(5):
        actions = torch.randint(0, 5, (4, 3), generator=g)
        step, twin_step = env.step(actions), twin.step(actions)
        assert step.truncated.tolist() == [False, k == 4, False, False]
        assert torch.equal(step.final_obs, twin_step.final_obs)
    assert step.done[1].all() and not step.done[[0, 2, 3]].any() and step.episode_length[1] == 25
    others = [0, 2, 3]
    assert torch.equal(step.obs[others], twin_step.obs[others])
    assert torch.equal(env.extra["goal"][others], twin.extra["goal"][others])
    assert not torch.allclose(step.obs[1], step.final_obs[1])
    assert env.t.tolist() == [5, 0, 5, 5]
