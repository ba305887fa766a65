"""Non-stationarity diagnostics and the live-component audit, for every actor architecture.

Diagnostics (logged to metrics.csv):
- `kl_agent_i` / `kl_sum`: KL(pi_before || pi_after) of each agent's policy over the update, on the
  rollout's active samples (pi_before = the stored behaviour policy). The sum bounds how far the
  joint policy moved, i.e. how much each agent's "environment" changed.
- `grad_cos_mean` / `grad_cos_neg_frac`: cosine similarity between agents' policy-gradient
  vectors on the actor parameters (before the update), mean over agent pairs and the fraction
  of pairs pointing against each other (negative transfer through shared weights).
- `snd`: System Neural Diversity, the mean pairwise Jensen-Shannon distance (base 2, in [0, 1])
  between agents' action distributions on a fixed pool of observations (every agent sees the
  same observation). For Gaussian actions: mean pairwise distance of the action means.
- `delta_norm_ratio` (actor=hyper): mean ||delta|| / ||theta_base|| on the rollout.

The audit (after `diagnostics.audit_updates` updates) checks that every trainable module received a
non-zero gradient from the loss during those updates (parameters that merely *moved*, e.g. by weight
decay, do not count), that a target hypernetwork is read by an enabled, non-zero loss term, and that
every enabled loss term was non-zero; it records the result in summary.json and stops the run naming
whatever is dead, so a hypernetwork that is never called in training or a regulariser that never
reaches the loss cannot go unnoticed.
"""

from __future__ import annotations

import itertools

import torch

from hypermappo.config import data_chunk_length
from hypermappo.errors import UserError
from hypermappo.models.distributions import Categorical, DiagGaussian, MultiCategorical


class DeadComponentError(UserError):
    """An enabled module got no update or an enabled loss term stayed zero."""


def full_batch(buf, recurrent: bool, chunk_length: int) -> dict:
    return next(iter(buf.chunks(1, chunk_length) if recurrent else buf.minibatches(1)))


@torch.no_grad()
def per_agent_kl(actor, batch: dict, space) -> tuple[torch.Tensor, object]:
    """KL(stored behaviour || current) per agent [N], averaged over active samples."""
    seq = "actor_h0" in batch
    out = actor(batch["obs"], batch.get("available"), batch.get("actor_h0"), batch["reset"], sequence=seq,
                active=batch["active"])
    kl = out.dist.kl_from_params(batch["dist_params"])  # [..., N]
    active = batch["active"].float()
    dims = tuple(range(kl.dim() - 1))
    return (kl * active).sum(dims) / active.sum(dims).clamp(min=1.0), out


