"""Training the co-player model (models/coplayer.py) on a learner's rollouts: storage, labels, memory, loss.

Per collect step a learner group's model reads its K agents' own observations (`act`) and, after the env
step, the rollout's facts about every slot are recorded (`record`): all slots' actions, which were alive, the
env's `goal_event`s, scripted partners' own goals (`ScriptedContext.goal`) and, for subgoals, all slots'
observations (targets only; never an input). After the PPO update the model is trained on the whole rollout
as one sequence per env and agent, from the memory it had at the rollout's start:
- action loss: cross-entropy on each alive co-player's action at t;
- goal loss: cross-entropy on its goal at t: a scripted partner's own target when it writes one, else in
  hindsight the goal it completes next in the same episode (steps with no later event in the rollout are
  unlabelled and masked);
- subgoal loss: squared error on its observation H steps ahead (`subgoal_at=horizon`) or at its next rewarded
  step (`subgoal_at=reward`), OMG's two subgoals (masked when the episode or the rollout ends first).
Accuracies are measured on the rollout before the model's step (data it was not yet trained on).

Memory: `episode` resets an agent's memory when its own trajectory restarts (death, episode end);
`persistent` keeps it across episodes and resets env e's memory only when some group's `partner_id[e]`
changes, so beliefs about the same partner accumulate. The co-player model has its own Adam optimiser and is
built from a generator forked from the run seed: with nothing fed to the policy, actor and critic train
exactly as without it.
"""

from __future__ import annotations

import gymnasium as gym
import torch
import torch.nn.functional as F

from hypermappo.algos.adam import adam
from hypermappo.config import resolve_coplayer_defaults
from hypermappo.errors import NonFiniteError, UserError
from hypermappo.models.coplayer import BeliefActor, CoplayerModel, belief_dim

SEED_OFFSET = 104_729  # the co-player model's init generator: run seed + this (+ the learner's offset)


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


def hindsight_goals(goal_event: torch.Tensor, episode_end: torch.Tensor, window: int = 0) -> torch.Tensor:
    """goal_event [T, E, N] (goal completed in step t, -1 none), episode_end [T, E] bool -> label [T, E, N]: the
    next goal completed at or after t in the same episode, if it is completed within `window` steps (0: any
    distance); -1 otherwise (none in the rollout, or too far: a hunter that caught a hare after wandering for 20
    steps was not after the hare all that time)."""
    label = torch.empty_like(goal_event)
    nxt = torch.full_like(goal_event[0], -1)  # [E, N]
    dist = torch.zeros_like(goal_event[0])  # steps until that event
    for t in reversed(range(goal_event.shape[0])):  # a recursion over time, like GAE
        hit = goal_event[t] >= 0
        nxt = torch.where(hit, goal_event[t], torch.where(episode_end[t].unsqueeze(-1), torch.full_like(nxt, -1), nxt))
        dist = torch.where(hit, 0, dist + 1)
        label[t] = torch.where((window <= 0) | (dist < window), nxt, -1)
    return label


def subgoal_at_reward(obs_all: torch.Tensor, reward: torch.Tensor, episode_end: torch.Tensor):
    """obs_all [T, E, N, D], reward [T, E, N], episode_end [T, E] -> (target [T, E, N, D] = a slot's observation at
    its next rewarded step t' >= t in the same episode, valid [T, E, N]: there is one in the rollout)."""
    target, valid = torch.empty_like(obs_all), torch.empty(reward.shape, dtype=torch.bool, device=reward.device)
    cur, cur_valid = torch.zeros_like(obs_all[0]), torch.zeros_like(valid[0])  # [E, N, D], [E, N]
    for t in reversed(range(obs_all.shape[0])):  # a recursion over time, like GAE
        hit = reward[t] != 0
        cur_valid = hit | (cur_valid & ~episode_end[t].unsqueeze(-1))
        cur = torch.where(hit.unsqueeze(-1), obs_all[t], cur)
        target[t], valid[t] = cur, cur_valid
    return target, valid


def subgoal_targets(obs_all: torch.Tensor, episode_end: torch.Tensor, horizon: int):
    """obs_all [T, E, N, D], episode_end [T, E] -> (target [T, E, N, D] = obs at t + H, valid [T, E]: t + H is in
    the rollout and no episode ended in steps t .. t + H - 1)."""
    T = obs_all.shape[0]
    target = torch.zeros_like(obs_all)
    valid = torch.zeros(episode_end.shape, dtype=torch.bool, device=obs_all.device)
    if horizon < T:
        target[:T - horizon] = obs_all[horizon:]
        ends = F.pad(episode_end.long().cumsum(0), (0, 0, 1, 0))  # [T + 1, E]: ends before step i
        valid[:T - horizon] = (ends[horizon:T] - ends[:T - horizon]) == 0
    return target, valid


