"""Tiny scripted envs for the PettingZoo / Gymnasium-tuple adapter tests (importable as env strings).

`pettingzoo:envs_for_adapter_tests:make_scripted_env` and
`gym:envs_for_adapter_tests:ScriptedTuple-v0` resolve to the envs below because pytest puts
`tests/` on sys.path.
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

AGENTS = ["runner", "sprinter", "walker"]
OBS_SIZES = {"runner": 3, "sprinter": 1, "walker": 2}
ACTION_SIZES = {"runner": 4, "sprinter": 2, "walker": 3}
RUNNER_MASK = np.array([1, 1, 1, 0], np.int8)  # the runner may never take action 3
SPRINTER_DIES_AT = 2  # terminated (with a flag) at this step
WALKER_LEAVES_AT = 4  # removed from env.agents at this step, without any flag


def episode_length(seed: int) -> int:
    """Episodes last 2..6 steps depending on the seed; even lengths end terminated, odd ones truncated."""
    return 2 + seed % 5


def observation(agent: str, t: int, length: int, seed: int) -> np.ndarray:
    if agent == "runner":
        return np.array([t, length, seed % 100], np.float32)
    if agent == "sprinter":
        return np.array([t + 0.5], np.float32)
    return np.array([t, -1.0], np.float32)


def reward(agent: str, action: int) -> float:
    return AGENTS.index(agent) + 1 + action / 10


class ScriptedDeathsEnv(ParallelEnv):
    """Three agents with different spaces and scripted deaths; the episode length depends on the seed.

    runner lives to the end; sprinter is terminated at step 2; walker leaves env.agents at step 4
    without any flag; at step `episode_length(seed)` every remaining agent is terminated (even
    length) or truncated (odd length). Obs / rewards follow `observation` / `reward`.
    """

    metadata: ClassVar[dict] = {"name": "scripted_deaths_v0", "render_modes": []}

    def __init__(self, with_state: bool = False):
        self.possible_agents = list(AGENTS)
        self.agents = []
        self.with_state = with_state
        self.t, self.length, self.seed = 0, 2, 0

    def observation_space(self, agent):
        return gym.spaces.Box(-10.0, 100.0, (OBS_SIZES[agent],), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(ACTION_SIZES[agent])

    def _infos(self):
        return {a: ({"action_mask": RUNNER_MASK.copy()} if a == "runner" else {}) for a in self.agents}

    def reset(self, seed=None, options=None):
        self.seed = 0 if seed is None else seed
        self.length = episode_length(self.seed)
        self.t = 0
        self.agents = list(AGENTS)
        return {a: observation(a, 0, self.length, self.seed) for a in self.agents}, self._infos()

    def step(self, actions):
        assert set(actions) == set(self.agents), (actions, self.agents)
        assert actions["runner"] != 3, "masked action taken"
        self.t += 1
        acting = list(self.agents)
        rewards = {a: reward(a, int(actions[a])) for a in acting}
        observations = {a: observation(a, self.t, self.length, self.seed) for a in acting}
        terminations = {a: False for a in acting}
        truncations = {a: False for a in acting}
        if "sprinter" in acting and self.t == SPRINTER_DIES_AT:
            terminations["sprinter"] = True
        if self.t == self.length:
            flags = terminations if self.length % 2 == 0 else truncations
            for a in acting:
                flags[a] = True
        leaving = {a for a in acting if terminations[a] or truncations[a]}
        if self.t == WALKER_LEAVES_AT:
            leaving.add("walker")
        self.agents = [a for a in acting if a not in leaving]
        return observations, rewards, terminations, truncations, {a: {} for a in acting}

    def state(self):
        if not self.with_state:
            raise NotImplementedError
        return np.array([self.t, self.length], np.float32)


def make_scripted_env(with_state: bool = False) -> ScriptedDeathsEnv:
    return ScriptedDeathsEnv(with_state=with_state)


class ScriptedTupleEnv(gym.Env):
    """EPyMARL-style Tuple env: 2 agents, a shared scalar reward, per-agent `done` lists.

    Agent 0 is done at step 1; everyone is done at step `3 + seed % 3`. Agent 1's action 2 is masked
    via info["action_mask"]. Observations: agent 0 [t, seed], agent 1 [t, -t, 1].
    """

    def __init__(self):
        self.observation_space = gym.spaces.Tuple((gym.spaces.Box(-99, 99, (2,), np.float32),
                                                   gym.spaces.Box(-99, 99, (3,), np.float32)))
        self.action_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3)))
        self.t, self.seed, self.length = 0, 0, 3

    def _obs(self):
        return (np.array([self.t, self.seed % 50], np.float32), np.array([self.t, -self.t, 1], np.float32))

    def _info(self):
        return {"action_mask": [np.array([1, 1]), np.array([1, 1, 0])]}

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.seed = 0 if seed is None else seed
        self.length, self.t = 3 + self.seed % 3, 0
        return self._obs(), self._info()

    def step(self, actions):
        assert actions[1] != 2, "masked action taken"
        self.t += 1
        done = [self.t >= 1, self.t >= self.length]
        return self._obs(), float(actions[0] + actions[1]), done, False, self._info()


gym.register("ScriptedTuple-v0", entry_point=ScriptedTupleEnv)
