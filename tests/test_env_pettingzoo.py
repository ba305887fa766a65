"""The PettingZoo adapter (mpe2 and user envs) keeps the VecEnv contract and matches the raw envs."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch
from envs_for_adapter_tests import (
    ACTION_SIZES,
    AGENTS,
    RUNNER_MASK,
    SPRINTER_DIES_AT,
    WALKER_LEAVES_AT,
    episode_length,
    observation,
    reward,
)

from hypermappo.envs.contract import random_actions, run_random
from hypermappo.envs.registry import make_env
from hypermappo.errors import UserError

MPE2_SCENARIOS = ["simple_spread_v3", "simple_adversary_v3", "simple_tag_v3", "simple_speaker_listener_v4",
                  "simple_reference_v3"]
SCRIPTED = "pettingzoo:envs_for_adapter_tests:make_scripted_env"


def _steps_equal(a, b):
    for name in ("obs", "state", "active", "reward", "done", "terminated", "truncated", "available_actions",
                 "final_obs", "final_state", "final_active", "episode_return", "episode_length"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert torch.equal(x, y), name


@pytest.mark.parametrize("scenario", MPE2_SCENARIOS)
def test_mpe2_contract_with_auto_reset(scenario):
    env = make_env(f"mpe2:{scenario}", num_envs=2, max_cycles=10)
    steps = run_random(env, steps=23, seed=1)  # > 2 episodes of 10 steps
    assert env.spec.episode_limit == 10 and not env.spec.can_save_state
    ends = torch.stack([s.truncated for s in steps[1:]])  # [T, E]
    assert ends.sum(0).tolist() == [2, 2] and ends[9].all() and ends[19].all()
    assert steps[10].episode_length.tolist() == [10, 10]
    env.close()


@pytest.mark.parametrize("scenario", ["simple_adversary_v3", "simple_speaker_listener_v4"])
def test_mpe2_outputs_equal_raw_env(scenario):
    """Same seeds and actions -> the raw mpe2 env's obs (zero-padded), rewards and state, across an auto-reset."""
    num_envs, seed, limit = 2, 7, 5
    env = make_env(f"mpe2:{scenario}", num_envs=num_envs, max_cycles=limit)
    raw = [importlib.import_module(f"mpe2.{scenario}").parallel_env(max_cycles=limit) for _ in range(num_envs)]
    names = raw[0].possible_agents
    raw_obs = [r.reset(seed=seed + i)[0] for i, r in enumerate(raw)]
    episodes = [0] * num_envs

    def check_obs(obs, state, e, observations, raw_env):
        for n, name in enumerate(names):
            size = observations[name].shape[0]
            assert np.array_equal(obs[e, n, :size].numpy(), observations[name].astype(np.float32))
            assert (obs[e, n, size:] == 0).all()
        assert np.array_equal(state[e].numpy(), raw_env.state().astype(np.float32))

    s = env.reset(seed=seed)
    for e in range(num_envs):
        check_obs(s.obs, s.state, e, raw_obs[e], raw[e])
    if scenario == "simple_speaker_listener_v4":  # speaker has 3 actions, listener 5: padded actions unavailable
        assert env.spec.has_available_actions and s.available_actions[:, 0].tolist() == [[1, 1, 1, 0, 0]] * 2
    g = torch.Generator().manual_seed(0)
    for _ in range(2 * limit + 2):
        actions = random_actions(env, s, g)
        s = env.step(actions)
        for e, r in enumerate(raw):
            observations, rewards, _, truncations, _ = r.step({name: int(actions[e, n]) for n, name in enumerate(names)})
            assert s.reward[e].tolist() == [np.float32(rewards[name]) for name in names]
            if s.truncated[e]:
                assert all(truncations.values())
                check_obs(s.final_obs, s.final_state, e, observations, r)
                episodes[e] += 1
                observations = r.reset(seed=seed + e + episodes[e] * num_envs)[0]
            check_obs(s.obs, s.state, e, observations, r)
    assert episodes == [2, 2]


