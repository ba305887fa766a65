"""Value functions: centralised (MAPPO) on global state / all observations, or local (IPPO).

The critic returns one value per agent slot `[..., N]`, so agent-specific global state
(`state_agent_id`, `state_obs_agent_id`) and IPPO's local critic share one code path.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from hypermappo.models.actor import agent_onehot
from hypermappo.models.agent_layers import AgentLinear, AgentMLP


def resolve_input(algo: str, choice: str) -> str:
    if choice != "auto":
        return choice
    return "obs" if algo == "ippo" else "state_agent_id"


def critic_input(mode: str, obs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """obs [..., N, D], state [..., S] -> critic input [..., N, C]."""
    n = obs.shape[-2]
    if mode == "obs":
        return obs
    if mode == "obs_concat":
        return obs.flatten(-2).unsqueeze(-2).expand(*obs.shape[:-2], n, -1)
    s = state.unsqueeze(-2).expand(*obs.shape[:-2], n, state.shape[-1])
    if mode == "state":
        return s
    if mode == "state_agent_id":
        return torch.cat([s, agent_onehot(n, obs)], -1)
    if mode == "state_obs_agent_id":
        return torch.cat([s, obs, agent_onehot(n, obs)], -1)
    raise ValueError(mode)


def input_dim(mode: str, spec) -> int:
    n, d, s = spec.num_agents, spec.obs_dim, spec.state_dim
    return {"obs": d, "obs_concat": n * d, "state": s, "state_agent_id": s + n,
            "state_obs_agent_id": s + d + n}[mode]


class Critic(nn.Module):
    def __init__(self, spec, cfg):
        super().__init__()
        m, c = cfg.model, cfg.critic
        self.mode = resolve_input(cfg.algo, c.input)
        recurrent = (c.recurrent == "on") or (c.recurrent == "auto" and cfg.actor == "rnn")
        share = m.share_params if c.share_params == "auto" else c.share_params == "on"
        groups = 1 if share else spec.num_agents
        self.trunk = AgentMLP(input_dim(self.mode, spec), c.hidden_sizes or m.hidden_sizes, groups, m.activation,
                              m.layer_norm, m.feature_norm, m.gain, rnn_hidden=m.rnn_hidden if recurrent else 0)
        self.hidden_size = m.rnn_hidden if recurrent else 0
        self.head = AgentLinear(self.trunk.out_dim, 1, groups, gain=1.0)

    def forward(self, obs, state, hidden=None, reset=None, sequence=False):
        """-> (values [..., N] in normalised units when value normalisation is on, new hidden)."""
        features, hidden = self.trunk(critic_input(self.mode, obs, state), hidden, reset, sequence)
        return self.head(features).squeeze(-1), hidden
