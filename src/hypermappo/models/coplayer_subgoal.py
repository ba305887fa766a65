"""OMG's subgoal model (`coplayer.model=subgoal`): infer what state each co-player is heading for.

Yu et al., "Opponent Modeling based on Subgoal Inference" (NeurIPS 2024): a conditional VAE whose encoder reads
the learner's own trajectory (here: a GRU over its own observations, as models/coplayer.py) and gives, per
co-player slot, a Gaussian over a latent subgoal z; a decoder turns z into the subgoal state (the co-player's
observation at the step it is heading for). The KL term pulls q(z | the learner's history) towards
p(z | the true subgoal state), the encoder of a VAE over states that is pre-trained on the run's first rollouts
and then frozen, so the latent space is the states' and not whatever the CVAE finds convenient. What the policy
reads (`features`) is the mean of q per slot: the inferred subgoal, as a vector of `coplayer.subgoal_latent`.

Like every co-player model it never reads another agent's observation at execution: the co-players' states
are training targets only.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from hypermappo.models.coplayer import CoplayerModel

LOGVAR_MIN, LOGVAR_MAX = -8.0, 4.0  # clamp: a variance of e^-8..e^4 (no overflow in exp, no collapse to 0)


def _mlp(i: int, h: int, o: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, o))


def gaussian(params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., 2Z] -> mean [..., Z], log-variance [..., Z] (clamped)."""
    mu, logvar = params.chunk(2, -1)
    return mu, logvar.clamp(LOGVAR_MIN, LOGVAR_MAX)


def kl_gaussians(mu_q, logvar_q, mu_p, logvar_p) -> torch.Tensor:
    """KL(N(mu_q, e^logvar_q) || N(mu_p, e^logvar_p)), summed over the last dimension."""
    return 0.5 * (logvar_p - logvar_q + (logvar_q.exp() + (mu_q - mu_p).pow(2)) / logvar_p.exp() - 1.0).sum(-1)


class SubgoalModel(CoplayerModel):
    """The history encoder (GRU, inherited), the CVAE's inference head and decoder, and the state VAE (prior)."""

    def __init__(self, obs_dim: int, n_slots: int, latent: int, hidden: int):
        super().__init__(obs_dim, n_slots, 0, 0, 0, hidden)
        self.latent = latent
        self.infer = nn.Linear(hidden, n_slots * 2 * latent)  # q(z | history) for every slot
        self.decoder = _mlp(latent, hidden, obs_dim)  # z -> the subgoal state
        self.prior_encoder = _mlp(obs_dim, hidden, 2 * latent)  # p(z | state): the state VAE's encoder
        self.prior_decoder = _mlp(latent, hidden, obs_dim)  # the state VAE's decoder (pre-training only)

    def posterior(self, embedding: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """embedding [..., K, H] -> q's mean and log-variance [..., K, N, Z]."""
        return gaussian(self.infer(embedding).unflatten(-1, (self.n_slots, 2 * self.latent)))

    def features(self, memory: torch.Tensor) -> torch.Tensor:
        """What the policy reads: the inferred subgoal of every slot, q's mean, flattened [..., K, N * Z]."""
        return self.posterior(memory)[0].flatten(-2)

    def predict(self, embedding: torch.Tensor) -> dict[str, torch.Tensor]:
        """The decoded subgoal state of every slot from q's mean: {"subgoal": [..., K, N, D]} (no action head)."""
        return {"subgoal": self.decoder(self.posterior(embedding)[0])}
