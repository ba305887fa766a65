"""Env strings -> vectorised envs. A new backend is one module plus one line in `BACKENDS`.

An env string is `prefix[:rest]`, e.g. `mpe2:simple_spread_v3`, `vmas:navigation`, `staghunt`,
`matrix:climbing`, `smax:3m`, `gym:lbforaging:Foraging-8x8-2p-2f-v3`,
`pettingzoo:my_pkg.my_module:make_env`. Each backend module exposes
`make(name: str, num_envs: int, device, **kwargs) -> VecEnv`, where `name` is the part after the
first colon ("" when there is none). Backends are imported only when used, so optional
dependencies (VMAS, JAX) are needed only by those who use them.
"""

from __future__ import annotations

import difflib
import importlib

import torch

from hypermappo.envs.vec import VecEnv
from hypermappo.errors import UserError

# prefix -> ("module" or "module:function" (default function: make), one-line description)
BACKENDS: dict[str, tuple[str, str]] = {
    "matrix": ("hypermappo.envs.matrix", "repeated matrix games, batched in torch"),
    "staghunt": ("hypermappo.envs.staghunt", "stag-hunt gridworld, batched in torch"),
    "coingame": ("hypermappo.envs.coingame", "coin game (LOLA), two players, general-sum, batched in torch"),
    "mpe": ("hypermappo.envs.mpe_torch", "MPE scenarios re-implemented batched in torch (mpe2 semantics)"),
    "mpe2": ("hypermappo.envs.pettingzoo:make_mpe2", "mpe2 PettingZoo envs through the PettingZoo adapter"),
    "pettingzoo": ("hypermappo.envs.pettingzoo:make_pettingzoo", "any PettingZoo ParallelEnv factory `module:function`"),
    "vmas": ("hypermappo.envs.vmas", "VMAS scenarios (batched torch)"),
    "gym": ("hypermappo.envs.gym_multiagent", "Gymnasium multi-agent envs with tuple spaces (lbforaging, rware)"),
    "smax": ("hypermappo.envs.smax", "SMAX from JaxMARL (optional extra `hypermappo[smax]`)"),
}


def split_env_string(env: str) -> tuple[str, str]:
    prefix, _, rest = env.partition(":")
    if prefix not in BACKENDS:
        close = difflib.get_close_matches(prefix, BACKENDS, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UserError(f"unknown env backend {prefix!r} in env={env!r}{hint}; expected one of {sorted(BACKENDS)}")
    return prefix, rest


def make_env(env: str, num_envs: int, device: str | torch.device = "cpu", **kwargs) -> VecEnv:
    """Build E = num_envs copies of the env named by `env` (see module docstring)."""
    if num_envs < 1:
        raise UserError(f"num_envs must be >= 1, got {num_envs}")
    prefix, rest = split_env_string(env)
    module_name, _, function = BACKENDS[prefix][0].partition(":")
    make = getattr(importlib.import_module(module_name), function or "make")
    try:
        return make(rest, num_envs=num_envs, device=torch.device(device), **kwargs)
    except TypeError as e:  # an env kwarg the backend does not take is a user mistake
        if "unexpected keyword argument" in str(e):
            bad = str(e).split("argument")[-1].strip()
            raise UserError(f"env_kwargs: {prefix} envs take no argument {bad}") from None
        raise
