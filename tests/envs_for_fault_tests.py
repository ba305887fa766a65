"""A tiny PettingZoo env that goes wrong on cue, for the fault tests (`pettingzoo:envs_for_fault_tests:make_faulty_env`).

Two agents `a0`, `a1`, Discrete(2) actions, 3-float observations, episodes of 5 steps. The instance
whose first `reset` seed is `faulty_seed` (env i of a run with seed s is seeded s + i) misbehaves from
its `after`-th step on, counted over all its episodes: `fault="reward"` / `"observation"` puts `value`
(nan or inf) into agent `agent`'s reward / observation, `fault="raise"` raises a RuntimeError, and
`fault="final_observation"` ends episodes truncated (a time limit) with `value` in the last observation.
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

AGENTS = ["a0", "a1"]
EPISODE_LENGTH = 5


class FaultyEnv(ParallelEnv):
    metadata: ClassVar[dict] = {"name": "faulty_v0", "render_modes": []}

    def __init__(self, fault: str = "reward", after: int = 10, faulty_seed: int = 0, agent: int = 0,
                 value: str = "nan"):
        self.possible_agents = list(AGENTS)
        self.agents = []
        self.fault, self.after, self.faulty_seed, self.agent = fault, after, faulty_seed, AGENTS[agent]
        self.value = float(value)
        self.first_seed = None
        self.steps = 0  # over all episodes of this instance
        self.t = 0

    def observation_space(self, agent):
        return gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(2)

    def _obs(self, agent: str) -> np.ndarray:
        obs = np.array([self.t, AGENTS.index(agent), 1.0], np.float32)
        final = self.fault == "final_observation" and self.t >= EPISODE_LENGTH
        if self._faulty() and (self.fault == "observation" or final) and agent == self.agent:
            obs[1] = self.value
        return obs

    def _faulty(self) -> bool:
        return self.first_seed == self.faulty_seed and self.steps >= self.after

    def reset(self, seed=None, options=None):
        if self.first_seed is None:
            self.first_seed = seed
        self.t = 0
        self.agents = list(AGENTS)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        self.t += 1
        self.steps += 1
        if self._faulty() and self.fault == "raise":
            raise RuntimeError(f"boom at step {self.steps}")
        rewards = {a: float(actions[a]) for a in self.agents}
        if self._faulty() and self.fault == "reward":
            rewards[self.agent] = self.value
        done = self.t >= EPISODE_LENGTH
        observations = {a: self._obs(a) for a in self.agents}
        flags = {a: done for a in self.agents}
        unflagged = {a: False for a in self.agents}
        truncated = self.fault == "final_observation"
        result = (observations, rewards, unflagged if truncated else flags, flags if truncated else unflagged,
                  {a: {} for a in self.agents})
        if done:
            self.agents = []
        return result


def make_faulty_env(**kwargs) -> FaultyEnv:
    return FaultyEnv(**kwargs)
