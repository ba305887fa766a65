"""One env of a batched torch VecEnv seen as a PettingZoo ParallelEnv, so a game's rules live once (in torch).

A subclass names its `vec_class` (a VecEnv taking `(num_envs, device, **kwargs)` with `frame_from_state` for
rendering) and `metadata`. Infos: at an episode's end, every per-env extra ([E] tensors such as
`stag_captures`) goes into each agent's info; when the env labels goals (`spec.goal_names`, also exposed as
the attribute `goal_names`), every reset and step puts `infos[agent]["goal_event"]` (int: the goal index the
agent completed in the step just taken, -1 for none), which the PettingZoo adapter turns back into
`extras["goal_event"]`.
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch
from pettingzoo import ParallelEnv

from hypermappo.errors import UserError


class BatchedParallelEnv(ParallelEnv):
    """A PettingZoo ParallelEnv backed by a one-env batch of `vec_class`."""

    metadata: ClassVar[dict] = {"render_modes": ["rgb_array"], "name": "batched_v0", "is_parallelizable": True}
    vec_class: ClassVar[type]

    def __init__(self, render_mode: str | None = None, **kwargs):
        name = self.metadata["name"]
        if render_mode not in (None, "rgb_array"):
            raise UserError(f"{name}: render_mode={render_mode!r} is not supported; expected None or 'rgb_array'")
        self.render_mode = render_mode
        self.vec = self.vec_class(1, "cpu", **kwargs)
        spec = self.vec.spec
        self.possible_agents = list(spec.agent_names)
        self.agents: list[str] = []
        self.goal_names = list(spec.goal_names)
        # PettingZoo wants the very same space object on every call (so seeding a space sticks)
        self._observation_spaces = {a: spec.observation_space for a in self.possible_agents}
        self._action_spaces = {a: gym.spaces.Discrete(spec.action_space.n) for a in self.possible_agents}
        self.state_space = gym.spaces.Box(0.0, 1.0, (spec.state_dim,), np.float32)
        self._state = np.zeros(spec.state_dim, np.float32)

    def observation_space(self, agent: str) -> gym.spaces.Box:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> gym.spaces.Discrete:
        return self._action_spaces[agent]

    def _split(self, obs: torch.Tensor) -> dict[str, np.ndarray]:
        rows = obs[0].numpy()
        return {a: rows[i].copy() for i, a in enumerate(self.possible_agents)}

    def _infos(self, extras: dict, ended: bool) -> dict[str, dict]:
        episode = {k: int(v[0]) for k, v in extras.items() if v.dim() == 1} if ended else {}
        infos = {a: dict(episode) for a in self.possible_agents}
        if self.goal_names:
            for i, a in enumerate(self.possible_agents):
                infos[a]["goal_event"] = int(extras["goal_event"][0, i])
        return infos

    def reset(self, seed: int | None = None, options: dict | None = None):
        s = self.vec.reset(seed)
        self.agents = list(self.possible_agents)
        self._state = s.state[0].numpy().copy()
        return self._split(s.obs), self._infos(s.extras, ended=False)

    def step(self, actions: dict):
        if not self.agents:
            return {}, {}, {}, {}, {}
        joint = torch.tensor([[int(actions.get(a, 0)) for a in self.possible_agents]], dtype=torch.long)
        s = self.vec.step(joint)
        ended = bool(s.episode_done[0])
        obs = self._split(s.final_obs if ended else s.obs)
        self._state = (s.final_state if ended else s.state)[0].numpy().copy()
        rewards = {a: float(s.reward[0, i]) for i, a in enumerate(self.possible_agents)}
        terminations = dict.fromkeys(self.possible_agents, bool(s.terminated[0]))
        truncations = dict.fromkeys(self.possible_agents, bool(s.truncated[0]))
        infos = self._infos(s.extras, ended)
        if ended:
            self.agents = []
        return obs, rewards, terminations, truncations, infos

    def state(self) -> np.ndarray:
        return self._state.copy()

    def render(self):
        """Frame of the last observed state: at an episode's end its final state, not the auto-reset one."""
        if self.render_mode != "rgb_array":
            return None
        return self.vec.frame_from_state(self._state)

    def close(self):
        pass
