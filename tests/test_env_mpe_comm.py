"""Tests of the batched MPE communication scenarios (speaker_listener, reference, crypto): equal to mpe2
step for step in both action modes, and keeping the VecEnv contract."""

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
SCENARIOS = {"simple_speaker_listener": "simple_speaker_listener_v4", "simple_reference": "simple_reference_v3",
             "simple_crypto": "simple_crypto_v3"}


def _landmark_index(world, landmark) -> int:
    return next(i for i, lm in enumerate(world.landmarks) if lm is landmark)


def _copy_world(scenario: str, ref_envs) -> dict[str, np.ndarray]:
    """mpe2's current worlds as set_world keyword arrays [E, ...] (positions, goals, key, comm state)."""
    worlds = [e.unwrapped.world for e in ref_envs]
    landmark_pos = np.stack([[lm.state.p_pos for lm in w.landmarks] for w in worlds])
    if scenario == "simple_speaker_listener":
        return {"speaker_pos": [w.agents[0].state.p_pos for w in worlds],
                "listener_pos": [w.agents[1].state.p_pos for w in worlds],
                "listener_vel": [w.agents[1].state.p_vel for w in worlds], "landmark_pos": landmark_pos,
                "goal": [_landmark_index(w, w.agents[0].goal_b) for w in worlds],
                "comm": [w.agents[0].state.c for w in worlds]}
    agent_pos = np.stack([[a.state.p_pos for a in w.agents] for w in worlds])
    comm = np.stack([[a.state.c for a in w.agents] for w in worlds])
    if scenario == "simple_reference":
        return {"agent_pos": agent_pos, "agent_vel": [[a.state.p_vel for a in w.agents] for w in worlds],
                "landmark_pos": landmark_pos, "comm": comm,
                "goal": [[_landmark_index(w, a.goal_b) for a in w.agents] for w in worlds]}
    return {"agent_pos": agent_pos, "landmark_pos": landmark_pos, "comm": comm,  # simple_crypto
            "goal": [_landmark_index(w, w.agents[0].goal_a) for w in worlds],
            "key": [int(np.argmax(w.agents[2].key)) for w in worlds]}


def _sample_actions(ref_env, num_envs: int, slot_dim: int, continuous: bool, rng: np.random.Generator):
    """Random actions as our [E, N] / [E, N, D] array and as mpe2's per-env dicts (each agent's own space)."""
    names = ref_env.possible_agents
    spaces = [ref_env.action_space(n) for n in names]
    if continuous:  # outside [0, 1] on purpose (mpe2 clips, so must we); some all-negative rows clip to silence
        ours = rng.uniform(-0.3, 1.3, (num_envs, len(names), slot_dim)).astype(np.float32)
        ours[rng.random((num_envs, len(names))) < 0.2] = -0.1
        per_env = [{n: a[i, : s.shape[0]] for i, (n, s) in enumerate(zip(names, spaces))} for a in ours]
    else:
        ours = np.stack([rng.integers(0, s.n, num_envs) for s in spaces], axis=1)  # [E, N]
        per_env = [{n: int(a[i]) for i, n in enumerate(names)} for a in ours]
    return ours, per_env


CASES = [(s, c, {}) for s in SCENARIOS for c in (False, True)] + [("simple_reference", False, {"local_ratio": 0.2})]


