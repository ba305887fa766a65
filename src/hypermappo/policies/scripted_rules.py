"""Env-specific scripted policies: rule-based partners for the stag hunt, coin game, MPE simple_spread, matrix games.

Each rule reads the batched env's own state tensors (positions, prey alive, ...) and returns actions `[E, K]`
for its slots with a fixed number of tensor ops: no loop over envs or agents. Dead slots take the no-op 0.
Goal-directed rules write their target into `ctx.goal` ([E, K] index into `env.spec.goal_names`, -1 none):
`staghunt_stag` "stag", `staghunt_hare` "hare" (the snowdrift payoff uses the same rules), `staghunt_follow`
"hunter", `coin_cooperative` "own_coin", `coin_selfish` "own_coin" or "other_coin"
by the colour of the coin it walks to. Registered on import; `hypermappo.policies.scripted` imports this module,
so `get_scripted("staghunt_stag")` finds them without the user importing anything.

    staghunt_hare            walk to the nearest hare (Manhattan distance, ties to the lower prey index)
    staghunt_stag            walk to the nearest stag
    staghunt_follow          walk to the nearest other hunter
    coin_cooperative         coin game: walk to the nearest coin of my colour only (stay when there is none;
                             its goal stays "own_coin" while it waits)
    coin_selfish             coin game: walk to the nearest coin of any colour
    spread_nearest_landmark  go to the nearest landmark no other agent is nearer to (greedy "nearest free
                             landmark"); agents with none go to the nearest landmark nobody else has picked
    matrix_mixed             a fixed mixed strategy, params {probs: [p_0, ..., p_{A-1}]}, sampled with ctx.generator

The grid rules (stag hunt, coin game) take `path`: `larger` (default: along the axis with the larger gap), `rows`
(rows until aligned, then columns), `cols`, or `any` (each step, rows or columns at random while both gaps are
open, drawn from ctx.generator): the same goal by other moves, so a held-out partner can pursue a known goal in a way
no training partner did (`scripted:staghunt_stag@path=cols`), and a training partner can show every shortest way to
its goal (`path=any`) instead of one habit that a co-player model would take for the goal itself.
"""

from __future__ import annotations

import math
import numbers

import torch

from hypermappo.envs.coingame import OTHER_GOAL, OWN_GOAL, CoinGameVecEnv
from hypermappo.envs.matrix import MatrixGameVecEnv
from hypermappo.envs.mpe_torch import SimpleSpreadVecEnv
from hypermappo.envs.staghunt import HARE_GOAL, HUNTER_GOAL, STAG_GOAL, StagHuntVecEnv
from hypermappo.envs.vec import EnvStep
from hypermappo.errors import UserError
from hypermappo.policies.scripted import ScriptedContext, scripted


def _require(env, cls, policy: str, env_name: str):
    if not isinstance(env, cls):
        raise UserError(f"scripted policy {policy!r} plays {env_name}; this env is {type(env).__name__}")
    return env


