"""mpe2 `simple_adversary_v3` batched in torch: N good agents hide which of N landmarks is the goal
from one adversary that must find it.

Reproduced (checked against mpe2 1.1.1 in tests/test_env_mpe_suite.py): agents `adversary_0`,
`agent_0` .. `agent_{N-1}` (size 0.15, silent, no collisions, accel 5), N landmarks (size 0.08); one goal
landmark per episode drawn uniformly, shared by all; starts uniform in [-1, 1]^2 at rest.
Observations: adversary [landmark_l - pos (2N), other agents - pos in index order (2N)] (8 for N=2,
padded to the good agents' width); good agent [goal - pos (2), landmark_l - pos (2N), others - pos (2N)].
Rewards (mpe2's shaped defaults, per agent): adversary -|adv - goal|; every good agent
-min over good agents |a - goal| + |adv - goal|. Truncation after max_cycles.
Not reproduced: mpe2's numpy RNG (torch.Generator from reset(seed); `set_world(..., goal=)` copies an
mpe2 start), partial observability (num_agent_neighbors / num_landmark_neighbors), benchmark_data.

Env strings: `mpe:simple_adversary` (alias `_v3`). kwargs: N (2), max_cycles (25), continuous_actions (False).
"""

from __future__ import annotations

import numpy as np
import torch

from hypermappo.envs.mpe._scenario import WorldScenarioEnv, check_count
from hypermappo.envs.mpe._world import Entity


class SimpleAdversaryVecEnv(WorldScenarioEnv):
    scenario = "simple_adversary"

    def __init__(self, num_envs: int, device="cpu", *, N: int = 2, max_cycles: int = 25,
                 continuous_actions: bool = False):
        N = check_count(self.scenario, "N", N, 1)
        A = N + 1
        agents = [Entity(size=0.15, movable=True, collide=False) for _ in range(A)]
        landmarks = [Entity(size=0.08, collide=False) for _ in range(N)]
        names = ["adversary_0"] + [f"agent_{i}" for i in range(N)]
        colors = [[0.85, 0.35, 0.35]] + [[0.35, 0.35, 0.85]] * N + [[0.15, 0.15, 0.15]] * N
        goal = torch.zeros(num_envs, dtype=torch.long, device=device)  # [E] index of the goal landmark
        self.n_good = N
        self._setup(num_envs, device, entities=agents + landmarks, agent_names=names, spawn_range=[1.0] * (A + N),
                    obs_sizes=[4 * N] + [2 + 4 * N] * N, max_cycles=max_cycles,
                    continuous_actions=continuous_actions, dim_c=2, colors=colors, extra={"goal": goal})
        dev = self.device
        self._viewers = torch.arange(A, device=dev)
        # what agent i sees, in observation order: every landmark, then every other agent by index
        seen = [[A + k for k in range(N)] + [j for j in range(A) if j != i] for i in range(A)]
        self._seen = torch.tensor(seen, dtype=torch.long, device=dev)  # [A, N + A - 1]

    def _spawn_extra(self, env_ids, k):
        goal = torch.randint(0, self.n_good, (k,), generator=self.generator, device=self.device)
        if env_ids is None:
            self.extra["goal"].copy_(goal)
        else:
            self.extra["goal"][env_ids] = goal

    def _goal_rel(self) -> torch.Tensor:
        """goal - pos of every agent [A, 2, E]."""
        w, A = self.world, self.num_agents
        goal_pos = w.pos[A:].gather(0, self.extra["goal"].view(1, 1, -1).expand(1, 2, -1))  # [1, 2, E]
        return goal_pos - w.pos[:A]

    def _observe_groups(self) -> list[torch.Tensor]:
        rel = self.world.relative(self._viewers, self._seen).flatten(1, 2)  # [A, 2(N + A - 1), E]
        return [rel[:1], torch.cat([self._goal_rel()[1:], rel[1:]], 1)]

    def _reward(self) -> torch.Tensor:
        goal_dist = self.world.norm(self._goal_rel())  # [A, E]
        adversary = goal_dist[:1]  # [1, E]
        good = adversary - goal_dist[1:].amin(0, keepdim=True)  # [1, E]
        return torch.cat([-adversary, good.expand(self.n_good, -1)], 0)  # [A, E]

    def _colors(self, env_index: int) -> np.ndarray:
        colors = self.colors.copy()
        colors[self.num_agents + int(self.extra["goal"][env_index])] = [0.15, 0.65, 0.15]
        return colors


def make(num_envs: int, device="cpu", **kwargs) -> SimpleAdversaryVecEnv:
    return SimpleAdversaryVecEnv(num_envs, device, **kwargs)
