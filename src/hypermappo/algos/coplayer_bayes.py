"""The Bayesian co-player model (`coplayer.model=bayes`): a goal-conditioned partner policy trained on every
transition whose goal is known, and a Bayesian belief over each co-player's goal (models/coplayer_goal.py).

`GoalBelief` is the running belief of K learner agents about every slot of E envs; training (`BayesCoplayer`)
and held-out evaluation (adaptation.py) step it the same way:

    features, log_pred = belief.begin(obs)       # before acting: belief + predicted action distribution
    belief.observe(actions, active, episode_end) # after the env step: Bayes update on the public actions,
                                                 # the goal-switch hazard, the prior carried at an episode end

Training data, per rollout, every ordered pair (observer o, co-player j), both alive, j's goal known:
(o's observation, j, j's previous action) -> j's action under goal g. Goal labels: a scripted partner's own
target (`ScriptedContext.goal`; a rule that writes no target, like `random`, and a target of -1 are "other"),
else in hindsight the next goal the slot completes in the same episode (env `extras["goal_event"]`);
unlabelled otherwise. Pairs with a learner as the co-player ("self as a model of others", `coplayer.self_model`)
use the observer slot's observation from the rollout: training data only, never a prediction's input. The pairs
go into a replay of the most recent `coplayer.replay_size` samples, and each update takes `coplayer.steps`
Adam steps on mini-batches drawn from it with the model's own seeded generator (checkpointed: exact resume).

Logged (metrics.csv): the fit on the new rollout before training (goal-conditioned action accuracy and loss),
and the belief's online predictions during the rollout: action accuracy and NLL (all steps, the first 5 steps of
an episode, and those in the first vs later episodes against the same partner), goal accuracy (argmax of the
belief vs the label, from step 5 on), Brier score and expected calibration error of the goal belief.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from hypermappo.algos.adam import adam
from hypermappo.algos.coplayer import SEED_OFFSET, hindsight_goals
from hypermappo.config import resolve_coplayer_defaults
from hypermappo.envs.symmetry import augment
from hypermappo.errors import NonFiniteError, UserError
from hypermappo.kernels import online_correction
from hypermappo.models.coplayer_goal import (
    GoalPolicy,
    bayes_update,
    carry,
    coplayer_seats,
    current_goal,
    goal_labels,
    one_hot_mask,
    predictive,
    switch,
)
from hypermappo.runtime import sync_free
from hypermappo.runtime.device_rng import device_generator, restore

REPLAY_SEED_OFFSET = 7_919  # the replay sampler's generator: run seed + this (+ the learner's offset)
GOAL_NOT_GIVEN = -2  # scripted_goal: nothing written for this slot (policies/population.py)
EARLY_STEPS = 5  # "the first steps of an episode" in the logged metrics
ECE_BINS = 10
FIT_SAMPLES = 4096  # the fit metrics (coplayer_fit_acc / _loss): on at most this many of a rollout's pairs


def bayes_belief_dim(env_spec) -> int:
    """Features the belief adds to the actor's input: per slot, the goal posterior and the predicted action
    distribution (zero at the learner's own slot)."""
    return env_spec.num_agents * (goal_labels(len(env_spec.goal_names)) + int(env_spec.action_space.n))


def population_members(cfg) -> int:
    """The read-outs coplayer.member_heads adds: the members of the run's population groups (a learner group's
    config carries their count, policies/specs.py; a config without groups has none)."""
    return getattr(cfg, "population_members", 0)


def build_goal_policy(cfg, env_spec) -> GoalPolicy:
    c = resolve_coplayer_defaults(cfg.coplayer)  # a config built without validate()
    return GoalPolicy(env_spec.obs_dim, env_spec.num_agents, int(env_spec.action_space.n),
                      goal_labels(len(env_spec.goal_names)), c.hidden, c.floor, env_spec.identity_features,
                      env_spec.coplayer_view if c.view == "coplayer" else None,
                      population_members(cfg) if c.member_heads else 0, c.goal_readout == "state")


def check_env(cfg, env_spec) -> None:
    import gymnasium as gym

    if not isinstance(env_spec.action_space, gym.spaces.Discrete):
        raise UserError(f"coplayer.model=bayes: the goal belief needs Discrete actions; env {cfg.env!r} has "
                        f"{env_spec.action_space}")
    if not env_spec.public_actions:
        raise UserError(f"coplayer.model=bayes: env {cfg.env!r} does not declare public actions (EnvSpec."
                        f"public_actions), so a learner cannot see the moves the belief is updated on; use "
                        f"coplayer.model=gru")


class GoalBelief:
    """The goal belief of K learner agents (slots `slots`) about every slot of E envs, and its memory rules.

    The last goal, "other" (behaviour no named goal explains), is a stationary action distribution learnt online
    per partner: its policy is the Dirichlet(1) posterior predictive of the partner's moves counted so far, kept
    across episodes with the belief's memory. A partner that plays a fixed mix of moves (random play, an early
    learner that mostly stays) is then predicted as well as counting its moves does, instead of uniformly."""

    def __init__(self, model: GoalPolicy, slots: torch.Tensor, n_slots: int, alpha: float, hazard: float,
                 persistent: bool, observe_actions: bool = True, event_reset: float = 0.0, online_lr: float = 0.0,
                 corrected_evidence: bool = True, evidence_weight: float = 1.0):
        self.model, self.slots, self.N = model, slots, n_slots
        self.G, self.A = model.n_goals, model.n_actions
        # with member heads (coplayer.member_heads) the belief is over hypotheses (read-out, named goal): read-out 0
        # the member-free one, 1..M the training populations' members; then each member as a whole (its read-out's
        # "other" row: for a member whose goals no rule gives, a frozen learner, learnt from all its moves, so that
        # it is predicted as itself when met again); last "other", the counted moves. H = (1 + M) * (G - 1) + M + 1
        self.M = getattr(model, "n_members", 0)
        self.H = (1 + self.M) * (self.G - 1) + self.M + 1
        # the hypotheses' rows of the model's [(1 + M) * G, A] output: the named goals read-out by read-out, then the
        # members' "other" rows, each member as a whole (the member-free read-out's is not one: its "other" is the
        # counted moves)
        self.named_rows = torch.tensor([r * self.G + g for r in range(1 + self.M) for g in range(self.G - 1)]
                                       + [m * self.G + self.G - 1 for m in range(1, 1 + self.M)], device=slots.device)
        # the prior a fresh belief starts from: uniform over goals, each goal's mass spread evenly over its 1 + M
        # hypotheses (a named goal's read-outs; "other"'s members as a whole and the counted moves), so uniform
        self.fresh = torch.full((self.H,), 1.0 / self.H, device=slots.device)
        self.log_fresh = self.fresh.log()
        self.read_free = False
        self.alpha, self.hazard, self.persistent, self.observe_actions = alpha, hazard, persistent, observe_actions
        self.event_reset = event_reset
        self.evidence_weight = evidence_weight  # the power of each move's likelihood in the update (1: Bayes)
        # the per-partner online correction of the goal policies' moves (off at 0): logits + W h, W [E, K, N - 1, A, H]
        # (co-player seats only, `coplayer_seats` order; [A, H] so that its update is one contiguous multiply-add)
        # learnt by online multinomial logistic regression on the partner's public moves, h the goal network's last
        # hidden layer; kept and reset with the belief's memory
        self.online_lr = online_lr if isinstance(model, torch.nn.Module) else 0.0
        self.W = self.h = self.pred = None
        # the Bayes update's likelihoods: the corrected goal policies (True) or the goal model's own (False; the
        # correction then only sharpens the predicted moves, it cannot make one goal fit every partner)
        self.corrected_evidence = corrected_evidence
        self.log_evidence = None
        self.others = one_hot_mask(slots, n_slots)  # [K, N]
        self.seat = coplayer_seats(slots, n_slots)  # [K, N - 1]
        self.seat_k = torch.arange(slots.numel(), device=slots.device).unsqueeze(-1)  # [K, 1]: indexes [.., K, N - 1]
        self.log_b = self.prior = self.prev = self.log_pi = self.episode_index = self.counts = None
        self.goal_probs = None
        # the goal read-out (coplayer.goal_readout=state): goal predictions b(g) q(g | o_i, j, a_prev)
        self.readout = getattr(model, "goal_out", None) is not None
        # a compiled learner's belief (BayesCoplayer.compile): `predict_from_views` and `_observed` as graphs
        self.graph = self.observe_graph = None

    def start(self, E: int, device) -> None:
        """Fresh start: uniform prior and belief, no previous actions, first episode."""
        K = self.slots.numel()
        # where reading the device costs nothing (a CPU: runtime/sync_free.py), `reset` looks whether any env changed
        # partner and touches only those; sync-free (CUDA), it rewrites every env by masks
        self.read_free = not sync_free.decide(torch.device(device))[0]
        self.prior = self.fresh.to(device).expand(E, K, self.N, self.H).clone()
        self.log_b = self.prior.log()
        self.prev = torch.full((E, self.N), self.A, dtype=torch.long, device=device)
        self.episode_index = torch.zeros(E, dtype=torch.long, device=device)  # episodes against this partner, 0-based
        self.counts = torch.zeros(E, K, self.N, self.A, device=device)  # each co-player's moves seen (the "other" goal)
        if self.online_lr > 0:
            self.W = torch.zeros(E, K, self.N - 1, self.A, self.model.body[-1].in_features, device=device)

    def reset(self, envs: torch.Tensor) -> None:
        """A new partner in envs [E] (bool): what was learnt about the last one is dropped."""
        if self.read_free:  # the same values, at the envs that changed partner only (none at most steps)
            which = envs.nonzero().squeeze(-1)
            if which.numel():  # new tensors (a saved state_dict holds the old ones), but W: in place, as below
                at = (which,)
                self.prior = self.prior.index_put(at, self.fresh)
                self.log_b = self.log_b.index_put(at, self.log_fresh)
                self.prev = self.prev.index_put(at, self.prev.new_tensor(self.A))
                self.episode_index = self.episode_index.index_put(at, self.episode_index.new_tensor(0))
                self.counts = self.counts.index_put(at, self.counts.new_tensor(0.0))
                if self.W is not None:
                    self.W.index_fill_(0, which, 0.0)
            return
        m = envs.view(-1, 1, 1, 1)
        self.prior = torch.where(m, self.fresh, self.prior)
        self.log_b = torch.where(m, self.log_fresh, self.log_b)
        self.prev = torch.where(envs.unsqueeze(-1), self.A, self.prev)
        self.episode_index = torch.where(envs, 0, self.episode_index)
        self.counts = torch.where(m, 0.0, self.counts)
        if self.W is not None:
            self.W.masked_fill_(m.unsqueeze(-1), 0.0)  # in place: W is the belief's largest state

    def begin(self, obs: torch.Tensor, features: bool = True) -> tuple[torch.Tensor | None, torch.Tensor]:
        """obs [E, K, D] (own) -> (policy features [E, K, N * (G + A)], None unless `features`; log predicted
        action [E, K, N, A]). Also kept: the goal posterior `goal_probs` [E, K, N, G] the predictions used."""
        prev = self.prev if self.observe_actions else torch.full_like(self.prev, self.A)
        # the co-players only ([E, K, N - 1, ...], `coplayer_seats` order): a learner's own slot is never predicted
        counts = self.counts[:, self.seat_k, self.seat]  # [E, K, N - 1, A]
        if self.graph is None:
            self.h = self.raw = None
            adjust = self._correct if self.W is not None else (self._keep_hidden if self.readout else None)
            log_pi = self.model.coplayer_log_probs(obs, prev, self.slots, *(() if adjust is None else (adjust,)))
            out = self._predict(log_pi, self.raw, counts, self.log_b, features, self.h if self.readout else None)
        else:  # a compiled learner: the views by their C kernel, the rest one graph (`predict_from_views`)
            seen, target, prev_seat = self.model.coplayer_inputs(obs, prev, self.slots)
            out, self.h = self.graph(seen, target, prev_seat, self.W, counts, self.log_b, features)
        self.log_pi, self.log_evidence, self.pred, log_pred, self.goal_probs, belief_features = out
        return belief_features, log_pred

    def predict_from_views(self, seen: torch.Tensor, target: torch.Tensor, prev: torch.Tensor, W: torch.Tensor | None,
                           counts: torch.Tensor, log_b: torch.Tensor, features: bool):
        """`begin` from the co-players' views on (`GoalPolicy.coplayer_inputs`): what a compiled learner runs as one
        graph (BayesCoplayer.compile; the correction's product inside it is the C kernel as a custom op,
        kernels/online_correction.py). -> (`_predict`'s outputs, the last hidden layer h for the correction's
        update)."""
        raw, h = self.model.net(seen, target, prev)
        log_pi = raw if W is None else self._corrected(raw, h, W)
        return self._predict(log_pi, raw if W is not None else None, counts, log_b, features,
                             h if self.readout else None), h

    def _predict(self, log_pi: torch.Tensor, raw: torch.Tensor | None, counts: torch.Tensor, log_b: torch.Tensor,
                 features: bool, hidden: torch.Tensor | None = None):
        """The co-players' goal policies log pi [E, K, N - 1, G, A] (corrected; `raw`: before the correction, None
        without one), their counted moves [E, K, N - 1, A] and the belief log b [E, K, N, H] -> (every hypothesis'
        policy [E, K, N - 1, H, A], the Bayes update's likelihoods (the same or the uncorrected ones), the predicted
        distribution [E, K, N - 1, A] (None without a correction, which alone needs it), log predicted action
        [E, K, N, A], goal posterior [E, K, N, G], policy features or None). `hidden` [E, K, N - 1, H]: the goal
        network's last hidden layer, with the goal read-out (the goal posterior is then `current_goal`'s)."""
        habit = ((counts + 1.0) / (counts.sum(-1, keepdim=True) + self.A)).log()
        hypotheses = torch.cat([self._named(log_pi), habit.unsqueeze(-2)], -2)  # "other": the moves counted
        evidence = hypotheses if (raw is None or self.corrected_evidence) else \
            torch.cat([self._named(raw), habit.unsqueeze(-2)], -2)
        pred = predictive(log_b[:, self.seat_k, self.seat], hypotheses)  # [E, K, N - 1, A]
        E, K = log_b.shape[0], self.seat.shape[0]
        log_pred = pred.new_full((E, K, self.N, self.A), -math.log(self.A)).scatter(  # own slots: uniform
            2, self.seat.view(1, K, -1, 1).expand_as(pred), pred)
        goal_log_b = self._goal_log_b(log_b)
        if hidden is not None:  # the goal pursued now: b(g) q(g | o_i, j, a_prev), at the co-players' slots
            now = current_goal(goal_log_b[:, self.seat_k, self.seat], self.model.goal_log_q(hidden))
            goal_log_b = goal_log_b.scatter(2, self.seat.view(1, K, -1, 1).expand_as(now), now)
        goal_probs = goal_log_b.exp()
        belief_features = None
        if features:  # (an actor that does not read the belief: only the prediction is scored)
            mask = self.others.unsqueeze(-1).to(log_b.dtype)  # [K, N, 1]
            belief_features = torch.cat([(goal_probs * mask).flatten(-2), (log_pred.exp() * mask).flatten(-2)], -1)
        return hypotheses, evidence, pred.exp() if raw is not None else None, log_pred, goal_probs, belief_features

    def _named(self, log_pi: torch.Tensor) -> torch.Tensor:
        """The model's [..., G, A] (member heads: [..., (1 + M) * G, A]) -> the modelled hypotheses' rows [..., H - 1,
        A]: the named goals (with member heads: per read-out, then each member as a whole)."""
        return log_pi[..., :-1, :] if self.M == 0 else log_pi.index_select(-2, self.named_rows)

    def goal_log_b(self) -> torch.Tensor:
        """The goal posterior [E, K, N, G] (log): with member heads, each named goal's mass summed over read-outs,
        a member as a whole split over the named goals as that member's own goal hypotheses are now (a frozen learner
        recognised as itself is after the goal its goal rows favour), and "other" the counted moves."""
        return self._goal_log_b(self.log_b)

    def _goal_log_b(self, log_b: torch.Tensor) -> torch.Tensor:
        if self.M == 0:
            return log_b
        n = (1 + self.M) * (self.G - 1)
        per_readout = log_b[..., :n].unflatten(-1, (1 + self.M, self.G - 1))  # [..., 1 + M, G - 1]
        whole = log_b[..., n:n + self.M]  # [..., M]
        # a member recognised as a whole pursues the goal its own goal rows favour now
        as_goals = whole.unsqueeze(-1) + per_readout[..., 1:, :].log_softmax(-1)  # [..., M, G - 1]
        named = torch.cat([per_readout, as_goals], -2).logsumexp(-2)
        return torch.cat([named, log_b[..., -1:]], -1)

    def _keep_hidden(self, log_pi: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """`coplayer_log_probs`' adjustment without a correction: the hidden layer kept (the goal read-out's input)."""
        self.h = hidden.detach()
        return log_pi

    def _correct(self, log_pi: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """`coplayer_log_probs`' adjustment: the online correction (`_corrected`), the uncorrected log pi and the
        hidden layer h [E, K, N - 1, H] kept (h for the update in `observe`)."""
        self.h, self.raw = hidden.detach(), log_pi
        return self._corrected(log_pi, self.h, self.W)

    @staticmethod
    def _corrected(log_pi: torch.Tensor, h: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
        """The online correction of the co-players' goal policies: log pi [E, K, N - 1, G, A] + W h, renormalised."""
        corr = online_correction.apply(W, h)  # [E, K, N - 1, A]
        return (log_pi + corr.unsqueeze(-2)).log_softmax(-1)

    def observe(self, actions: torch.Tensor, active: torch.Tensor, episode_end: torch.Tensor,
                event: torch.Tensor | None = None) -> None:
        """actions [E, N] every slot's action of this step, active [E, N] alive when acting, episode_end [E],
        event [E, N] the goal each slot completed at this step (-1: none; the env's public `goal_event`): a
        co-player that has just reached a goal picks its next one afresh, so its belief moves `event_reset` of the
        way back to the episode's prior (what is known of this partner, not what it was just doing)."""
        step = self.observe_graph or self._observed
        self.log_b, self.prior, self.counts, self.prev, self.episode_index, err = step(
            actions, active, episode_end, event, self.log_b, self.prior, self.counts, self.prev, self.episode_index,
            self.log_evidence, self.pred)
        if self.W is not None:  # W [.., A, H] += lr err (x) h / (|h|^2 + 1), in place (W is the belief's largest state)
            online_correction.update_(self.W, err, self.h.contiguous(), self.online_lr)
            if not self.persistent:  # memory off: nothing about the partner crosses the episode's end
                self.W.masked_fill_(episode_end.view(-1, 1, 1, 1, 1), 0.0)

    def _observed(self, actions, active, episode_end, event, log_b, prior, counts, prev, episode_index, log_evidence,
                  pred):
        """`observe` as a function of the belief's state (what a compiled learner runs as one graph): -> the new
        (log b, prior, counts, previous actions, episode index) and the online correction's error term (None
        without one; its update of W in place follows)."""
        # the Bayes update at the co-players' slots ([E, K, N - 1, ...], as `begin`); a learner's own slot keeps its
        # belief (the uniform prior: nothing updates it)
        cp = (slice(None), self.seat_k, self.seat)
        moves = actions[:, self.seat]  # [E, K, N - 1]
        like = log_evidence.gather(-1, moves[..., None, None].expand(-1, -1, -1, self.H, 1)).squeeze(-1)  # [.., H]
        seen = active.unsqueeze(1) & active[:, self.slots].unsqueeze(-1) & self.others  # [E, K, N]: both alive
        log_b_cp, prior_cp = log_b[cp], prior[cp]
        post = switch(bayes_update(log_b_cp, like, self.evidence_weight), prior_cp, self.hazard)
        if event is not None and self.event_reset > 0:
            done_goal = (event >= 0)[:, self.seat].unsqueeze(-1)  # [E, K, N - 1, 1]
            post = torch.where(done_goal, switch(post, prior_cp, self.event_reset), post)
        updated = torch.where(seen[cp].unsqueeze(-1), post, log_b_cp)
        log_b = log_b.scatter(2, self.seat.view(1, *self.seat.shape, 1).expand_as(updated), updated)
        moved = F.one_hot(actions, self.A).to(counts.dtype).unsqueeze(1)  # [E, 1, N, A]
        counts = counts + moved * seen.unsqueeze(-1)
        err = None
        if pred is not None:  # the online correction: one step of online logistic regression, d log p(a) / d logits
            # ~ onehot(a) - p, normalised by |h|^2 (normalised LMS: the step does not depend on the features' scale)
            seen_cp = seen[:, self.seat_k, self.seat].unsqueeze(-1)  # [E, K, N - 1, 1]
            err = ((F.one_hot(moves, self.A).to(pred.dtype) - pred) * seen_cp).contiguous()
        prev = torch.where(active, actions, prev)
        nxt_prior = carry(prior, log_b, self.alpha) if self.persistent else self.fresh.expand_as(prior)
        end = episode_end.view(-1, 1, 1, 1)
        prior = torch.where(end, nxt_prior, prior)
        if not self.persistent:  # memory off: nothing about the partner crosses the episode's end
            counts = torch.where(end, 0.0, counts)
        log_b = torch.where(end, prior.log(), log_b)
        prev = torch.where(episode_end.unsqueeze(-1), self.A, prev)
        return log_b, prior, counts, prev, episode_index + episode_end.long(), err

    def state_dict(self) -> dict:
        return {"log_b": self.log_b, "prior": self.prior, "prev": self.prev, "episode_index": self.episode_index,
                "counts": self.counts, **({"W": self.W.clone()} if self.W is not None else {})}

    def load_state_dict(self, sd: dict) -> None:
        if sd["log_b"].shape[-1] != self.H:  # member heads without whole rows held (1 + M) * (G - 1) + 1
            raise UserError(f"resume: the checkpoint's goal belief holds {sd['log_b'].shape[-1]} hypotheses per "
                            f"co-player, this model {self.H}: it was saved by a version of coplayer.member_heads "
                            f"without members as a whole; start the run afresh")
        self.log_b, self.prior, self.prev, self.episode_index = (sd["log_b"], sd["prior"], sd["prev"],
                                                                 sd["episode_index"])
        self.counts = sd["counts"] if "counts" in sd else torch.zeros(*self.log_b.shape[:3], self.A,
                                                                       device=self.log_b.device)
        if self.online_lr > 0:
            E, K = self.log_b.shape[:2]
            W = sd.get("W")
            if W is None:
                W = torch.zeros(E, K, self.N - 1, self.A, self.model.body[-1].in_features, device=self.log_b.device)
            elif W.shape[2] == self.N and W.shape[-1] == self.A:  # an older layout: [E, K, N, H, A], every slot
                W = W[:, self.seat_k, self.seat].transpose(-1, -2)
            self.W = W.clone()


def calibration(prob: torch.Tensor, label: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Goal probabilities [M, G], labels [M], mask [M] -> (Brier score, expected calibration error of the argmax,
    ECE_BINS equal-width confidence bins)."""
    m = mask.to(prob.dtype)
    n = m.sum().clamp(min=1.0)
    onehot = F.one_hot(label.clamp(min=0), prob.shape[-1]).to(prob.dtype)
    brier = (((prob - onehot) ** 2).sum(-1) * m).sum() / n
    conf, pred = prob.max(-1)
    correct = (pred == label).to(prob.dtype)
    bins = (conf * ECE_BINS).nan_to_num(0.0).long().clamp(0, ECE_BINS - 1)  # a NaN belief: no IndexError
    gap_sum = torch.zeros(ECE_BINS, dtype=prob.dtype, device=prob.device).index_add_(0, bins, (conf - correct) * m)
    return brier, gap_sum.abs().sum() / n


class BayesCoplayer:
    """A learner group's Bayesian co-player model: network, optimiser, replay, belief and one rollout of data."""

    def __init__(self, cfg, env_spec, slots: list[int], num_envs: int, device, seed: int):
        c = cfg.coplayer
        self.cfg, self.c = cfg, c
        check_env(cfg, env_spec)
        if c.member_heads and not population_members(cfg):
            raise UserError("coplayer.member_heads=true: the run has no population group, so no member to give a "
                            "read-out of its own; add a group with kind: population, or leave it false")
        N, D, K, T, E = env_spec.num_agents, env_spec.obs_dim, len(slots), cfg.rollout_length, num_envs
        self.N, self.K, self.T, self.E, self.D = N, K, T, E, D
        self.n_named = len(env_spec.goal_names)
        self.OTHER = self.n_named  # the "other" goal's index
        with torch.random.fork_rng(devices=[]):  # its own init: the actor's and critic's draws are unchanged
            torch.manual_seed(seed + SEED_OFFSET)
            self.model = build_goal_policy(cfg, env_spec).to(device)
        self.G, self.A = self.model.n_goals, self.model.n_actions
        self.trains = c.action_weight > 0 or c.goal_readout == "state"
        self.opt = adam(self.model.parameters(), device, lr=c.lr, eps=cfg.ppo.adam_eps)
        self.sampler = device_generator(seed + SEED_OFFSET + REPLAY_SEED_OFFSET, device)  # replay draws on the device
        self.symmetries = list(env_spec.symmetries) if c.symmetries != "off" else []  # the game's (envs/symmetry.py)
        self.fed = c.feed == "policy" or (cfg.actor == "hyper" and "coplayer" in cfg.hyper.context)
        self.slots = torch.tensor(slots, dtype=torch.long, device=device)
        self.learner_slot = torch.zeros(N, dtype=torch.bool, device=device)
        self.learner_slot[self.slots] = True
        self.belief = GoalBelief(self.model, self.slots, N, c.prior_weight, c.hazard, c.memory != "episode",
                                 c.observe_actions, c.event_reset, c.online_lr, c.goal_evidence == "corrected",
                                 c.evidence_weight)
        z = dict(device=device)
        # the rollout: every slot's observation (training inputs of each observer), actions, previous actions
        self.obs_all = torch.zeros(T, E, N, D, **z)
        self.actions = torch.zeros(T, E, N, dtype=torch.long, **z)
        self.prev = torch.zeros(T, E, N, dtype=torch.long, **z)
        self.active_all = torch.zeros(T, E, N, dtype=torch.bool, **z)
        self.episode_end = torch.zeros(T, E, dtype=torch.bool, **z)
        self.goal_event = torch.full((T, E, N), -1, dtype=torch.long, **z)
        self.scripted_goal = torch.full((T, E, N), GOAL_NOT_GIVEN, dtype=torch.long, **z)
        # member heads: which population member played each slot (its read-out, 1..M; 0: none, a learner or a
        # group that is no population)
        self.M = self.model.n_members
        self.member = torch.zeros(T, E, N, dtype=torch.long, **z) if self.M else None
        # the belief's online predictions, scored once labels are known (at the update)
        self.log_pred = torch.zeros(T, E, K, N, self.A, **z)
        self.belief_probs = torch.zeros(T, E, K, N, self.G, **z)
        self.t_in_episode = torch.zeros(T, E, dtype=torch.long, **z)
        self.episode_idx = torch.zeros(T, E, dtype=torch.long, **z)
        self.step_count = None  # [E] steps into the current episode
        # replay of training samples (observations in float16: a checkpoint carries it whole)
        cap = c.replay_size
        self.replay = {"obs": torch.zeros(cap, D, dtype=torch.float16, **z),
                       "target": torch.zeros(cap, dtype=torch.long, **z), "prev": torch.zeros(cap, dtype=torch.long, **z),
                       "action": torch.zeros(cap, dtype=torch.long, **z), "goal": torch.zeros(cap, dtype=torch.long, **z),
                       "known": torch.zeros(cap, dtype=torch.bool, **z),
                       **({"member": torch.zeros(cap, dtype=torch.long, **z)} if self.M else {})}
        self.replay_fill, self.replay_pos = 0, 0
        self.partner = None
        self.after_backward = None  # the live-component audit's gradient hook, while it runs
        self.fused = None  # ppo.compile: the Adam step as one graph (`compile`)
        self.graph_note = None  # ppo.compile: which of its parts run as graphs (`compile`; run header, summary.json)

    def compile(self, compile_fn) -> None:
        """ppo.compile: the belief's predictions from the co-players' views (the goal network, the online
        correction, the predictive), its Bayes update (`_observed`) and each Adam step of the update as graphs (the
        views and the correction's in-place update of W stay C kernels between them). Measured side by side
        (benchmarks/kernels/coplayer_graphs.py, egocentric stag hunt, E = 1024, one Intel Xeon thread): collection
        1.21x and the update 1.05x as fast, 1.10x the env steps per second.
        `HYPERMAPPO_COPLAYER_GRAPHS=0` keeps all three eager (side-by-side timing)."""
        from hypermappo.algos.coplayer_step import FusedGoalStep
        from hypermappo.compile import switch

        if not switch("HYPERMAPPO_COPLAYER_GRAPHS"):
            self.graph_note = "co-player model: eager beside the compiled policy (HYPERMAPPO_COPLAYER_GRAPHS=0)"
            return
        self.graph_note = ("co-player model: the belief's predictions, its Bayes update and the goal model's Adam "
                           "steps as graphs")
        self.belief.graph = compile_fn(self.belief.predict_from_views)
        self.belief.observe_graph = compile_fn(self.belief._observed)
        if self.trains:
            self.fused = FusedGoalStep(self, compile_fn)

    def loss_terms(self) -> list[str]:
        return ["coplayer_action_loss"] if self.trains else []

    # ------------------------------------------------------------------ collection

    def start(self, E: int, device) -> None:
        self.belief.start(E, device)
        self.step_count = torch.zeros(E, dtype=torch.long, device=device)
        self.partner = None

    @torch.no_grad()
    def act(self, t: int, obs: torch.Tensor, new_episode: torch.Tensor, partner: torch.Tensor | None):
        """obs [E, K, D] (own), partner [E, G] ids or None -> the actor's input (the belief appended when fed)."""
        if partner is not None:
            if self.partner is not None:
                self.belief.reset((partner != self.partner).any(-1))
            self.partner = partner.clone()
        self.prev[t].copy_(self.belief.prev)
        features, log_pred = self.belief.begin(obs, features=self.fed)
        self.log_pred[t].copy_(log_pred)
        self.belief_probs[t].copy_(self.belief.goal_probs)
        self.t_in_episode[t].copy_(self.step_count)
        self.episode_idx[t].copy_(self.belief.episode_index)
        return torch.cat([obs, features], -1) if self.fed else obs

    @torch.no_grad()
    def record(self, t: int, step, actions: torch.Tensor, nxt, groups) -> None:
        """After env.step: every slot's observation, action and goal; then the belief's Bayes update."""
        end = nxt.terminated | nxt.truncated
        self.obs_all[t].copy_(step.obs)
        self.actions[t].copy_(actions)
        self.active_all[t].copy_(step.active)
        self.episode_end[t].copy_(end)
        event = nxt.extras.get("goal_event") if self.n_named else None
        if self.n_named and event is None:
            raise UserError(f"coplayer: env {self.cfg.env!r} has goal_names but put no extras['goal_event'] in its "
                            f"step (the EnvSpec.goal_names contract)")
        if event is not None:
            self.goal_event[t].copy_(event)
        given = self.scripted_goal[t]
        given.fill_(GOAL_NOT_GIVEN)
        offset = 1  # member heads: the first population group's members are read-outs 1..
        for g in groups:
            if g.learning:
                continue
            goal = getattr(g, "last_goal", None)
            if goal is not None:  # a scripted rule's own target (-1: none, "other"); frozen actors write none
                given[:, g.index] = goal.to(given.dtype)
            if self.member is not None and getattr(g, "population", None) is not None:
                pid = g.partner_id.view(g.partner_id.shape[0], -1)  # [E, 1] or [E, K_g] (a member per slot)
                self.member[t][:, g.index] = (offset + pid).expand(-1, g.K)
                offset += len(g.population)
        self.belief.observe(actions, step.active, end, event)
        self.step_count = torch.where(end, 0, self.step_count + 1)

    # ------------------------------------------------------------------ training

    def labels(self) -> torch.Tensor:
        """[T, E, N] goal index per slot and step (OTHER for a scripted "no target"), -1 unlabelled."""
        hindsight = hindsight_goals(self.goal_event, self.episode_end, self.c.hindsight_window)
        given = torch.where(self.scripted_goal == -1, self.OTHER, self.scripted_goal)
        return torch.where(self.scripted_goal != GOAL_NOT_GIVEN, given, hindsight)

    def _pairs(self, label: torch.Tensor) -> dict[str, torch.Tensor]:
        """The rollout's training samples: every (observer, co-player) pair, both alive, the co-player's goal
        known, the observer a learner slot (or any slot for a learner co-player with coplayer.self_model)."""
        N = self.N
        observer_ok = self.learner_slot.view(N, 1) | (self.c.self_model & self.learner_slot.view(1, N))  # [o, j]
        # with member heads a population member's every move is a sample (one of no known goal trains the member's
        # whole row only)
        known = label >= 0 if self.member is None else (label >= 0) | (self.member > 0)
        keep = (self.active_all.unsqueeze(3) & self.active_all.unsqueeze(2) & ~torch.eye(N, dtype=torch.bool,
                device=label.device) & observer_ok & known.unsqueeze(2))  # [T, E, o, j]
        t, e, o, j = keep.nonzero().unbind(-1)  # in time order
        if t.numel() > self.c.replay_size:  # only the most recent fit in the replay
            t, e, o, j = (x[-self.c.replay_size:] for x in (t, e, o, j))
        prev = self.prev if self.c.observe_actions else torch.full_like(self.prev, self.A)
        return {"obs": self.obs_all[t, e, o], "target": (j - o) % N,  # j relative to the observer
                "prev": prev[t, e, j], "action": self.actions[t, e, j], "goal": label[t, e, j],
                "known": self.scripted_goal[t, e, j] != GOAL_NOT_GIVEN,  # a rule's own goal, not a hindsight guess
                **({"member": self.member[t, e, j]} if self.member is not None else {})}

    def _push(self, samples: dict[str, torch.Tensor]) -> None:
        cap = self.c.replay_size
        n = samples["target"].shape[0]
        if n > cap:  # more than the replay holds: the most recent
            samples = {k: v[n - cap:] for k, v in samples.items()}
            n = cap
        idx = (self.replay_pos + torch.arange(n, device=samples["target"].device)) % cap
        for k, v in samples.items():
            self.replay[k][idx] = v.to(self.replay[k].dtype)
        self.replay_pos = (self.replay_pos + n) % cap
        self.replay_fill = min(cap, self.replay_fill + n)

    def _losses(self, batch: dict[str, torch.Tensor], normed: torch.Tensor | None = None, hits: bool = True):
        """Per-sample cross-entropy of the goal-conditioned policy and its argmax hit: ([B], [B], member hits)
        (`normed`: the batch's `GoalPolicy.normed_inputs`, if computed already). With member heads the member-free
        read-out's cross-entropy plus, for a sample a population member played, that member's read-out's on its
        goal (both where a goal is known, from a rule or in hindsight), and `whole`: for a member whose goals no
        rule gives (a frozen learner), its own "other" row's on every one of its moves, labelled or not (the member
        as a whole: a frozen learner met in training is predicted as itself). The hit: the member-free read-out's,
        the fit to a partner never met (False where no goal is known); member hits: each member's samples scored by
        its own read-out (by its whole row where it has one). Then, with the goal read-out, its cross-entropy on the
        goal label and its argmax hit ([B] each, 0 and False where no goal is known; None, None without). Returns
        (nll, hit, member_hit, goal_nll, goal_hit, whole), `whole` None without member heads; without `hits` (a
        training step reads none) the three hits are None."""
        goal, labelled, member = batch["goal"], None, batch.get("member")
        if self.M:  # -1: a member's move of no known goal (it trains the member's whole row only)
            labelled = goal >= 0
            goal = goal.clamp(min=0)
        if normed is None:
            normed = self.model.normed_inputs(batch["obs"].float(), batch["target"])
        # read-out rows [B, R]: the member-free one on the goal; with member heads the member's own on its goal and
        # its whole row (its read-out's "other"; 0: member-free)
        rows = (goal.unsqueeze(1) if not self.M else
                torch.stack([goal, member * self.G + goal, member * self.G + self.OTHER], 1))
        log_pi, hidden = self.model.rows_log_probs_and_hidden(normed, batch["target"], batch["prev"], rows)
        action = batch["action"].unsqueeze(-1)
        nll_rows = -log_pi.gather(2, action.unsqueeze(1).expand(-1, rows.shape[1], 1)).squeeze(-1)  # [B, R]
        hit_rows = log_pi.argmax(-1) == action if hits else None  # [B, R]
        nll, hit = nll_rows[:, 0], hit_rows[:, 0] if hits else None
        member_hit = whole = None
        if self.M:  # the member's read-out on its goal (0: member-free), and its whole row
            nll = torch.where(labelled, nll + torch.where(member > 0, nll_rows[:, 1], 0.0), 0.0)
            as_whole = self._as_whole(batch)
            whole = torch.where(as_whole, nll_rows[:, 2], 0.0)
            if hits:
                hit = hit & labelled
                member_hit = torch.where(as_whole, hit_rows[:, 2], hit_rows[:, 1])[member > 0]
        goal_nll = goal_hit = None
        if self.model.goal_out is not None:
            log_q = self.model.goal_log_q(hidden)  # [B, G]
            goal_nll = -log_q.gather(1, goal.unsqueeze(-1)).squeeze(-1)
            goal_hit = log_q.argmax(-1) == goal if hits else None
            if labelled is not None:
                goal_nll = torch.where(labelled, goal_nll, 0.0)
                goal_hit = goal_hit & labelled if hits else None
        return nll, hit, member_hit, goal_nll, goal_hit, whole

    @staticmethod
    def _as_whole(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """[B] bool: the samples a member's whole row learns from, those of a member whose goals no rule gives (a
        frozen learner; a scripted member's goal rows are it)."""
        return (batch["member"] > 0) & ~batch["known"]

    def step_loss(self, batch: dict[str, torch.Tensor], normed: torch.Tensor) -> torch.Tensor:
        """The loss of one Adam step on a replay mini-batch: the weighted mean cross-entropy of `_losses`, a goal known
        from the partner's own rule counting fully, a hindsight guess `coplayer.hindsight_weight`; with the goal
        read-out, its cross-entropy on the goal labels added with the same weights; with member heads, a member's
        whole row on its every move with weight 1 (who played is known, not guessed)."""
        nll, _, _, goal_nll, _, whole = self._losses(batch, normed, hits=False)
        w = torch.where(batch["known"], 1.0, self.c.hindsight_weight)
        if whole is not None:  # a sample of no known goal counts only in its member's whole row
            w = torch.where(batch["goal"] >= 0, w, 0.0)
            as_whole = self._as_whole(batch).to(w.dtype)
            total = self.c.action_weight * ((w * nll).sum() + whole.sum())
            if goal_nll is not None:
                total = total + (w * goal_nll).sum()
            return total / (w.sum() + as_whole.sum()).clamp(min=1e-8)
        if goal_nll is None:
            return self.c.action_weight * (w * nll).sum() / w.sum().clamp(min=1e-8)
        return (self.c.action_weight * (w * nll).sum() + (w * goal_nll).sum()) / w.sum().clamp(min=1e-8)

    def _online_metrics(self, label: torch.Tensor) -> dict[str, torch.Tensor]:
        """The belief's predictions made during the rollout, scored against what the co-players did."""
        others = self.others_mask()  # [T, E, K, N]: observer k and co-player n alive
        nll = -self.log_pred.gather(-1, self.actions.unsqueeze(2).unsqueeze(-1).expand(-1, -1, self.K, -1, 1)).squeeze(-1)
        hit = (self.log_pred.argmax(-1) == self.actions.unsqueeze(2)).float()  # [T, E, K, N]
        t_ep = self.t_in_episode.view(self.T, self.E, 1, 1).expand_as(others)
        ep = self.episode_idx.view(self.T, self.E, 1, 1).expand_as(others)
        early = others & (t_ep < EARLY_STEPS)

        def mean(x, m):
            return (x * m).sum() / m.sum().clamp(min=1)

        out = {"coplayer_action_acc": mean(hit, others), "coplayer_action_nll": mean(nll, others),
               "coplayer_action_acc_first5": mean(hit, early),
               "coplayer_action_acc_first5_ep1": mean(hit, early & (ep == 0)),
               "coplayer_action_acc_first5_later": mean(hit, early & (ep > 0))}
        glabel = label.unsqueeze(2).expand(-1, -1, self.K, -1)  # [T, E, K, N]
        gmask = others & (glabel >= 0) & (t_ep >= EARLY_STEPS - 1)  # from the 5th step on
        if self.n_named:
            out["coplayer_goal_acc"] = mean((self.belief_probs.argmax(-1) == glabel).float(), gmask)
            brier, ece = calibration(self.belief_probs[gmask], glabel[gmask], torch.ones_like(glabel[gmask],
                                     dtype=torch.bool))
            out["coplayer_goal_brier"], out["coplayer_goal_ece"] = brier, ece
        return out

    def others_mask(self) -> torch.Tensor:
        learner_alive = self.active_all[:, :, self.slots]  # [T, E, K]
        return learner_alive.unsqueeze(-1) & self.belief.others & self.active_all.unsqueeze(2)

    def replay_batches(self, B: int) -> dict[str, torch.Tensor]:
        """Every Adam step's mini-batch of B replay samples, drawn and gathered at once (the same draws as one call
        per step): {name: [coplayer.steps, B, ...]}. With `coplayer.symmetries`, each sample (`rules`: each one a
        scripted partner's rule made, `known`) in a random symmetry of the game (EnvSpec.symmetries), its observation
        and moves alike, drawn from the same generator. Only a rule is known to be symmetric: a frozen learner's
        habits need not be (measured, snowdrift: reflecting every sample cut in-distribution accuracy against the
        frozen learner by 0.04 and 0.16 on two seeds)."""
        idx = torch.randint(self.replay_fill, (self.c.steps, B), generator=self.sampler, device=self.sampler.device)
        batches = {k: v[idx] for k, v in self.replay.items()}
        if self.symmetries:
            obs, moves = augment(self.symmetries, batches["obs"].float(),
                                 {"action": batches["action"], "prev": batches["prev"]}, self.sampler,
                                 where=batches["known"] if self.c.symmetries == "rules" else None)
            batches.update(obs=obs.to(batches["obs"].dtype), **moves)
        return batches

    def update(self) -> dict[str, float]:
        """Push the rollout's labelled pairs into the replay, score the belief's online predictions, then
        `coplayer.steps` Adam steps on replay mini-batches."""
        c = self.c
        with torch.no_grad():
            label = self.labels()
            metrics = self._online_metrics(label)
            fresh = self._pairs(label)
            n = fresh["target"].numel()
            if n:  # on every k-th pair, at most FIT_SAMPLES spread over the rollout: a metric, not worth a full pass
                every = -(-n // FIT_SAMPLES)
                sample = {k: v[::every] for k, v in fresh.items()}
                nll, hit, member_hit, goal_nll, goal_hit, _ = self._losses(sample)
                if self.M:  # a member's moves of no known goal are samples too: the fit is scored on the labelled
                    labelled = sample["goal"] >= 0
                    nll, hit = nll[labelled], hit[labelled]
                    goal_nll, goal_hit = (None, None) if goal_nll is None else (goal_nll[labelled], goal_hit[labelled])
                metrics["coplayer_fit_loss"], metrics["coplayer_fit_acc"] = nll.mean(), hit.float().mean()
                if goal_nll is not None:  # the goal read-out on the new rollout's labels, before training
                    metrics["coplayer_goal_fit_loss"] = goal_nll.mean()
                    metrics["coplayer_goal_fit_acc"] = goal_hit.float().mean()
                if member_hit is not None and member_hit.numel():  # each member by its own read-out
                    metrics["coplayer_fit_acc_member"] = member_hit.float().mean()
            metrics["coplayer_labelled_pairs"] = (fresh["goal"] >= 0).sum().float()
            self._push(fresh)
        if self.trains and self.replay_fill:
            B = min(c.batch_size, self.replay_fill)
            batches = self.replay_batches(B)  # [steps, B, ...]
            # the views and the input LayerNorm read no parameter: once for every step's samples
            normed = self.model.normed_inputs(batches["obs"].float(), batches["target"])
            checks = []
            # one graph per step where compiled (coplayer_step.py), for full mini-batches and outside the audit
            fused = self.fused if B == c.batch_size and self.after_backward is None else None
            for step in range(c.steps):
                batch = {k: v[step] for k, v in batches.items()}
                if fused is not None:
                    loss, norm = fused(batch, normed[step])
                else:
                    loss = self.step_loss(batch, normed[step])
                    self.opt.zero_grad(set_to_none=True)
                    loss.backward()
                    if self.after_backward is not None:
                        self.after_backward()
                    norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(),
                                                          self.cfg.ppo.max_grad_norm or float("inf"), foreach=True)
                    self.opt.step()
                if step == 0:
                    metrics["coplayer_action_loss"] = loss.detach()
                checks.append(loss.detach() + norm)
            bad = (~torch.isfinite(torch.stack(checks))).nonzero()  # one host sync per update, not per step
            if bad.numel():
                raise NonFiniteError(f"non-finite co-player action loss in co-player step {int(bad[0, 0]) + 1}")
        return {k: float(v) for k, v in metrics.items()}

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "opt": self.opt.state_dict(), "sampler": self.sampler.get_state(),
                "replay": {k: v[:self.replay_fill].clone() for k, v in self.replay.items()},
                "replay_pos": self.replay_pos, "belief": self.belief.state_dict(), "step_count": self.step_count,
                "partner": self.partner}

    def load_state_dict(self, sd: dict, with_memory: bool) -> None:
        self.model.load_state_dict(sd["model"])
        self.opt.load_state_dict(sd["opt"])
        restore(self.sampler, sd["sampler"], "co-player replay")
        n = sd["replay"]["target"].shape[0]
        for k, v in sd["replay"].items():
            self.replay[k][:n] = v
        self.replay_fill, self.replay_pos = n, sd["replay_pos"]
        if with_memory:
            self.belief.load_state_dict(sd["belief"])
            self.step_count, self.partner = sd["step_count"], sd["partner"]


class BayesBeliefActor(torch.nn.Module):
    """An actor that reads the goal belief, for acting outside training (evaluation, crossplay): the belief of its
    agents (env slots `slots`) about every slot of the env lives here, not in the hidden state, and is updated by
    `observe(actions, step)` after each env step (the evaluation loops call it); it starts afresh on a batch of
    new envs and carries each episode's prior as in training."""

    def __init__(self, actor, model: GoalPolicy, cfg, slots: list[int] | None = None):
        super().__init__()
        self.actor, self.model, self.cfg = actor, model, cfg
        self.slots = list(range(model.n_slots)) if slots is None else list(slots)
        self.hidden_size = actor.hidden_size
        self.belief: GoalBelief | None = None
        self.active_all = None

    def forward(self, obs, available=None, hidden=None, reset=None, sequence=False, active=None):
        from hypermappo.models.actor import ActorOut

        E = obs.shape[0]
        fresh = reset is not None and bool(reset.all()) and self.active_all is None
        if self.belief is None or self.belief.log_b.shape[0] != E or fresh:
            c = self.cfg.coplayer
            self.belief = GoalBelief(self.model, torch.tensor(self.slots, device=obs.device), self.model.n_slots,
                                     c.prior_weight, c.hazard, c.memory != "episode", c.observe_actions,
                                     c.event_reset, c.online_lr, c.goal_evidence == "corrected", c.evidence_weight)
            self.belief.start(E, obs.device)
            self.active_all = None
        if self.active_all is None:
            self.active_all = torch.ones(E, self.model.n_slots, dtype=torch.bool, device=obs.device)
        features, _ = self.belief.begin(obs)
        out = self.actor(torch.cat([obs, features], -1), available, hidden, reset, active=active)
        return ActorOut(out.dist, out.hidden, out.aux)

    @torch.no_grad()
    def observe(self, actions: torch.Tensor, step) -> None:
        """actions [E, N] taken by every slot of the env, `step` the EnvStep they led to."""
        self.belief.observe(actions.long(), self.active_all, step.terminated | step.truncated,
                            step.extras.get("goal_event"))
        self.active_all = step.active

    def done(self) -> None:
        """The evaluation is over: the next forward starts a fresh belief."""
        self.belief = self.active_all = None