def _expected_after_step(length: int, t: int, actions: list[int]):
    """What the adapter must report for one scripted env after its episode's step t (1-based)."""
    alive_before = {a for a in AGENTS if not (a == "sprinter" and t - 1 >= SPRINTER_DIES_AT)
                    and not (a == "walker" and t - 1 >= WALKER_LEAVES_AT)}
    rewards = [reward(a, actions[n]) if a in alive_before else 0.0 for n, a in enumerate(AGENTS)]
    terminated_here = {"sprinter"} & alive_before if t == SPRINTER_DIES_AT else set()
    if t == length:
        ends_terminated = length % 2 == 0
        if ends_terminated:
            terminated_here = set(alive_before)
        final_active = [a in alive_before and a not in terminated_here for a in AGENTS]
        return {"rewards": rewards, "done": [True] * 3, "terminated": ends_terminated,
                "truncated": not ends_terminated, "final_active": final_active}
    alive_after = alive_before - terminated_here - ({"walker"} if t == WALKER_LEAVES_AT else set())
    done = [a in alive_before and a not in alive_after for a in AGENTS]
    return {"rewards": rewards, "done": done, "terminated": False, "truncated": False, "alive": alive_after}


def _expected_obs(alive: set, t: int, length: int, seed: int):
    obs = np.zeros((3, 3), np.float32)  # [N, padded obs_dim]
    available = np.zeros((3, 4), bool)  # [N, padded A]
    for n, a in enumerate(AGENTS):
        if a in alive:
            o = observation(a, t, length, seed)
            obs[n, :o.size] = o
            available[n, :ACTION_SIZES[a]] = True
            if a == "runner":
                available[n] &= RUNNER_MASK.astype(bool)
        else:
            available[n, 0] = True
    return obs, available


@pytest.mark.parametrize("vectorizer", ["inprocess", "subprocess"])
def test_scripted_deaths_masks_and_independent_auto_reset(vectorizer):
    """Deaths at scripted steps, episodes of different lengths per env: exact done/active/obs/available masks."""
    num_envs, seed = 3, 0
    env = make_env(SCRIPTED, num_envs=num_envs, vectorizer=vectorizer, num_workers=2)
    spec = env.spec
    assert (spec.num_agents, spec.obs_dim, spec.state_dim, spec.action_space.n) == (3, 3, 9, 4)
    assert spec.agent_names == AGENTS and spec.has_available_actions
    episode = [0] * num_envs
    t = [0] * num_envs
    seeds = [seed + e for e in range(num_envs)]
    s = env.reset(seed=seed)
    for e in range(num_envs):
        obs, available = _expected_obs(set(AGENTS), 0, episode_length(seeds[e]), seeds[e])
        assert np.array_equal(s.obs[e].numpy(), obs) and np.array_equal(s.available_actions[e].numpy(), available)
    g = torch.Generator().manual_seed(1)
    seen_lengths = [[] for _ in range(num_envs)]
    returns = [0.0] * num_envs
    for _ in range(16):
        actions = random_actions(env, s, g)
        s = env.step(actions)
        for e in range(num_envs):
            t[e] += 1
            length = episode_length(seeds[e])
            want = _expected_after_step(length, t[e], actions[e].tolist())
            assert np.allclose(s.reward[e].numpy(), want["rewards"]), (e, t[e])
            assert s.done[e].tolist() == want["done"], (e, t[e])
            assert (bool(s.terminated[e]), bool(s.truncated[e])) == (want["terminated"], want["truncated"])
            returns[e] += sum(want["rewards"]) / 3
            if want["terminated"] or want["truncated"]:
                assert s.final_active[e].tolist() == want["final_active"]
                final = {a for a, alive in zip(AGENTS, want["final_active"]) if alive}
                assert np.array_equal(s.final_obs[e].numpy(), _expected_obs(final, t[e], length, seeds[e])[0])
                assert s.episode_length[e] == t[e] and np.isclose(s.episode_return[e].item(), returns[e], atol=1e-5)
                seen_lengths[e].append(t[e])
                episode[e] += 1
                seeds[e] = seed + e + episode[e] * num_envs  # the documented auto-reset seeds
                t[e], returns[e] = 0, 0.0
                alive = set(AGENTS)
            else:
                alive = want["alive"]
            obs, available = _expected_obs(alive, t[e], episode_length(seeds[e]), seeds[e])
            assert s.active[e].tolist() == [a in alive for a in AGENTS]
            assert np.array_equal(s.obs[e].numpy(), obs), (e, t[e])
            assert np.array_equal(s.available_actions[e].numpy(), available), (e, t[e])
            assert np.array_equal(s.state[e].numpy(), obs.reshape(-1))  # no env.state(): concatenated obs
    # env e's k-th episode has seed e + 3k: env 0 ran lengths 2, 5, 3, 6 while envs 1 and 2 went their own way
    assert seen_lengths == [[2, 5, 3, 6], [3, 6, 4, 2], [4, 2, 5, 3]]
    env.close()


