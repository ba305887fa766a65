"""The Gymnasium Tuple-space adapter (lbforaging, rware, EPyMARL style) keeps the VecEnv contract."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from hypermappo.envs.contract import random_actions, run_random
from hypermappo.envs.registry import make_env
from hypermappo.errors import UserError

SCRIPTED = "gym:envs_for_adapter_tests:ScriptedTuple-v0"


def test_scripted_tuple_env_per_agent_done_shared_reward_masks():
    """Per-agent `done` lists kill a slot, a scalar reward is shared, info action masks are used."""
    env = make_env(SCRIPTED, num_envs=2)
    spec = env.spec
    assert (spec.num_agents, spec.obs_dim, spec.action_space.n, spec.has_available_actions) == (2, 3, 3, True)
    s = env.reset(seed=0)  # episode lengths 3 + seed % 3: env 0 -> 3, env 1 -> 4
    assert s.obs[1].tolist() == [[0, 1, 0], [0, 0, 1]]
    assert s.available_actions[0].tolist() == [[True, True, False], [True, True, False]]
    s = env.step(torch.tensor([[1, 1], [0, 1]]))
    assert s.reward.tolist() == [[2, 2], [1, 1]]
    assert s.done.tolist() == [[True, False], [True, False]] and not s.terminated.any()
    assert s.active.tolist() == [[False, True], [False, True]]
    assert (s.obs[:, 0] == 0).all() and s.obs[:, 1].tolist() == [[1, -1, 1], [1, -1, 1]]
    assert s.available_actions[:, 0].tolist() == [[True, False, False]] * 2
    s = env.step(torch.tensor([[1, 1], [1, 1]]))
    assert s.reward.tolist() == [[0, 1], [0, 1]]  # dead agent 0 gets nothing and sends the no-op 0
    s = env.step(torch.tensor([[0, 0], [0, 0]]))
    assert s.terminated.tolist() == [True, False] and s.done[0].all() and s.episode_length[0] == 3
    assert s.final_active[0].tolist() == [False, False]
    assert s.obs[0].tolist() == [[0, 2, 0], [0, 0, 1]] and s.active[0].all()  # env 0 reset with seed 0 + 2
    assert s.active[1].tolist() == [False, True]  # env 1 goes on
    env.close()


def test_scripted_tuple_env_subprocess_and_contract():
    inprocess = run_random(make_env(SCRIPTED, num_envs=3), steps=12, seed=4)
    env = make_env(SCRIPTED, num_envs=3, vectorizer="subprocess", num_workers=2)
    subprocess = run_random(env, steps=12, seed=4)
    for x, y in zip(inprocess, subprocess):
        for name in ("obs", "reward", "done", "active", "available_actions", "final_obs"):
            a, b = getattr(x, name), getattr(y, name)
            assert (a is None and b is None) or torch.equal(a, b), name
    env.close()


def test_bad_gym_strings():
    with pytest.raises(UserError, match="Tuple observation"):
        make_env("gym:CartPole-v1", num_envs=1)
    with pytest.raises(UserError, match="no Gymnasium env id"):
        make_env("gym:envs_for_adapter_tests:ScriptedTupel-v0", num_envs=1)
    with pytest.raises(UserError, match="cannot import module"):
        make_env("gym:no_such_module_xyz:X-v0", num_envs=1)


def test_lbforaging_contract_and_equals_raw_env():
    pytest.importorskip("lbforaging", reason="lbforaging not installed (optional extra hypermappo[gym])")
    env_id = "Foraging-8x8-2p-2f-v3"
    env = make_env(f"gym:lbforaging:{env_id}", num_envs=2, max_episode_steps=8)
    steps = run_random(env, steps=20, seed=3)  # several auto-resets (time limit or all food eaten)
    assert sum(int(s.episode_done.sum()) for s in steps) >= 4
    raw = [gym.make(env_id, max_episode_steps=8, disable_env_checker=True) for _ in range(2)]
    raw_obs = [r.reset(seed=3 + i)[0] for i, r in enumerate(raw)]
    episodes = [0, 0]
    g = torch.Generator().manual_seed(0)
    s = env.reset(seed=3)
    for e in range(2):
        assert np.array_equal(s.obs[e].numpy(), np.stack(raw_obs[e]))
    for _ in range(20):
        actions = random_actions(env, s, g)
        s = env.step(actions)
        for e, r in enumerate(raw):
            obs, rewards, done, truncated, _ = r.step(tuple(actions[e].tolist()))
            assert np.array_equal(s.reward[e].numpy(), np.asarray(rewards, np.float32))
            if done or truncated:
                assert s.episode_done[e]
                episodes[e] += 1
                obs = r.reset(seed=3 + e + 2 * episodes[e])[0]
            assert np.array_equal(s.obs[e].numpy(), np.stack(obs))
    env.close()


def test_rware_contract():
    pytest.importorskip("rware", reason="rware not installed (optional extra hypermappo[gym])")
    env = make_env("gym:rware:rware-tiny-2ag-v2", num_envs=2, max_steps=6)
    assert env.spec.episode_limit == 6 and env.spec.num_agents == 2
    steps = run_random(env, steps=13, seed=0)
    assert torch.stack([s.episode_done for s in steps]).sum().item() == 4
    env.close()
