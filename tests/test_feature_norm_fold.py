"""The input LayerNorm's affine folded into the first layer (AgentLinear.forward_normed): same function and
gradients as applying it separately, and taken exactly where it pays (differentiated forwards)."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from hypermappo.config import build_config
from hypermappo.envs.vec import EnvSpec
from hypermappo.errors import UserError
from hypermappo.models.actor import build_actor
from hypermappo.models.agent_layers import AgentMLP
from hypermappo.models.critic import build_critic

SPEC = EnvSpec(num_agents=3, obs_dim=7, state_dim=21, observation_space=gym.spaces.Box(-1, 1, (7,)),
               action_space=gym.spaces.Discrete(5))
# (actor kind, overrides, whether the actor folds: an observation context that generates the first layer per
# sample does not)
NETS = {
    "mlp": ("mlp", [], True),
    "mlp-per-agent": ("mlp", ["model.share_params=false"], True),
    "mlp-tanh": ("mlp", ["model.activation=tanh"], True),
    "hyper-id": ("hyper", ["hyper.context=[agent_id]"], True),
    "hyper-id-rank2": ("hyper", ["hyper.context=[agent_id]", "hyper.rank=2"], True),
    "hyper-obs-last": ("hyper", ["hyper.context=[obs]"], True),
    "hyper-obs-all": ("hyper", ["hyper.context=[obs]", "hyper.layers=all"], False),
}


def _nets(kind, overrides):
    """An actor and a critic in float64 whose LayerNorm affines and hypernetwork heads have moved from their init
    (at init the affine is the identity and the fold would change nothing)."""
    cfg = build_config(None, [f"actor={kind}", *overrides])
    torch.manual_seed(0)
    actor, critic = build_actor(kind, SPEC, cfg).double(), build_critic(SPEC, cfg).double()
    with torch.no_grad():
        for net in (actor, critic):
            for name, p in net.named_parameters():
                if "norm" in name or name.startswith("hyper."):
                    p.add_(0.3 * torch.randn_like(p))
    return actor, critic


def _outputs_and_grads(actor, critic, obs, state):
    logits = actor(obs).dist.logp_all
    values, _ = critic(obs, state)
    loss = (logits * torch.linspace(-1, 1, logits.shape[-1], dtype=logits.dtype)).sum() + (values ** 2).sum()
    params = [p for net in (actor, critic) for p in net.parameters()]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return logits.detach(), values.detach(), grads


def _set_fold(nets, on: bool):
    for net in nets:
        for m in net.modules():
            if isinstance(m, AgentMLP):
                m.fold_feature_norm = on


@pytest.mark.parametrize("name", NETS)
def test_folded_network_equals_the_unfolded_one_with_its_gradients(name):
    kind, overrides, _ = NETS[name]
    actor, critic = _nets(kind, overrides)
    torch.manual_seed(1)
    obs, state = torch.randn(6, 4, 3, SPEC.obs_dim, dtype=torch.float64), torch.randn(6, 4, SPEC.state_dim,
                                                                                       dtype=torch.float64)
    runs = []
    for on in (True, False):
        _set_fold((actor, critic), on)
        runs.append(_outputs_and_grads(actor, critic, obs, state))
    (la, va, ga), (lb, vb, gb) = runs
    torch.testing.assert_close(la, lb, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(va, vb, rtol=1e-12, atol=1e-12)
    for a, b in zip(ga, gb):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    # not vacuous: the input LayerNorm's affine gets a gradient on the folded path
    assert ga[[n for n, _ in actor.named_parameters()].index("trunk.feature_norm.weight")].abs().sum() > 0


@pytest.mark.parametrize("name", NETS)
def test_fold_is_taken_in_differentiated_forwards_only(name):
    """Folded, the input LayerNorm module is never called (its affine enters through the first layer's weights);
    without gradients (collection, evaluation) it is applied as it is."""
    kind, overrides, actor_folds = NETS[name]
    actor, critic = _nets(kind, overrides)
    calls = {"actor": 0, "critic": 0}
    for key, net in (("actor", actor), ("critic", critic)):
        net.trunk.feature_norm.register_forward_hook(lambda *_, k=key: calls.__setitem__(k, calls[k] + 1))
    obs, state = torch.randn(4, 3, SPEC.obs_dim, dtype=torch.float64), torch.randn(4, SPEC.state_dim,
                                                                                   dtype=torch.float64)
    actor(obs), critic(obs, state)
    assert calls == {"actor": 0 if actor_folds else 1, "critic": 0}
    with torch.no_grad():
        actor(obs), critic(obs, state)
    assert calls == {"actor": 1 if actor_folds else 2, "critic": 1}


def test_switch_turns_the_fold_off_and_rejects_other_values(monkeypatch):
    monkeypatch.setenv("HYPERMAPPO_FOLD_FEATURE_NORM", "0")
    assert not AgentMLP(4, [8]).fold_feature_norm
    monkeypatch.setenv("HYPERMAPPO_FOLD_FEATURE_NORM", "yes")
    with pytest.raises(UserError, match="HYPERMAPPO_FOLD_FEATURE_NORM='yes': expected 0 or 1"):
        AgentMLP(4, [8])
    monkeypatch.delenv("HYPERMAPPO_FOLD_FEATURE_NORM")
    assert AgentMLP(4, [8]).fold_feature_norm
    assert not AgentMLP(4, [8], feature_norm=False).fold_feature_norm
