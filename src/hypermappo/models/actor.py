"""The actor interface every architecture implements, and the registry that picks one by name.

An actor maps a batch of agent observations `[..., N, obs_dim]` (plus available actions, which agents are
alive and, for recurrent actors, a hidden state and reset mask) to an action distribution over `[..., N]`.
Adding an architecture = one module with an `Actor` subclass + one line in `ACTORS`.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

import torch
import torch.nn as nn

from hypermappo.models.distributions import ActionDist

# name -> "module:class"; `actor=NAME` in the config picks one
ACTORS: dict[str, str] = {
    "mlp": "hypermappo.models.mlp:MLPActor",
    "rnn": "hypermappo.models.mlp:RNNActor",
    "hyper": "hypermappo.models.hyper:HyperActor",
}


class ActorOut(NamedTuple):
    dist: ActionDist
    hidden: torch.Tensor | None  # [..., N, hidden_size] or None for feed-forward actors
    aux: dict  # architecture-specific tensors the losses / diagnostics need (e.g. Δθ)


class Actor(nn.Module):
    hidden_size: int = 0  # > 0: recurrent, trained on chunks of ppo.data_chunk_length steps

    def forward(self, obs: torch.Tensor, available: torch.Tensor | None = None,
                hidden: torch.Tensor | None = None, reset: torch.Tensor | None = None,
                sequence: bool = False, active: torch.Tensor | None = None) -> ActorOut:
        """obs [..., N, obs_dim] -> distribution over [..., N]. With `sequence=True` (recurrent
        training) obs is [L, ..., N, obs_dim], reset [L, ..., N] and hidden the state at step 0.
        `active` [..., N] bool marks alive agents (None = all): an actor that looks at other agents
        (e.g. attention over their observations) must ignore dead and padded slots; others ignore it."""
        raise NotImplementedError

    def aux_losses(self, out: ActorOut, batch: dict) -> dict[str, torch.Tensor]:
        """Extra loss terms (name -> scalar, already weighted) this architecture adds."""
        return {}

    def optimizer_groups(self, lr: float) -> list[dict]:
        """Adam parameter groups (a hypernetwork gets its own learning rate)."""
        return [{"params": [p for p in self.parameters() if p.requires_grad], "lr": lr, "name": "actor"}]

    def after_update(self) -> None:
        """Called once after every PPO update (e.g. to sync a target network)."""

    def describe(self) -> dict:
        """Facts about how this run computes the actor that the config alone does not say (for summary.json)."""
        return {}


def build_actor(name: str, spec, cfg) -> Actor:
    module, cls = ACTORS[name].split(":")
    return getattr(importlib.import_module(module), cls)(spec, cfg)


def agent_onehot(n: int, like: torch.Tensor) -> torch.Tensor:
    """[..., N, N] one-hot agent ids broadcast to the leading shape of `like` [..., N, d]."""
    eye = torch.eye(n, device=like.device, dtype=like.dtype)
    return eye.expand(*like.shape[:-2], n, n)
