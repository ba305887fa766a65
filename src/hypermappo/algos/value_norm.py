"""Value-target normalisation: the MAPPO reference's ValueNorm, and PopArt.

Running mean and mean-of-squares with exponential decay `beta` and a debiasing term (so early
estimates are not pulled towards zero), as the reference `ValueNorm` does. The critic learns
normalised targets; GAE works on denormalised values. PopArt additionally rescales the critic's
output layer whenever the statistics move, so its unnormalised predictions are preserved.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class ValueNorm(nn.Module):
    # The statistics are float64 tensors of shape (1,), not 0-d: Dynamo takes a 0-d float64 CPU tensor that a compiled
    # graph reads for a Python float, fails to keep it symbolic and restarts its analysis, tracing the whole update
    # step twice (~8 s more to compile a compiled MPE run, 14 s for a Hyper-MAPPO update graph). Checkpoints with 0-d
    # statistics load as before.
    SHAPE = (1,)
    STATS = ("running_mean", "running_mean_sq", "debiasing_term")

    def __init__(self, beta: float = 0.99999, epsilon: float = 1e-5, var_floor: float = 1e-2):
        super().__init__()
        self.beta, self.epsilon, self.var_floor = beta, epsilon, var_floor
        for name in self.STATS:
            self.register_buffer(name, torch.zeros(self.SHAPE, dtype=torch.float64))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for name in self.STATS:
            value = state_dict.get(prefix + name)
            if isinstance(value, torch.Tensor) and value.dim() == 0:  # saved before the statistics had shape (1,)
                state_dict[prefix + name] = value.reshape(self.SHAPE)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def mean_var(self) -> tuple[torch.Tensor, torch.Tensor]:
        d = self.debiasing_term.clamp(min=self.epsilon)
        mean = self.running_mean / d
        var = (self.running_mean_sq / d - mean ** 2).clamp(min=self.var_floor)
        return mean, var

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """x: the (active) return targets of one update, any shape."""
        x = x.double()
        self.running_mean.mul_(self.beta).add_(x.mean() * (1 - self.beta))
        self.running_mean_sq.mul_(self.beta).add_((x * x).mean() * (1 - self.beta))
        self.debiasing_term.mul_(self.beta).add_(1 - self.beta)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, var = self.mean_var()
        return ((x.double() - mean) / var.sqrt()).to(x.dtype)

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, var = self.mean_var()
        return (x.double() * var.sqrt() + mean).to(x.dtype)


class PopArt(ValueNorm):
    """ValueNorm that keeps the critic head's unnormalised output unchanged across updates."""

    def __init__(self, head: nn.Module, **kw):
        super().__init__(**kw)
        self.head = [head]  # a list so the head is not registered (and saved) twice

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        old_mean, old_var = self.mean_var()
        super().update(x)
        new_mean, new_var = self.mean_var()
        old_std, new_std = old_var.sqrt(), new_var.sqrt()
        head = self.head[0]
        head.weight.mul_((old_std / new_std).float())
        head.bias.mul_(old_std.float()).add_((old_mean - new_mean).float()).div_(new_std.float())


class NoNorm(nn.Module):
    """Identity, for ppo.value_norm=none."""

    def update(self, x):
        pass

    def normalize(self, x):
        return x

    def denormalize(self, x):
        return x


def build_value_norm(kind: str, critic_head: nn.Module) -> nn.Module:
    if kind == "valuenorm":
        return ValueNorm()
    if kind == "popart":
        return PopArt(critic_head)
    return NoNorm()
