"""Action distributions for every Gymnasium action space, batched over `[..., N]` agent slots.

Discrete -> categorical (unavailable actions get logit -1e10, i.e. probability exactly 0),
MultiDiscrete -> independent categoricals, Box -> diagonal Gaussian with a state-independent
log-std, MultiBinary -> independent Bernoullis. `params()` flattens a distribution into one
tensor so the rollout buffer can store the behaviour policy and `kl_from_params` can later
measure KL(pi_old || pi_new) exactly (the Hyper-MAPPO alignment term and the per-agent KL
diagnostics need this).
"""

from __future__ import annotations

import math

import gymnasium as gym
import torch
import torch.nn.functional as F

MASKED_LOGIT = -1e10


def head_size(space: gym.Space) -> int:
    """Number of network outputs the policy head needs for `space`."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(sum(space.nvec))
    if isinstance(space, gym.spaces.Box):
        return int(math.prod(space.shape))
    if isinstance(space, gym.spaces.MultiBinary):
        return int(space.n)
    raise TypeError(f"unsupported action space {space}")


def params_size(space: gym.Space) -> int:
    return 2 * head_size(space) if isinstance(space, gym.spaces.Box) else head_size(space)


class ActionDist:
    """Base: subclasses hold tensors shaped [..., N, k] and reduce over the last dim."""

    def sample(self) -> torch.Tensor: ...
    def mode(self) -> torch.Tensor: ...
    def log_prob(self, action: torch.Tensor) -> torch.Tensor: ...
    def entropy(self) -> torch.Tensor: ...
    def params(self) -> torch.Tensor: ...
    def kl_from_params(self, old: torch.Tensor) -> torch.Tensor: ...
    def probs_for_diversity(self) -> torch.Tensor: ...


class Categorical(ActionDist):
    def __init__(self, logits: torch.Tensor, available: torch.Tensor | None = None):
        if available is not None:
            logits = logits.masked_fill(~available, MASKED_LOGIT)
        self.logp_all = torch.log_softmax(logits, -1)  # [..., A]

    def sample(self) -> torch.Tensor:
        # Gumbel-max: one fused op, same RNG stream as torch.rand
        return self.sample_from(torch.rand_like(self.logp_all))

    def sample_from(self, u: torch.Tensor) -> torch.Tensor:
        """The sample `sample()` draws when torch.rand gives it `u` (uniforms of logp_all's shape): a caller with
        its own generator per seed (seed_batch.py) draws the same actions as a run of that seed alone."""
        return (self.logp_all - torch.log(-torch.log(u.clamp(1e-20, 1.0)))).argmax(-1)

    def mode(self) -> torch.Tensor:
        return self.logp_all.argmax(-1)

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return self.logp_all.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.logp_all.exp() * self.logp_all).sum(-1)

    def params(self) -> torch.Tensor:
        return self.logp_all

    def kl_from_params(self, old: torch.Tensor) -> torch.Tensor:
        return (old.exp() * (old - self.logp_all)).sum(-1)

    def probs_for_diversity(self) -> torch.Tensor:
        return self.logp_all.exp()


class MultiCategorical(ActionDist):
    def __init__(self, logits: torch.Tensor, nvec: list[int]):
        self.nvec = nvec
        self.parts = [Categorical(part) for part in logits.split(nvec, -1)]

    def sample(self):
        return torch.stack([p.sample() for p in self.parts], -1)

    def mode(self):
        return torch.stack([p.mode() for p in self.parts], -1)

    def log_prob(self, action):
        return sum(p.log_prob(action[..., i]) for i, p in enumerate(self.parts))

    def entropy(self):
        return sum(p.entropy() for p in self.parts)

    def params(self):
        return torch.cat([p.params() for p in self.parts], -1)

    def kl_from_params(self, old):
        return sum(p.kl_from_params(o) for p, o in zip(self.parts, old.split(self.nvec, -1)))

    def probs_for_diversity(self):
        return torch.cat([p.probs_for_diversity() for p in self.parts], -1) / len(self.parts)


class DiagGaussian(ActionDist):
    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor):
        self.mean = mean
        self.log_std = log_std.expand_as(mean)

    def sample(self):
        return self.mean + self.log_std.exp() * torch.randn_like(self.mean)

    def mode(self):
        return self.mean

    def log_prob(self, action):
        z = (action - self.mean) / self.log_std.exp()
        return (-0.5 * z * z - self.log_std - 0.5 * math.log(2 * math.pi)).sum(-1)

    def entropy(self):
        return (0.5 + 0.5 * math.log(2 * math.pi) + self.log_std).sum(-1)

    def params(self):
        return torch.cat([self.mean, self.log_std], -1)

    def kl_from_params(self, old):
        old_mean, old_log_std = old.chunk(2, -1)
        var_ratio = torch.exp(2 * (old_log_std - self.log_std))
        t = (old_mean - self.mean) / self.log_std.exp()
        return 0.5 * (var_ratio + t * t - 1 - torch.log(var_ratio)).sum(-1)

    def probs_for_diversity(self):
        return self.mean


class Bernoulli(ActionDist):
    def __init__(self, logits: torch.Tensor):
        self.logits = logits

    def sample(self):
        return (torch.rand_like(self.logits) < torch.sigmoid(self.logits)).float()

    def mode(self):
        return (self.logits > 0).float()

    def log_prob(self, action):
        return -F.binary_cross_entropy_with_logits(self.logits, action.float(), reduction="none").sum(-1)

    def entropy(self):
        p = torch.sigmoid(self.logits)
        return F.binary_cross_entropy_with_logits(self.logits, p, reduction="none").sum(-1)

    def params(self):
        return self.logits

    def kl_from_params(self, old):
        p_old = torch.sigmoid(old)
        lp_old, lq_old = F.logsigmoid(old), F.logsigmoid(-old)
        lp_new, lq_new = F.logsigmoid(self.logits), F.logsigmoid(-self.logits)
        return (p_old * (lp_old - lp_new) + (1 - p_old) * (lq_old - lq_new)).sum(-1)

    def probs_for_diversity(self):
        return torch.sigmoid(self.logits)


def make_dist(space: gym.Space, head_out: torch.Tensor, available: torch.Tensor | None = None,
              log_std: torch.Tensor | None = None) -> ActionDist:
    """Distribution for `space` from the policy head's output [..., N, head_size(space)]."""
    if isinstance(space, gym.spaces.Discrete):
        return Categorical(head_out, available)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return MultiCategorical(head_out, [int(n) for n in space.nvec])
    if isinstance(space, gym.spaces.Box):
        return DiagGaussian(head_out, log_std)
    if isinstance(space, gym.spaces.MultiBinary):
        return Bernoulli(head_out)
    raise TypeError(f"unsupported action space {space}")


def dist_from_params(space: gym.Space, params: torch.Tensor) -> ActionDist:
    """Rebuild a stored behaviour-policy distribution (for diagnostics)."""
    if isinstance(space, gym.spaces.Box):
        mean, log_std = params.chunk(2, -1)
        return DiagGaussian(mean, log_std)
    if isinstance(space, gym.spaces.Discrete):
        d = Categorical.__new__(Categorical)
        d.logp_all = params
        return d
    return make_dist(space, params)
