"""simple_speaker_listener (mpe2 `simple_speaker_listener_v4`) batched in torch: `mpe:simple_speaker_listener`.

The speaker (`speaker_0`) sees the goal landmark's colour and can only speak (3 words); the listener
(`listener_0`) hears it, sees the 3 landmarks relative to itself and its own velocity, and can only move.
Both get the same reward, minus the listener's squared distance to the goal landmark (so
`spec.team_reward` is True). Equal to mpe2 step for step (`tests/test_env_mpe_comm.py`):
- obs speaker_0: [goal colour (3)], zero-padded to 11; listener_0: [own vel (2), landmark_l - own pos
  (2 x 3), speaker's utterance (3)]. State (14) = the two unpadded observations, as mpe2's `state()`.
- actions: discrete Discrete(5) slot: speaker says word a in {0, 1, 2} (3, 4 are padding, reported
  unavailable; sent anyway they mean word 0, as the PettingZoo adapter sends action 0); listener moves
  (no-op, left, right, down, up). Continuous: Box(0, 1, (5,)) slot; the speaker's utterance is its
  first 3 entries, the listener's force 5 x (a2 - a1, a4 - a3).
- physics: mpe2's integration without collisions (nothing collides here); the speaker never moves.
Not reproduced: mpe2's numpy RNG (a torch.Generator draws the starts; `set_world` copies an mpe2 start).

kwargs: max_cycles (25), continuous_actions (False).
"""

from __future__ import annotations

import numpy as np
import torch

from hypermappo.envs.mpe._comm import CommVecEnv, integrate, movement_force, one_hot, uniform

DIM_C = 3
NUM_LANDMARKS = 3
AGENT_SIZE, LANDMARK_SIZE = 0.075, 0.04
LANDMARK_COLORS = [[0.65, 0.15, 0.15], [0.15, 0.65, 0.15], [0.15, 0.15, 0.65]]
AGENT_COLOR = [0.25, 0.25, 0.25]
GOAL_TINT = 0.45  # the listener is drawn in the goal's colour + 0.45, as in mpe2


class SimpleSpeakerListenerVecEnv(CommVecEnv):
    scenario = "simple_speaker_listener"
    agent_names = ["speaker_0", "listener_0"]
    obs_sizes = [3, 2 + 2 * NUM_LANDMARKS + DIM_C]
    action_sizes = [DIM_C, 5]
    continuous_sizes = [DIM_C, 5]
    team_reward = True
    world_shapes = {
        "speaker_pos": ((2,), torch.float32),  # only drawn: the speaker is not movable
        "listener_pos": ((2,), torch.float32),
        "listener_vel": ((2,), torch.float32),
        "landmark_pos": ((NUM_LANDMARKS, 2), torch.float32),
        "goal": ((), torch.long),  # index of the landmark the listener must reach
        "comm": ((DIM_C,), torch.float32),  # the speaker's utterance (mpe2 state.c)
    }

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", **kwargs):
        super().__init__(num_envs, device, **kwargs)
        self._landmark_colors = torch.tensor(LANDMARK_COLORS, device=self.device)  # [L, 3]

    def _spawn(self, k: int) -> dict[str, torch.Tensor]:
        g, dev = self.generator, self.device
        return {"goal": torch.randint(0, NUM_LANDMARKS, (k,), generator=g, device=dev),
                "speaker_pos": uniform((k, 2), g, dev), "listener_pos": uniform((k, 2), g, dev),
                "listener_vel": torch.zeros(k, 2, device=dev),
                "landmark_pos": uniform((k, NUM_LANDMARKS, 2), g, dev), "comm": torch.zeros(k, DIM_C, device=dev)}

    def _act(self, actions: torch.Tensor) -> None:
        w = self.world
        if self.continuous_actions:  # [E, 2, 5]
            w["comm"].copy_(actions[:, 0, :DIM_C])
            force = movement_force(actions[:, 1], True)  # [E, 2]
        else:  # [E, 2]
            word = actions[:, 0].masked_fill(actions[:, 0] >= DIM_C, 0)  # padded actions -> word 0
            w["comm"].copy_(one_hot(word, DIM_C))
            force = movement_force(actions[:, 1], False)  # [E, 2]
        integrate(w["listener_pos"], w["listener_vel"], force)

    def _observe(self) -> torch.Tensor:
        w, E = self.world, self.num_envs
        obs = torch.zeros(E, 2, self.spec.obs_dim, device=self.device)  # [E, N, obs_dim]
        obs[:, 0, :3] = self._landmark_colors[w["goal"]]
        rel = (w["landmark_pos"] - w["listener_pos"].unsqueeze(1)).reshape(E, 2 * NUM_LANDMARKS)  # [E, 6]
        obs[:, 1] = torch.cat([w["listener_vel"], rel, w["comm"]], dim=1)
        return obs

    def _reward(self) -> torch.Tensor:
        w = self.world
        goal_pos = w["landmark_pos"].gather(1, w["goal"].view(-1, 1, 1).expand(-1, 1, 2)).squeeze(1)  # [E, 2]
        dist2 = (w["listener_pos"] - goal_pos).square().sum(1)  # [E]
        return dist2.neg().unsqueeze(1).expand(-1, 2).contiguous()  # [E, 2]

    def _render_entities(self, env_index: int):
        w = {k: v[env_index].detach().cpu().numpy() for k, v in self.world.items()}
        rgb = (np.array(LANDMARK_COLORS) * 200).astype(np.uint8)
        listener = ((np.array(LANDMARK_COLORS[int(w["goal"])]) + GOAL_TINT) * 200).astype(np.uint8)
        grey = (np.array(AGENT_COLOR) * 200).astype(np.uint8)
        return ([(w["speaker_pos"], AGENT_SIZE, grey), (w["listener_pos"], AGENT_SIZE, listener)]
                + [(p, LANDMARK_SIZE, c) for p, c in zip(w["landmark_pos"], rgb)])


def make(num_envs: int, device: torch.device | str = "cpu", **kwargs) -> SimpleSpeakerListenerVecEnv:
    return SimpleSpeakerListenerVecEnv(num_envs, device, **kwargs)
