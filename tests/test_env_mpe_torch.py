"""Tests of the batched torch simple_spread (`mpe:simple_spread`): equal to mpe2 step for step, keeps the contract."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from mpe2 import simple_spread_v3

from hypermappo.envs.contract import random_actions, run_random
from hypermappo.envs.mpe_torch import SimpleSpreadVecEnv
from hypermappo.envs.registry import make_env
from hypermappo.errors import UserError

ATOL = 1e-4


def _assert_close(a: torch.Tensor, b: torch.Tensor) -> None:
    """torch.testing.assert_close costs ~3 s of imports on first use; this is enough here."""
    assert a.shape == b.shape and torch.allclose(a, b, atol=1e-6, rtol=1e-6), (a - b).abs().max()


def _world_arrays(ref_envs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """mpe2's current physical state as agent_pos / agent_vel [E, N, 2], landmark_pos [E, L, 2]."""
    worlds = [e.unwrapped.world for e in ref_envs]
    agent_pos = np.stack([[a.state.p_pos for a in w.agents] for w in worlds])
    agent_vel = np.stack([[a.state.p_vel for a in w.agents] for w in worlds])
    landmark_pos = np.stack([[lm.state.p_pos for lm in w.landmarks] for w in worlds])
    return agent_pos, agent_vel, landmark_pos


@pytest.mark.parametrize("n_agents, continuous, seeds", [(3, False, [0, 1, 2, 3]), (4, False, [7, 8]),
                                                         (3, True, [11, 12])])
def test_matches_mpe2_step_for_step(n_agents, continuous, seeds):
    """Same start (copied from mpe2) + same actions -> same obs, state, rewards, truncation, returns."""
    ref_envs = [simple_spread_v3.parallel_env(N=n_agents, continuous_actions=continuous) for _ in seeds]
    names = ref_envs[0].possible_agents
    env = make_env("mpe:simple_spread", len(seeds), N=n_agents, continuous_actions=continuous)
    env.reset(seed=0)
    rng = np.random.default_rng(123)
    saw_collision = False
    for episode in range(2):  # the second episode starts after our env's own auto-reset
        ref_obs = [e.reset(seed=s + 1000 * episode)[0] for e, s in zip(ref_envs, seeds)]
        step = env.set_world(*_world_arrays(ref_envs))
        np.testing.assert_allclose(step.obs.numpy(), [[o[n] for n in names] for o in ref_obs], atol=ATOL)
        np.testing.assert_allclose(step.state.numpy(), [e.state() for e in ref_envs], atol=ATOL)
        ref_return = np.zeros(len(seeds))
        for t in range(25):
            if continuous:  # outside [0, 1] on purpose: mpe2 clips, so must we
                actions = rng.uniform(-0.3, 1.3, (len(seeds), n_agents, 5)).astype(np.float32)
            else:
                actions = rng.integers(0, 5, (len(seeds), n_agents))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # mpe2's clip wrapper warns about out-of-range actions
                ref = [e.step(dict(zip(names, a))) for e, a in zip(ref_envs, actions)]
            step = env.step(torch.as_tensor(actions))
            ref_obs = np.array([[r[0][n] for n in names] for r in ref])
            ref_reward = np.array([[r[1][n] for n in names] for r in ref])
            ref_truncated = np.array([all(r[3].values()) for r in ref])
            np.testing.assert_allclose(step.final_obs.numpy(), ref_obs, atol=ATOL)
            np.testing.assert_allclose(step.final_state.numpy(), [e.state() for e in ref_envs], atol=ATOL)
            np.testing.assert_allclose(step.reward.numpy(), ref_reward, atol=ATOL)
            np.testing.assert_array_equal(step.truncated.numpy(), ref_truncated)
            assert not step.terminated.any()
            if t < 24:
                _assert_close(step.obs, step.final_obs)
            saw_collision |= bool((ref_reward.std(-1) > 0).any())  # collision penalties are per agent
            ref_return += ref_reward.mean(-1)
        assert step.truncated.all() and (step.episode_length == 25).all()
        np.testing.assert_allclose(step.episode_return.numpy(), ref_return, atol=1e-3)
        assert (step.obs[:, :, :2] == 0).all(), "a new episode starts at rest"
    assert saw_collision, "the comparison never exercised the contact force / collision penalty"


@pytest.mark.parametrize("continuous", [False, True])
def test_contract_and_auto_reset(continuous):
    env = make_env("mpe:simple_spread", 8, continuous_actions=continuous)
    assert env.spec.obs_dim == 18 and env.spec.state_dim == 54 and env.spec.can_render and env.spec.can_save_state
    steps = run_random(env, 60, seed=1)
    ended_at = [t for t, s in enumerate(steps) if s.truncated.any()]
    assert ended_at == [25, 50]
    returns = torch.stack([s.reward.mean(-1) for s in steps[1:26]]).sum(0)
    _assert_close(steps[25].episode_return, returns)
    assert (steps[25].episode_length == 25).all()
    assert not torch.equal(steps[25].obs, steps[25].final_obs)