@pytest.mark.parametrize("scenario, continuous, kwargs", CASES)
def test_matches_mpe2_step_for_step(scenario, continuous, kwargs):
    """Same start (copied from mpe2) + same actions -> same obs (padded), state, rewards, truncation, returns."""
    module = importlib.import_module(f"mpe2.{SCENARIOS[scenario]}")
    seeds = [0, 1, 2]
    ref_envs = [module.parallel_env(continuous_actions=continuous, **kwargs) for _ in seeds]
    names = ref_envs[0].possible_agents
    env = make_env(f"mpe:{scenario}", len(seeds), continuous_actions=continuous, **kwargs)
    assert env.spec.agent_names == names
    assert env.spec.state_dim == ref_envs[0].unwrapped.state_space.shape[0]
    slot_dim = env.spec.action_space.shape[0] if continuous else 0
    env.reset(seed=0)
    rng = np.random.default_rng(123)

    def padded(obs_dicts):
        out = np.zeros((len(seeds), len(names), env.spec.obs_dim), np.float32)
        for e, o in enumerate(obs_dicts):
            for i, n in enumerate(names):
                out[e, i, : len(o[n])] = o[n]
        return out

    rewards_seen = []
    for episode in range(2):  # the second episode starts after our env's own auto-reset
        ref_obs = [e.reset(seed=s + 1000 * episode)[0] for e, s in zip(ref_envs, seeds)]
        step = env.set_world(**_copy_world(scenario, ref_envs))
        np.testing.assert_allclose(step.obs.numpy(), padded(ref_obs), atol=ATOL)
        np.testing.assert_allclose(step.state.numpy(), [e.state() for e in ref_envs], atol=ATOL)
        ref_return = np.zeros(len(seeds))
        for _ in range(25):
            ours, per_env = _sample_actions(ref_envs[0], len(seeds), slot_dim, continuous, rng)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # mpe2's clip wrapper warns about out-of-range actions
                ref = [e.step(a) for e, a in zip(ref_envs, per_env)]
            step = env.step(torch.as_tensor(ours))
            ref_reward = np.array([[r[1][n] for n in names] for r in ref])
            np.testing.assert_allclose(step.final_obs.numpy(), padded([r[0] for r in ref]), atol=ATOL)
            np.testing.assert_allclose(step.final_state.numpy(), [e.state() for e in ref_envs], atol=ATOL)
            np.testing.assert_allclose(step.reward.numpy(), ref_reward, atol=ATOL)
            np.testing.assert_array_equal(step.truncated.numpy(), [all(r[3].values()) for r in ref])
            assert not step.terminated.any()
            rewards_seen.append(ref_reward)
            ref_return += ref_reward.mean(-1)
        assert step.truncated.all() and (step.episode_length == 25).all()
        np.testing.assert_allclose(step.episode_return.numpy(), ref_return, atol=1e-3)
    rewards = np.concatenate(rewards_seen)
    if continuous or scenario != "simple_crypto":  # discrete crypto rewards are sums of 0 / +-2 terms
        assert len(np.unique(rewards.round(4))) > 10, "the comparison saw too few distinct rewards to mean much"
    if scenario == "simple_crypto":  # every reward branch exercised: zero, positive and negative terms
        assert (rewards > 0).any() and (rewards < 0).any() and (rewards == 0).any()


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("continuous", [False, True])
def test_contract_and_auto_reset(scenario, continuous):
    env = make_env(f"mpe:{scenario}_v3" if scenario != "simple_speaker_listener" else f"mpe:{scenario}_v4", 8,
                   continuous_actions=continuous)
    assert env.spec.can_render and env.spec.can_save_state
    steps = run_random(env, 60, seed=1)
    assert [t for t, s in enumerate(steps) if s.truncated.any()] == [25, 50]
    returns = torch.stack([s.reward.mean(-1) for s in steps[1:26]]).sum(0)
    assert torch.allclose(steps[25].episode_return, returns, atol=1e-5)
    assert (steps[25].episode_length == 25).all()
    assert not torch.equal(steps[25].obs, steps[25].final_obs)
    assert (steps[26].obs.std(0) > 0).any(), "envs of one batch differ"


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_auto_reset_is_per_env(scenario):
    """Env 1 is put 5 steps from its end: only it resets (at rest, silent), the others continue untouched."""
    env, twin = make_env(f"mpe:{scenario}", 4), make_env(f"mpe:{scenario}", 4)
    step = env.reset(seed=3)
    twin.reset(seed=3)
    state = env.get_state()
    state["t"][1] = 20
    state["tracker"]["lengths"][1] = 20
    env.set_state(state)
    g = torch.Generator().manual_seed(0)
    for k in range(5):
        actions = random_actions(env, step, g)
        step, twin_step = env.step(actions), twin.step(actions)
        assert step.truncated.tolist() == [False, k == 4, False, False]
        assert torch.equal(step.final_obs, twin_step.final_obs)
    assert step.done[1].all() and not step.done[[0, 2, 3]].any() and step.episode_length[1] == 25
    others = [0, 2, 3]
    assert torch.equal(step.obs[others], twin_step.obs[others])
    assert not torch.equal(step.obs[1], step.final_obs[1])
    for name, value in env.world.items():
        if name.endswith("_vel") or name == "comm":
            assert (value[1] == 0).all() and (value[others] != 0).any(), name
    assert env.t.tolist() == [5, 0, 5, 5]


