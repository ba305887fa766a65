"""mpe2 `simple_push_v3` batched in torch: an adversary pushes the good agent away from its goal landmark.

Reproduced (checked against mpe2 1.1.1 in tests/test_env_mpe_suite.py): agents `adversary_0`, `agent_0`
(size 0.05, silent, colliding with each other, accel 5), 2 landmarks (no collisions) coloured
[0.1, 0.9, 0.1] and [0.1, 0.1, 0.9]; one goal landmark per episode drawn uniformly; starts uniform in
[-1, 1]^2 at rest. Observations: adversary [vel (2), landmark_l - pos (4), other - pos (2)] (8, padded);
good agent [vel (2), goal - pos (2), own colour (3: 0.25 grey + 0.5 on the goal's channel), landmark_l
- pos (4), landmark colours (6), other - pos (2)] (19). Rewards: good -|agent - goal|; adversary
|agent - goal| - |adversary - goal|. Truncation after max_cycles.
Not reproduced: mpe2's numpy RNG (torch.Generator from reset(seed); `set_world(..., goal=)` copies an
mpe2 start), benchmark_data.

Env strings: `mpe:simple_push` (alias `_v3`). kwargs: max_cycles (25), continuous_actions (False).
"""

from __future__ import annotations

import numpy as np
import torch

from hypermappo.envs.mpe._scenario import WorldScenarioEnv
from hypermappo.envs.mpe._world import Entity

_LANDMARK_COLORS = [[0.1, 0.9, 0.1], [0.1, 0.1, 0.9]]


class SimplePushVecEnv(WorldScenarioEnv):
    scenario = "simple_push"

    def __init__(self, num_envs: int, device="cpu", *, max_cycles: int = 25, continuous_actions: bool = False):
        entities = [Entity(movable=True), Entity(movable=True), Entity(collide=False), Entity(collide=False)]
        goal = torch.zeros(num_envs, dtype=torch.long, device=device)  # [E] index of the goal landmark
        colors = [[0.75, 0.25, 0.25], [0.25, 0.25, 0.25]] + _LANDMARK_COLORS
        self._setup(num_envs, device, entities=entities, agent_names=["adversary_0", "agent_0"],
                    spawn_range=[1.0] * 4, obs_sizes=[8, 19], max_cycles=max_cycles,
                    continuous_actions=continuous_actions, dim_c=2, colors=colors, extra={"goal": goal})
        dev = self.device
        self._viewers = torch.arange(2, device=dev)
        self._seen = torch.tensor([[2, 3, 1], [2, 3, 0]], device=dev)  # landmarks, then the other agent
        self._landmark_colors = torch.tensor(_LANDMARK_COLORS, device=dev).view(6, 1)  # [6, 1]
        # own colour of the good agent for goal 0 / goal 1: [3, 2]
        self._own_colors = torch.tensor([[0.25, 0.75, 0.25], [0.25, 0.25, 0.75]], device=dev).T.contiguous()

    def _spawn_extra(self, env_ids, k):
        goal = torch.randint(0, 2, (k,), generator=self.generator, device=self.device)
        if env_ids is None:
            self.extra["goal"].copy_(goal)
        else:
            self.extra["goal"][env_ids] = goal

    def _goal_rel(self) -> torch.Tensor:
        """goal - pos of both agents [2, 2, E]."""
        w = self.world
        goal_pos = w.pos[2:].gather(0, self.extra["goal"].view(1, 1, -1).expand(1, 2, -1))  # [1, 2, E]
        return goal_pos - w.pos[:2]

    def _observe_groups(self) -> list[torch.Tensor]:
        w, E = self.world, self.num_envs
        rel = w.relative(self._viewers, self._seen).flatten(1, 2)  # [2, 6, E]: landmarks 0, 1, other agent
        adversary = torch.cat([w.vel[:1], rel[:1]], 1)  # [1, 8, E]
        own_color = self._own_colors.index_select(1, self.extra["goal"]).unsqueeze(0)  # [1, 3, E]
        good = torch.cat([w.vel[1:2], self._goal_rel()[1:], own_color, rel[1:, :4],
                          self._landmark_colors.expand(6, E).unsqueeze(0), rel[1:, 4:]], 1)  # [1, 19, E]
        return [adversary, good]

    def _reward(self) -> torch.Tensor:
        goal_dist = self.world.norm(self._goal_rel())  # [2, E]: adversary, agent
        return torch.stack([goal_dist[1] - goal_dist[0], -goal_dist[1]])  # [2, E]

    def _colors(self, env_index: int) -> np.ndarray:
        colors = self.colors.copy()
        colors[1, 1 + int(self.extra["goal"][env_index])] += 0.5
        return colors


def make(num_envs: int, device="cpu", **kwargs) -> SimplePushVecEnv:
    return SimplePushVecEnv(num_envs, device, **kwargs)
