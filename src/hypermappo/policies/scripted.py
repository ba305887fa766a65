"""Scripted (rule-based) policies: batched functions from an env step to actions, registered by name.

A scripted policy acts for a set of agent slots in every env at once and has no parameters to train:

    @scripted("always_left")
    def always_left(step: EnvStep, ctx: ScriptedContext) -> torch.Tensor:
        return torch.zeros(step.obs.shape[0], len(ctx.slots), dtype=torch.long, device=step.obs.device)

`step` is the EnvStep every slot sees (obs `[E, N, D]`, `available_actions`, `active`, ...); `ctx.slots` are the
agent slots this policy acts for (`[K]`), `ctx.env` the batched env (rules may read its state), `ctx.generator` a
torch.Generator seeded from the run's seed, `ctx.params` the policy's keyword settings from the config. The
function returns actions `[E, K]` (Discrete, int64) in the layout of the VecEnv contract. A user's own policy
is registered with the decorator, or named in a config as `module.path:function`. Env-specific rules
(`staghunt_hare`, `staghunt_stag`, `staghunt_follow`, `coin_cooperative`, `coin_selfish`, `spread_nearest_landmark`,
`matrix_mixed`) live in
`scripted_rules.py` and are registered when this module is imported.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from typing import Callable

import torch

from hypermappo.envs.vec import EnvStep
from hypermappo.errors import UserError


@dataclass
class ScriptedContext:
    env: object  # the VecEnv the policy acts in
    slots: torch.Tensor  # [K] int64: the agent slots this policy acts for
    generator: torch.Generator  # seeded from the run's seed: scripted randomness is reproducible
    params: dict = field(default_factory=dict)  # keyword settings from the config, e.g. {"action": 2}
    # goal-directed rules write their current target here at every act: [E, K] int64 index into the env's
    # `EnvSpec.goal_names` (-1 = no goal this step); co-player models train on it as the true goal label
    goal: torch.Tensor | None = None


ScriptedFn = Callable[[EnvStep, ScriptedContext], torch.Tensor]
SCRIPTED: dict[str, ScriptedFn] = {}


def scripted(name: str):
    """Decorator: register a scripted policy under `name`. Every registered policy also takes the param `eps`: with
    probability eps per step and slot its move is replaced by a uniformly random one (an epsilon-noisy variant of
    the same rule, its goal unchanged; drawn from ctx.generator, so nothing is drawn without it)."""

    def register(fn: ScriptedFn) -> ScriptedFn:
        @functools.wraps(fn)
        def rule(step: EnvStep, ctx: ScriptedContext) -> torch.Tensor:
            actions = fn(step, ctx)
            eps = ctx.params.get("eps")
            if eps is None:
                return actions
            if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0.0 <= eps <= 1.0:
                raise UserError(f"scripted policy {name!r}: params eps={eps!r} is invalid; expected a probability "
                                f"in [0, 1]")
            E, K = actions.shape[:2]
            noisy = torch.rand(E, K, generator=ctx.generator).to(actions.device) < eps
            other = _uniform_available(step, ctx.slots, int(ctx.env.spec.action_space.n), ctx.generator)
            other = torch.where(step.active[:, ctx.slots], other.to(actions.dtype), torch.zeros_like(actions))
            return torch.where(noisy, other, actions)

        SCRIPTED[name] = rule
        return rule

    return register


def get_scripted(name: str) -> ScriptedFn:
    """A registered policy by name, or `module.path:function` imported on demand."""
    if name in SCRIPTED:
        return SCRIPTED[name]
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise UserError(f"scripted policy {name!r}: cannot import it ({e})") from None
        if not callable(fn):
            raise UserError(f"scripted policy {name!r} is not a function")
        return fn
    raise UserError(f"unknown scripted policy {name!r}; expected one of {sorted(SCRIPTED)} or module.path:function")


def _uniform_available(step: EnvStep, slots: torch.Tensor, n_actions: int, generator: torch.Generator) -> torch.Tensor:
    """A uniformly random available action per env and slot: [E, K]."""
    E, K = step.obs.shape[0], slots.numel()
    if step.available_actions is None:
        return torch.randint(n_actions, (E, K), generator=generator).to(step.obs.device)
    weights = step.available_actions[:, slots].float().cpu().reshape(E * K, -1)  # [E*K, A]
    return torch.multinomial(weights, 1, generator=generator).view(E, K).to(step.obs.device)


@scripted("random")
def random_policy(step: EnvStep, ctx: ScriptedContext) -> torch.Tensor:
    """Uniform over the available actions (Discrete action spaces)."""
    n = ctx.params.get("n_actions") or int(ctx.env.spec.action_space.n)
    actions = _uniform_available(step, ctx.slots, n, ctx.generator)
    ctx.goal = torch.full_like(actions, -1)  # pursues no goal (a co-player model's "other")
    return actions


@scripted("fixed")
def fixed_action(step: EnvStep, ctx: ScriptedContext) -> torch.Tensor:
    """The same action always (params: action=INT); dead slots take the no-op 0."""
    if "action" not in ctx.params:
        raise UserError("scripted policy 'fixed' needs params {action: INT}")
    a = torch.full((step.obs.shape[0], ctx.slots.numel()), int(ctx.params["action"]), dtype=torch.long,
                   device=step.obs.device)
    return torch.where(step.active[:, ctx.slots], a, torch.zeros_like(a))


# env-specific rules (stag hunt, coin game, simple_spread, simple_tag, matrix games) register themselves on import
from hypermappo.policies import scripted_rules, scripted_tag  # noqa: E402, F401  (scripted_tag: MPE simple_tag)
