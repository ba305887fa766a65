"""Gradient norms shared by the eager update (mappo.py, maddpg.py) and the compiled one-graph steps (fused_step.py,
coplayer_step.py)."""

from __future__ import annotations

import torch


def global_norm(tensors) -> torch.Tensor:
    """The 2-norm of all `tensors` together (the norm of their norms, as clip_grad_norm_ computes it)."""
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t) for t in tensors]))


def clip_coefficient(total: torch.Tensor, max_norm: float) -> torch.Tensor:
    """The factor clip_grad_norm_ scales gradients of global norm `total` by: max_norm / (total + 1e-6), at most 1."""
    return (max_norm / (total + 1e-6)).clamp(max=1.0)


def grad_norm(params, max_norm: float) -> torch.Tensor:
    """The parameters' gradient norm, clipped to `max_norm` in place when it is > 0 (0 = measure only)."""
    params = [p for p in params if p.grad is not None]
    if not params:
        return torch.zeros(())
    if max_norm > 0:
        return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
    return global_norm(p.grad for p in params)
