"""On-policy rollout storage: tensors preallocated once as `[T, E, N, ...]` and filled in place.

Holds one rollout of T steps from E envs with N agent slots, computes GAE per agent slot (`dones`
cuts a slot's trace: the agent's own death or its env's episode end under `ppo.death=agent`, only
the episode end under `ppo.death=episode`; see `algos/death.py`), and
serves mini-batches for feed-forward networks (`[B, N, ...]`, B samples of (t, env)) or
chunks of `chunk_length` consecutive steps for recurrent ones (`[L, B, N, ...]` plus the hidden
state at each chunk's start).
"""

from __future__ import annotations

import gymnasium as gym
import torch

from hypermappo.errors import UserError


def action_layout(space: gym.spaces.Space) -> tuple[tuple, torch.dtype]:
    """Per-agent action shape and dtype in the rollout (and replay) buffer, following the VecEnv contract."""
    if isinstance(space, gym.spaces.Discrete):
        return (), torch.long
    if isinstance(space, gym.spaces.MultiDiscrete):
        return tuple(space.shape), torch.long
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return tuple(space.shape), torch.float32
    raise UserError(f"action space {space} is not supported; expected Discrete, MultiDiscrete, Box or MultiBinary")


def select_rows(fields: dict[str, torch.Tensor], idx: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """A mini-batch: rows `idx` of each [T*E, N, ...] field (None: all rows, as they are)."""
    return fields if idx is None else {k: v[idx] for k, v in fields.items()}


def shuffled_minibatches(fields: dict[str, torch.Tensor], indices: list) -> list[dict[str, torch.Tensor]]:
    """The mini-batches `select_rows(fields, idx)` for each of `indices` (from `minibatch_indices`), as contiguous
    row slices of one gather per field. Why: a compiled step handed the rows' indices fuses the gather into each
    kernel that reads a field, which then loads every element through the index (at 1,536 samples the loss's
    kernels took 80-180 us each, one thread); slices are plain contiguous inputs."""
    if indices == [None]:
        return [fields]
    sizes = [len(idx) for idx in indices]
    perm = torch.cat(indices)
    parts = {k: v.index_select(0, perm).split(sizes) for k, v in fields.items()}
    return [{k: parts[k][m] for k in fields} for m in range(len(indices))]



def draw_perm(n: int, generator: torch.Generator | None, device) -> torch.Tensor:
    """A permutation of n drawn where the generator lives (the run's device: runtime/device_rng.py), moved to the
    buffer's device (a no-op then): no host-to-device copy per update on a GPU."""
    on = generator.device if generator is not None else device
    return torch.randperm(n, generator=generator, device=on).to(device)

class RolloutBuffer:
    def __init__(self, T: int, E: int, N: int, obs_dim: int, state_dim: int, action_shape: tuple,
                 action_dtype: torch.dtype, n_actions_avail: int = 0, params_dim: int = 0,
                 actor_hidden: int = 0, critic_hidden: int = 0, device: torch.device | str = "cpu",
                 store_prev_obs: bool = False):
        self.T, self.E, self.N = T, E, N
        z = dict(device=device)
        self.obs = torch.zeros(T, E, N, obs_dim, **z)  # [T, E, N, obs_dim]
        # observation of the step before t (for the Hyper-MAPPO smoothness term), masked by `reset`
        self.prev_obs = torch.zeros(T, E, N, obs_dim, **z) if store_prev_obs else None
        self.state = torch.zeros(T, E, state_dim, **z)  # [T, E, S]
        self.available = torch.ones(T, E, N, n_actions_avail, dtype=torch.bool, **z) if n_actions_avail else None
        self.active = torch.zeros(T, E, N, dtype=torch.bool, **z)  # alive when acting at t
        self.reset = torch.zeros(T, E, N, dtype=torch.bool, **z)  # hidden state zeroed before step t
        self.actions = torch.zeros(T, E, N, *action_shape, dtype=action_dtype, **z)
        self.logp = torch.zeros(T, E, N, **z)
        self.values = torch.zeros(T, E, N, **z)  # critic output (normalised units if value norm on)
        self.rewards = torch.zeros(T, E, N, **z)  # incl. gamma * V(final obs) at truncation
        self.dones = torch.zeros(T, E, N, dtype=torch.bool, **z)  # slot's trace ends after step t
        self.dist_params = torch.zeros(T, E, N, params_dim, **z) if params_dim else None
        self.actor_h = torch.zeros(T, E, N, actor_hidden, **z) if actor_hidden else None
        self.critic_h = torch.zeros(T, E, N, critic_hidden, **z) if critic_hidden else None
        self.advantages = torch.zeros(T, E, N, **z)
        self.returns = torch.zeros(T, E, N, **z)

    def insert(self, t: int, **items: torch.Tensor) -> None:
        for name, value in items.items():
            if value is not None:
                getattr(self, name)[t].copy_(value)

    @torch.no_grad()
    def compute_gae(self, values: torch.Tensor, last_values: torch.Tensor, gamma: float, lam: float) -> None:
        """values [T, E, N] and last_values [E, N] in *unnormalised* units -> advantages, returns."""
        # every step's delta at once (the same elementwise ops as one step at a time); only the recursion loops
        next_values = torch.cat([values[1:], last_values.unsqueeze(0)])  # [T, E, N]
        nextnonterminal = 1.0 - self.dones.float()
        delta = self.rewards + gamma * next_values * nextnonterminal - values
        decay = gamma * lam * nextnonterminal
        lastgaelam = torch.zeros_like(last_values)
        for t in reversed(range(self.T)):
            lastgaelam = delta[t] + decay[t] * lastgaelam
            self.advantages[t] = lastgaelam
        self.returns.copy_(self.advantages + values)

    def _fields(self) -> dict[str, torch.Tensor]:
        names = ["obs", "prev_obs", "state", "available", "active", "reset", "actions", "logp", "values", "advantages",
                 "returns", "dist_params"]
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    def minibatches(self, num_mini_batch: int, generator: torch.Generator | None = None, over: str = "samples"):
        """Feed-forward: yields dicts of [B, N, ...] tensors over shuffled (t, env) samples.

        over="agents" (the reference's sampling): mini-batches of shuffled (t, env, agent) triples;
        each yields the (t, env) rows its triples touch, whole (a centralised critic or an actor
        looking at all agents needs every agent's inputs), plus `selected` [B, N]: the drawn agents,
        the only ones that carry loss weight."""
        flat = self.flat_fields()
        total = self.T * self.E
        if over == "agents" and num_mini_batch > 1:
            yield from self._agent_batches(flat, total, num_mini_batch, generator)
            return
        for idx in self.minibatch_indices(num_mini_batch, generator):
            yield select_rows(flat, idx)

    def flat_fields(self) -> dict[str, torch.Tensor]:
        """The stored fields as [T*E, N, ...] views (a feed-forward mini-batch is rows of these)."""
        return {k: v.flatten(0, 1) for k, v in self._fields().items()}

    def minibatch_indices(self, num_mini_batch: int, generator: torch.Generator | None = None) -> list:
        """The rows of each feed-forward mini-batch over (t, env) samples: [None] (all rows, in order: order is
        irrelevant for a single full batch, so no permutation is drawn) or num_mini_batch index tensors."""
        if num_mini_batch == 1:
            return [None]
        return list(draw_perm(self.T * self.E, generator, self.obs.device).chunk(num_mini_batch))

    def _agent_batches(self, rows: dict, total: int, num_mini_batch: int, generator: torch.Generator | None,
                       starts: dict | None = None, dim: int = 0):
        """Mini-batches of (row, agent) pairs: rows [.., total (at `dim`), N, ...] -> touched rows + `selected`."""
        perm = draw_perm(total * self.N, generator, self.obs.device)
        for idx in perm.chunk(num_mini_batch):
            selected = torch.zeros(total, self.N, dtype=torch.bool, device=self.obs.device)  # [rows, N]
            selected.view(-1)[idx] = True
            touched = selected.any(-1).nonzero().squeeze(-1)
            batch = {k: v.index_select(dim, touched) for k, v in rows.items()}
            batch.update({k: v[touched] for k, v in (starts or {}).items()})
            batch["selected"] = selected[touched]
            yield batch

    def chunks(self, num_mini_batch: int, chunk_length: int, generator: torch.Generator | None = None,
               over: str = "samples"):
        """Recurrent: yields dicts of [L, B, N, ...] chunks plus `actor_h0` / `critic_h0` [B, N, H]
        (over="agents": chunks of (chunk, env, agent), as `minibatches`)."""
        L = chunk_length
        n_chunks = self.T // L  # T % L == 0 is checked when the run is set up
        fields = self._fields()

        def to_chunks(x):  # [T, E, ...] -> [L, n_chunks * E, ...] with chunk-major batch order
            x = x.reshape(n_chunks, L, self.E, *x.shape[2:]).transpose(0, 1)
            return x.reshape(L, n_chunks * self.E, *x.shape[3:])

        chunked = {k: to_chunks(v) for k, v in fields.items()}
        starts = {}
        if self.actor_h is not None:
            starts["actor_h0"] = self.actor_h[::L].reshape(n_chunks * self.E, self.N, -1)
        if self.critic_h is not None:
            starts["critic_h0"] = self.critic_h[::L].reshape(n_chunks * self.E, self.N, -1)
        total = n_chunks * self.E
        if over == "agents" and num_mini_batch > 1:
            yield from self._agent_batches(chunked, total, num_mini_batch, generator, starts, dim=1)
            return
        perm = draw_perm(total, generator, self.obs.device) if num_mini_batch > 1 else None
        for idx in (perm.chunk(num_mini_batch) if perm is not None else [None]):
            if idx is None:
                yield {**chunked, **starts}
            else:
                yield {**{k: v[:, idx] for k, v in chunked.items()}, **{k: v[idx] for k, v in starts.items()}}
