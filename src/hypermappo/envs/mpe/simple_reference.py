"""simple_reference (mpe2 `simple_reference_v3`) batched in torch: `mpe:simple_reference`.

Two agents (`agent_0`, `agent_1`) both move and speak (10 words). Each knows which of 3 landmarks the
*other* agent must reach and sees it as that landmark's colour; each is rewarded
(1 - local_ratio) x mean over agents of the local terms + local_ratio x its own local term, where agent
i's local term is minus the distance of the other agent to agent i's goal landmark. Equal to mpe2 step
for step (`tests/test_env_mpe_comm.py`):
- obs of agent i (21): [own vel (2), landmark_l - own pos (2 x 3), colour of agent i's goal landmark (3),
  the other agent's utterance (10)]. State (42) = both observations, as mpe2's `state()`.
- actions: discrete Discrete(50), movement = a % 5 (no-op, left, right, down, up), word = a // 5;
  continuous Box(0, 1, (15,)): force 5 x (a2 - a1, a4 - a3), utterance a[5:15].
- physics: mpe2's integration without collisions (nothing collides here).
`spec.team_reward` is True only for local_ratio = 0 (then every agent gets the mean term).
Not reproduced: mpe2's numpy RNG (a torch.Generator draws the starts; `set_world` copies an mpe2 start).

kwargs: local_ratio (0.5), max_cycles (25), continuous_actions (False).
"""

from __future__ import annotations

import numpy as np
import torch

from hypermappo.envs.mpe._comm import MOVE_ACTIONS, CommVecEnv, integrate, movement_force, one_hot, uniform
from hypermappo.errors import UserError

DIM_C = 10
NUM_AGENTS, NUM_LANDMARKS = 2, 3
SIZE = 0.05  # mpe2's Entity default, agents and landmarks
LANDMARK_COLORS = [[0.75, 0.25, 0.25], [0.25, 0.75, 0.25], [0.25, 0.25, 0.75]]


class SimpleReferenceVecEnv(CommVecEnv):
    scenario = "simple_reference"
    agent_names = ["agent_0", "agent_1"]
    obs_sizes = [2 + 2 * NUM_LANDMARKS + 3 + DIM_C] * NUM_AGENTS
    action_sizes = [MOVE_ACTIONS * DIM_C] * NUM_AGENTS
    continuous_sizes = [MOVE_ACTIONS + DIM_C] * NUM_AGENTS
    world_shapes = {
        "agent_pos": ((NUM_AGENTS, 2), torch.float32),
        "agent_vel": ((NUM_AGENTS, 2), torch.float32),
        "landmark_pos": ((NUM_LANDMARKS, 2), torch.float32),
        "goal": ((NUM_AGENTS,), torch.long),  # agent i's goal_b: the landmark the *other* agent must reach
        "comm": ((NUM_AGENTS, DIM_C), torch.float32),  # each agent's utterance (mpe2 state.c)
    }

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", *, local_ratio: float = 0.5, **kwargs):
        if isinstance(local_ratio, bool) or not isinstance(local_ratio, int | float) or not 0.0 <= local_ratio <= 1.0:
            raise UserError(f"simple_reference: local_ratio must be a number in [0, 1], got {local_ratio!r}")
        self.local_ratio = float(local_ratio)
        self.team_reward = self.local_ratio == 0.0
        super().__init__(num_envs, device, **kwargs)
        self._landmark_colors = torch.tensor(LANDMARK_COLORS, device=self.device)  # [L, 3]

    def _spawn(self, k: int) -> dict[str, torch.Tensor]:
        g, dev = self.generator, self.device
        return {"goal": torch.randint(0, NUM_LANDMARKS, (k, NUM_AGENTS), generator=g, device=dev),
                "agent_pos": uniform((k, NUM_AGENTS, 2), g, dev), "agent_vel": torch.zeros(k, NUM_AGENTS, 2, device=dev),
                "landmark_pos": uniform((k, NUM_LANDMARKS, 2), g, dev),
                "comm": torch.zeros(k, NUM_AGENTS, DIM_C, device=dev)}

    def _act(self, actions: torch.Tensor) -> None:
        w = self.world
        if self.continuous_actions:  # [E, N, 15]
            force = movement_force(actions, True)  # [E, N, 2]
            w["comm"].copy_(actions[..., MOVE_ACTIONS:])
        else:  # [E, N]
            force = movement_force(actions % MOVE_ACTIONS, False)  # [E, N, 2]
            w["comm"].copy_(one_hot(actions // MOVE_ACTIONS, DIM_C))
        integrate(w["agent_pos"], w["agent_vel"], force)

    def _observe(self) -> torch.Tensor:
        w, E, N = self.world, self.num_envs, NUM_AGENTS
        rel = (w["landmark_pos"].unsqueeze(1) - w["agent_pos"].unsqueeze(2)).reshape(E, N, 2 * NUM_LANDMARKS)
        heard = w["comm"].flip(1)  # [E, N, dim_c]: the other agent's utterance
        return torch.cat([w["agent_vel"], rel, self._landmark_colors[w["goal"]], heard], dim=2)  # [E, N, 21]

    def _reward(self) -> torch.Tensor:
        w = self.world
        goal_pos = w["landmark_pos"].gather(1, w["goal"].unsqueeze(2).expand(-1, -1, 2))  # [E, N, 2]
        local = (w["agent_pos"].flip(1) - goal_pos).square().sum(2).sqrt().neg()  # [E, N]
        shared = local.mean(1, keepdim=True)  # [E, 1]
        return shared * (1.0 - self.local_ratio) + local * self.local_ratio

    def _render_entities(self, env_index: int):
        w = {k: v[env_index].detach().cpu().numpy() for k, v in self.world.items()}
        rgb = (np.array(LANDMARK_COLORS) * 200).astype(np.uint8)
        agent_rgb = rgb[w["goal"][::-1]]  # mpe2 paints an agent in the colour of its goal landmark
        return ([(p, SIZE, c) for p, c in zip(w["agent_pos"], agent_rgb)]
                + [(p, SIZE, c) for p, c in zip(w["landmark_pos"], rgb)])


def make(num_envs: int, device: torch.device | str = "cpu", **kwargs) -> SimpleReferenceVecEnv:
    return SimpleReferenceVecEnv(num_envs, device, **kwargs)
