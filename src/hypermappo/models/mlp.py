"""The MAPPO actor: MLP (actor=mlp) or MLP + GRU (actor=rnn), shared or per-agent weights."""

from __future__ import annotations

import gymnasium as gym
import torch
import torch.nn as nn

from hypermappo.models.actor import Actor, ActorOut, agent_onehot
from hypermappo.models.agent_layers import AgentLinear, AgentMLP
from hypermappo.models.distributions import head_size, make_dist


class MLPActor(Actor):
    recurrent = False

    def __init__(self, spec, cfg):
        super().__init__()
        m = cfg.model
        self.n_agents = spec.num_agents
        self.action_space = spec.action_space
        self.agent_id = m.agent_id
        groups = 1 if m.share_params else spec.num_agents
        in_dim = spec.obs_dim + (spec.num_agents if m.agent_id else 0)
        self.trunk = AgentMLP(in_dim, m.hidden_sizes, groups, m.activation, m.layer_norm, m.feature_norm,
                              m.hidden_gain(), rnn_hidden=m.rnn_hidden if self.recurrent else 0)
        self.hidden_size = m.rnn_hidden if self.recurrent else 0
        self.head = AgentLinear(self.trunk.out_dim, head_size(spec.action_space), groups, m.policy_gain)
        self.log_std = None
        if isinstance(spec.action_space, gym.spaces.Box):
            self.log_std = nn.Parameter(torch.full((groups, head_size(spec.action_space)), m.log_std_init))

    def actor_input(self, obs: torch.Tensor) -> torch.Tensor:
        if self.agent_id:
            return torch.cat([obs, agent_onehot(self.n_agents, obs)], -1)
        return obs

    def forward(self, obs, available=None, hidden=None, reset=None, sequence=False, active=None) -> ActorOut:
        features, hidden = self.trunk(self.actor_input(obs), hidden, reset, sequence)
        dist = make_dist(self.action_space, self.head(features), available, self.log_std)
        return ActorOut(dist, hidden, {})


class RNNActor(MLPActor):
    recurrent = True
