"""Symmetries of a game: transformations of the world under which its rules are unchanged (a grid's reflections).

An env declares them in `EnvSpec.symmetries`. Each says what an agent's observation becomes in the transformed
world and where each action goes: reflected top to bottom, a stag hunt is the same game with "up" and "down"
swapped, and a partner that walks to the nearest hare still does, by the reflected moves. Each declared symmetry
is its own inverse and commutes with the others, so applying each with probability 1/2 draws uniformly from the
group they make (two reflections of a grid: the identity, either reflection and the half-turn).

Why: the models of the others (algos/coplayer_bayes.py, `coplayer.symmetries`) learn "what a partner pursuing
goal g does here" from a few thousand moves; seen in every reflection, a way to a goal learnt on one side of the
grid is known on every side (measured on the stag hunt: a held-out nearest-hare hunter mispredicted ~1 move in 8
when its hare was 3 or more steps away, a table an MLP on the flattened grid fills one cell at a time).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Symmetry:
    name: str  # e.g. "flip_rows"
    obs: Callable[[torch.Tensor], torch.Tensor]  # an agent's observation [..., D] -> the same in the transformed world
    actions: tuple[int, ...]  # action a -> actions[a] in the transformed world (Discrete actions)


# the grid moves every grid env here shares: 0 stay, 1 up, 2 down, 3 left, 4 right
ROWS_FLIPPED = (0, 2, 1, 3, 4)  # up <-> down
COLS_FLIPPED = (0, 1, 2, 4, 3)  # left <-> right


def flip_planes(obs: torch.Tensor, start: int, planes: int, height: int, width: int, dim: int) -> torch.Tensor:
    """`obs` [..., D] with `planes` row-major [height, width] grids from feature `start` on, each flipped along
    `dim` (-2 rows, -1 columns); other features unchanged."""
    end = start + planes * height * width
    grids = obs[..., start:end].unflatten(-1, (planes, height, width)).flip(dim).flatten(-3)
    return torch.cat([obs[..., :start], grids, obs[..., end:]], -1)


def reflect_coordinates(obs: torch.Tensor, index: list[int], present: list[int] | None = None) -> torch.Tensor:
    """`obs` [..., D] with the features at `index` (grid coordinates scaled to [0, 1]) reflected, x -> 1 - x; where
    `present` is given (one feature per coordinate, 1 = the thing is on the grid), a coordinate of an absent thing
    stays as the env writes it (0)."""
    idx = torch.tensor(index, device=obs.device)
    x = obs[..., idx]
    reflected = 1.0 - x
    if present is not None:
        reflected = torch.where(obs[..., torch.tensor(present, device=obs.device)] > 0.5, reflected, x)
    return obs.index_copy(-1, idx, reflected)


def augment(symmetries: list[Symmetry], obs: torch.Tensor, actions: dict[str, torch.Tensor],
            generator: torch.Generator, where: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Each sample of obs [..., D] in a random element of the group `symmetries` make: every symmetry applied with
    probability 1/2, one draw per sample and symmetry from `generator`; `actions` ({name: [...] long}) mapped
    alike (a value past the table, such as "no previous action", is left as it is). `where` ([...] bool): only
    those samples (the draws are made for every sample either way)."""
    for s in symmetries:
        table = torch.tensor(s.actions, dtype=torch.long, device=obs.device)
        on = torch.rand(obs.shape[:-1], generator=generator, device=generator.device).to(obs.device) < 0.5
        if where is not None:
            on = on & where
        obs = torch.where(on.unsqueeze(-1), s.obs(obs), obs)
        actions = {k: torch.where(on & (a < table.numel()), table[a.clamp(max=table.numel() - 1)], a)
                   for k, a in actions.items()}
    return obs, actions
