"""Training OMG's subgoal model (`coplayer.model=subgoal`, models/coplayer_subgoal.py) on a learner's rollouts.

Per rollout, for every step t, learner agent k and co-player j (both alive):
- the subgoal: j's observation at the step t + h (1 <= h <= `coplayer.subgoal_horizon`, same episode, in the
  rollout) whose state the learner values most (`subgoal_select=optimistic`, OMG's choice in cooperative games)
  or least (`conservative`, its choice in general-sum games); `auto` = optimistic where the env's reward is the
  team's (`EnvSpec.team_reward`), else conservative. The value is the learner's own critic's at t + h (its mean
  over the group's agents), read from the rollout: no extra forward pass;
- the CVAE loss: squared error of the decoded subgoal (from z ~ q(z | k's history), reparameterised with the
  model's own seeded generator) plus `coplayer.kl_weight` x KL(q || p(z | the subgoal state)), where p is the
  state VAE's encoder, detached;
- the state VAE (the prior) trains on every alive slot's observation of the first `coplayer.prior_updates`
  rollouts (PRIOR_STEPS full-batch steps each, before the CVAE's; a VAE loss, `kl_weight` x KL to N(0, I)),
  then is frozen: pre-trained on the run's first rollouts' states. Both VAEs use `kl_weight`: with the squared
  error of states whose features vary by ~0.3 and a weight of 1, the KL wins and both latents collapse to the
  prior (measured on the stag hunt: the prior's means spread 0.07 over states, hit ratio at chance).

Logged before the update's steps (data not yet trained on): `coplayer_subgoal_hit`, the hit ratio: the share of
(t, k, j) whose decoded subgoal (from q's mean) is nearer one of the states j reaches in the next H steps than every
state j was in over its present and last H steps and does not reach again (`hit_ratio`: it names where j is going,
not where j is);
`coplayer_subgoal_hit_chance`: the same for a random co-player state of the rollout in place of the prediction;
`coplayer_subgoal_hit_now`: the same for j's own present state (it hits exactly where j stays or comes back within
H steps); the reconstruction error, the KL, the share of pairs with a subgoal in the rollout.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hypermappo.algos.coplayer import CoplayerLearner, _masked_mean
from hypermappo.models.coplayer_subgoal import gaussian, kl_gaussians
from hypermappo.runtime.device_rng import device_generator, restore

GENERATOR_SEED_OFFSET = 15_485_863  # the CVAE's noise and the hit ratio's draws: run seed + this
PRIOR_STEPS = 20  # full-batch steps of the state VAE per rollout while it pre-trains


def select_mode(setting: str, env_spec) -> str:
    """`coplayer.subgoal_select` -> optimistic | conservative (auto: by whether the env's reward is shared)."""
    if setting != "auto":
        return setting
    return "optimistic" if env_spec.team_reward else "conservative"


def future_steps(episode_end: torch.Tensor, horizon: int) -> list[tuple[int, torch.Tensor]]:
    """episode_end [T, E] -> [(h, ok [T, E])] for h = 1..H: step t + h is in the rollout and in t's episode."""
    T = episode_end.shape[0]
    ends = F.pad(episode_end.long().cumsum(0), (0, 0, 1, 0))  # [T + 1, E]: episode ends before step i
    out = []
    for h in range(1, min(horizon, T - 1) + 1):
        ok = torch.zeros_like(episode_end)
        ok[:T - h] = (ends[h:T] - ends[:T - h]) == 0  # no end in steps t .. t + h - 1
        out.append((h, ok))
    return out


def select_subgoals(obs_all: torch.Tensor, values: torch.Tensor, episode_end: torch.Tensor, horizon: int,
                    mode: str):
    """obs_all [T, E, N, D], values [T, E] (the learner's), episode_end [T, E] -> (target [T, E, N, D]: every
    slot's observation at the step t + h, 1 <= h <= H in t's episode, of the highest (optimistic) or lowest
    (conservative) value, the earliest on a tie; valid [T, E]: there is such a step; offset [T, E]: h)."""
    sign = 1.0 if mode == "optimistic" else -1.0
    T, E = values.shape
    best = torch.full_like(values, -torch.inf)
    offset = torch.zeros(T, E, dtype=torch.long, device=values.device)
    valid = torch.zeros(T, E, dtype=torch.bool, device=values.device)
    for h, ok in future_steps(episode_end, horizon):
        v = torch.full_like(values, -torch.inf)
        v[:T - h] = sign * values[h:]
        v = torch.where(ok, v, -torch.inf)
        better = ok & (v > best)  # strictly: the earliest of equal values stays
        best = torch.where(better, v, best)
        offset = torch.where(better, h, offset)
        valid = valid | ok
    idx = (torch.arange(T, device=values.device).unsqueeze(1) + offset).clamp(max=T - 1)  # [T, E]
    target = obs_all.gather(0, idx.view(T, E, 1, 1).expand_as(obs_all))
    return target, valid, offset


def past_steps(episode_end: torch.Tensor, horizon: int) -> list[tuple[int, torch.Tensor]]:
    """episode_end [T, E] -> [(h, ok [T, E])] for h = 0..H: step t - h is in the rollout and in t's episode."""
    T = episode_end.shape[0]
    ends = F.pad(episode_end.long().cumsum(0), (0, 0, 1, 0))  # [T + 1, E]: episode ends before step i
    out = [(0, torch.ones_like(episode_end))]
    for h in range(1, min(horizon, T - 1) + 1):
        ok = torch.zeros_like(episode_end)
        ok[h:] = (ends[h:T] - ends[:T - h]) == 0  # no end in steps t - h .. t - 1
        out.append((h, ok))
    return out


def _shifted(x: torch.Tensor, h: int, fill: float) -> torch.Tensor:
    """x [T, ...] -> y with y[t] = x[t + h] (h may be negative), `fill` where t + h is outside the rollout."""
    y = torch.full_like(x, fill)
    T = x.shape[0]
    if h >= 0:
        y[:T - h] = x[h:]
    else:
        y[-h:] = x[:T + h]
    return y


def hit_ratio(pred: torch.Tensor, obs_all: torch.Tensor, episode_end: torch.Tensor, horizon: int,
              mask: torch.Tensor) -> torch.Tensor:
    """The share of the masked [T, E, K, N] (t, k, j) that `hits` counts as hits."""
    return _masked_mean(hits(pred, obs_all, episode_end, horizon).float(), mask)


def hits(pred: torch.Tensor, obs_all: torch.Tensor, episode_end: torch.Tensor, horizon: int) -> torch.Tensor:
    """pred [T, E, K, N, D] predicted subgoal states, obs_all [T, E, N, D] -> [T, E, K, N] bool: (t, k, j)'s
    prediction is nearer to one of the states j reaches in steps t + 1 .. t + H of t's episode than to every state j
    was in over steps t - H .. t that it does not reach again in that window: it names where j is
    going, not where j is or was. A state j stays in (or comes back to) is a place it goes, so copying j's present
    state hits exactly where j stays or comes back within H steps."""
    T = obs_all.shape[0]
    futures = [(_shifted(obs_all, h, torch.nan), ok) for h, ok in future_steps(episode_end, horizon)]  # j at t + h
    shape = pred.shape[:-1]
    ahead = torch.full(shape, torch.inf, device=pred.device)
    for will, ok in futures:
        d = (pred - will.unsqueeze(2)).pow(2).sum(-1)
        ahead = torch.minimum(ahead, torch.where(ok.view(T, -1, 1, 1), d, torch.inf))
    rival = torch.full(shape, torch.inf, device=pred.device)
    for h, ok in past_steps(episode_end, horizon):
        was = _shifted(obs_all, -h, torch.nan)  # [T, E, N, D]: j's state at t - h
        again = torch.zeros(obs_all.shape[:-1], dtype=torch.bool, device=pred.device)  # [T, E, N]
        for will, ok_f in futures:
            again = again | ((was == will).all(-1) & ok_f.unsqueeze(-1))
        d = (pred - was.unsqueeze(2)).pow(2).sum(-1)
        keep = ok.view(T, -1, 1, 1) & ~again.unsqueeze(2)
        rival = torch.minimum(rival, torch.where(keep, d, torch.inf))
    return ahead < rival  # no rival left (inf): any reachable state hits


class SubgoalCoplayer(CoplayerLearner):
    """A learner group's subgoal model: the rollout's storage (CoplayerLearner's), the learner's values, the
    CVAE and state-VAE losses, and a generator of its own."""

    def __init__(self, cfg, env_spec, slots: list[int], num_envs: int, device, seed: int):
        super().__init__(cfg, env_spec, slots, num_envs, device, seed)
        c = self.c
        self.obs_all = torch.zeros(self.T, self.E, self.N, self.D, device=device)  # targets only, never an input
        self.trains = True
        self.mode = select_mode(c.subgoal_select, env_spec)
        self.values: torch.Tensor | None = None  # [T, E, K]: the learner's rollout buffer's values (bind_values)
        self.prior_updates_done = 0
        self.generator = device_generator(seed + GENERATOR_SEED_OFFSET, device)

    def bind_values(self, values: torch.Tensor) -> None:
        """The learner's rollout buffer's values [T, E, K] (filled in place each step; read in `update`)."""
        self.values = values

    def loss_terms(self) -> list[str]:
        return ["coplayer_subgoal_loss", "coplayer_prior_loss"]  # the prior's: its first prior_updates (>= 1)

    def update(self) -> dict[str, float]:
        """`coplayer.epochs` full-batch steps on the stored rollout; metrics of the first pass."""
        c = self.c
        learner_alive = self.active_all[:, :, self.slots]  # [T, E, K]
        with torch.no_grad():
            alive = learner_alive.float()
            value = (self.values * alive).sum(-1) / alive.sum(-1).clamp(min=1.0)  # [T, E]: the learner's value
            target, valid, _ = select_subgoals(self.obs_all, value, self.episode_end, c.subgoal_horizon, self.mode)
            pair = learner_alive.unsqueeze(-1) & self.others & self.active_all.unsqueeze(2)  # [T, E, K, N]
            mask = pair & valid.view(*valid.shape, 1, 1)
            partners = self.obs_all.unsqueeze(2).expand(-1, -1, self.K, -1, -1)[pair]  # [P, D]: co-player states
            if partners.shape[0] == 0:  # no co-player alive in the whole rollout: nothing to hit
                partners = self.obs_all.new_full((1, self.D), torch.inf)
            draws = torch.randint(partners.shape[0], (mask.numel(),), generator=self.generator, device=partners.device)
            guess = partners[draws].view(*mask.shape, -1)  # a random co-player state of the rollout, per (t, k, j)
        training_prior = self.prior_updates_done < c.prior_updates
        metrics: dict[str, torch.Tensor] = {}
        if training_prior:  # pre-training the state VAE on this rollout's states, before the CVAE reads it
            states = self.obs_all[self.active_all]  # [M, D]: every alive slot's observation
            for step in range(PRIOR_STEPS):
                loss = self._prior_loss(states)
                if step == 0:
                    metrics["coplayer_prior_loss"] = loss.detach()
                self._step(loss, {"prior": loss}, f"co-player step {step + 1} (prior)")
        for epoch in range(c.epochs):
            emb = self.model.sequence(self.obs, self.new_episode, self.h0, self.reset)  # [T, E, K, H]
            mu, logvar = self.model.posterior(emb)  # [T, E, K, N, Z]
            noise = torch.randn(mu.shape, generator=self.generator, device=mu.device)
            decoded = self.model.decoder(mu + noise * (0.5 * logvar).exp())  # [T, E, K, N, D]
            recon = (decoded - target.unsqueeze(2)).pow(2).sum(-1)  # [T, E, K, N]
            with torch.no_grad():
                mu_p, logvar_p = gaussian(self.model.prior_encoder(target))  # [T, E, N, Z]
            kl = kl_gaussians(mu, logvar, mu_p.unsqueeze(2), logvar_p.unsqueeze(2))  # [T, E, K, N]
            terms = {"subgoal": _masked_mean(recon + c.kl_weight * kl, mask)}
            if epoch == 0:
                with torch.no_grad():
                    pred = self.model.decoder(mu)  # the subgoal the policy's features stand for
                    metrics["coplayer_subgoal_hit"] = hit_ratio(pred, self.obs_all, self.episode_end,
                                                                c.subgoal_horizon, mask)
                    metrics["coplayer_subgoal_hit_chance"] = hit_ratio(guess, self.obs_all, self.episode_end,
                                                                       c.subgoal_horizon, mask)
                    now = self.obs_all.unsqueeze(2).expand_as(pred)  # "it stays where it is": j's own state at t
                    metrics["coplayer_subgoal_hit_now"] = hit_ratio(now, self.obs_all, self.episode_end,
                                                                    c.subgoal_horizon, mask)
                    metrics["coplayer_subgoal_recon"] = _masked_mean((pred - target.unsqueeze(2)).pow(2).mean(-1), mask)
                    metrics["coplayer_subgoal_kl"] = _masked_mean(kl, mask)
                    metrics["coplayer_subgoal_labelled"] = _masked_mean(mask.float(), pair)
                metrics.update({f"coplayer_{k}_loss": v.detach() for k, v in terms.items()})
            self._step(terms["subgoal"], terms, f"co-player step {epoch + 1} (subgoal)")
        self.prior_updates_done += int(training_prior)
        return {k: float(v) for k, v in metrics.items()}

    def _prior_loss(self, states: torch.Tensor) -> torch.Tensor:
        """The state VAE's loss on states [M, D]: reconstruction through its own latent + kl_weight x KL to N(0, I)."""
        mu, logvar = gaussian(self.model.prior_encoder(states))
        z = mu + torch.randn(mu.shape, generator=self.generator, device=mu.device) * (0.5 * logvar).exp()
        kl = kl_gaussians(mu, logvar, torch.zeros_like(mu), torch.zeros_like(logvar))
        return ((self.model.prior_decoder(z) - states).pow(2).sum(-1) + self.c.kl_weight * kl).mean()

    def state_dict(self) -> dict:
        return {**super().state_dict(), "generator": self.generator.get_state(),
                "prior_updates_done": self.prior_updates_done}

    def load_state_dict(self, sd: dict, with_memory: bool) -> None:
        super().load_state_dict(sd, with_memory)
        restore(self.generator, sd["generator"], "co-player subgoal")
        self.prior_updates_done = sd["prior_updates_done"]
