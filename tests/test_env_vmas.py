"""The VMAS adapter keeps the VecEnv contract and reports exactly what VMAS itself computes."""

import pytest
import torch

vmas = pytest.importorskip("vmas")

from vmas.simulator.core import Agent, World
from vmas.simulator.scenario import BaseScenario

from hypermappo.envs.contract import random_actions, run_random
from hypermappo.envs.registry import make_env
from hypermappo.envs.vmas import VmasVecEnv
from hypermappo.errors import UserError


class CountdownScenario(BaseScenario):
    """Env e terminates (VMAS `done()`) after 2 + e % 3 steps, so envs finish at different times.
    The observation is the env's own step counter, which shows whether and when an env was reset."""

    def make_world(self, batch_dim, device, **kwargs):
        world = World(batch_dim, device)
        for i in range(2):
            world.add_agent(Agent(name=f"agent_{i}", collide=False))
        self.t = torch.zeros(batch_dim, device=device)
        self.limit = 2 + torch.arange(batch_dim, device=device) % 3
        return world

    def reset_world_at(self, env_index=None):
        if env_index is None:
            self.t.zero_()
        else:
            self.t[env_index] = 0

    def post_step(self):
        self.t += 1

    def observation(self, agent):
        return self.t.unsqueeze(-1).clone()  # [E, 1]

    def reward(self, agent):
        return torch.ones_like(self.t)

    def done(self):
        return self.t >= self.limit


def test_contract_with_auto_reset():
    env = make_env("vmas:simple_spread", 8)  # MPE default max_steps 25
    assert env.spec.episode_limit == 25 and env.spec.num_agents == 3 and env.spec.obs_dim == 14
    steps = run_random(env, 30)
    ends = torch.stack([s.episode_done for s in steps[1:]])  # [T, E]
    assert ends[24].all() and ends.sum() == 8  # every env truncated once, at step 25
    assert steps[25].truncated.all() and not steps[25].terminated.any()
    assert torch.equal(steps[25].episode_length, torch.full((8,), 25))


def test_heterogeneous_agents_are_padded():
    env = make_env("vmas:simple_speaker_listener", 4, max_steps=5)
    assert env.spec.obs_dim == 11 and env.spec.state_dim == 3 + 11 and env.spec.action_space.n == 27
    s = run_random(env, 7)[-1]
    assert (s.obs[:, 0, 3:] == 0).all()  # the speaker sees 3 numbers, padded to the listener's 11
    assert s.available_actions[:, 0].all() and s.available_actions[:, 1, :9].all()
    assert not s.available_actions[:, 1, 9:].any()  # the listener has 9 actions
    cont = make_env("vmas:simple_speaker_listener", 4, max_steps=5, continuous_actions=True)
    assert cont.spec.action_space.shape == (5,) and not cont.spec.has_available_actions
    run_random(cont, 7)


def test_matches_vmas_own_outputs():
    """Same seed and actions: padded obs, rewards, final obs and the reset after truncation equal VMAS's."""
    e, t_max = 4, 5
    env = VmasVecEnv("simple_speaker_listener", e, "cpu", max_steps=t_max)
    g = torch.Generator().manual_seed(1)
    s = env.reset(seed=3)
    record = [(s, None)]
    for _ in range(t_max + 1):
        a = random_actions(env, s, g)
        s = env.step(a)
        record.append((s, a))

    raw = vmas.make_env("simple_speaker_listener", num_envs=e, continuous_actions=False, max_steps=t_max,
                        terminated_truncated=True, clamp_actions=True)
    obs = raw.reset(seed=3)
    dims = [o.shape[-1] for o in obs]

    def same_obs(ours, theirs):
        for i, o in enumerate(theirs):
            assert torch.equal(ours[:, i, : dims[i]], o) and (ours[:, i, dims[i]:] == 0).all()

    same_obs(record[0][0].obs, obs)
    assert torch.equal(record[0][0].state, torch.cat(obs, -1))
    for k, (s, a) in enumerate(record[1:], start=1):
        obs, rew, terminated, truncated, _ = raw.step([a[:, i : i + 1] for i in range(2)])
        assert torch.equal(s.reward, torch.stack(rew, 1))
        assert torch.equal(s.terminated, terminated) and torch.equal(s.truncated, truncated)
        if k == t_max:  # truncation: the adapter already reset; the finished episode is in final_obs
            same_obs(s.final_obs, obs)
            assert torch.equal(s.final_state, torch.cat(obs, -1))
            obs = raw.reset()
        same_obs(s.obs, obs)


def test_independent_auto_reset_and_termination_wins_over_truncation():
    env = VmasVecEnv(CountdownScenario(), 6, "cpu", max_steps=3)  # limits per env: 2 3 4 2 3 4
    env.reset(seed=0)
    zeros = torch.zeros(6, 2, dtype=torch.long)
    s = env.step(zeros)
    assert not s.episode_done.any() and (s.obs[..., 0] == 1).all()
    s = env.step(zeros)  # envs 0 and 3 terminate after 2 steps; only they are reset
    assert s.terminated.tolist() == [True, False, False, True, False, False] and not s.truncated.any()
    assert s.obs[:, 0, 0].tolist() == [0, 2, 2, 0, 2, 2]
    assert (s.final_obs[[0, 3], :, 0] == 2).all() and s.done[[0, 3]].all() and not s.done[[1, 2, 4, 5]].any()
    assert s.episode_length[[0, 3]].tolist() == [2, 2] and s.episode_return[[0, 3]].tolist() == [2.0, 2.0]
    s = env.step(zeros)  # step 3: envs 1, 4 terminate AND reach max_steps (terminated wins); 2, 5 truncate
    assert s.terminated.tolist() == [False, True, False, False, True, False]
    assert s.truncated.tolist() == [False, False, True, False, False, True]
    assert s.obs[:, 0, 0].tolist() == [1, 0, 0, 1, 0, 0]
    run_random(env, 10)


def test_seeding_is_reproducible():
    def rollout(seed):
        env = make_env("vmas:balance", 3, max_steps=4, continuous_actions=True)
        return torch.stack([s.obs for s in run_random(env, 6, seed=seed)])

    a, b, c = rollout(0), rollout(0), rollout(1)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_user_errors():
    with pytest.raises(UserError, match="simple_spread"):
        make_env("vmas:simple_sprad", 2)
    with pytest.raises(UserError, match="n_agnts"):
        make_env("vmas:simple_spread", 2, n_agnts=4)


def test_render_frame():
    env = make_env("vmas:simple_spread", 2)
    env.reset(seed=0)
    try:
        frame = env.render(1)
    except RuntimeError as e:  # no display / EGL on this machine
        pytest.skip(str(e))
    finally:
        env.close()
    assert frame.ndim == 3 and frame.shape[-1] == 3 and frame.dtype.name == "uint8"