def test_env_state_used_when_implemented():
    env = make_env(SCRIPTED, num_envs=2, with_state=True)
    assert env.spec.state_dim == 2
    s = env.reset(seed=3)
    assert s.state.tolist() == [[0, episode_length(3)], [0, episode_length(4)]]
    s = env.step(torch.zeros(2, 3, dtype=torch.long))
    assert s.state[:, 0].tolist() == [1, 1]


def test_seeding_reproducible_and_seed_dependent():
    def rollout(seed, **kwargs):
        env = make_env("mpe2:simple_tag_v3", num_envs=3, max_cycles=4, **kwargs)
        return run_random(env, steps=9, seed=seed)

    a, b, c = rollout(5), rollout(5), rollout(6)
    for x, y in zip(a, b):
        _steps_equal(x, y)
    assert not torch.equal(a[0].obs, c[0].obs)
    assert not torch.equal(a[0].obs[0], a[0].obs[1])  # envs of one batch get different seeds


def test_subprocess_equals_inprocess():
    kwargs = {"num_envs": 5, "max_cycles": 6}
    inprocess = run_random(make_env("mpe2:simple_speaker_listener_v4", **kwargs), steps=14, seed=2)
    env = make_env("mpe2:simple_speaker_listener_v4", vectorizer="subprocess", num_workers=2, **kwargs)
    subprocess = run_random(env, steps=14, seed=2)
    for x, y in zip(inprocess, subprocess):
        _steps_equal(x, y)
    workers = list(env._envs.processes)
    env.close()
    assert len(workers) == 2 and not any(p.is_alive() for p in workers)


def test_render_only_when_asked():
    env = make_env("mpe2:simple_spread_v3", num_envs=2, render_mode="rgb_array")
    assert env.spec.can_render
    env.reset(seed=0)
    frame = env.render(1)
    assert frame.ndim == 3 and frame.shape[2] == 3 and frame.dtype == np.uint8 and frame.any()
    workers = make_env("mpe2:simple_spread_v3", num_envs=2, render_mode="rgb_array", vectorizer="subprocess",
                       num_workers=2)
    workers.reset(seed=0)
    assert np.array_equal(workers.render(1), frame)  # env 1 lives in the second worker
    workers.close()
    plain = make_env("mpe2:simple_spread_v3", num_envs=1)
    assert not plain.spec.can_render
    with pytest.raises(UserError, match="render_mode"):
        plain.render(0)


@pytest.mark.parametrize("env_string, message", [
    ("mpe2:simple_sprad_v3", "did you mean simple_spread_v3"),
    ("pettingzoo:no_such_module_xyz:make_env", "cannot import module 'no_such_module_xyz'"),
    ("pettingzoo:envs_for_adapter_tests:no_such_factory", "has no 'no_such_factory'"),
    ("pettingzoo:envs_for_adapter_tests:AGENTS", "not callable"),
    ("pettingzoo:builtins:dict", "not a PettingZoo ParallelEnv"),
    ("pettingzoo:envs_for_adapter_tests.x", "expected pettingzoo:<module>:<factory>"),
])
def test_bad_env_strings_are_one_line_user_errors(env_string, message):
    with pytest.raises(UserError, match=message) as info:
        make_env(env_string, num_envs=1)
    assert "\n" not in str(info.value)


def test_bad_kwargs_and_vectorizer():
    with pytest.raises(UserError, match="no argument 'bogus'"):
        make_env("mpe2:simple_spread_v3", num_envs=1, bogus=1)
    with pytest.raises(UserError, match="no argument 'bogus'"):  # raised in a worker, still a UserError
        make_env("mpe2:simple_spread_v3", num_envs=2, bogus=1, vectorizer="subprocess", num_workers=1)
    with pytest.raises(UserError, match="vectorizer"):
        make_env("mpe2:simple_spread_v3", num_envs=1, vectorizer="threads")


def test_continuous_actions():
    env = make_env("mpe2:simple_spread_v3", num_envs=2, continuous_actions=True, max_cycles=5)
    assert env.spec.action_space.shape == (5,) and not env.spec.has_available_actions
    steps = run_random(env, steps=6, seed=0)
    assert steps[5].truncated.all() and steps[1].reward.abs().sum() > 0
    with pytest.raises(UserError, match="action spaces differ"):  # Box spaces of different sizes: no padding
        make_env("mpe2:simple_speaker_listener_v4", num_envs=1, continuous_actions=True)