def build_model(cfg, env_spec) -> CoplayerModel:
    """The co-player model of `cfg` for an env (heads for the loss terms with a weight > 0)."""
    c = resolve_coplayer_defaults(cfg.coplayer)  # a config built without validate()
    if c.model == "subgoal":
        from hypermappo.models.coplayer_subgoal import SubgoalModel

        return SubgoalModel(env_spec.obs_dim, env_spec.num_agents, c.subgoal_latent, c.hidden)
    n_actions = int(env_spec.action_space.n) if c.action_weight > 0 else 0
    n_goals = len(env_spec.goal_names) if c.goal_weight > 0 else 0
    return CoplayerModel(env_spec.obs_dim, env_spec.num_agents, n_actions, n_goals,
                         env_spec.obs_dim if c.subgoal_weight > 0 else 0, c.hidden)


def make_coplayer(cfg, env_spec, slots: list[int], num_envs: int, device, seed: int):
    """The co-player model learner of `cfg.coplayer.model` for a learner group on `slots`."""
    resolve_coplayer_defaults(cfg.coplayer)  # a config built without validate()
    if cfg.coplayer.model == "bayes":
        from hypermappo.algos.coplayer_bayes import BayesCoplayer

        return BayesCoplayer(cfg, env_spec, slots, num_envs, device, seed)
    if cfg.coplayer.model == "subgoal":
        from hypermappo.algos.coplayer_subgoal import SubgoalCoplayer

        return SubgoalCoplayer(cfg, env_spec, slots, num_envs, device, seed)
    return CoplayerLearner(cfg, env_spec, slots, num_envs, device, seed)


def acting_actor(cfg, env_spec, actor, checkpoint: dict | None = None):
    """What acts for a run outside training (eval, crossplay): its actor, wrapped with the co-player model when the
    actor reads the belief (weights from `checkpoint` when given)."""
    if not belief_dim(cfg, env_spec):
        return actor
    if cfg.coplayer.model == "bayes":
        from hypermappo.algos.coplayer_bayes import BayesBeliefActor, build_goal_policy

        model = build_goal_policy(cfg, env_spec)
        if checkpoint is not None:
            model.load_state_dict(checkpoint["coplayer"]["model"])
        return BayesBeliefActor(actor, model, cfg)
    model = build_model(cfg, env_spec)
    if checkpoint is not None:
        model.load_state_dict(checkpoint["coplayer"]["model"])
    return BeliefActor(actor, model)