def _noop_dead(step: EnvStep, slots: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Dead (inactive) slots take the no-op 0: [E, K]."""
    return torch.where(step.active[:, slots], actions, torch.zeros_like(actions))


def _masked_argmin(dist: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """dist [..., M], valid [..., M] -> (index of the smallest valid entry [...], any valid [...]); with no
    candidates at all (M = 0, e.g. the hare rule where the env has no hares) index 0 and no target."""
    if dist.shape[-1] == 0:
        return torch.zeros(dist.shape[:-1], dtype=torch.long, device=dist.device), valid.any(-1)
    return dist.masked_fill(~valid, math.inf).argmin(-1), valid.any(-1)


# ---------------------------------------------------------------- stag hunt
_BIG = 1 << 20  # larger than any Manhattan distance on a grid


PATHS = ("larger", "rows", "cols", "any")  # the grid rules' `path` param: which way they walk to the same target


def _path(ctx: ScriptedContext, name: str) -> str | torch.Tensor:
    """The rule's `path`; for "any", this step's coin flips [E, K] (True: rows first), one per slot and env."""
    path = ctx.params.get("path", "larger")
    if path not in PATHS:
        raise UserError(f"scripted policy {name!r}: params path={path!r} is invalid; expected one of {list(PATHS)}")
    if path == "any":
        E, K = ctx.env.num_envs, ctx.slots.numel()
        return (torch.rand(E, K, generator=ctx.generator) < 0.5).to(ctx.slots.device)
    return path


def _grid_step_towards(pos: torch.Tensor, target: torch.Tensor, has_target: torch.Tensor,
                       path: str | torch.Tensor = "larger") -> torch.Tensor:
    """One grid move from pos [E, K, 2] towards target [E, K, 2] (row, col): along the axis with the larger
    gap (rows first on ties; path="rows": rows until aligned, then columns; "cols": columns first: the same goal
    reached by other moves; a bool tensor [E, K]: rows first where True, while both gaps are open: `path=any`).
    Actions: 0 stay, 1 up, 2 down, 3 left, 4 right. No target or arrived: stay."""
    d_row, d_col = (target - pos).unbind(-1)  # [E, K] each
    vertical = torch.where(d_row < 0, 1, 2)
    horizontal = torch.where(d_col < 0, 3, 4)
    if isinstance(path, torch.Tensor):
        rows_now = (d_row != 0) & (path | (d_col == 0))
    else:
        rows_now = {"larger": d_row.abs() >= d_col.abs(), "rows": d_row != 0, "cols": d_col == 0}[path]
    move = torch.where(rows_now, vertical, horizontal)
    arrived = (d_row == 0) & (d_col == 0)
    return torch.where(arrived | ~has_target, 0, move).long()


def _walk_to_nearest(me: torch.Tensor, targets: torch.Tensor, valid: torch.Tensor,
                     path: str | torch.Tensor = "larger"):
    """Walk from me [E, K, 2] to the nearest valid target. targets [E, M, 2], valid [E, M] or [E, K, M]
    -> (actions [E, K], chosen target index [E, K], has a target [E, K])."""
    dist = (me.unsqueeze(2) - targets.unsqueeze(1)).abs().sum(-1)  # [E, K, M]
    valid = valid.unsqueeze(1).expand_as(dist) if valid.dim() == 2 else valid
    nearest, has_target = _masked_argmin(dist.float(), valid)  # [E, K]
    if targets.shape[1] == 0:  # no such target in this game: stay
        return torch.zeros_like(nearest), nearest, has_target
    goal = targets.gather(1, nearest.unsqueeze(-1).expand(-1, -1, 2))  # [E, K, 2]
    return _grid_step_towards(me, goal, has_target, path), nearest, has_target


def _set_goal(step: EnvStep, ctx: ScriptedContext, goal: torch.Tensor, has_target: torch.Tensor) -> None:
    """ctx.goal [E, K]: the target's goal index, -1 without a target or for dead slots."""
    ctx.goal = torch.where(has_target & step.active[:, ctx.slots], goal, -1).long()


def _prey_rule(step: EnvStep, ctx: ScriptedContext, name: str, stags: bool) -> torch.Tensor:
    env = _require(ctx.env, StagHuntVecEnv, name, "the stag hunt (env 'staghunt')")
    part = slice(0, env.n_stags) if stags else slice(env.n_stags, env.n_prey)  # prey holds stags, then hares
    actions, _, has_target = _walk_to_nearest(env.hunters[:, ctx.slots], env.prey[:, part], env.prey_alive[:, part],
                                              _path(ctx, name))
    _set_goal(step, ctx, torch.full_like(actions, STAG_GOAL if stags else HARE_GOAL), has_target)
    return _noop_dead(step, ctx.slots, actions)


@scripted("staghunt_hare")
def staghunt_hare(step: EnvStep, ctx: ScriptedContext) -> torch.Tensor:
    """Walk to the nearest hare (stay when none is left)."""
    return _prey_rule(step, ctx, "staghunt_hare", stags=False)


@scripted("staghunt_stag")
def staghunt_stag(step: EnvStep, ctx: ScriptedContext) -> torch.Tensor:
    """Walk to the nearest stag and wait on it for a partner (stay when none is left)."""
    return _prey_rule(step, ctx, "staghunt_stag", stags=True)


@scripted("staghunt_follow")
def staghunt_follow(step: EnvStep, ctx: ScriptedContext) -> torch.Tensor:
    """Walk to the nearest other hunter (stay when alone)."""
    env = _require(ctx.env, StagHuntVecEnv, "staghunt_follow", "the stag hunt (env 'staghunt')")
    others = torch.arange(env.n_hunters, device=env.device) != ctx.slots.unsqueeze(-1)  # [K, H]: not itself
    valid = others.unsqueeze(0).expand(env.num_envs, -1, -1)  # [E, K, H]
    actions, _, has_target = _walk_to_nearest(env.hunters[:, ctx.slots], env.hunters, valid,
                                              _path(ctx, "staghunt_follow"))
    _set_goal(step, ctx, torch.full_like(actions, HUNTER_GOAL), has_target)  # it goes for a hunter
    return _noop_dead(step, ctx.slots, actions)


# ---------------------------------------------------------------- coin game
def _coin_rule(step: EnvStep, ctx: ScriptedContext, name: str, own_only: bool) -> torch.Tensor:
    env = _require(ctx.env, CoinGameVecEnv, name, "the coin game (env 'coingame')")
    own = env.coin_colour.unsqueeze(1) == ctx.slots.view(1, -1, 1)  # [E, K, C]: slot i owns colour i
    valid = own if own_only else torch.ones_like(own)
    actions, nearest, has_target = _walk_to_nearest(env.players[:, ctx.slots], env.coins, valid, _path(ctx, name))
    goal = torch.where(own.gather(2, nearest.unsqueeze(-1)).squeeze(-1), OWN_GOAL, OTHER_GOAL)  # [E, K]
    if own_only:  # a cooperative player waiting for a coin of its colour still pursues its own coins: waiting is
        # how it does (labelled "no goal", its stay would read as random play to a model of the others)
        goal, has_target = torch.full_like(goal, OWN_GOAL), torch.ones_like(has_target)
    _set_goal(step, ctx, goal, has_target)
    return _noop_dead(step, ctx.slots, actions)


@scripted("coin_cooperative")
def coin_cooperative(step: EnvStep, ctx: ScriptedContext) -> torch.Tensor:
    """Walk to the nearest coin of my own colour; leave the other's coins alone (stay when there is none)."""
    return _coin_rule(step, ctx, "coin_cooperative", own_only=True)


@scripted("coin_selfish")
def coin_selfish(step: EnvStep, ctx: ScriptedContext) -> torch.Tensor:
    """Walk to the nearest coin, whatever its colour."""
    return _coin_rule(step, ctx, "coin_selfish", own_only=False)


# ---------------------------------------------------------------- MPE simple_spread
_SPREAD_VELOCITY_LEAD = 0.5  # aim at target - 0.5 * velocity: brakes before arriving instead of overshooting
_SPREAD_DEADBAND = 0.02  # closer than this on both axes: no-op


@scripted("spread_nearest_landmark")
def spread_nearest_landmark(step: EnvStep, ctx: ScriptedContext) -> torch.Tensor:
    """Go to the nearest landmark that no other agent is nearer to; an agent that is nearest to none goes to the
    nearest landmark no agent has picked. Discrete actions of mpe: 0 no-op, 1 -x, 2 +x, 3 -y, 4 +y."""
    env = _require(ctx.env, SimpleSpreadVecEnv, "spread_nearest_landmark", "MPE simple_spread (env 'mpe:simple_spread')")
    if env.continuous_actions:
        raise UserError("scripted policy 'spread_nearest_landmark' needs discrete actions; this env has "
                        "continuous_actions=True")
    agents, landmarks = env.agent_pos, env.landmark_pos  # [E, N, 2], [E, L, 2]
    dist = torch.cdist(agents, landmarks)  # [E, N, L]
    free = dist <= dist.amin(1, keepdim=True)  # [E, N, L]: no other agent is nearer to landmark l
    first, has_free = _masked_argmin(dist, free)  # [E, N]
    picked = (torch.nn.functional.one_hot(first, landmarks.shape[1]).bool() & has_free.unsqueeze(-1)).any(1)  # [E, L]
    fallback, _ = _masked_argmin(dist, ~picked.unsqueeze(1).expand_as(dist))  # [E, N] (some landmark is never picked)
    choice = torch.where(has_free, first, fallback)[:, ctx.slots]  # [E, K]
    goal = landmarks.gather(1, choice.unsqueeze(-1).expand(-1, -1, 2))  # [E, K, 2]
    aim = goal - agents[:, ctx.slots] - _SPREAD_VELOCITY_LEAD * env.agent_vel[:, ctx.slots]  # [E, K, 2]
    x, y = aim.unbind(-1)
    move = torch.where(x.abs() > y.abs(), torch.where(x > 0, 2, 1), torch.where(y > 0, 4, 3))
    actions = torch.where(aim.abs().amax(-1) < _SPREAD_DEADBAND, 0, move).long()
    return _noop_dead(step, ctx.slots, actions)


# ---------------------------------------------------------------- matrix games
def _mixed_probs(params: dict, n_actions: int) -> torch.Tensor:
    probs = params.get("probs")
    ok = isinstance(probs, (list, tuple)) and len(probs) == n_actions and all(
        isinstance(p, numbers.Real) and not isinstance(p, bool) and math.isfinite(p) and p >= 0 for p in probs)
    if not ok or abs(sum(probs) - 1.0) > 1e-6:
        raise UserError(f"scripted policy 'matrix_mixed': params probs={probs!r} is invalid; expected {n_actions} "
                        f"non-negative numbers summing to 1")
    return torch.tensor([float(p) for p in probs])


@scripted("matrix_mixed")
def matrix_mixed(step: EnvStep, ctx: ScriptedContext) -> torch.Tensor:
    """Every step each slot draws its action from the fixed distribution params {probs: [...]}."""
    env = _require(ctx.env, MatrixGameVecEnv, "matrix_mixed", "matrix games (env 'matrix:<game>')")
    probs = _mixed_probs(ctx.params, env.a)
    E, K = step.obs.shape[0], ctx.slots.numel()
    draws = torch.multinomial(probs.expand(E * K, -1), 1, replacement=True, generator=ctx.generator)  # [E*K, 1]
    return _noop_dead(step, ctx.slots, draws.view(E, K).to(step.obs.device))
