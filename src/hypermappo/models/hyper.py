"""Hyper-MAPPO actor: a hypernetwork generates the actor's weights, theta = theta_base + delta(context).

The actor has exactly the MAPPO MLP actor's layers (`trunk`, `head`, same orthogonal init), so
its base weights *are* a MAPPO actor. A hypernetwork maps a per-agent context (agent identity,
all agents' observations through attention, a GRU over the agent's history, or a combination)
to weight increments delta for the chosen layers. Its output heads start at zero, so at step 0
the policy equals the MAPPO actor's while gradients still reach the heads (and, once the heads
have moved, the layers before them).

Compute is batched over envs x agents: when the context is agent identity alone, delta depends on
the agent only, so the N per-agent weight matrices are formed once and applied with one batched
matmul per layer, in an agent-major layout `[N, samples, features]` so no layer's activations are
transposed; otherwise the generated part is computed factored (see `WeightGenerator`): one dense
matmul of each layer's input against the generator's weights, no per-sample weight matrices.
"""

from __future__ import annotations

import copy
import dataclasses
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from hypermappo.config import resolve_hyper_defaults
from hypermappo.errors import UserError
from hypermappo.kernels import obs_context as obs_context_kernel
from hypermappo.models.actor import ActorOut, agent_onehot
from hypermappo.models.agent_attention import AgentAttention
from hypermappo.models.agent_layers import AgentGRUCell, AgentLayerNorm, AgentLinear, fold_norm
from hypermappo.models.distributions import make_dist
from hypermappo.models.mlp import MLPActor


class ContextEncoder(nn.Module):
    """Per-agent context [..., N, C] from agent id, all observations and/or the agent's history."""

    def __init__(self, spec, h, belief_size: int = 0):
        super().__init__()
        self.n = spec.num_agents
        self.parts = list(h.context)
        # the input's last `belief_size` features are the co-player belief (models/coplayer.py), not observation
        self.belief_dim = belief_size
        spec = dataclasses.replace(spec, obs_dim=spec.obs_dim - belief_size)
        dim = belief_size if "coplayer" in self.parts else 0
        if "agent_id" in self.parts:
            if h.id_encoding == "embedding":
                self.id_embedding = nn.Parameter(torch.randn(self.n, h.id_embed_dim) * 0.1)
                dim += h.id_embed_dim
            else:
                self.id_embedding = None
                dim += self.n
        if "obs" in self.parts:
            self.obs_encoder = nn.Sequential(nn.LayerNorm(spec.obs_dim, elementwise_affine=False),
                                             nn.Linear(spec.obs_dim, h.obs_embed_dim),
                                             nn.ReLU())
            self.aggregation = h.obs_aggregation
            if h.obs_aggregation == "attention":
                self.attention = AgentAttention(self.n, h.obs_embed_dim, h.attention_heads, h.attention_kernel)
                dim += 2 * h.obs_embed_dim  # own encoding + attended summary
            elif h.obs_aggregation == "mean":
                dim += 2 * h.obs_embed_dim
            else:
                dim += h.obs_embed_dim
        self.history_size = 0
        if "history" in self.parts:
            self.history_encoder = nn.Sequential(nn.LayerNorm(spec.obs_dim, elementwise_affine=False),
                                                 nn.Linear(spec.obs_dim, h.history_hidden),
                                                 nn.ReLU())
            self.history_gru = AgentGRUCell(h.history_hidden, h.history_hidden)
            self.history_size = h.history_hidden
            dim += h.history_hidden
        self.dim = dim
        # LayerNorm on the hypernetwork input; its affine would be absorbed by the next (linear) layer: none
        self.norm = nn.LayerNorm(dim, elementwise_affine=False)

    @property
    def static(self) -> bool:
        """True when the context is agent identity alone (delta is per agent, not per sample)."""
        return self.parts == ["agent_id"]

    def agent_part(self, like: torch.Tensor) -> torch.Tensor:
        if self.id_embedding is not None:
            return self.id_embedding.expand(*like.shape[:-2], self.n, self.id_embedding.shape[-1])
        return agent_onehot(self.n, like)

    def forward(self, obs, hidden=None, reset=None, sequence=False, active=None):
        """obs [..., N, D] (or [L, ..., N, D] with sequence), active [..., N] bool or None (all alive) ->
        (context [..., N, C], new history state). Dead / padded agent slots are left out of the attention keys and
        of the mean over agents."""
        parts = []
        if self.belief_dim:
            belief, obs = obs[..., -self.belief_dim:], obs[..., :-self.belief_dim]
            if "coplayer" in self.parts:
                parts.append(belief)
        if "agent_id" in self.parts:
            parts.append(self.agent_part(obs))
        if "obs" in self.parts:
            enc = self.obs_encoder(obs)  # [..., N, H]
            if self.aggregation == "attention":
                flat = enc.reshape(-1, self.n, enc.shape[-1])  # [B, N, H]: own encoding queries all alive agents
                alive = None if active is None else active.reshape(-1, self.n)  # [B, N]
                parts += [enc, self.attention.attend(flat, alive).reshape(enc.shape)]
            elif self.aggregation == "mean":
                if active is None:
                    mean = enc.mean(-2, keepdim=True)
                else:  # over alive agents; 0 when none is
                    alive = active.unsqueeze(-1).to(enc.dtype)  # [..., N, 1]
                    mean = (enc * alive).sum(-2, keepdim=True) / alive.sum(-2, keepdim=True).clamp(min=1.0)
                parts += [enc, mean.expand_as(enc)]
            else:
                parts.append(enc)
        new_hidden = None
        if "history" in self.parts:
            x = self.history_encoder(obs)
            if sequence:
                outs = []
                for t in range(x.shape[0]):
                    hidden = self._gru_step(x[t], hidden, None if reset is None else reset[t])
                    outs.append(hidden)
                parts.append(torch.stack(outs))
            else:
                hidden = self._gru_step(x, hidden, reset)
                parts.append(hidden)
            new_hidden = hidden
        return self.norm(torch.cat(parts, -1)), new_hidden

    def _gru_step(self, x, h, reset):
        if reset is not None:
            h = h * (~reset).unsqueeze(-1).to(h.dtype)
        return self.history_gru(x, h)