class CoplayerLearner:
    """A learner group's co-player model, its optimiser, its memory and one rollout of its training data."""

    def __init__(self, cfg, env_spec, slots: list[int], num_envs: int, device, seed: int):
        c = cfg.coplayer
        self.cfg, self.c = cfg, c
        space = env_spec.action_space
        if not isinstance(space, gym.spaces.Discrete):
            raise UserError(f"coplayer.enabled: the co-player model predicts Discrete actions; env {cfg.env!r} has "
                            f"{space}")
        if c.goal_weight > 0 and not env_spec.goal_names:
            raise UserError(f"coplayer.goal_weight: env {cfg.env!r} labels no goals (its EnvSpec.goal_names is "
                            f"empty); set coplayer.goal_weight=0 or use an env with goals")
        N, D, K, T, E = env_spec.num_agents, env_spec.obs_dim, len(slots), cfg.rollout_length, num_envs
        self.N, self.K, self.T, self.E, self.D = N, K, T, E, D
        n_goals = len(env_spec.goal_names) if c.goal_weight > 0 else 0
        with torch.random.fork_rng(devices=[]):  # its own init: the actor's and critic's draws are unchanged
            torch.manual_seed(seed + SEED_OFFSET)
            self.model = build_model(cfg, env_spec).to(device)
        self.trains = any(w > 0 for w in (c.action_weight, c.goal_weight, c.subgoal_weight))
        self.opt = adam(self.model.parameters(), device, lr=c.lr, eps=cfg.ppo.adam_eps)
        self.fed = belief_dim(cfg, env_spec) > 0
        self.slots = torch.tensor(slots, dtype=torch.long, device=device)
        self.others = ~F.one_hot(self.slots, N).bool()  # [K, N]: who is a co-player of learner agent k
        z = dict(device=device)
        self.obs = torch.zeros(T, E, K, D, **z)  # the learner agents' own observations
        self.new_episode = torch.zeros(T, E, K, dtype=torch.bool, **z)
        self.reset = torch.zeros(T, E, K, dtype=torch.bool, **z)  # memory zeroed before step t
        self.h0 = torch.zeros(E, K, c.hidden, **z)  # memory at the rollout's start
        self.actions = torch.zeros(T, E, N, dtype=torch.long, **z)  # every slot's action at t
        self.active_all = torch.zeros(T, E, N, dtype=torch.bool, **z)  # every slot alive at t
        self.episode_end = torch.zeros(T, E, dtype=torch.bool, **z)
        self.goal_event = torch.full((T, E, N), -1, dtype=torch.long, **z) if n_goals else None
        self.scripted_goal = torch.full((T, E, N), -2, dtype=torch.long, **z) if n_goals else None  # -2: not given
        self.obs_all = torch.zeros(T, E, N, D, **z) if c.subgoal_weight > 0 else None
        self.reward_all = torch.zeros(T, E, N, **z) if c.subgoal_weight > 0 and c.subgoal_at == "reward" else None
        self.memory: torch.Tensor | None = None  # [E, K, H]
        self.pending_reset: torch.Tensor | None = None  # [E, K]: reset at the next step (fresh start)
        self.partner: torch.Tensor | None = None  # [E, G] partner ids seen at the last step
        self.after_backward = None  # the live-component audit's gradient hook, while it runs

    def loss_terms(self) -> list[str]:
        c = self.c
        return [f"coplayer_{k}_loss" for k, w in (("action", c.action_weight), ("goal", c.goal_weight),
                                                  ("subgoal", c.subgoal_weight)) if w > 0]

    # ------------------------------------------------------------------ collection

    def start(self, E: int, device) -> None:
        """Fresh start (run start, resume without env state, the learner's own phase change): memory zero."""
        self.memory = torch.zeros(E, self.K, self.c.hidden, device=device)
        self.pending_reset = torch.ones(E, self.K, dtype=torch.bool, device=device)
        self.partner = None

    @torch.no_grad()
    def act(self, t: int, obs: torch.Tensor, new_episode: torch.Tensor, partner: torch.Tensor | None):
        """obs [E, K, D] (own), new_episode [E, K] (the actor's reset mask), partner [E, G] ids or None -> the
        actor's input: obs, with the belief [E, K, H] appended when it is fed to the policy."""
        reset = self.pending_reset | new_episode if self.c.memory != "persistent" else self.pending_reset
        if partner is not None:
            if self.partner is not None:
                reset = reset | (partner != self.partner).any(-1, keepdim=True)  # a new partner in env e
            self.partner = partner.clone()
        self.pending_reset = torch.zeros_like(self.pending_reset)
        if t == 0:
            self.h0.copy_(self.memory)
        self.obs[t].copy_(obs)
        self.new_episode[t].copy_(new_episode)
        self.reset[t].copy_(reset)
        self.memory = self.model.step(obs, new_episode, self.memory, reset)
        return torch.cat([obs, self.model.features(self.memory)], -1) if self.fed else obs

    @torch.no_grad()
    def record(self, t: int, step, actions: torch.Tensor, nxt, groups) -> None:
        """After env.step: every slot's actions [E, N] taken from `step`, their goals and ends (from `nxt`)."""
        self.actions[t].copy_(actions)
        self.active_all[t].copy_(step.active)
        self.episode_end[t].copy_(nxt.terminated | nxt.truncated)
        if self.obs_all is not None:
            self.obs_all[t].copy_(step.obs)
        if self.reward_all is not None:
            self.reward_all[t].copy_(nxt.reward)
        if self.goal_event is not None:
            event = nxt.extras.get("goal_event")
            if event is None:
                raise UserError(f"coplayer.goal_weight: env {self.cfg.env!r} has goal_names but put no "
                                f"extras['goal_event'] in its step (the EnvSpec.goal_names contract)")
            self.goal_event[t].copy_(event)
            given = self.scripted_goal[t]
            given.fill_(-2)
            for g in groups:
                if getattr(g, "last_goal", None) is not None and not g.learning:
                    given[:, g.index] = g.last_goal.to(given.dtype)

    # ------------------------------------------------------------------ training

    def update(self) -> dict[str, float]:
        """Train on the stored rollout (`coplayer.epochs` full-batch steps); metrics of the first pass."""
        c = self.c
        learner_alive = self.active_all[:, :, self.slots]  # [T, E, K]
        pair = learner_alive.unsqueeze(-1) & self.others  # [T, E, K, N]: learner k alive, n is a co-player
        with torch.no_grad():
            if self.goal_event is not None:
                hindsight = hindsight_goals(self.goal_event, self.episode_end)
                goal = torch.where(self.scripted_goal >= -1, self.scripted_goal, hindsight)  # [T, E, N]
            if self.reward_all is not None:
                sub_target, sub_valid = subgoal_at_reward(self.obs_all, self.reward_all, self.episode_end)
            elif self.obs_all is not None:
                sub_target, sub_valid = subgoal_targets(self.obs_all, self.episode_end, c.subgoal_horizon)
                sub_valid = sub_valid.unsqueeze(-1).expand(-1, -1, self.N)  # [T, E, N]
        metrics: dict[str, torch.Tensor] = {}
        for epoch in range(c.epochs):
            emb = self.model.sequence(self.obs, self.new_episode, self.h0, self.reset)  # [T, E, K, H]
            pred = self.model.predict(emb)
            terms = {}
            if "action" in pred:
                logits = pred["action"]  # [T, E, K, N, A]
                target = self.actions.unsqueeze(2).expand(-1, -1, self.K, -1)  # [T, E, K, N]
                mask = pair & self.active_all.unsqueeze(2)
                ce = F.cross_entropy(logits.flatten(0, -2), target.flatten(), reduction="none").view(target.shape)
                terms["action"] = (c.action_weight, _masked_mean(ce, mask))
                if epoch == 0:
                    metrics["coplayer_action_acc"] = _masked_mean((logits.argmax(-1) == target).float(), mask)
            if "goal" in pred:
                logits = pred["goal"]  # [T, E, K, N, G]
                target = goal.unsqueeze(2).expand(-1, -1, self.K, -1)
                mask = pair & (target >= 0)
                ce = F.cross_entropy(logits.flatten(0, -2), target.clamp(min=0).flatten(),
                                     reduction="none").view(target.shape)
                terms["goal"] = (c.goal_weight, _masked_mean(ce, mask))
                if epoch == 0:
                    metrics["coplayer_goal_acc"] = _masked_mean((logits.argmax(-1) == target).float(), mask)
                    metrics["coplayer_goal_labelled"] = _masked_mean(mask.float(), pair)
            if "subgoal" in pred:
                err = (pred["subgoal"] - sub_target.unsqueeze(2)).pow(2).mean(-1)  # [T, E, K, N]
                mask = pair & sub_valid.unsqueeze(2)
                terms["subgoal"] = (c.subgoal_weight, _masked_mean(err, mask))
            if epoch == 0:
                metrics.update({f"coplayer_{k}_loss": v.detach() for k, (_, v) in terms.items()})
            if not self.trains:
                break
            self._step(sum(w * v for w, v in terms.values()), {k: v for k, (_, v) in terms.items()},
                       f"co-player epoch {epoch + 1}")
        return {k: float(v) for k, v in metrics.items()}

    def _step(self, loss: torch.Tensor, terms: dict[str, torch.Tensor], where: str) -> None:
        """One optimiser step on `loss` (the sum of `terms`), clipped; a non-finite loss or gradient norm raises
        NonFiniteError naming the first non-finite term and `where`."""
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.after_backward is not None:
            self.after_backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.ppo.max_grad_norm or float("inf"),
                                              foreach=True)
        if not torch.isfinite(loss.detach() + norm):
            bad = next((f"{k} loss" for k, v in terms.items() if not torch.isfinite(v)), "gradient norm")
            raise NonFiniteError(f"non-finite co-player {bad} in {where}")
        self.opt.step()

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "opt": self.opt.state_dict(), "memory": self.memory,
                "pending_reset": self.pending_reset, "partner": self.partner}

    def load_state_dict(self, sd: dict, with_memory: bool) -> None:
        self.model.load_state_dict(sd["model"])
        self.opt.load_state_dict(sd["opt"])
        if with_memory:
            self.memory, self.pending_reset, self.partner = sd["memory"], sd["pending_reset"], sd["partner"]