def test_heterogeneous_slots_speaker_listener():
    """Speaker: 3-word slot (actions 3, 4 unavailable, and if sent anyway they say word 0), obs padded with zeros."""
    env = make_env("mpe:simple_speaker_listener", 4)
    assert env.spec.team_reward and env.spec.has_available_actions and env.spec.obs_dim == 11
    step = env.reset(seed=0)
    assert step.available_actions[:, 0].tolist() == [[True, True, True, False, False]] * 4
    assert step.available_actions[:, 1].all()
    assert (step.obs[:, 0, 3:] == 0).all() and (step.obs[:, 0, :3] > 0).all()
    saved = env.get_state()
    padded = env.step(torch.tensor([[3, 0], [4, 0], [0, 0], [0, 0]])).final_obs
    env.set_state(saved)
    word0 = env.step(torch.zeros(4, 2, dtype=torch.long)).final_obs
    assert torch.equal(padded, word0)
    assert (word0[:, 1, 8:] == torch.tensor([1.0, 0.0, 0.0])).all(), "the listener hears word 0"
    crypto, reference = make_env("mpe:simple_crypto", 2), make_env("mpe:simple_reference", 2)
    assert not crypto.spec.team_reward and not crypto.spec.has_available_actions
    assert (crypto.reset(seed=0).obs[:, 0, 4:] == 0).all(), "eve's observation is padded"
    assert not reference.spec.team_reward and make_env("mpe:simple_reference", 2, local_ratio=0.0).spec.team_reward


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_seeding_and_state_round_trip(scenario):
    env, twin = make_env(f"mpe:{scenario}", 6), make_env(f"mpe:{scenario}", 6)
    first, again = env.reset(seed=9), twin.reset(seed=9)
    assert torch.equal(first.obs, again.obs) and not torch.equal(first.obs, twin.reset(seed=10).obs)
    assert len(set(env.world["goal"].flatten().tolist())) > 1, "goals are drawn, not fixed"
    g = torch.Generator().manual_seed(9)
    step = first
    for _ in range(10):
        step = env.step(random_actions(env, step, g))
    saved = env.get_state()
    untouched = {k: v.clone() for k, v in saved["world"].items()}
    actions = []
    for _ in range(30):  # crosses a reset (RNG used)
        actions.append(random_actions(env, step, g))
        step = env.step(actions[-1])
    first_run = [env.step(a) for a in actions]
    for key, value in untouched.items():  # the snapshot does not alias the live env
        assert torch.equal(saved["world"][key], value), key
    env.set_state(saved)
    for _ in range(30):
        env.step(torch.zeros_like(actions[0]))
    env.set_state(saved)
    step = None
    for a in actions:
        step = env.step(a)
    second_run = [env.step(a) for a in actions]
    for s1, s2 in zip(first_run, second_run):
        assert torch.equal(s1.obs, s2.obs) and torch.equal(s1.reward, s2.reward)
        assert torch.equal(s1.truncated, s2.truncated)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_render_shows_entities_and_messages(scenario):
    env = make_env(f"mpe:{scenario}", 2)
    env.reset(seed=0)
    silent = env.render(1)
    assert silent.shape == (400, 400, 3) and silent.dtype == np.uint8
    assert (silent != 255).any() and (silent == 255).any()
    actions = torch.ones(2, env.spec.num_agents, dtype=torch.long)  # word 0 for reference (1 // 5), word 1 else
    env.step(actions)
    speaking = env.render(1)
    if scenario == "simple_speaker_listener":  # only the listener moved: compare the message corner only
        assert not np.array_equal(silent[-40:, :60], speaking[-40:, :60]), "the utterance is not drawn"
    else:
        assert not np.array_equal(silent, speaking)


def test_user_errors():
    with pytest.raises(UserError, match="local_ratio"):
        make_env("mpe:simple_reference", 2, local_ratio=1.5)
    with pytest.raises(UserError, match="max_cycles"):
        make_env("mpe:simple_crypto", 2, max_cycles=0)
    with pytest.raises(UserError, match="continuous_actions"):
        make_env("mpe:simple_speaker_listener", 2, continuous_actions="yes")
    with pytest.raises(UserError, match="unknown"):
        make_env("mpe:simple_crypto", 2).set_world(positions=np.zeros((2, 3, 2)))
    with pytest.raises(UserError, match="no argument"):
        make_env("mpe:simple_crypto", 2, N=4)