def gradient_cosine(actor, batch: dict, samples: int, adv_mean, adv_std, clip: float) -> dict:
    """Pairwise cosine between agents' PPO policy-gradient vectors on the actor parameters."""
    seq = "actor_h0" in batch
    if seq:  # keep whole chunks: subsample along the chunk axis
        b = batch["obs"].shape[1]
        keep = max(1, min(b, samples // batch["obs"].shape[0]))
        sub = {k: (v[:keep] if k.endswith("_h0") else v[:, :keep]) for k, v in batch.items()}
    else:
        sub = {k: v[:samples] for k, v in batch.items()}
    params = [p for p in actor.parameters() if p.requires_grad]
    out = actor(sub["obs"], sub.get("available"), sub.get("actor_h0"), sub["reset"], sequence=seq, active=sub["active"])
    logp = out.dist.log_prob(sub["actions"])
    ratio = (logp - sub["logp"]).exp()
    adv = (sub["advantages"] - adv_mean) / (adv_std + 1e-5)
    surr = torch.min(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
    active = sub["active"].float()
    n = surr.shape[-1]
    grads = []
    for i in range(n):  # N backward passes over one shared graph (diagnostic, not the hot path)
        loss_i = -(surr[..., i] * active[..., i]).sum() / active[..., i].sum().clamp(min=1.0)
        g = torch.autograd.grad(loss_i, params, retain_graph=i < n - 1, allow_unused=True)
        grads.append(torch.cat([(x if x is not None else torch.zeros_like(p)).flatten() for x, p in zip(g, params)]))
    G = torch.stack(grads)  # [N, P]
    G = G / G.norm(dim=1, keepdim=True).clamp(min=1e-12)
    cos = torch.stack([G[i] @ G[j] for i, j in itertools.combinations(range(n), 2)]) if n > 1 else torch.zeros(1)
    return {"grad_cos_mean": float(cos.mean()), "grad_cos_neg_frac": float((cos < 0).float().mean())}


def js_distance(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon distance (sqrt of the base-2 divergence) over the last dim."""
    m = 0.5 * (p + q)

    def kl(a, b):
        return (a * (torch.log2(a.clamp(min=1e-12)) - torch.log2(b.clamp(min=1e-12)))).sum(-1)

    return (0.5 * kl(p, m) + 0.5 * kl(q, m)).clamp(min=0).sqrt()


@torch.no_grad()
def system_neural_diversity(actor, pool: torch.Tensor, n_agents: int, space) -> float:
    """pool [P, obs_dim]: every agent slot gets the same observation; mean pairwise JS distance."""
    obs = pool.unsqueeze(1).expand(-1, n_agents, -1).contiguous()  # [P, N, D]
    hidden = torch.zeros(pool.shape[0], n_agents, actor.hidden_size) if actor.hidden_size else None
    dist = actor(obs, None, hidden, None).dist
    pairs = list(itertools.combinations(range(n_agents), 2))
    if not pairs:
        return 0.0
    if isinstance(dist, DiagGaussian):
        mu = dist.mean
        return float(torch.stack([(mu[:, i] - mu[:, j]).norm(dim=-1).mean() for i, j in pairs]).mean())
    if isinstance(dist, (Categorical, MultiCategorical)):
        parts = dist.parts if isinstance(dist, MultiCategorical) else [dist]
        d = sum(torch.stack([js_distance(pt.logp_all.exp()[:, i], pt.logp_all.exp()[:, j]) for i, j in pairs])
                for pt in parts) / len(parts)
        return float(d.mean())
    p = dist.probs_for_diversity()  # Bernoulli: per-dimension distributions
    two = torch.stack([p, 1 - p], -1)
    return float(torch.stack([js_distance(two[:, i], two[:, j]).mean() for i, j in pairs]).mean())


class Diagnostics:
    """Computes the per-update diagnostics; owns the fixed SND observation pool."""

    def __init__(self, actor, cfg, spec):
        self.actor, self.cfg, self.spec = actor, cfg, spec
        self.pool: torch.Tensor | None = None

    def before_update(self, buf, recurrent: bool) -> dict:
        d = self.cfg.diagnostics
        if self.pool is None:
            g = torch.Generator().manual_seed(self.cfg.seed + 7)
            obs = buf.obs[buf.active]  # [M, D] active agents' observations from the first rollout
            idx = torch.randperm(obs.shape[0], generator=g)[: d.snd_pool].to(obs.device)
            self.pool = obs[idx].clone()
        batch = full_batch(buf, recurrent, data_chunk_length(self.cfg))
        active_adv = buf.advantages[buf.active]
        mean, std = (active_adv.mean(), active_adv.std()) if active_adv.numel() > 1 else (0.0, 1.0)
        return gradient_cosine(self.actor, batch, d.grad_cos_samples, mean, std, self.cfg.ppo.clip)

    def after_update(self, buf, recurrent: bool) -> dict:
        batch = full_batch(buf, recurrent, data_chunk_length(self.cfg))
        kl, out = per_agent_kl(self.actor, batch, self.spec.action_space)
        stats = {f"kl_agent_{i}": float(v) for i, v in enumerate(kl)}
        stats["kl_sum"] = float(kl.sum())
        stats["snd"] = system_neural_diversity(self.actor, self.pool, self.spec.num_agents, self.spec.action_space)
        if hasattr(self.actor, "delta_norm_ratio"):
            with torch.no_grad():
                stats["delta_norm_ratio"] = float(self.actor.delta_norm_ratio(out))
        return stats

    def state_dict(self) -> dict:
        return {"pool": self.pool}

    def load_state_dict(self, sd: dict) -> None:
        self.pool = sd["pool"]


def _components(prefix: str, module: torch.nn.Module) -> dict[str, list[torch.nn.Parameter]]:
    """Each submodule with its own trainable parameters is one component (name -> params)."""
    comps: dict[str, list] = {}
    for name, p in module.named_parameters():
        if p.requires_grad:
            comps.setdefault(f"{prefix}.{name.rsplit('.', 1)[0]}" if "." in name else f"{prefix}.{name}", []).append(p)
    return comps


class LiveComponentAudit:
    """Judges each component by what reaches it from the losses during the first `audit_updates` updates: a
    trainable component is live iff it got a non-zero gradient (`observe_grads`, called after every backward
    while the audit runs); the target hypernetwork (no gradients, a synced copy) is live iff a loss term that
    reads it is enabled and non-zero (and, once a sync is due, the sync moved it)."""

    # loss terms that read the target hypernetwork (see HyperActor.aux_losses)
    TARGET_READERS = ("smooth_loss",)

    def __init__(self, actor, critic, cfg):
        self.cfg = cfg
        self.components = {**_components("actor", actor), **_components("critic", critic)}
        target = getattr(actor, "target", None)
        self.target = target
        if target is not None:  # synced, not trained (its parameters need no gradient; dropped all the same)
            self.components = {k: v for k, v in self.components.items()
                               if k != "actor.target" and not k.startswith("actor.target.")}
        self.grad_seen = {k: torch.zeros(()) for k in self.components}  # sum of |grad| over the audited updates
        self.target_snapshot = [p.detach().clone() for p in target.parameters()] if target is not None else None
        self.loss_seen: dict[str, float] = {}
        self.extra_terms: list[str] = []  # loss terms of watched modules (`watch`)

    def watch(self, prefix: str, module: torch.nn.Module, loss_terms: list[str]) -> None:
        """Audit another trained module (e.g. the co-player model) and the loss terms that train it."""
        components = _components(prefix, module)
        self.components.update(components)
        self.grad_seen.update({k: torch.zeros(()) for k in components})
        self.extra_terms += loss_terms

    @torch.no_grad()
    def observe_grads(self) -> None:
        """After a backward pass (before clipping and the optimiser step): accumulate each component's |grad|."""
        for name, params in self.components.items():
            grads = [p.grad for p in params if p.grad is not None]
            if grads:
                total = torch.stack([torch.linalg.vector_norm(g, 1) for g in grads]).sum()
                self.grad_seen[name] = self.grad_seen[name] + total.cpu()

    def enabled_loss_terms(self) -> list[str]:
        terms = ["policy_loss", "value_loss"]
        if self.cfg.ppo.entropy_coef > 0:
            terms.append("entropy")
        if self.cfg.actor == "hyper" and self.cfg.hyper.alpha > 0:
            terms.append("smooth_loss")
        if self.cfg.hyper.beta > 0:
            terms.append("align_loss")
        return terms + self.extra_terms

    def observe(self, metrics: dict) -> None:
        for k in self.enabled_loss_terms():
            self.loss_seen[k] = max(self.loss_seen.get(k, 0.0), abs(metrics.get(k, 0.0)))

    def state_dict(self) -> dict:
        """What the audit has seen so far (a resumed run audits the whole run, not the resumed part)."""
        return {"grad_seen": dict(self.grad_seen), "target_snapshot": self.target_snapshot,
                "loss_seen": dict(self.loss_seen)}

    def load_state_dict(self, sd: dict) -> None:
        self.grad_seen, self.target_snapshot = dict(sd["grad_seen"]), sd["target_snapshot"]
        self.loss_seen = dict(sd["loss_seen"])

    def check(self, updates: int) -> dict:
        result = {"after_updates": updates, "components": {}, "loss_terms": {}}
        dead = []
        for name in self.components:
            live = bool(self.grad_seen[name] > 0)
            result["components"][name] = "live" if live else "DEAD"
            if not live:
                dead.append(name)
        if self.target is not None:
            h = self.cfg.hyper
            enabled = self.enabled_loss_terms()
            live = any(k in enabled and self.loss_seen.get(k, 0.0) > 0 for k in self.TARGET_READERS)
            if h.target == "polyak" or updates >= h.target_interval:  # a sync is due: it must have moved it
                live = live and any(not torch.equal(p, s) for p, s in zip(self.target.parameters(),
                                                                          self.target_snapshot))
            result["components"]["actor.target"] = "live" if live else "DEAD"
            if not live:
                dead.append("actor.target")
        for k in self.enabled_loss_terms():
            ok = self.loss_seen.get(k, 0.0) > 0
            result["loss_terms"][k] = "non-zero" if ok else "ZERO"
            if not ok:
                dead.append(f"loss term {k}")
        result["passed"] = not dead
        result["dead"] = dead
        return result
