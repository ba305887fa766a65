"""Value functions: centralised (MAPPO) on global state / all observations, or local (IPPO).

The critic returns one value per agent slot `[..., N]`, so agent-specific global state
(`state_agent_id`, `state_obs_agent_id`) and IPPO's local critic share one code path.
With `ppo.death=episode` a dead agent's input is death-masked as in the MAPPO paper: everything
zero except its own agent id, so its value is one learned constant per agent slot.
`critic.arch=hyper` (`HyperCritic`) keeps this critic as the base and adds per-agent weight increments
generated from the agent's one-hot id (HyperMARL's critic), with hyper.py's generator machinery.
"""

from __future__ import annotations

import types

import torch
import torch.nn as nn

from hypermappo.config import CoplayerConfig, HyperConfig, resolve_death
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


def death_mask(mode: str, x: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """critic input x [..., N, C], active [..., N] -> x with dead agents' inputs zeroed except their id."""
    keep = active.unsqueeze(-1)  # [..., N, 1]
    if mode.endswith("agent_id"):
        n = active.shape[-1]
        is_id = torch.arange(x.shape[-1], device=x.device) >= x.shape[-1] - n  # [C], the one-hot at the end
        keep = keep | is_id
    return torch.where(keep, x, torch.zeros((), dtype=x.dtype, device=x.device))


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
                              m.layer_norm, m.feature_norm, m.hidden_gain(), rnn_hidden=m.rnn_hidden if recurrent else 0)
        self.hidden_size = m.rnn_hidden if recurrent else 0
        self.head = AgentLinear(self.trunk.out_dim, 1, groups, gain=1.0)
        self.death_masked = resolve_death(cfg.ppo.death, spec) == "episode"
        self.obs_dim = spec.obs_dim  # the env's; features the actor's input adds after it are not the critic's
        # every agent slot reads the same input through the same weights: one forward per env, the value broadcast
        # to the N slots (the same values, N times fewer rows; the broadcast's backward sums the slots' gradients)
        self.one_row_per_env = (self.mode in ("state", "obs_concat") and groups == 1 and not recurrent
                                and not self.death_masked)

    def optimizer_groups(self, lr: float) -> list[dict]:
        """One group at the optimiser's lr; no extra keys, so optimiser state (and checkpoints) stay as before."""
        return [{"params": list(self.parameters())}]

    def forward(self, obs, state, hidden=None, reset=None, sequence=False, active=None):
        """-> (values [..., N] in normalised units when value normalisation is on, new hidden).

        active [..., N]: alive agents; dead ones get a death-masked input when `ppo.death=episode`."""
        if obs.shape[-1] != self.obs_dim:  # the rollout's obs with the co-player belief appended (coplayer.feed)
            obs = obs[..., :self.obs_dim]
        x = critic_input(self.mode, obs, state)
        if self.death_masked and active is not None:
            x = death_mask(self.mode, x, active)
        if self.one_row_per_env:
            features, _ = self.trunk(x[..., :1, :])
            return self.head(features).squeeze(-1).expand(x.shape[:-1]), None
        features, hidden = self.trunk(x, hidden, reset, sequence)
        return self.head(features).squeeze(-1), hidden


class HyperCritic(Critic):
    """Critic whose layers are theta_base + delta(agent id), delta from a hypernetwork (critic.arch=hyper).

    The base is exactly `Critic` (same init), and the generators' output heads start at zero, so at step 0
    this is MAPPO's critic. The context is the agent id alone, so the N per-agent weight sets are generated
    once per forward and applied with one batched matmul per layer (agent-major layout, as HyperActor)."""

    def __init__(self, spec, cfg):
        super().__init__(spec, cfg)
        from hypermappo.models.hyper import HyperNetwork

        c = cfg.critic
        # agent-id context only: the critic's hypernetwork never reads a co-player belief
        net_cfg = types.SimpleNamespace(hyper=HyperConfig(context=["agent_id"], hidden=c.hyper_hidden, rank=0,
                                                          layers="all"),
                                        coplayer=CoplayerConfig(), actor="mlp")
        self.layers = list(self.trunk.linears) + [self.head]
        self.hyper = HyperNetwork(spec, net_cfg, [(lin.in_features, lin.out_features) for lin in self.layers],
                                  full=False, hidden_units=[])
        self.hyper_lr = c.hyper_lr

    def optimizer_groups(self, lr: float) -> list[dict]:
        hyper = set(id(p) for p in self.hyper.parameters())
        return [{"params": [p for p in self.parameters() if id(p) not in hyper], "lr": lr, "name": "critic_base"},
                {"params": list(self.hyper.parameters()), "lr": self.hyper_lr, "name": "critic_hypernetwork"}]

    def forward(self, obs, state, hidden=None, reset=None, sequence=False, active=None):
        from hypermappo.models.hyper import HyperActor

        x = critic_input(self.mode, obs, state)  # [..., N, C]
        if self.death_masked and active is not None:  # dead agents: zero input except their id, as Critic
            x = death_mask(self.mode, x, active)
        t = self.trunk
        if t.feature_norm is not None:
            x = t.feature_norm(x)
        n = x.shape[-2]
        gens, _, _ = self.hyper(x.new_zeros(1, n, 1))  # per-agent tensors [1, N, ...]
        gens = [{k: v[0] for k, v in g.items()} for g in gens]
        lead = x.shape[:-2]
        x = x.reshape(-1, n, x.shape[-1]).transpose(0, 1).contiguous()  # [N, B, C]
        for i, (lin, gen) in enumerate(zip(t.linears, gens)):
            x = HyperActor._agent_major_block(t, i, HyperActor._agent_major_layer(lin, x, gen))
        values = HyperActor._agent_major_layer(self.head, x, gens[-1])  # [N, B, 1]
        return values.squeeze(-1).transpose(0, 1).reshape(*lead, n), None


def build_critic(spec, cfg) -> Critic:
    """The critic `critic.arch` names."""
    return HyperCritic(spec, cfg) if cfg.critic.arch == "hyper" else Critic(spec, cfg)
