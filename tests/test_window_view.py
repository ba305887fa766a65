"""The stag hunt's co-player view kernel (kernels/window_view.py): the C pass against the env's PyTorch composition
(envs/staghunt.window_view) it replaces, and the co-player model's use of it."""

from __future__ import annotations

import pytest
import torch

from hypermappo.envs import staghunt
from hypermappo.envs.registry import make_env
from hypermappo.kernels import window_view
from hypermappo.models.coplayer_goal import GoalPolicy

pytestmark = pytest.mark.skipif(isinstance(window_view.library(), str),
                                reason=f"kernel: {window_view.library()}")


def _observations(radius: int, size: int, steps: int = 30, envs: int = 64):
    """Windows from random play (partners near edges, in and out of sight), rel 0 or 1 per row."""
    env = make_env("staghunt", envs, "cpu", observation="partial", view_radius=radius, grid_size=size)
    s = env.reset(seed=radius)
    g = torch.Generator().manual_seed(size)
    out = []
    for _ in range(steps):
        s = env.step(torch.randint(0, 5, (envs, 2), generator=g))
        out.append((s.obs.clone(), torch.randint(0, 2, s.obs.shape[:-1], generator=g)))
    return out


@pytest.mark.parametrize("radius, size", [(4, 5), (1, 5), (2, 7)])
def test_the_kernel_equals_the_composition(radius, size, monkeypatch):
    """Bit for bit, on windows that cover the grid, that miss the partner, and that cross the grid's edge."""
    seen_out_of_sight = 0
    for obs, rel in _observations(radius, size):
        got = window_view.apply(obs, rel, size=size, n_hunters=2, radius=radius)
        want = staghunt.window_view(obs, rel, size=size, n_hunters=2, radius=radius)
        assert torch.equal(got, want)
        lead, ww = 5, (2 * radius + 1) ** 2
        seen_out_of_sight += int((obs[..., lead:lead + ww].amax(-1) < 0.5).sum())
    if radius == 1:
        assert seen_out_of_sight > 0, "the out-of-sight branch ran"
    monkeypatch.setenv("HYPERMAPPO_WINDOW_VIEW_KERNEL", "0")
    assert torch.equal(window_view.apply(obs, rel, size=size, n_hunters=2, radius=radius), want)


def test_the_coplayer_model_reads_the_view_through_the_kernel():
    env = make_env("staghunt", 4, "cpu", observation="partial", view_radius=4)
    model = GoalPolicy(env.spec.obs_dim, 2, 5, 4, 8, 0.05, env.spec.identity_features, env.spec.coplayer_view)
    assert model.view.func is window_view.apply and model.view.keywords == env.spec.coplayer_view.keywords
    full = make_env("staghunt", 4, "cpu")  # another view: kept as the env gives it
    assert window_view.fast(full.spec.coplayer_view) is full.spec.coplayer_view
