"""Scripted predators and prey for MPE simple_tag: co-players of several kinds for the zero-sum held-out protocol.

Every rule acts for any slot: an adversary slot chases, a good-agent slot flees, so one population can mix them
over predator and prey seats alike (`draw: slot`). Discrete actions of mpe: 0 no-op, 1 -x, 2 +x, 3 -y, 4 +y. Goals
(`ctx.goal`, indices into the env's `goal_names`): an adversary writes `chase_g` for the prey it goes for, a good
agent the `flee_<direction>` of the move it makes (envs/mpe/simple_tag.py labels learned agents the same way).

    tag_nearest     adversary: to the nearest prey; prey: away from the nearest adversary
    tag_intercept   adversary: to where the nearest prey will be (its position + LEAD x its velocity);
                    prey: away from the adversaries' centroid
    tag_target      adversary: to prey `target` (param, default 0) wherever it is; prey: away from adversary `target`

Prey keep off the walls (mpe2's boundary penalty grows beyond 0.9): a coordinate beyond WALL pulls its move inward.
"""

from __future__ import annotations

import torch

from hypermappo.envs.mpe.simple_tag import SimpleTagVecEnv, flee_goal
from hypermappo.envs.vec import EnvStep
from hypermappo.errors import UserError
from hypermappo.policies.scripted import ScriptedContext, scripted

LEAD = 0.5  # seconds of the prey's velocity an interceptor aims ahead
BRAKE = 0.3  # aim at target - BRAKE x own velocity: no overshooting
WALL = 0.8


def _env(ctx: ScriptedContext, name: str) -> SimpleTagVecEnv:
    env = ctx.env
    if not isinstance(env, SimpleTagVecEnv):
        raise UserError(f"scripted policy {name!r} plays MPE simple_tag (env 'mpe:simple_tag'); this env is "
                        f"{type(env).__name__}")
    if env.continuous_actions:
        raise UserError(f"scripted policy {name!r} needs discrete actions; this env has continuous_actions=True")
    return env


def _move(aim: torch.Tensor) -> torch.Tensor:
    """aim [..., 2] -> the discrete move along its larger axis [...]."""
    x, y = aim.unbind(-1)
    return torch.where(x.abs() >= y.abs(), torch.where(x < 0, 1, 2), torch.where(y < 0, 3, 4)).long()


def _rule(step: EnvStep, ctx: ScriptedContext, name: str, kind: str) -> torch.Tensor:
    env = _env(ctx, name)
    V, A = env.n_adversaries, env.num_agents
    pos = env.world.pos[:A].permute(2, 0, 1)  # [E, A, 2]
    vel = env.world.vel[:A].permute(2, 0, 1)
    me, my_vel = pos[:, ctx.slots], vel[:, ctx.slots]  # [E, K, 2]
    hunters, prey, prey_vel = pos[:, :V], pos[:, V:], vel[:, V:]
    E, K = me.shape[:2]
    target = int(ctx.params.get("target", 0))
    # adversaries: which prey, and where to aim
    gap = torch.cdist(me, prey)  # [E, K, G]
    chosen = gap.argmin(-1) if kind != "target" else torch.full((E, K), min(target, prey.shape[1] - 1),
                                                                 device=me.device)
    prey_at = prey.gather(1, chosen.unsqueeze(-1).expand(-1, -1, 2))  # [E, K, 2]
    if kind == "intercept":
        prey_at = prey_at + LEAD * prey_vel.gather(1, chosen.unsqueeze(-1).expand(-1, -1, 2))
    chase = _move(prey_at - me - BRAKE * my_vel)
    # prey: away from a threat
    if kind == "intercept":
        threat = hunters.mean(1, keepdim=True).expand(E, K, 2)
    else:
        which = torch.cdist(me, hunters).argmin(-1) if kind == "nearest" else \
            torch.full((E, K), min(target, V - 1), device=me.device)
        threat = hunters.gather(1, which.unsqueeze(-1).expand(-1, -1, 2))
    away = me - threat
    away = away + torch.where(me.abs() > WALL, -me.sign() * (me.abs() - WALL) * 10, 0.0)  # off the walls
    flee = _move(away)
    is_prey = (ctx.slots >= V).view(1, K)
    actions = torch.where(is_prey, flee, chase)
    moves = torch.tensor([[0.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [0.0, -1.0], [0.0, 1.0]], device=me.device)
    ctx.goal = torch.where(is_prey, flee_goal(moves[flee], env.n_good), chosen).long()
    active = step.active[:, ctx.slots]
    ctx.goal = torch.where(active, ctx.goal, -1)
    return torch.where(active, actions, 0)


@scripted("tag_nearest")
def tag_nearest(step: EnvStep, ctx: ScriptedContext) -> torch.Tensor:
    """Adversary: chase the nearest prey. Prey: flee the nearest adversary."""
    return _rule(step, ctx, "tag_nearest", "nearest")


@scripted("tag_intercept")
def tag_intercept(step: EnvStep, ctx: ScriptedContext) -> torch.Tensor:
    """Adversary: aim ahead of the nearest prey. Prey: flee the adversaries' centroid."""
    return _rule(step, ctx, "tag_intercept", "intercept")


@scripted("tag_target")
def tag_target(step: EnvStep, ctx: ScriptedContext) -> torch.Tensor:
    """Adversary: chase prey `target`. Prey: flee adversary `target` (params: target, default 0)."""
    return _rule(step, ctx, "tag_target", "target")
