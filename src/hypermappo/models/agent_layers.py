"""Layers whose weights are either shared by all agents or separate per agent, in one batched call.

`groups=1` is parameter sharing; `groups=N` gives every agent slot its own weights, applied to
inputs shaped `[..., N, features]` with one batched matmul (no Python loop over agents, no
optimizer per agent). Init follows the MAPPO reference: orthogonal weights, zero biases.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from hypermappo.compile import switch
from hypermappo.kernels import act_norm


class AgentLinear(nn.Module):
    def __init__(self, in_features: int, out_features: int, groups: int = 1, gain: float = 1.0):
        super().__init__()
        self.in_features, self.out_features, self.groups = in_features, out_features, groups
        self.weight = nn.Parameter(torch.empty(groups, in_features, out_features))  # [G, in, out]
        self.bias = nn.Parameter(torch.zeros(groups, out_features))  # [G, out]
        self.reset_parameters(gain)

    def reset_parameters(self, gain: float) -> None:
        with torch.no_grad():
            for g in range(self.groups):  # init only, not a hot path
                w = torch.empty(self.out_features, self.in_features)
                nn.init.orthogonal_(w, gain=gain)
                self.weight[g].copy_(w.t())
            self.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., N, in] -> [..., N, out]."""
        return self.apply_weights(x, self.weight, self.bias)

    def forward_normed(self, x: torch.Tensor, norm: AgentLayerNorm) -> torch.Tensor:
        """self(norm(x)) with the LayerNorm's affine folded into this layer: normalise x without it, then multiply by
        weight * norm.weight (per input row) plus bias + norm.bias @ weight.

        Why: x is the env's observation, which needs no gradient; unfolded, the backward still multiplies the
        layer's output gradient back to the LayerNorm's output (a [rows, in] product: for actor and critic ~14% of
        the product time of MAPPO's compiled update at the paper's 76,800 rows) and walks it again for the affine's
        gradients. Folded, those gradients come from the small folded weights. Same function to float rounding."""
        return self.apply_weights(F.layer_norm(x, (self.in_features,), eps=norm.eps),
                                  *fold_norm(norm, self.weight, self.bias))

    def apply_weights(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """x [..., N, in] @ w [G, in, out] + bias [G, out]."""
        if self.out_features < self.in_features:
            # the same product through an [out, in] copy of the (small) weight: for narrow outputs such as a
            # policy head, MKL runs this layout ~2x faster forward and ~8x faster for the weight gradient
            w = w.transpose(1, 2).contiguous().transpose(1, 2)
        if self.groups == 1:
            y = torch.addmm(bias[0], x.reshape(-1, self.in_features), w[0])
            return y.reshape(*x.shape[:-1], self.out_features)
        n = x.shape[-2]
        xt = x.reshape(-1, n, self.in_features).transpose(0, 1)  # [N, B, in]
        y = torch.baddbmm(bias.unsqueeze(1), xt, w)  # [N, B, out]
        return y.transpose(0, 1).reshape(*x.shape[:-1], self.out_features)


def fold_norm(norm: AgentLayerNorm, w: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights [G, in, out], bias [G, out]) of a linear layer that reads norm's output, with norm's affine folded
    in: layer(norm(x)) = layer'(x normalised without affine). G may be 1 or the agents (shared or per-agent)."""
    return norm.weight.unsqueeze(-1) * w, bias + (norm.bias.unsqueeze(1) @ w).squeeze(1)


class AgentLayerNorm(nn.Module):
    def __init__(self, features: int, groups: int = 1, eps: float = 1e-5):
        super().__init__()
        self.features, self.groups, self.eps = features, groups, eps
        self.weight = nn.Parameter(torch.ones(groups, features))
        self.bias = nn.Parameter(torch.zeros(groups, features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.groups == 1:
            return F.layer_norm(x, (self.features,), self.weight[0], self.bias[0], self.eps)
        return F.layer_norm(x, (self.features,), eps=self.eps) * self.weight + self.bias


class AgentGRUCell(nn.Module):
    """GRU cell (PyTorch's gate equations) with shared or per-agent weights."""

    def __init__(self, in_features: int, hidden: int, groups: int = 1):
        super().__init__()
        self.hidden = hidden
        self.ih = AgentLinear(in_features, 3 * hidden, groups, gain=1.0)
        self.hh = AgentLinear(hidden, 3 * hidden, groups, gain=1.0)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """x [..., N, in], h [..., N, H] -> h' [..., N, H]."""
        gi, gh = self.ih(x), self.hh(h)
        i_r, i_z, i_n = gi.chunk(3, -1)
        h_r, h_z, h_n = gh.chunk(3, -1)
        r = torch.sigmoid(i_r + h_r)
        z = torch.sigmoid(i_z + h_z)
        n = torch.tanh(i_n + r * h_n)
        return (1 - z) * n + z * h


ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh}  # (in-place ReLU measured ~15% slower per update on CPU)


class AgentMLP(nn.Module):
    """Input LayerNorm -> [Linear -> act -> LayerNorm] x L -> optional GRU + LayerNorm.

    The layer order is the MAPPO reference's MLPBase / RNNLayer. `forward` takes the GRU state and
    a per-slot reset mask (1 = start of a new episode: zero the state before this step).
    """

    def __init__(self, in_dim: int, hidden_sizes: list[int], groups: int = 1, activation: str = "relu",
                 layer_norm: bool = True, feature_norm: bool = True, gain: float = 2 ** 0.5,
                 rnn_hidden: int = 0):
        super().__init__()
        self.in_dim = in_dim
        self.feature_norm = AgentLayerNorm(in_dim, groups) if feature_norm else None
        # in differentiated forwards the input LayerNorm's affine is folded into the first layer
        # (AgentLinear.forward_normed); HYPERMAPPO_FOLD_FEATURE_NORM=0 applies it separately (side-by-side timing)
        self.fold_feature_norm = feature_norm and bool(hidden_sizes) and switch("HYPERMAPPO_FOLD_FEATURE_NORM")
        self.linears = nn.ModuleList()
        self.norms = nn.ModuleList()
        self.act = ACTIVATIONS[activation]()
        self.activation = activation
        # LayerNorm(act(.)) of the hidden blocks through one C kernel at large batches (act_norm.py)
        self.fused_norms = layer_norm and groups == 1 and activation in act_norm.ACTS and act_norm.unavailable() is None
        d = in_dim
        for h in hidden_sizes:
            self.linears.append(AgentLinear(d, h, groups, gain))
            self.norms.append(AgentLayerNorm(h, groups) if layer_norm else nn.Identity())
            d = h
        self.rnn = AgentGRUCell(d, rnn_hidden, groups) if rnn_hidden else None
        self.rnn_norm = AgentLayerNorm(rnn_hidden, groups) if rnn_hidden else None
        self.out_dim = rnn_hidden or d

    @property
    def recurrent(self) -> bool:
        return self.rnn is not None

    def hidden_layers(self, x: torch.Tensor) -> torch.Tensor:
        first = 0
        if self.feature_norm is not None:
            if self.fold_feature_norm and torch.is_grad_enabled():
                # a forward that will be differentiated: the input LayerNorm's affine folded into the first layer
                # (AgentLinear.forward_normed); without gradients the fold only adds its two small products
                x, first = self.block(0, self.linears[0].forward_normed(x, self.feature_norm)), 1
            else:
                x = self.feature_norm(x)
        for i in range(first, len(self.linears)):
            x = self.block(i, self.linears[i](x))
        return x

    def block(self, i: int, z: torch.Tensor) -> torch.Tensor:
        """The rest of hidden block i after its linear layer: LayerNorm(act(z)) (act(z) without LayerNorm), through
        the act_norm kernel where it pays; any layout with features last (shared LayerNorm weights)."""
        norm = self.norms[i]
        if self.fused_norms and act_norm.usable(z, self.activation):
            return act_norm.act_norm(z, norm.weight[0], norm.bias[0], self.activation, norm.eps)
        return norm(self.act(z))

    def forward(self, x: torch.Tensor, h: torch.Tensor | None = None, reset: torch.Tensor | None = None,
                sequence: bool = False):
        """x [..., N, in] -> (features [..., N, out_dim], new GRU state or None).

        With `sequence=True`, x is [L, ..., N, in] and reset [L, ..., N]: the feed-forward layers
        run on all L steps at once and only the GRU steps through time (training on chunks).
        """
        x = self.hidden_layers(x)
        if self.rnn is None:
            return x, None
        if not sequence:
            return self._gru_step(x, h, reset)
        outs = []
        for t in range(x.shape[0]):
            out, h = self._gru_step(x[t], h, None if reset is None else reset[t])
            outs.append(out)
        return torch.stack(outs), h

    def _gru_step(self, x, h, reset):
        if reset is not None:
            h = h * (~reset).unsqueeze(-1).to(h.dtype)
        h = self.rnn(x, h)
        return self.rnn_norm(h), h
