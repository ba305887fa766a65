"""Gymnasium multi-agent envs with Tuple spaces (EPyMARL style: lbforaging, rware) as a VecEnv.

Env string `gym:<module>:<env id>`, e.g. `gym:lbforaging:Foraging-8x8-2p-2f-v3` or
`gym:rware:rware-tiny-2ag-v2`: imports `module` (which registers the ids), then
`gymnasium.make(id, **kwargs)`. `gym:<env id>` works for ids that are already registered.

Such an env has Tuple observation / action spaces with one entry per agent, takes a tuple of
actions and returns per-agent rewards as a list (a scalar reward is shared by all agents) and
`done` / `truncated` as a bool or a per-agent list. The agent slots, padding, death, state
(concatenated padded observations), seeding and vectoriser rules and the kwargs `vectorizer`,
`num_workers`, `start_method`, `render_mode`, `team_reward` are those of `pettingzoo.py`, whose adapter base and
vectorisers this module reuses. Action masks are used when `info["action_mask"]` holds one per agent.
Note that lbforaging and rware report their own time limit as `done` (terminated), not truncated;
pass `max_episode_steps=T` below their limit to get Gymnasium's truncation instead.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch

from hypermappo.envs.pettingzoo import AdapterVecEnv, SingleEnvAdapter, episode_limit_of, pop_vectorizer_kwargs
from hypermappo.errors import UserError


def _per_agent(value, n: int, dtype) -> np.ndarray:
    """A scalar (shared) or a per-agent sequence -> [N] array."""
    array = np.asarray(value, dtype)
    if array.ndim == 0:
        return np.full(n, array, dtype)
    if array.shape != (n,):
        raise ValueError(f"expected a scalar or {n} per-agent values, got shape {array.shape}")
    return array


class TupleEnvAdapter(SingleEnvAdapter):
    """A Gymnasium env with Tuple spaces as N slots; agents never leave, but per-agent `done` kills a slot."""

    def __init__(self, env: gym.Env, *, can_render: bool = False, what: str = "env"):
        self.env = env
        if not (isinstance(env.observation_space, gym.spaces.Tuple) and isinstance(env.action_space, gym.spaces.Tuple)):
            raise UserError(f"env {what!r} needs Tuple observation and action spaces (one entry per agent), got "
                            f"{type(env.observation_space).__name__} / {type(env.action_space).__name__}")
        obs_spaces, action_spaces = list(env.observation_space.spaces), list(env.action_space.spaces)
        if len(obs_spaces) != len(action_spaces):
            raise UserError(f"env {what!r}: {len(obs_spaces)} observation spaces but {len(action_spaces)} action spaces")
        n = len(obs_spaces)
        observations, info = env.reset()  # a probe: are action masks given?
        self._setup_slots([f"agent_{i}" for i in range(n)], obs_spaces, action_spaces,
                          env_gives_masks=isinstance(info, dict) and "action_mask" in info,
                          episode_limit=episode_limit_of(env), can_render=can_render, what=what)
        self.all_present = np.ones(n, bool)  # [N] agents never leave a Tuple env
        self._write_observations(observations, info)
        self._start_episode(self.all_present)

    def _write_observations(self, observations, info) -> None:
        masks = info.get("action_mask") if isinstance(info, dict) else None
        for i, o in enumerate(observations):
            self._write_agent_obs(i, o, None if masks is None else masks[i])

    def reset(self, seed: int | None) -> None:
        observations, info = self.env.reset(seed=seed)
        self.obs.fill(0.0)
        self.env_masks.fill(True)
        self._write_observations(observations, info)
        self._start_episode(self.all_present)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool, bool]:
        n = self.spec.num_agents
        acted = self.alive.copy()  # [N]
        env_actions = tuple(self._env_action(i, actions[i]) if acted[i] else self.noop_actions[i] for i in range(n))
        observations, rewards, dones, truncations, info = self.env.step(env_actions)
        reward = _per_agent(rewards, n, np.float32) * acted  # [N]
        terminated = _per_agent(dones, n, bool)  # [N]
        truncated = _per_agent(truncations, n, bool)  # [N]
        self._write_observations(observations, info)
        done, env_terminated, env_truncated = self._finish_step(acted, terminated, truncated, self.all_present)
        return reward, done, env_terminated, env_truncated

    def render(self) -> np.ndarray:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


@dataclass(frozen=True)
class TupleEnvFactory:
    """Picklable recipe for one Tuple-space Gymnasium env adapter, so worker processes can build their own."""

    module: str | None
    env_id: str
    env_string: str
    kwargs: dict = field(default_factory=dict)
    render_mode: str | None = None

    def __call__(self) -> TupleEnvAdapter:
        _import_registering_module(self.module, self.env_string)
        kwargs = dict(self.kwargs)
        if self.render_mode is not None:
            kwargs["render_mode"] = self.render_mode
        kwargs.setdefault("disable_env_checker", True)  # it warns on every step about per-agent reward lists
        env = gym.make(self.env_id, **kwargs)
        return TupleEnvAdapter(env, can_render=self.render_mode == "rgb_array", what=self.env_string)


def _import_registering_module(module: str | None, env_string: str) -> None:
    if module is None:
        return
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise UserError(f"env {env_string!r}: cannot import module {module!r} ({e}); is it installed?") from None


def make(name: str, num_envs: int, device: torch.device | str = "cpu", **kwargs) -> AdapterVecEnv:
    """name = `<module>:<env id>` or `<env id>` (see module docstring)."""
    env_string = f"gym:{name}"
    module, _, env_id = name.rpartition(":")
    if not env_id:
        raise UserError(f"env {env_string!r}: expected gym:<module>:<env id>, e.g. gym:lbforaging:Foraging-8x8-2p-2f-v3")
    _import_registering_module(module or None, env_string)
    if env_id not in gym.registry:
        close = difflib.get_close_matches(env_id, list(gym.registry), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UserError(f"env {env_string!r}: no Gymnasium env id {env_id!r} is registered{hint}")
    vectorizer_kwargs = pop_vectorizer_kwargs(kwargs)
    render_mode = kwargs.pop("render_mode", None)
    factory = TupleEnvFactory(module or None, env_id, env_string, dict(kwargs), render_mode)
    return AdapterVecEnv(factory, num_envs, device, **vectorizer_kwargs)
