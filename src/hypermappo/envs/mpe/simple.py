"""mpe2 `simple_v3` batched in torch: one agent learns to reach one landmark (a debugging task).

Reproduced (checked against mpe2 1.1.1 in tests/test_env_mpe_suite.py): agent `agent_0` (silent, does
not collide, accel 5), one landmark; start positions uniform in [-1, 1]^2 at rest; observation
[own vel (2), landmark - own pos (2)]; reward -|landmark - pos|^2 (squared distance); truncation after
max_cycles. Physics: `_world.py`. Not reproduced: mpe2's numpy RNG for starts (torch.Generator seeded by
reset(seed); `set_world` copies an mpe2 start), benchmark_data.

Env strings: `mpe:simple` (alias `mpe:simple_v3`). kwargs: max_cycles (25), continuous_actions (False).
"""

from __future__ import annotations

import torch

from hypermappo.envs.mpe._scenario import WorldScenarioEnv
from hypermappo.envs.mpe._world import Entity


class SimpleVecEnv(WorldScenarioEnv):
    scenario = "simple"

    def __init__(self, num_envs: int, device="cpu", *, max_cycles: int = 25, continuous_actions: bool = False):
        entities = [Entity(movable=True, collide=False), Entity(collide=False)]
        self._setup(num_envs, device, entities=entities, agent_names=["agent_0"], spawn_range=[1.0, 1.0],
                    obs_sizes=[4], max_cycles=max_cycles, continuous_actions=continuous_actions,
                    colors=[[0.25, 0.25, 0.25], [0.75, 0.25, 0.25]])
        self._agent = torch.tensor([0], device=self.device)
        self._landmark = torch.tensor([[1]], device=self.device)

    def _observe_groups(self) -> list[torch.Tensor]:
        w = self.world
        rel = w.relative(self._agent, self._landmark)  # [1, 1, 2, E]
        return [torch.cat([w.vel[:1], rel.flatten(1, 2)], 1)]  # [1, 4, E]

    def _reward(self) -> torch.Tensor:
        delta = self.world.pos[1] - self.world.pos[0]  # [2, E]
        return -(delta * delta).sum(0, keepdim=True)  # [1, E]


def make(num_envs: int, device="cpu", **kwargs) -> SimpleVecEnv:
    return SimpleVecEnv(num_envs, device, **kwargs)
