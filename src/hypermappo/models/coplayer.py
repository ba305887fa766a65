"""Co-player model: a learner's belief about the other agents, from its own observation history only.

A GRU over the learner agent's own observations (plus a new-episode flag) gives an embedding per learner agent
`[..., K, H]`; heads read it to predict, for every agent slot of the env (the learner's own slot is masked
out by the loss):
- its next action (logits `[..., K, N, A]`, Discrete action spaces),
- its current discrete goal (logits `[..., K, N, G]` over the env's `EnvSpec.goal_names`),
- its subgoal: its observation `subgoal_horizon` steps ahead (OMG's subgoal), a vector `[..., K, N, D]`.

The model never reads another agent's observation: predictions are a function of the learner's own inputs,
so it can run at execution time. Its recurrent state is its *memory*; `algos/coplayer.py` decides when it is
reset (each episode, or only when the partner changes). The embedding is the belief that can be fed to the
policy (`coplayer.feed=policy`) or be the hypernetwork's context (`hyper.context=[coplayer]`); it reaches them
detached, so the co-player model learns from its own losses only.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from hypermappo.config import resolve_coplayer_defaults
from hypermappo.models.actor import Actor, ActorOut


def belief_dim(cfg, env_spec) -> int:
    """Features the co-player belief adds to the actor's input (0: the actor reads the env observation only);
    `env_spec`: the whole env's (every slot is a possible co-player)."""
    c = cfg.coplayer
    fed = c.feed == "policy" or (cfg.actor == "hyper" and "coplayer" in cfg.hyper.context)
    if not (c.enabled and fed):
        return 0
    if c.model == "bayes":
        from hypermappo.models.coplayer_goal import goal_labels

        return env_spec.num_agents * (goal_labels(len(env_spec.goal_names)) + int(env_spec.action_space.n))
    if c.model == "subgoal":
        return env_spec.num_agents * c.subgoal_latent  # every slot's inferred subgoal (models/coplayer_subgoal.py)
    return resolve_coplayer_defaults(c).hidden


class CoplayerModel(nn.Module):
    def __init__(self, obs_dim: int, n_slots: int, n_actions: int, n_goals: int, subgoal_dim: int, hidden: int):
        super().__init__()
        self.obs_dim, self.n_slots, self.hidden_size = obs_dim, n_slots, hidden
        self.n_actions, self.n_goals, self.subgoal_dim = n_actions, n_goals, subgoal_dim
        self.encoder = nn.Sequential(nn.LayerNorm(obs_dim + 1, elementwise_affine=False),
                                     nn.Linear(obs_dim + 1, hidden), nn.ReLU())
        self.gru = nn.GRUCell(hidden, hidden)
        self.action_head = nn.Linear(hidden, n_slots * n_actions) if n_actions else None
        self.goal_head = nn.Linear(hidden, n_slots * n_goals) if n_goals else None
        self.subgoal_head = nn.Linear(hidden, n_slots * subgoal_dim) if subgoal_dim else None

    def step(self, obs: torch.Tensor, new_episode: torch.Tensor, hidden: torch.Tensor,
             reset: torch.Tensor) -> torch.Tensor:
        """One step: own obs [..., K, D], new_episode [..., K] bool, memory [..., K, H], reset [..., K] bool
        (memory zeroed before the step) -> new memory = embedding [..., K, H]."""
        hidden = hidden * (~reset).unsqueeze(-1).to(hidden.dtype)
        x = self.encoder(torch.cat([obs, new_episode.unsqueeze(-1).to(obs.dtype)], -1))
        lead = x.shape[:-1]
        return self.gru(x.reshape(-1, x.shape[-1]), hidden.reshape(-1, self.hidden_size)).view(*lead, -1)

    def sequence(self, obs: torch.Tensor, new_episode: torch.Tensor, hidden0: torch.Tensor,
                 reset: torch.Tensor) -> torch.Tensor:
        """obs [T, ..., K, D], new_episode / reset [T, ..., K], hidden0 [..., K, H] -> embeddings [T, ..., K, H]."""
        x = self.encoder(torch.cat([obs, new_episode.unsqueeze(-1).to(obs.dtype)], -1))  # [T, ..., K, H]
        T, lead = x.shape[0], x.shape[1:-1]
        keep = (~reset).reshape(T, -1, 1).to(x.dtype).unbind(0)
        h = hidden0.reshape(-1, self.hidden_size)
        outs = []
        # the recurrence over time, envs x agents one batch; unbind (not x[t]): one backward op, not T full-size zeros
        for x_t, keep_t in zip(x.reshape(T, -1, x.shape[-1]).unbind(0), keep):
            h = self.gru(x_t, h * keep_t)
            outs.append(h)
        return torch.stack(outs).view(T, *lead, self.hidden_size)

    def features(self, memory: torch.Tensor) -> torch.Tensor:
        """What the policy reads of the memory [..., K, H]: the embedding itself."""
        return memory

    def predict(self, embedding: torch.Tensor) -> dict[str, torch.Tensor]:
        """embedding [..., K, H] -> action logits [..., K, N, A], goal logits [..., K, N, G], subgoals
        [..., K, N, D] (the heads that exist)."""
        out = {}
        if self.action_head is not None:
            out["action"] = self.action_head(embedding).unflatten(-1, (self.n_slots, self.n_actions))
        if self.goal_head is not None:
            out["goal"] = self.goal_head(embedding).unflatten(-1, (self.n_slots, self.n_goals))
        if self.subgoal_head is not None:
            out["subgoal"] = self.subgoal_head(embedding).unflatten(-1, (self.n_slots, self.subgoal_dim))
        return out


class BeliefActor(Actor):
    """An actor whose input carries the co-player belief, as one recurrent actor for evaluation: its hidden
    state is [actor's hidden, co-player memory], reset (like any memory here) at each episode start."""

    def __init__(self, actor: Actor, model: CoplayerModel):
        super().__init__()
        self.actor, self.model = actor, model
        self.hidden_size = actor.hidden_size + model.hidden_size

    def forward(self, obs, available=None, hidden=None, reset=None, sequence=False, active=None) -> ActorOut:
        a = self.actor.hidden_size
        lead = obs.shape[:-1]
        if reset is None:
            reset = torch.zeros(lead, dtype=torch.bool, device=obs.device)
        memory = hidden[..., a:] if hidden is not None else obs.new_zeros(*lead, self.model.hidden_size)
        belief = self.model.step(obs, reset, memory, reset)
        out = self.actor(torch.cat([obs, self.model.features(belief)], -1), available, hidden[..., :a] if a else None, reset,
                         active=active)
        new_hidden = torch.cat([out.hidden, belief], -1) if a else belief
        return ActorOut(out.dist, new_hidden, out.aux)
