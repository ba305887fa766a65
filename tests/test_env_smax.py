"""The SMAX bridge keeps the VecEnv contract (deaths, masks, auto-reset) and reports what SMAX computes.

Every test uses the same map, E and kwargs, so XLA compiles the jitted step once per session (that
compile dominates the run time; JAX's persistent cache makes later sessions faster)."""

import numpy as np
import pytest
import torch

pytest.importorskip("jaxmarl")

from hypermappo.envs.contract import random_actions, run_random
from hypermappo.envs.registry import make_env
from hypermappo.errors import UserError

E, MAX_STEPS = 8, 20


def make():
    return make_env("smax:3m", E, max_steps=MAX_STEPS)


@pytest.fixture(scope="module")
def rollout():
    env = make()
    return env, run_random(env, 3 * MAX_STEPS, seed=0)


def test_contract_deaths_and_episode_ends(rollout):
    env, steps = rollout
    assert env.spec.num_agents == 3 and env.spec.action_space.n == 8 and env.spec.state_dim == 72
    later = steps[1:]
    deaths = sum(int((s.done & ~s.episode_done.unsqueeze(-1)).sum()) for s in later)
    terminated = sum(int(s.terminated.sum()) for s in later)
    truncated = sum(int(s.truncated.sum()) for s in later)
    assert deaths > 0 and terminated > 0 and truncated > 0
    for prev, s in zip(steps, later):
        assert s.available_actions[..., 0].all()  # "stop" is always possible
        died = prev.active & ~s.active & ~s.episode_done.unsqueeze(-1)
        assert s.done[died].all()  # done on the step a unit dies ...
        assert (s.reward[~prev.active] == 0).all()  # ... and dead slots get no reward afterwards
        assert not (s.done & ~prev.active & ~s.episode_done.unsqueeze(-1)).any()  # done only once
        ended = s.episode_done
        assert (s.episode_length[ended] <= MAX_STEPS).all()
        assert (s.episode_length[s.truncated] == MAX_STEPS).all()
        assert s.active[ended].all()  # a new episode starts with every unit alive
    lengths = torch.cat([s.episode_length[s.episode_done] for s in later])
    assert len(lengths.unique()) > 1  # envs end at different times, each reset on its own


def test_tensors_match_smax_own_functions():
    """obs, world state and available actions equal SMAX's get_obs / get_world_state / get_avail_actions
    on the bridge's own JAX state, with the action index permuted so that 0 = SMAX's stop (4)."""
    import jax
    import jax.numpy as jnp

    env = make()
    smax = env.program.env

    @jax.jit
    @jax.vmap
    def smax_view(st):
        alive = st.state.unit_alive[:3]
        obs = jnp.stack([smax.get_obs(st)[a] for a in smax.agents]) * alive[:, None]
        avail = jnp.stack(list(smax.get_avail_actions(st).values())).astype(bool)
        return obs, smax.get_world_state(st), avail, alive

    s = env.reset(seed=5)
    g = torch.Generator().manual_seed(5)
    for _ in range(12):
        s = env.step(random_actions(env, s, g))
        obs, world_state, avail, alive = (np.asarray(x) for x in smax_view(env.state))
        np.testing.assert_allclose(s.obs.numpy(), obs, atol=1e-6)
        np.testing.assert_allclose(s.state.numpy(), world_state, atol=1e-6)
        assert (s.available_actions.numpy() == avail[..., [4, 0, 1, 2, 3, 5, 6, 7]]).all()
        assert (s.active.numpy() == alive).all()


def test_action_zero_is_stop():
    env = make()
    env.reset(seed=1)
    env.step(torch.zeros(E, 3, dtype=torch.long))
    assert (np.asarray(env.state.state.prev_movement_actions)[:, :3] == 0).all()
    env.step(torch.ones(E, 3, dtype=torch.long))  # our 1 = SMAX move 0
    assert (np.abs(np.asarray(env.state.state.prev_movement_actions)[:, :3]).sum(-1) > 0).all()


def test_seeding_is_reproducible():
    def obs(seed):
        return torch.stack([s.obs for s in run_random(make(), 15, seed=seed)])

    a, b, c = obs(0), obs(0), obs(1)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_unknown_map():
    with pytest.raises(UserError, match="3m"):
        make_env("smax:3mm", 2)
