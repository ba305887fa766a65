"""The MPE suite batched in torch, one module per scenario (`mpe:<scenario>`).

A scenario is a module `hypermappo/envs/mpe/<scenario>.py` exposing
`make(num_envs, device="cpu", **kwargs) -> VecEnv`; modules whose name starts with `_` are shared
helpers, not scenarios. Adding a scenario is adding its file: nothing else lists them.
simple_spread lives in `hypermappo.envs.mpe_torch` (the first, hand-tuned port).
"""

from __future__ import annotations

import importlib
import pkgutil


def scenario_modules() -> list[str]:
    """Names of the scenario modules in this package (sorted)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def scenario_make(name: str):
    """The `make` function of scenario `name`, or None if there is no such module."""
    if name not in scenario_modules():
        return None
    return importlib.import_module(f"{__name__}.{name}").make