def test_random_policy_return_matches_mpe2_scale():
    """design.md: mpe2's uniformly random policy scores about -27.0 per episode (N=3)."""
    env = SimpleSpreadVecEnv(1000)
    env.reset(seed=5)
    g = torch.Generator().manual_seed(5)
    for _ in range(25):
        step = env.step(torch.randint(0, 5, (1000, 3), generator=g))
    assert abs(step.episode_return.mean().item() + 27.0) < 1.5


def test_auto_reset_is_per_env():
    """Env 1 is put 5 steps from its end: only it resets, the others continue untouched."""
    env, twin = SimpleSpreadVecEnv(4), SimpleSpreadVecEnv(4)
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
        _assert_close(step.final_obs, twin_step.final_obs)
    assert step.done[1].all() and not step.done[[0, 2, 3]].any()
    assert step.episode_length[1] == 25
    others = [0, 2, 3]
    _assert_close(step.obs[others], twin_step.obs[others])
    assert not torch.allclose(step.obs[1], step.final_obs[1])
    assert (step.obs[1, :, :2] == 0).all()
    assert (env.t == torch.tensor([5, 0, 5, 5])).all()


def test_seeding():
    a, b = SimpleSpreadVecEnv(16), SimpleSpreadVecEnv(16)
    first, again, other = a.reset(seed=7).obs, b.reset(seed=7).obs, b.reset(seed=8).obs
    _assert_close(first, again)
    assert not torch.allclose(first, other)
    assert not torch.allclose(first[0], first[1]), "envs of one batch start in different places"
    pos = a.agent_pos
    assert pos.abs().max() <= 1 and pos.abs().max() > 0.5


def test_state_round_trip_continues_identically():
    env = SimpleSpreadVecEnv(6, N=3)
    step = env.reset(seed=9)
    g = torch.Generator().manual_seed(9)
    for _ in range(10):
        step = env.step(random_actions(env, step, g))
    saved = env.get_state()
    untouched = {key: saved[key].clone() for key in ("agent_pos", "agent_vel", "landmark_pos", "t")}
    actions = [torch.randint(0, 5, (6, 3), generator=g) for _ in range(30)]  # crosses a reset (RNG used)
    first = [env.step(a) for a in actions]
    for key, value in untouched.items():  # the snapshot does not alias the live env
        assert torch.equal(saved[key], value), key
    env.set_state(saved)
    second = [env.step(a) for a in actions]
    for s1, s2 in zip(first, second):
        assert torch.equal(s1.obs, s2.obs) and torch.equal(s1.reward, s2.reward)
        assert torch.equal(s1.truncated, s2.truncated)
    assert torch.equal(first[-1].episode_return, second[-1].episode_return)


def test_render_and_errors():
    env = SimpleSpreadVecEnv(2)
    env.reset(seed=0)
    frame = env.render(1)
    assert frame.shape == (400, 400, 3) and frame.dtype == np.uint8
    assert (frame != 255).any() and (frame == 255).any()
    with pytest.raises(UserError, match="simple_spread"):
        make_env("mpe:simple_tagg", 2)
    with pytest.raises(UserError):
        make_env("mpe:simple_spread", 2, N=0)
    with pytest.raises(UserError):
        make_env("mpe:simple_spread", 2, render_mode="human")


def test_steps_without_end_is_exact_and_carry_is_finish_without_a_reset():
    """The promise chunked collection relies on (collect_step.py): the next `steps_without_end()` steps end no
    episode and the one after ends some (envs at different episode steps, max_cycles 7); on such a step, `carry`
    gives what `finish` gives."""
    env = SimpleSpreadVecEnv(3, max_cycles=7)
    env.reset(seed=0)
    state = env.get_state()
    state["t"] = torch.tensor([0, 2, 5])  # the env at step 5 ends first, at its 2nd next step
    env.set_state(state)
    g = torch.Generator().manual_seed(1)
    seen = []
    for _ in range(30):
        k = env.steps_without_end()
        seen.append(k)
        for _ in range(k):
            core = env.step_parts()[0](torch.randint(0, 5, (3, 3), generator=g))
            obs, state, active, available, done = env.carry(*core)
            step = env.step_parts()[1](*core)
            assert not bool(step.episode_done.any())
            assert torch.equal(obs, step.obs) and torch.equal(state, step.state) and torch.equal(active, step.active)
            assert available is None and step.available_actions is None and torch.equal(done, step.done)
        assert bool(env.step(torch.randint(0, 5, (3, 3), generator=g)).episode_done.any())
    assert seen[:3] == [1, 2, 1] and set(seen) <= set(range(7))
