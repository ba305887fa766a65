"""A tiny PettingZoo env where team reward earned after a death matters: the sacrifice game.

Two agents, episodes of `length` steps (then truncated: a time limit). Each alive agent holds
(action 0) or sacrifices itself (action 1: it dies at that step). Every agent alive at a step gets
the team reward: 1.0 once some agent has sacrificed at an earlier step, else 0.1. When both are
gone the episode ends (terminated). Best play: one agent sacrifices at once (team reward
0.1 + 1.0 * (length - 1)); nobody sacrificing earns 0.1 * length. An agent whose trace ends at
its death (`ppo.death=agent`) never sees the reward its sacrifice buys, so holding is its best
reply; with `ppo.death=episode` it does. Used by `benchmarks/death_modes.py` as
`pettingzoo:death_env:make` with env kwarg `team_reward: true`.
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

AGENTS = ["agent_0", "agent_1"]


class SacrificeEnv(ParallelEnv):
    metadata: ClassVar[dict] = {"name": "sacrifice_v0", "render_modes": []}

    def __init__(self, length: int = 10):
        self.possible_agents = list(AGENTS)
        self.agents: list[str] = []
        self.length = length
        self.max_cycles = length  # the adapter reads the episode limit from here
        self.t, self.sacrificed = 0, False

    def observation_space(self, agent):
        return gym.spaces.Box(0.0, 1.0, (5,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(2)

    def _obs(self, agent):
        other = AGENTS[1 - AGENTS.index(agent)]
        one_hot = [1.0, 0.0] if agent == AGENTS[0] else [0.0, 1.0]
        return np.array([self.t / self.length, float(other in self.agents), float(self.sacrificed), *one_hot],
                        np.float32)

    def reset(self, seed=None, options=None):
        self.t, self.sacrificed = 0, False
        self.agents = list(AGENTS)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        acting = list(self.agents)
        team = 1.0 if self.sacrificed else 0.1
        rewards = {a: team for a in acting}
        dying = {a for a in acting if int(actions[a]) == 1}
        self.sacrificed = self.sacrificed or bool(dying)
        self.t += 1
        self.agents = [a for a in acting if a not in dying]
        terminations = {a: a in dying for a in acting}
        truncations = {a: self.t >= self.length and a not in dying for a in acting}
        if self.t >= self.length:
            self.agents = []
        observations = {a: self._obs(a) for a in acting}
        return observations, rewards, terminations, truncations, {a: {} for a in acting}


def make(length: int = 10) -> SacrificeEnv:
    return SacrificeEnv(length)
