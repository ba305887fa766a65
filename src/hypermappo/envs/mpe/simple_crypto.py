"""simple_crypto (mpe2 `simple_crypto_v3`) batched in torch: `mpe:simple_crypto`.

Alice (`alice_0`) must tell Bob (`bob_0`) which of 2 one-hot goal vectors is the goal over a public
channel (4 words or a 4-vector) that Eve (`eve_0`) overhears; Alice and Bob share a private one-hot key.
Nobody moves. Agent slots in mpe2's order: eve_0, bob_0, alice_0. Equal to mpe2 step for step
(`tests/test_env_mpe_comm.py`):
- obs eve_0: [Alice's utterance (4)], zero-padded to 8; bob_0: [key (4), Alice's utterance (4)];
  alice_0: [goal (4), key (4)]. State (20) = the unpadded observations, as mpe2's `state()`.
- actions (every agent speaks): discrete Discrete(4) -> one-hot utterance; continuous Box(0, 1, (4,))
  -> the clipped vector itself. Bob's and Eve's utterances are their guesses of the goal.
- rewards, with err(x) = |utterance of x - goal|^2, counted only when x's utterance is not all zeros:
  Eve -err(Eve); Alice and Bob err(Eve) - err(Bob) (not a team reward: Eve's differs).
Not reproduced: mpe2's numpy RNG (a torch.Generator draws goal, key and the never-used positions;
`set_world` copies an mpe2 start).

kwargs: max_cycles (25), continuous_actions (False).
"""

from __future__ import annotations

import numpy as np
import torch

from hypermappo.envs.mpe._comm import CommVecEnv, one_hot, uniform

DIM_C = 4
NUM_AGENTS, NUM_LANDMARKS = 3, 2
EVE, BOB, ALICE = 0, 1, 2
SIZE = 0.05  # mpe2's Entity default
AGENT_COLORS = [[0.75, 0.25, 0.25], [0.25, 0.25, 0.25], [0.25, 0.25, 0.25]]  # Bob is drawn in the goal's colour


class SimpleCryptoVecEnv(CommVecEnv):
    scenario = "simple_crypto"
    agent_names = ["eve_0", "bob_0", "alice_0"]
    obs_sizes = [DIM_C, 2 * DIM_C, 2 * DIM_C]
    action_sizes = [DIM_C] * NUM_AGENTS
    continuous_sizes = [DIM_C] * NUM_AGENTS
    world_shapes = {
        "agent_pos": ((NUM_AGENTS, 2), torch.float32),  # only drawn: nothing moves
        "landmark_pos": ((NUM_LANDMARKS, 2), torch.float32),  # only drawn
        "goal": ((), torch.long),  # the goal landmark; its colour is one_hot(goal, 4)
        "key": ((), torch.long),  # the private key is one_hot(key, 4)
        "comm": ((NUM_AGENTS, DIM_C), torch.float32),  # each agent's utterance (mpe2 state.c)
    }

    def _spawn(self, k: int) -> dict[str, torch.Tensor]:
        g, dev = self.generator, self.device
        return {"goal": torch.randint(0, NUM_LANDMARKS, (k,), generator=g, device=dev),
                "key": torch.randint(0, NUM_LANDMARKS, (k,), generator=g, device=dev),
                "agent_pos": uniform((k, NUM_AGENTS, 2), g, dev), "landmark_pos": uniform((k, NUM_LANDMARKS, 2), g, dev),
                "comm": torch.zeros(k, NUM_AGENTS, DIM_C, device=dev)}

    def _act(self, actions: torch.Tensor) -> None:
        comm = actions if self.continuous_actions else one_hot(actions, DIM_C)  # [E, N, dim_c]
        self.world["comm"].copy_(comm)

    def _observe(self) -> torch.Tensor:
        w = self.world
        said = w["comm"][:, ALICE]  # [E, 4]
        key, goal = one_hot(w["key"], DIM_C), one_hot(w["goal"], DIM_C)  # [E, 4] each
        first = torch.stack([said, key, goal], dim=1)  # [E, N, 4], eve / bob / alice
        second = torch.stack([torch.zeros_like(said), said, key], dim=1)  # [E, N, 4]
        return torch.cat([first, second], dim=2)  # [E, N, 8]

    def _reward(self) -> torch.Tensor:
        w = self.world
        comm = w["comm"]  # [E, N, 4]
        spoke = comm.ne(0).any(2)  # [E, N] mpe2 skips an agent whose utterance is all zeros
        err = (comm - one_hot(w["goal"], DIM_C).unsqueeze(1)).square().sum(2) * spoke  # [E, N]
        good = err[:, EVE] - err[:, BOB]  # [E]
        return torch.stack([err[:, EVE].neg(), good, good], dim=1)  # [E, N]

    def _render_entities(self, env_index: int):
        w = {k: v[env_index].detach().cpu().numpy() for k, v in self.world.items()}
        landmark_rgb = (np.eye(3)[:NUM_LANDMARKS] * 200).astype(np.uint8)  # one-hot colours, first 3 channels
        agent_rgb = (np.array(AGENT_COLORS) * 200).astype(np.uint8)
        agent_rgb[BOB] = landmark_rgb[int(w["goal"])]
        return ([(p, SIZE, c) for p, c in zip(w["agent_pos"], agent_rgb)]
                + [(p, SIZE, c) for p, c in zip(w["landmark_pos"], landmark_rgb)])


def make(num_envs: int, device: torch.device | str = "cpu", **kwargs) -> SimpleCryptoVecEnv:
    return SimpleCryptoVecEnv(num_envs, device, **kwargs)
