"""Checks that a VecEnv keeps the interface contract of `vec.py`; every backend's tests call it."""

from __future__ import annotations

import gymnasium as gym
import torch

from hypermappo.envs.vec import EnvStep, VecEnv


def random_actions(env: VecEnv, step: EnvStep, generator: torch.Generator | None = None) -> torch.Tensor:
    """Uniformly random actions for every slot, respecting available actions (dead -> no-op)."""
    e, n = env.num_envs, env.spec.num_agents
    space = env.spec.action_space
    dev = env.device
    if isinstance(space, gym.spaces.Discrete):
        if step.available_actions is not None:
            probs = step.available_actions.float().reshape(e * n, -1).cpu()
            return torch.multinomial(probs, 1, generator=generator).reshape(e, n).to(dev)
        return torch.randint(0, int(space.n), (e, n), generator=generator).to(dev)
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec = torch.as_tensor(space.nvec)
        u = torch.rand(e, n, len(nvec), generator=generator)
        return (u * nvec).long().to(dev)
    if isinstance(space, gym.spaces.Box):
        lo, hi = torch.as_tensor(space.low), torch.as_tensor(space.high)
        return (lo + (hi - lo) * torch.rand(e, n, *space.shape, generator=generator)).float().to(dev)
    if isinstance(space, gym.spaces.MultiBinary):
        return torch.randint(0, 2, (e, n, int(space.n)), generator=generator).float().to(dev)
    raise TypeError(f"unsupported action space {space}")


def check_step(env: VecEnv, s: EnvStep) -> None:
    """Shapes, dtypes, devices and the dead-slot conventions of one EnvStep."""
    e, n, spec = env.num_envs, env.spec.num_agents, env.spec
    assert s.obs.shape == (e, n, spec.obs_dim) and s.obs.dtype == torch.float32, s.obs.shape
    assert s.state.shape == (e, spec.state_dim) and s.state.dtype == torch.float32, s.state.shape
    for name in ("active", "done"):
        t = getattr(s, name)
        assert t.shape == (e, n) and t.dtype == torch.bool, (name, t.shape, t.dtype)
    assert s.reward.shape == (e, n) and s.reward.dtype == torch.float32
    for name in ("terminated", "truncated"):
        t = getattr(s, name)
        assert t.shape == (e,) and t.dtype == torch.bool, (name, t.shape, t.dtype)
    for t in (s.obs, s.state, s.reward, s.active):
        assert t.device.type == env.device.type
    if spec.has_available_actions:
        assert s.available_actions is not None and s.available_actions.dtype == torch.bool
        assert s.available_actions.shape[:2] == (e, n)
        assert s.available_actions.any(-1).all(), "every slot needs at least one available action"
    dead = ~s.active
    if dead.any():
        assert (s.obs[dead] == 0).all(), "dead slots must have zero observations"
        if s.available_actions is not None:
            av = s.available_actions[dead]
            assert av[:, 0].all() and not av[:, 1:].any(), "dead slots may only take the no-op"
    if spec.goal_names:  # goal labels: [E, N] int64 goal indices completed this step, -1 none
        g = s.extras.get("goal_event")
        assert g is not None, "an env with goal_names puts extras['goal_event'] into every EnvStep"
        assert g.shape == (e, n) and g.dtype == torch.int64, (g.shape, g.dtype)
        assert ((g >= -1) & (g < len(spec.goal_names))).all(), "goal_event out of range"
    ended = s.terminated | s.truncated
    assert (s.done[ended]).all(), "every agent is done when its env's episode ends"
    if s.episode_done is not None:
        assert torch.equal(s.episode_done, ended)


def run_random(env: VecEnv, steps: int, seed: int = 0) -> list[EnvStep]:
    """Reset and step with random actions, checking the contract at every step."""
    g = torch.Generator().manual_seed(seed)
    s = env.reset(seed=seed)
    check_step(env, s)
    out = [s]
    for _ in range(steps):
        s = env.step(random_actions(env, s, g))
        check_step(env, s)
        out.append(s)
    return out
