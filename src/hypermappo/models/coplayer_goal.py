"""Goal-conditioned co-player policy and the Bayesian goal belief over it (HOP's opponent model, batched).

The model pi_psi(a_j | o_i, j, g, a_j_prev) says what co-player j does when it pursues goal g, as seen from the
learner's own observation o_i, given j's identity and its previous (public) action. Goals are the env's
`goal_names` plus one "other" goal for behaviour that fits none of them (trained here on moves labelled "no
goal"; the belief plays it as the partner's own move counts, algos/coplayer_bayes.GoalBelief); every goal's policy
is mixed with a uniform floor, so no observed action can drive a goal's likelihood to zero.

The belief over each co-player's goal is a tensor of log-probabilities `[E, K, N, G]` (envs, learner agents,
agent slots, goals) updated in log space after every observed action:

    b_t(g)  ∝  b_{t-1}(g) * pi(a_{j,t-1} | o_{i,t-1}, j, g, a_{j,t-2})^w         (`bayes_update`; w = 1: Bayes)
    b_t     <- (1 - h) b_t + h * prior                                          (`switch`: a goal change, hazard h)

and carried into the next episode as its prior, `alpha * prior + (1 - alpha) * posterior` (`carry`). Predictions:
the partner's next action `sum_g b(g) pi(a | ..., g)` (`predictive`), its goal `argmax_g b(g)`, or with the goal
read-out the named goals' share of b in proportion to b(g) q(g | o_i, j, a_prev) (`current_goal`).
The pure functions below are the whole Bayes arithmetic (tested against hand-computed updates); the class is
the network.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from hypermappo.kernels import window_view


def bayes_update(log_belief: torch.Tensor, log_lik: torch.Tensor, weight: float = 1.0) -> torch.Tensor:
    """log b [..., G] + weight * log pi(observed action | g) [..., G] -> the normalised log posterior [..., G].
    `weight` < 1: a tempered (power) likelihood, b ∝ b_prev * pi^weight: each move counts as a fraction of one,
    the usual remedy where the likelihoods are misspecified (a partner that pursues a goal by moves of its own)."""
    post = log_belief + (log_lik if weight == 1.0 else weight * log_lik)
    return post - post.logsumexp(-1, keepdim=True)


def switch(log_belief: torch.Tensor, prior: torch.Tensor, hazard: float) -> torch.Tensor:
    """A goal change with probability `hazard` per step, to a goal drawn from `prior` [..., G] (probabilities)."""
    if hazard <= 0:
        return log_belief
    return ((1.0 - hazard) * log_belief.exp() + hazard * prior).clamp(min=1e-30).log()


def carry(prior: torch.Tensor, log_posterior: torch.Tensor, alpha: float) -> torch.Tensor:
    """The next episode's prior: alpha * (the last prior) + (1 - alpha) * (the episode's final posterior)."""
    return alpha * prior + (1.0 - alpha) * log_posterior.exp()


def current_goal(goal_log_b: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """The goal pursued now, log probabilities [..., G] from the belief log b [..., G] (which goal explains the
    partner's moves) and the read-out log q [..., G] (which goal a partner takes up in this state): "other" (the last
    goal: moves no goal explains, a kind of partner rather than a target) keeps its posterior b(other); the named
    goals share the rest in proportion to b(g) q(g). (A product over every goal would let the training partners'
    states outvote the moves of a partner unlike them: a random mover is "other" whatever the state.)"""
    named = (goal_log_b[..., :-1] + log_q[..., :-1]).log_softmax(-1) + goal_log_b[..., :-1].logsumexp(-1, keepdim=True)
    return torch.cat([named, goal_log_b[..., -1:]], -1)


def predictive(log_belief: torch.Tensor, log_pi: torch.Tensor) -> torch.Tensor:
    """log b [..., G], log pi [..., G, A] -> log p(a) = log sum_g b(g) pi(a | g): [..., A]."""
    return (log_belief.unsqueeze(-1) + log_pi).logsumexp(-2)


class GoalPolicy(nn.Module):
    """pi_psi(a_j | o_i, j, g, a_j_prev) for every goal g at once: logits [..., G, A].

    The first layer is the sum of three parts (the same function as a linear layer on [o_i, one-hot j, one-hot
    a_prev]), so the observation's product is computed once per learner agent, not once per co-player."""

    def __init__(self, obs_dim: int, n_slots: int, n_actions: int, n_goals: int, hidden: int, floor: float,
                 identity_features: list[int] | None = None, view=None, n_members: int = 0,
                 goal_readout: bool = False):
        super().__init__()
        # EnvSpec.coplayer_view or None: co-player j's behaviour is read from j's own position (its view, as far as
        # the observer's observation shows it), so one goal policy serves every seat, the learner's own included
        # (through a C kernel where the library has one for the env's view: kernels/window_view.py)
        self.view = window_view.fast(view) if view is not None else None
        keep = torch.ones(obs_dim)
        keep[list(identity_features or [])] = 0.0  # who is observing: not an input (see EnvSpec.identity_features)
        self.register_buffer("keep", keep, persistent=False)
        self.obs_dim, self.n_slots, self.n_actions, self.n_goals, self.floor = obs_dim, n_slots, n_actions, n_goals, floor
        self.norm = nn.LayerNorm(obs_dim, elementwise_affine=False)
        self.obs_in = nn.Linear(obs_dim, hidden)
        # which co-player, relative to the observer ((j - i) mod N): a behaviour seen from one seat is recognised
        # from another (the learner's own transitions, seen from its partner's seat, train the model of a partner)
        self.target_in = nn.Embedding(n_slots, hidden)
        self.prev_in = nn.Embedding(n_actions + 1, hidden)  # its previous action; index A = none seen yet
        self.body = nn.Sequential(nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_goals * n_actions))
        # member heads (coplayer.member_heads): per member of the training populations, an offset on every goal's
        # logits read from the same last hidden layer (that member's own way of pursuing each goal); "read-out" 0
        # is the member-free one, for partners never met
        self.n_members = n_members
        self.member_out = nn.Linear(hidden, n_members * n_goals * n_actions) if n_members else None
        if self.member_out is not None:  # every member starts as the member-free read-out
            nn.init.zeros_(self.member_out.weight)
            nn.init.zeros_(self.member_out.bias)
        # goal read-out (coplayer.goal_readout=state): q(g | o_i, j, a_prev) [..., G] from the same last hidden layer,
        # trained on the goal labels: which goal the co-player pursues now, from what the observer sees (made last:
        # the other layers' initial weights are those of a model without it)
        self.goal_out = nn.Linear(hidden, n_goals) if goal_readout else None

    def _log_probs(self, first: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The first layer's output -> (log pi [..., G, A], the last hidden layer [..., H], for a caller's own
        read-out: GoalBelief's online correction)."""
        hidden = self.body[:-1](first)
        logits = self.body[-1](hidden).unflatten(-1, (self.n_goals, self.n_actions))
        if self.member_out is not None:  # [..., (1 + M) * G, A]: the member-free read-out, then each member's
            offsets = self.member_out(hidden).unflatten(-1, (self.n_members, self.n_goals, self.n_actions))
            logits = torch.cat([logits.unsqueeze(-3), logits.unsqueeze(-3) + offsets], -3).flatten(-3, -2)
        return self._floored(logits), hidden

    def _floored(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits [..., A] -> log((1 - floor) * softmax + floor / A), stably."""
        logp = logits.log_softmax(-1)
        if self.floor > 0:
            logp = torch.logaddexp(logp + math.log1p(-self.floor),
                                   torch.full_like(logp, math.log(self.floor / self.n_actions)))
        return logp

    def rows_log_probs_and_hidden(self, normed: torch.Tensor, target: torch.Tensor, prev: torch.Tensor,
                                  rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`log_probs_and_hidden(..., normed)` at the read-out rows `rows` [B, R] only (row r * G + g: read-out r's goal
        g, r = 0 the member-free one): log pi [B, R, A] (the same values as gathering the whole output) and the last
        hidden layer [B, H]. Why: training reads two or three rows per sample, while the whole output of the member
        heads is (1 + M) G rows; normalising every row cost about as much as the rest of a training step."""
        hidden = self.body[:-1](self._first_layer(normed, target, prev, normed=True))
        G, A = self.n_goals, self.n_actions
        base = self.body[-1](hidden).unflatten(-1, (G, A))  # [B, G, A]
        logits = base.gather(1, (rows % G).unsqueeze(-1).expand(*rows.shape, A))
        if self.member_out is not None:
            offsets = self.member_out(hidden).unflatten(-1, (self.n_members * G, A))  # [B, M G, A]
            mine = offsets.gather(1, (rows - G).clamp(min=0).unsqueeze(-1).expand(*rows.shape, A))
            logits = torch.where((rows >= G).unsqueeze(-1), logits + mine, logits)
        return self._floored(logits), hidden

    def goal_log_q(self, hidden: torch.Tensor) -> torch.Tensor:
        """The goal read-out's log q(g | o_i, j, a_prev) [..., G] from the last hidden layer (`goal_out`)."""
        return self.goal_out(hidden).log_softmax(-1)

    def _first_layer(self, obs: torch.Tensor, target: torch.Tensor, prev: torch.Tensor,
                     normed: bool = False) -> torch.Tensor:
        """obs_in(norm(obs)) + target_in(target) + prev_in(prev): [..., H] (`normed`: obs is norm(obs) already,
        `normed_inputs`). The two embeddings and obs_in's bias are one small table [N * (A + 1), H] read once per
        row, added by the product itself where obs has a row per (target, prev) (one pass over the [rows, H]
        activations instead of four)."""
        H = self.obs_in.out_features
        table = (self.target_in.weight[:, None] + self.prev_in.weight[None] + self.obs_in.bias).reshape(-1, H)
        index = target * (self.n_actions + 1) + prev
        if torch.compiler.is_compiling():
            # the same rows as a product with the one-hot index (exact: one 1 per row): its gradient is a product
            # too. F.embedding's gradient compiles to a scatter-add whose parallel loop adds rows in the order the
            # threads reach them, so a compiled run with more than one thread was not the same run twice
            rows = F.one_hot(index, table.shape[0]).to(table.dtype) @ table
        else:
            rows = F.embedding(index, table)  # [..., H]
        x = obs if normed else self.norm(obs * self.keep)
        if x.shape[:-1] != rows.shape[:-1]:  # one observation per observer, broadcast over its co-players
            return F.linear(x, self.obs_in.weight) + rows
        return torch.addmm(rows.reshape(-1, H), x.reshape(-1, x.shape[-1]), self.obs_in.weight.t()).view(rows.shape)

    def log_probs(self, obs: torch.Tensor, target: torch.Tensor, prev: torch.Tensor,
                  normed: torch.Tensor | None = None) -> torch.Tensor:
        """obs [B, D], target [B] co-player slots relative to the observer, prev [B] previous actions (A: none)
        -> log pi [B, G, A] (with member heads: [B, (1 + M) * G, A], the member-free read-out first). `normed`:
        `normed_inputs(obs, target)`, computed earlier (obs is then not read)."""
        return self.log_probs_and_hidden(obs, target, prev, normed)[0]

    def log_probs_and_hidden(self, obs: torch.Tensor, target: torch.Tensor, prev: torch.Tensor,
                             normed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """`log_probs` and the last hidden layer [B, H] (the goal read-out's input)."""
        if normed is None:
            normed = self.normed_inputs(obs, target)
        return self._log_probs(self._first_layer(normed, target, prev, normed=True))

    def normed_inputs(self, obs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The first layer's parameter-free part: the co-player's view (`view`), the observer's identity features
        dropped, LayerNorm without affine: [..., D]. No parameter is read, so a training loop computes it once for
        every step's samples rather than once per step."""
        if self.view is not None:
            obs = self.view(obs, target)
        return self.norm(obs * self.keep)

    def all_coplayers(self, obs: torch.Tensor, prev: torch.Tensor, slots: torch.Tensor,
                      adjust=None) -> torch.Tensor:
        """obs [E, K, D] (the learner agents' own, in env slots `slots` [K]), prev [E, N] (every slot's previous
        action, A: none) -> log pi [E, K, N, G, A] for every slot n as a co-player (computed for the co-players
        only; a learner's own slot holds the uniform policy, which nothing reads). `adjust(log_pi, hidden)`, if
        given, rewrites the co-players' log pi [E, K, N - 1, G, A] (in `coplayer_seats` order) from the last hidden
        layer [E, K, N - 1, H] before they are placed (GoalBelief's online correction), at no cost for the
        learner's own slots."""
        e, k, n = obs.shape[0], obs.shape[1], self.n_slots
        seat = coplayer_seats(slots, n)  # [K, N - 1] the co-players' env slots
        logp = self.coplayer_log_probs(obs, prev, slots, adjust)  # [E, K, N - 1, G, A]
        out = logp.new_full((e, k, n, *logp.shape[-2:]), -math.log(self.n_actions))
        return out.scatter(2, seat.view(1, k, n - 1, 1, 1).expand_as(logp), logp)

    def coplayer_log_probs(self, obs: torch.Tensor, prev: torch.Tensor, slots: torch.Tensor,
                           adjust=None) -> torch.Tensor:
        """As `all_coplayers`, for the co-players only, in `coplayer_seats` order: log pi [E, K, N - 1, G, A] (what
        the belief computes with: no work for the learners' own slots)."""
        logp, hidden = self.net(*self.coplayer_inputs(obs, prev, slots))  # [E, K, N - 1, G, A], [E, K, N - 1, H]
        if adjust is not None:
            logp = adjust(logp, hidden)
        return logp

    def coplayer_inputs(self, obs: torch.Tensor, prev: torch.Tensor, slots: torch.Tensor):
        """obs [E, K, D], prev [E, N] as `all_coplayers` -> what `net` reads of the co-players: (their views
        [E, K, N - 1, D] (the learner's own observation, [E, K, 1, D], without `view`), their offsets from the
        observer [E, K, N - 1], their previous actions [E, K, N - 1])."""
        e, k, n, d = obs.shape[0], obs.shape[1], self.n_slots, obs.shape[-1]
        rel = torch.arange(1, n, device=obs.device)  # [N - 1] the co-players, relative to their observer
        seat = coplayer_seats(slots, n)  # [K, N - 1] their env slots
        target = rel.expand(e, k, n - 1)
        if self.view is None:  # one product per learner agent
            seen = obs.unsqueeze(2)  # [E, K, 1, D]
        else:  # one per (learner agent, co-player): each co-player's own view
            seen = self.view(obs.unsqueeze(2).expand(e, k, n - 1, d), target)  # [E, K, N - 1, D]
        return seen, target, prev[:, seat]

    def net(self, seen: torch.Tensor, target: torch.Tensor, prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The network from the co-players' inputs (`coplayer_inputs`) -> (log pi [..., G, A], the last hidden
        layer [..., H])."""
        return self._log_probs(self._first_layer(seen, target, prev))


def coplayer_seats(slots: torch.Tensor, n: int) -> torch.Tensor:
    """[K, N - 1]: the env slots of learner agent k's co-players, in order of their offset from it ((j - k) mod N)."""
    return (slots.unsqueeze(-1) + torch.arange(1, n, device=slots.device)) % n


def goal_labels(n_named: int) -> int:
    """Goals the model has for an env with `n_named` goal_names: those plus "other"."""
    return n_named + 1


def one_hot_mask(slots: torch.Tensor, n: int) -> torch.Tensor:
    """[K, N] bool: slot n is a co-player of learner agent k (every slot but its own)."""
    return ~F.one_hot(slots, n).bool()