class WeightGenerator(nn.Module):
    """Context code z -> delta (W [.., in, out], b [.., out]) for one generated layer; zero-initialised output.

    Per-sample generation is *factored*: each generated tensor is linear in the code c = [z, 1], so the
    layer's generated part x @ W(z) + b(z) = sum_k c_k (x @ G_k + g_k) is one dense matmul of x against the
    generator's own weights followed by a weighted sum over k, and W(z) [samples, in, out] is never formed
    (it is the largest tensor of the update and its per-sample matmul the slowest kernel); likewise x @ U(z)
    for low rank. Norms and differences of a full-rank delta, which the smoothness loss and diagnostics
    need, come from the Gram matrix of the generator weights (`flat_matrix`) instead."""

    def __init__(self, hidden: int, in_f: int, out_f: int, rank: int, full: bool):
        super().__init__()
        self.in_f, self.out_f, self.rank = in_f, out_f, rank
        if rank:
            self.u = nn.Linear(hidden, in_f * rank)  # random init: dW = U V is 0 because V starts at 0
            self.v = nn.Linear(hidden, rank * out_f)
            nn.init.zeros_(self.v.weight), nn.init.zeros_(self.v.bias)
        else:
            self.w = nn.Linear(hidden, in_f * out_f)
            nn.init.zeros_(self.w.weight), nn.init.zeros_(self.w.bias)
        self.b = nn.Linear(hidden, out_f)
        nn.init.zeros_(self.b.weight), nn.init.zeros_(self.b.bias)
        if full:  # full weights (no base): the generator's output bias starts at MAPPO's orthogonal init
            with torch.no_grad():
                self.w.bias.copy_(_orthogonal_flat(in_f, out_f))

    def forward(self, z, factored: bool = False):
        """z [..., hidden] -> dict with W [..., in, out] or (U [..., in, r], V [..., r, out]) and b [..., out];
        with `factored` just the code c = [z, 1] [..., hidden + 1], see the class docstring."""
        if factored:
            return {"code": F.pad(z, (0, 1), value=1.0)}
        out = {"b": self.b(z)}
        if self.rank:
            out["U"] = self.u(z).unflatten(-1, (self.in_f, self.rank))
            out["V"] = self.v(z).unflatten(-1, (self.rank, self.out_f))
        else:
            out["W"] = self.w(z).unflatten(-1, (self.in_f, self.out_f))
        return out

    def flat_matrix(self) -> torch.Tensor:
        """A [in*out + out, hidden + 1] with flat delta = A @ c (factored form; W row-major, then b)."""
        return torch.cat([self._with_bias(self.w), self._with_bias(self.b)])

    def explicit(self, code: torch.Tensor) -> dict:
        """The generated tensors (W or U, V, and b) from a factored code."""
        return self(code[..., :-1])

    @staticmethod
    def _with_bias(lin: nn.Linear) -> torch.Tensor:
        return torch.cat([lin.weight, lin.bias.unsqueeze(-1)], -1)  # [outputs, hidden + 1]: acts on c = [z, 1]

    def input_product(self, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(G [in, m], bias [m] or None) such that the layer input enters the generated part only as x @ G + bias
        (k = code size): G holds the generator's weights for W(z) (full rank, b(z) folded into the bias) or U(z)."""
        if self.rank:
            return self._with_bias(self.u).view(self.in_f, self.rank * k), None
        return self._with_bias(self.w).view(self.in_f, self.out_f * k), self._with_bias(self.b).view(-1)

    def combine(self, xg: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
        """xg = x @ G + bias [S, m] (see `input_product`) and the code [S, k] -> x @ W(z) + b(z) [S, out]."""
        k = code.shape[-1]
        if self.rank:  # x @ U(z) is a weighted sum over k of x @ G_u; V(z) and b(z) are one small matmul of the code
            r, o = self.rank, self.out_f
            xu = (xg.view(-1, r, k) * code.unsqueeze(1)).sum(-1)  # [S, r]
            vb = code @ torch.cat([self._with_bias(self.v), self._with_bias(self.b)]).t()  # [S, r*out + out]
            v, b = vb[:, :r * o].view(-1, r, o), vb[:, r * o:]
            return b + (xu * v.squeeze(1) if r == 1 else (xu.unsqueeze(-1) * v).sum(1))
        return (xg.view(-1, self.out_f, k) * code.unsqueeze(1)).sum(-1)  # contiguous reduce: ~1.5x faster than over k

    def apply_factored(self, x: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
        """x [..., in], code [..., hidden + 1] -> x @ W(z) + b(z) [..., out] without forming W(z)."""
        k = code.shape[-1]
        g, bias = self.input_product(k)
        xs = x.reshape(-1, self.in_f)
        xg = xs @ g if bias is None else torch.addmm(bias, xs, g)
        return self.combine(xg, code.reshape(-1, k)).view(*x.shape[:-1], self.out_f)


class _SharedInputProducts(torch.autograd.Function):
    """(x @ W + b, x @ G + g) for a layer input x [S, in] that feeds both a shared base layer (W, b) and a weight
    generator (G, g). The forward is two matmuls, the base one exactly as `AgentLinear` computes it (so delta = 0
    gives MAPPO's output bit for bit), except in a compiled graph (`ppo.compile`, which matches the eager run to
    float tolerance only): there it is one matmul over [W | G], so x (the last hidden layer's output, 19.7 MB at
    the paper's mini-batch) is read once instead of twice; the backward is one matmul for dx over [W | G] (instead
    of two matmuls and the sum of their results) and one for the weight gradients."""

    @staticmethod
    def forward(ctx, x, w, b, g, gb):
        if torch.compiler.is_compiling():
            o = w.shape[1]
            both = torch.addmm(torch.cat([b, gb if gb is not None else b.new_zeros(g.shape[1])]), x, torch.cat([w, g], 1))
            base, xg = both[:, :o], both[:, o:]
        else:
            w_layout = w.t().contiguous().t() if w.shape[1] < w.shape[0] else w  # AgentLinear's layout choice
            base = torch.addmm(b, x, w_layout)
            xg = x @ g if gb is None else torch.addmm(gb, x, g)
        ctx.save_for_backward(x, w, g)
        ctx.has_gb = gb is not None
        return base, xg

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_base, d_xg):
        x, w, g = ctx.saved_tensors
        o = w.shape[1]
        d = torch.cat([d_base, d_xg], 1)  # [S, out + m]
        dx = d @ torch.cat([w, g], 1).t()
        d_wg = (d.t() @ x).t()  # [in, out + m], computed in the [out, in] layout (faster for narrow outputs)
        return dx, d_wg[:, :o], d_base.sum(0), d_wg[:, o:], d_xg.sum(0) if ctx.has_gb else None


def _orthogonal_flat(in_f, out_f, gain=2 ** 0.5):
    w = torch.empty(out_f, in_f)
    nn.init.orthogonal_(w, gain=gain)
    return w.t().reshape(-1)


class HyperNetwork(nn.Module):
    """Context encoder + MLP + one weight generator per generated actor layer."""

    def __init__(self, spec, cfg, layer_shapes: list[tuple[int, int]], full: bool, hidden_units: list[int]):
        super().__init__()
        h = cfg.hyper
        self.context = ContextEncoder(spec, h, spec.belief_dim)
        layers, width = [], self.context.dim
        for _ in range(h.mlp_layers):
            layers += [nn.Linear(width, h.hidden), nn.ReLU()]
            width = h.hidden
        self.mlp = nn.Sequential(*layers)
        self.generators = nn.ModuleList(
            WeightGenerator(width, i, o, h.rank, full) for i, o in layer_shapes)
        self.scales = nn.ModuleList()
        for units in hidden_units:  # per-unit scale on shared hidden layers (layers=last + hidden_scale)
            lin = nn.Linear(width, units)
            nn.init.zeros_(lin.weight), nn.init.zeros_(lin.bias)
            self.scales.append(lin)
        self.context_kernel = self._context_kernel(spec, h)

    def _context_kernel(self, spec, h) -> str:
        """'fused' when the context encoder and MLP run as one C kernel (kernels/obs_context.py), else why not."""
        c = self.context
        if c.parts != ["obs"] or c.belief_dim or c.aggregation != "attention" or not len(self.mlp):
            return "modules (not an observation-only context with attention and an MLP)"
        if not obs_context_kernel.enabled():
            return "modules (HYPERMAPPO_OBS_CONTEXT_KERNEL=0)"
        if not c.attention.fused:
            return f"modules (attention kernel: {c.attention.implementation})"
        self.kernel_sizes = [h.obs_embed_dim, h.attention_heads, h.hidden, h.mlp_layers]
        lib = obs_context_kernel.library(spec.num_agents, spec.obs_dim, *self.kernel_sizes)
        return f"modules (kernel unavailable: {lib})" if isinstance(lib, str) else "fused"

    def context_params(self) -> torch.Tensor:
        """The context encoder's and MLP's parameters packed for the kernel (obs_context.pack)."""
        c = self.context
        return obs_context_kernel.pack(c.obs_encoder[1], c.attention, [m for m in self.mlp if isinstance(m, nn.Linear)])

    def _fused_context(self, obs: torch.Tensor) -> bool:
        return (self.context_kernel == "fused" and obs.device.type == "cpu" and not obs.requires_grad
                and obs.dtype in (torch.float32, torch.float64))

    @property
    def factored(self) -> bool:
        """Per-sample generation runs factored (see `WeightGenerator`); per-agent (static) does not."""
        return not self.context.static

    def forward(self, obs, hidden=None, reset=None, sequence=False, active=None):
        if self._fused_context(obs):
            z = obs_context_kernel.obs_context(obs, active, self.context_params(), self.kernel_sizes)
            new_hidden = None
        else:
            ctx, new_hidden = self.context(obs, hidden, reset, sequence, active)
            z = self.mlp(ctx)
        f = self.factored
        return [g(z, f) for g in self.generators], [1.0 + s(z) for s in self.scales], new_hidden

    def flat_matrix(self) -> torch.Tensor:
        """Factored form: flat delta of every generated layer = A @ c, A [P, hidden + 1]."""
        return torch.cat([g.flat_matrix() for g in self.generators])


class HyperActor(MLPActor):
    """MAPPO actor whose layers get hypernetwork-generated increments (see module docstring)."""

    def __init__(self, spec, cfg):
        # a belief the hypernetwork reads (hyper.context=[coplayer]) reaches the base layers only with coplayer.feed=policy
        trunk_obs_dim = spec.obs_dim - (spec.belief_dim if cfg.coplayer.feed != "policy" else 0)
        super().__init__(dataclasses.replace(spec, obs_dim=trunk_obs_dim), cfg)
        self.trunk_obs_dim = trunk_obs_dim
        h = cfg.hyper
        resolve_hyper_defaults(h)  # a config built without validate() (build_config resolves them already)
        self.cfg_h = h
        linears = list(self.trunk.linears) + [self.head]
        n_hidden = len(self.trunk.linears)
        self.generated = {"all": list(range(n_hidden + 1)), "last": [n_hidden], "hidden": list(range(n_hidden))}[h.layers]
        self.full = h.output == "full"
        shapes = [(linears[i].in_features, linears[i].out_features) for i in self.generated]
        scale_units = [lin.out_features for lin in self.trunk.linears] if h.hidden_scale else []
        self.hyper = HyperNetwork(spec, cfg, shapes, self.full, scale_units)
        if self.full:  # generated layers have no base weights: drop them so nothing pretends to be one
            for i in self.generated:
                linears[i].weight.requires_grad_(False).zero_()
                linears[i].bias.requires_grad_(False).zero_()
            with torch.no_grad():  # start at MAPPO's init gains (policy_gain on the head), not sqrt(2) everywhere
                for gen, i in zip(self.hyper.generators, self.generated):
                    gain = cfg.model.policy_gain if i == n_hidden else cfg.model.hidden_gain()
                    gen.w.bias.mul_(gain / 2 ** 0.5)
        self.hidden_size = self.hyper.context.history_size
        # output=accumulate: the generated layers' weights theta_t = theta_base + S_t are a per-agent state, carried
        # after the history GRU's state in the actor's hidden vector [..., N, history + state] (see
        # `_accumulated_forward`): a step count, the accumulated code or the weights themselves
        self.accumulate = h.output == "accumulate"
        self.state_shapes = shapes if self.accumulate else []
        self.state_size = 0
        if self.accumulate:
            self.state_kind = "count" if self.hyper.context.static else "weights" if h.rank else "code"
            self.state_size = {"count": 1, "code": self.hyper.generators[0].b.in_features + 1,
                               "weights": sum(i * o + o for i, o in shapes)}[self.state_kind]
            check_state_memory(cfg, spec.num_agents, self.state_size, shapes)
            self.hidden_size += self.state_size
        # feed-forward smoothness recomputes delta_{t-1} from the stored previous observation
        self.needs_prev_obs = h.alpha > 0 and not self.hyper.context.static and not self.hidden_size
        self.target = None
        if h.target != "none":
            self.target = copy.deepcopy(self.hyper).requires_grad_(False)
        self._updates = 0  # PPO updates so far: the hard target syncs every target_interval of them

    def get_extra_state(self) -> dict:
        """The sync counter travels with state_dict, so a resumed run syncs at the same updates."""
        return {"updates": self._updates}

    def set_extra_state(self, state: dict) -> None:
        self._updates = int(state["updates"])

    def describe(self) -> dict:
        attention = getattr(self.hyper.context, "attention", None)
        if attention is None:
            return {}
        return {"attention_kernel": attention.implementation, "obs_context_kernel": self.hyper.context_kernel}

    # -------------------------------------------------------------- optimiser / target

    def optimizer_groups(self, lr: float) -> list[dict]:
        hyper = set(id(p) for p in self.hyper.parameters())
        base = [p for p in self.parameters() if id(p) not in hyper and p.requires_grad
                and not any(p is q for q in (self.target.parameters() if self.target else []))]
        return [{"params": base, "lr": lr, "name": "actor_base"},
                {"params": list(self.hyper.parameters()), "lr": self.cfg_h.lr, "name": "hypernetwork"}]

    @torch.no_grad()
    def after_update(self) -> None:
        """Sync the target hypernetwork: a hard copy every K updates or Polyak averaging."""
        self._updates += 1
        if self.target is None:
            return
        if self.cfg_h.target == "polyak":
            tau = self.cfg_h.target_tau
            for tp, p in zip(self.target.parameters(), self.hyper.parameters()):
                tp.lerp_(p, tau)
        elif self._updates % self.cfg_h.target_interval == 0:
            self.target.load_state_dict(self.hyper.state_dict())

    # -------------------------------------------------------------- forward

    @staticmethod
    def _apply_layer(lin: AgentLinear, x: torch.Tensor, gen: dict | None, generator: WeightGenerator | None):
        """Per-sample generated increments (factored): x [..., N, in] -> [..., N, out]. The base product stays its
        own matmul, so delta = 0 gives MAPPO's logits exactly."""
        if gen is None:
            return lin(x)
        code = gen["code"]
        if lin.groups > 1:  # per-agent base weights: no shared matmul to merge the backward with
            return lin(x) + generator.apply_factored(x, code)
        k = code.shape[-1]
        g, g_bias = generator.input_product(k)
        base, xg = _SharedInputProducts.apply(x.reshape(-1, lin.in_features), lin.weight[0], lin.bias[0], g, g_bias)
        return (base + generator.combine(xg, code.reshape(-1, k))).view(*x.shape[:-1], lin.out_features)

    @staticmethod
    def _agent_major_layer(lin: AgentLinear, x: torch.Tensor, gen: dict | None,
                           norm: AgentLayerNorm | None = None) -> torch.Tensor:
        """Per-agent increments (static context): x [N, B, in] -> [N, B, out], one batched matmul. `norm`: the
        LayerNorm x went through without its affine, folded into the weights here (agent_layers.fold_norm)."""
        if gen is None and lin.groups == 1:  # shared weights: layout-agnostic
            return lin(x) if norm is None else lin.apply_weights(x, *fold_norm(norm, lin.weight, lin.bias))
        W, b = lin.weight, lin.bias  # [G, in, out], [G, out]
        if gen is not None:
            W = W + (gen["W"] if "W" in gen else gen["U"] @ gen["V"])  # [N, in, out] (a shared base broadcasts)
            b = b + gen["b"]
        if norm is not None:
            W, b = fold_norm(norm, W, b)
        if lin.out_features < lin.in_features:  # AgentLinear's faster layout for narrow outputs (same values)
            W = W.transpose(1, 2).contiguous().transpose(1, 2)
        return torch.baddbmm(b.unsqueeze(1), x, W)

    @staticmethod
    def _agent_major_block(trunk, i: int, z: torch.Tensor) -> torch.Tensor:
        """Hidden block i after its linear layer, in the agent-major layout [N, B, F]: a per-agent LayerNorm's
        affine [N, F] as [N, 1, F]; a shared one (or none) is layout-agnostic (AgentMLP.block)."""
        norm = trunk.norms[i]
        if isinstance(norm, AgentLayerNorm) and norm.groups > 1:
            u = F.layer_norm(trunk.act(z), (norm.features,), eps=norm.eps)
            return u * norm.weight.unsqueeze(1) + norm.bias.unsqueeze(1)
        return trunk.block(i, z)

    def _static_layers(self, x: torch.Tensor, by_layer: dict, scales: list,
                       fold: AgentLayerNorm | None = None) -> torch.Tensor:
        """x [..., N, in] -> logits [..., N, A] in the agent-major layout [N, B, ...]: only the input and the
        logits are transposed, not every hidden layer's activations (and their gradients). `fold`: the input
        LayerNorm, applied here with its affine folded into the first layer."""
        t = self.trunk
        lead, n = x.shape[:-2], x.shape[-2]
        x = x.reshape(-1, n, x.shape[-1]).transpose(0, 1).contiguous()  # [N, B, in]
        if fold is not None:
            x = F.layer_norm(x, (x.shape[-1],), eps=fold.eps)
        for i, lin in enumerate(t.linears):
            x = self._agent_major_block(t, i, self._agent_major_layer(lin, x, by_layer.get(i), fold if i == 0 else None))
            if scales:
                x = x * scales[i].unsqueeze(1)  # per agent [N, units]
        logits = self._agent_major_layer(self.head, x, by_layer.get(len(t.linears)))  # [N, B, A]
        return logits.transpose(0, 1).reshape(*lead, n, logits.shape[-1])

    def generate(self, obs, hidden=None, reset=None, sequence=False, net: HyperNetwork | None = None, active=None):
        """-> (per-layer generated tensors, per-unit scales, new history state). With an agent-id-only
        context they are per agent ([N, ...]) and computed once, not once per sample."""
        net = net or self.hyper
        if net.context.static:
            gens, scales, _ = net(obs.new_zeros(1, self.n_agents, obs.shape[-1]))
            return [{k: v[0] for k, v in g.items()} for g in gens], [sc[0] for sc in scales], None
        return net(obs, hidden, reset, sequence, active)

    def forward(self, obs, available=None, hidden=None, reset=None, sequence=False, active=None) -> ActorOut:
        if self.accumulate:
            return self._accumulated_forward(obs, available, hidden, reset, sequence, active)
        static = self.hyper.context.static
        gens, scales, new_hidden = self.generate(obs, hidden, reset, sequence, active=active)
        by_layer = dict(zip(self.generated, gens))
        x = self.actor_input(obs if obs.shape[-1] == self.trunk_obs_dim else obs[..., :self.trunk_obs_dim])
        t = self.trunk
        # the input LayerNorm's affine folded into the first layer where it is not generated per sample
        # (AgentLinear.forward_normed)
        fold = t.fold_feature_norm and torch.is_grad_enabled() and (static or 0 not in by_layer)
        if t.feature_norm is not None and not fold:
            x = t.feature_norm(x)
        if static:
            logits = self._static_layers(x, by_layer, scales, t.feature_norm if fold else None)
        else:
            generator = dict(zip(self.generated, self.hyper.generators))
            for i, lin in enumerate(t.linears):
                z = (lin.forward_normed(x, t.feature_norm) if fold and i == 0
                     else self._apply_layer(lin, x, by_layer.get(i), generator.get(i)))
                x = t.block(i, z)
                if scales:
                    x = x * scales[i]
            n = len(t.linears)
            logits = self._apply_layer(self.head, x, by_layer.get(n), generator.get(n))
        dist = make_dist(self.action_space, logits, available, self.log_std)
        return ActorOut(dist, new_hidden, {"gens": gens, "static": static})

    # -------------------------------------------------------------- output=accumulate
    # theta_t = theta_base + S_t, S_t = active_t * ((1 - decay) * S_{t-1} * ~reset_t + delta_t). A full-rank delta is
    # linear in the code c = [z, 1] (delta_t = A c_t, see `WeightGenerator`), so S_t = A C_t with C_t accumulated the
    # same way from the codes: the state is the code C_t [hidden + 1] per agent, whatever the generated layers' size,
    # and a layer runs the factored product of `_apply_layer` on C_t. A low-rank delta U(z) V(z) is not linear in the
    # code: there the state is S_t itself, every generated W and b flattened [P], applied per sample. With an agent-id
    # context delta is constant per agent, so S_t = n_t delta_agent: the state is the (decayed) step count n_t [1].

    def _flat_increment(self, gens: list[dict]) -> torch.Tensor:
        """delta_t as one flat vector per sample [..., N, P] (per agent [N, P] for a static context): per generated
        layer W row-major [in * out] (U V for low rank) then b [out], the layout of the low-rank weight state."""
        parts = []
        for g in self._explicit(gens):
            w = g["W"] if "W" in g else g["U"] @ g["V"]
            parts += [w.flatten(-2), g["b"]]
        return torch.cat(parts, -1)

    def weight_offset(self, hidden: torch.Tensor) -> torch.Tensor:
        """theta_t - theta_base [..., N, P] (the `_flat_increment` layout) from the actor's hidden state [..., N, H]."""
        state = hidden[..., self.hyper.context.history_size:]
        if self.state_kind == "count":
            return state * self._flat_increment(self.generate(hidden.new_zeros(1, self.n_agents, 1))[0])
        if self.state_kind == "weights":
            return state
        return state @ self.hyper.flat_matrix().t()

    def _accumulate_step(self, state, delta, reset, active):
        """One step of the recurrence above; zero (theta_base) at episode starts and while an agent is dead, so a
        respawned agent starts again from theta_base. state [..., N, S], delta [..., N, S] or [N, S]."""
        if reset is not None:
            state = state * (~reset).unsqueeze(-1).to(state.dtype)
        if self.cfg_h.decay:
            state = state * (1.0 - self.cfg_h.decay)
        state = state + delta
        if active is not None:
            state = state * active.unsqueeze(-1).to(state.dtype)
        return state

    def _explicit_layer(self, lin: AgentLinear, x: torch.Tensor, state: torch.Tensor | None) -> torch.Tensor:
        """x [..., N, in] through theta_base + S (low rank): the base layer as MAPPO computes it plus x @ S_W + S_b,
        so a zero state gives MAPPO's output exactly. state [..., N, in * out + out] (this layer's slice)."""
        if state is None:
            return lin(x)
        i, o = lin.in_features, lin.out_features
        w = state[..., :i * o].unflatten(-1, (i, o))  # [..., N, in, out]
        return lin(x) + (x.unsqueeze(-2) @ w).squeeze(-2) + state[..., i * o:]

    @staticmethod
    def _counted_layer(lin: AgentLinear, x: torch.Tensor, gen: dict | None, count: torch.Tensor) -> torch.Tensor:
        """x [..., N, in] through theta_base + n_t delta_agent: base layer + n_t (x @ dW_agent + db_agent)."""
        if gen is None:
            return lin(x)
        w = gen["W"] if "W" in gen else gen["U"] @ gen["V"]  # [N, in, out]
        return lin(x) + count * (torch.einsum("...ni,nio->...no", x, w) + gen["b"])

    def _accumulated_forward(self, obs, available, hidden, reset, sequence, active) -> ActorOut:
        """hyper.output=accumulate (see above), trained through chunks like a GRU state. hidden [..., N, history +
        state] is the state before this step (before step 0 of the chunk with `sequence`, obs [L, ..., N, D]);
        returns the state after the (last) step."""
        hs = self.hyper.context.history_size
        history = hidden[..., :hs] if hidden is not None and hs else None
        state = hidden[..., hs:] if hidden is not None else None
        gens, scales, new_history = self.generate(obs, history, reset, sequence, active=active)  # delta_t
        static, kind = self.hyper.context.static, self.state_kind
        if kind == "count":
            delta = obs.new_ones(self.n_agents, 1)  # [N, 1]: one more step of the agent's constant increment
        else:  # [(L,) ..., N, S]
            delta = self._flat_increment(gens) if kind == "weights" else gens[0]["code"]
        if state is None:
            state = obs.new_zeros(*(obs.shape[1:-1] if sequence else obs.shape[:-1]), self.state_size)
        if sequence:  # the recurrence steps through time; everything else runs on all L steps at once
            states = []
            for t in range(obs.shape[0]):
                state = self._accumulate_step(state, delta if static else delta[t],
                                              None if reset is None else reset[t], None if active is None else active[t])
                states.append(state)
            per_step = torch.stack(states)  # [L, ..., N, S]
        else:
            state = per_step = self._accumulate_step(state, delta, reset, active)
        by_layer, at = {}, 0
        for i, (fi, fo), gen in zip(self.generated, self.state_shapes, gens):
            if kind == "weights":
                by_layer[i] = per_step[..., at:at + fi * fo + fo]
                at += fi * fo + fo
            else:
                by_layer[i] = {"code": per_step} if kind == "code" else gen
        generator = dict(zip(self.generated, self.hyper.generators))
        x = self.actor_input(obs)
        t = self.trunk
        if t.feature_norm is not None:
            x = t.feature_norm(x)
        n = len(t.linears)
        for i, lin in enumerate(list(t.linears) + [self.head]):
            if kind == "weights":
                x = self._explicit_layer(lin, x, by_layer.get(i))
            elif kind == "code":
                x = self._apply_layer(lin, x, by_layer.get(i), generator.get(i))
            else:
                x = self._counted_layer(lin, x, by_layer.get(i), per_step)
            if i < n:
                x = t.block(i, x)
                if scales:
                    x = x * scales[i]
        dist = make_dist(self.action_space, x, available, self.log_std)
        new_hidden = state if new_history is None else torch.cat([new_history, state], -1)
        return ActorOut(dist, new_hidden, {"gens": gens, "static": static})

    # -------------------------------------------------------------- losses / diagnostics

    @staticmethod
    def _flat_delta(gens: list[dict]) -> torch.Tensor:
        """Concatenate every generated tensor into one vector per sample [..., P] (explicit form)."""
        parts = []
        for g in gens:
            for k in sorted(g):
                parts.append(g[k].flatten(-2) if k != "b" else g[k])
        return torch.cat(parts, -1)

    @staticmethod
    def _code(gens: list[dict]) -> torch.Tensor | None:
        """The factored form's code c [..., hidden + 1] (shared by every generated layer), else None."""
        return gens[0].get("code")

    def _explicit(self, gens: list[dict], net: HyperNetwork | None = None) -> list[dict]:
        """Generated tensors in explicit form (low rank is not linear in the code: formed when needed)."""
        code = self._code(gens)
        return gens if code is None else [g.explicit(code) for g in (net or self.hyper).generators]

    def _delta_sq_norm(self, gens: list[dict]) -> torch.Tensor:
        """||delta||^2 per sample: explicit, or c^T (A^T A) c in the factored full-rank form."""
        code = self._code(gens)
        if code is None or self.cfg_h.rank:
            return self._flat_delta(self._explicit(gens)).pow(2).sum(-1)
        a = self.hyper.flat_matrix()
        return ((code @ (a.t() @ a)) * code).sum(-1).clamp(min=0.0)

    def _delta_sq_dist(self, gens: list[dict], other: list[dict], other_net: HyperNetwork | None = None):
        """||delta - delta_other||^2 per sample; `other` from `other_net` (a target hypernetwork) or this one."""
        code, code_o = self._code(gens), self._code(other)
        if code is None or self.cfg_h.rank:
            explicit = self._flat_delta(self._explicit(gens)) - self._flat_delta(self._explicit(other, other_net))
            return explicit.pow(2).sum(-1)
        a = self.hyper.flat_matrix()
        if other_net is None:  # same generator: ||A (c - c')||^2 (the constant 1s cancel)
            d = code - code_o
            return ((d @ (a.t() @ a)) * d).sum(-1).clamp(min=0.0)
        ab = torch.cat([a, -other_net.flat_matrix()], -1)  # ||[A, -A'] [c; c']||^2
        cc = torch.cat([code, code_o], -1)
        return ((cc @ (ab.t() @ ab)) * cc).sum(-1).clamp(min=0.0)

    def delta_norm_ratio(self, out: ActorOut) -> torch.Tensor:
        """mean ||delta|| / ||theta_base|| over samples (||W|| when generating full weights)."""
        norm = self._delta_sq_norm(out.aux["gens"]).sqrt().mean()
        if self.full:
            return norm
        linears = list(self.trunk.linears) + [self.head]
        base = torch.cat([torch.cat([linears[i].weight.flatten(), linears[i].bias.flatten()])
                          for i in self.generated])
        return norm / base.norm().clamp(min=1e-8)

    def aux_losses(self, out: ActorOut, batch: dict) -> dict[str, torch.Tensor]:
        """alpha * L_smooth: ||delta_t - delta_{t-1}|| ^2 between consecutive steps of an agent
        (and ||delta - delta_target||^2 when a target hypernetwork is on), masked by active agents."""
        h = self.cfg_h
        if h.alpha <= 0:
            return {}
        gens = out.aux["gens"]
        active = batch["active"].float()
        terms = []
        if self.accumulate:  # the step of the weight state itself: ||delta_t||^2 (per agent for a static context)
            sq = self._delta_sq_norm(gens)
            terms.append((sq * active).sum() / active.sum().clamp(min=1.0))
        elif not out.aux["static"]:
            if "actor_h0" in batch:  # chunks [L, B, N]: adjacent steps within the chunk
                d = self._delta_sq_dist([{k: v[1:] for k, v in g.items()} for g in gens],
                                        [{k: v[:-1] for k, v in g.items()} for g in gens])
                keep = active[1:] * active[:-1] * (~batch["reset"][1:]).float()
            else:  # feed-forward: recompute delta_{t-1} from the stored previous observation (with step t's
                # active mask: step t-1's is not stored; an agent alive at t was alive at t-1 unless reset)
                d = self._delta_sq_dist(gens, self.hyper(batch["prev_obs"], active=batch["active"])[0])
                keep = active * (~batch["reset"]).float()
            terms.append((d * keep).sum() / keep.sum().clamp(min=1.0))
        if self.target is not None:
            h0 = batch.get("actor_h0")
            if h0 is not None:  # the history GRU's part (output=accumulate carries its weight state after it)
                h0 = h0[..., :self.hyper.context.history_size]
            with torch.no_grad():
                tgens = self.generate(batch["obs"], h0, batch["reset"], "actor_h0" in batch,
                                      net=self.target, active=batch["active"])[0]
            sq = self._delta_sq_dist(gens, tgens, self.target)
            terms.append(sq.mean() if out.aux["static"] else (sq * active).sum() / active.sum().clamp(min=1.0))
        smooth = sum(terms)
        return {"smooth_loss": h.alpha * smooth}


def _available_memory(device: str) -> int:
    """Bytes free for tensors on `device` (CUDA: the device's free memory; else the OS's MemAvailable)."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.mem_get_info(torch.device(device))[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def check_state_memory(cfg, n_agents: int, state_size: int, shapes: list, available: int | None = None) -> None:
    """Refuse an accumulated weight state that cannot fit: the rollout stores it for T x E x N slots, and a training
    pass over a mini-batch keeps it (and its products and gradients) per step: measured ~25x its stored size for the
    low-rank weight state at vmas:simple_spread E=1024 (benchmarks/results/hyper_accumulate.md, peak RSS)."""
    T, E = cfg.rollout_length, cfg.num_envs
    stored = 4 * T * E * n_agents * state_size
    need = stored * (1 + 24 / cfg.ppo.num_mini_batch)
    available = _available_memory(cfg.device) if available is None else available
    if need > available / 2:
        gb = 1024 ** 3
        raise UserError(
            f"hyper.output=accumulate: the weight state ({state_size:,} floats per agent for generated layers "
            f"{[f'{i}x{o}' for i, o in shapes]}) needs ~{need / gb:.1f} GB for rollout_length x num_envs x agents = "
            f"{T} x {E} x {n_agents}, more than half of the {available / gb:.1f} GB free; use hyper.rank=0 (the state "
            f"is then hidden+1 floats), hyper.layers=last, or fewer num_envs / rollout_length")
