"""Replay buffer for off-policy learners (MADDPG): preallocated tensors, ring-buffer writes, uniform sampling.

One row is one env step of one env: every agent slot's observation, action, reward, end and the next step's
observation (the final observation where the episode ended), so a sample needs no neighbouring row. `push`
writes the E rows of one vectorised step with one indexed copy per field (no loop over envs or agents);
when the buffer is full the oldest rows are overwritten (wrap-around). `sample` draws rows uniformly with
replacement from the filled part, from the caller's generator, so a run that restores the generator and
the buffer (`state_dict`, saved in every checkpoint) draws the same batches.
"""

from __future__ import annotations

import torch

from hypermappo.errors import UserError


class ReplayBuffer:
    def __init__(self, capacity: int, num_agents: int, obs_dim: int, state_dim: int, action_shape: tuple,
                 action_dtype: torch.dtype, n_avail: int, device):
        C, K = capacity, num_agents
        self.capacity, self.device = capacity, device
        self.pos = 0  # next row to write
        self.size = 0  # filled rows (<= capacity)
        self.pushed = 0  # rows ever pushed (env steps seen), also after wrap-around
        f32 = dict(dtype=torch.float32, device=device)
        flag = dict(dtype=torch.bool, device=device)
        self.data: dict[str, torch.Tensor] = {
            "obs": torch.zeros(C, K, obs_dim, **f32),  # [C, K, D]
            "state": torch.zeros(C, state_dim, **f32),  # [C, S]
            "active": torch.zeros(C, K, **flag),  # [C, K] alive when acting
            "actions": torch.zeros(C, K, *action_shape, dtype=action_dtype, device=device),  # [C, K, ...]
            "reward": torch.zeros(C, K, **f32),  # [C, K]
            "terminal": torch.zeros(C, K, **flag),  # [C, K] no bootstrap: died or env terminated
            "next_obs": torch.zeros(C, K, obs_dim, **f32),
            "next_state": torch.zeros(C, state_dim, **f32),
            "next_active": torch.zeros(C, K, **flag),
        }
        if n_avail:
            self.data["available"] = torch.zeros(C, K, n_avail, **flag)  # [C, K, A]
            self.data["next_available"] = torch.zeros(C, K, n_avail, **flag)

    def push(self, **rows: torch.Tensor | None) -> None:
        """Write one vectorised step: every field as [E, ...] (fields the buffer does not keep are ignored)."""
        E = rows["obs"].shape[0]
        if E > self.capacity:
            raise UserError(f"maddpg.buffer_size: {self.capacity} is smaller than one step of num_envs={E}")
        idx = (self.pos + torch.arange(E, device=self.device)) % self.capacity  # [E], wraps around
        for name, store in self.data.items():
            store[idx] = rows[name].to(store.dtype)
        self.pos = (self.pos + E) % self.capacity
        self.size = min(self.size + E, self.capacity)
        self.pushed += E

    def sample(self, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """`batch_size` rows drawn uniformly with replacement from the filled part -> each field [B, ...]."""
        idx = torch.randint(0, self.size, (batch_size,), generator=generator,  # [B], where the generator lives
                            device=generator.device).to(self.device)
        return {name: store[idx] for name, store in self.data.items()}

    def state_dict(self) -> dict:
        """The filled rows only (an unfilled buffer costs no checkpoint space) and the write position."""
        return {"pos": self.pos, "size": self.size, "pushed": self.pushed,
                "data": {k: v[: self.size].clone() for k, v in self.data.items()}}

    def load_state_dict(self, sd: dict) -> None:
        self.pos, self.size, self.pushed = sd["pos"], sd["size"], sd["pushed"]
        for k, v in sd["data"].items():
            self.data[k][: self.size] = v.to(self.device)
