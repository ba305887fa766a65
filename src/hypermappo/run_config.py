"""A run's config, checked by every module that reads it: what `hypermappo train`, `config` and `sweep` build.

`config.py` is a leaf (it imports no other module of the package): it parses presets and overrides and checks
single keys and the cross-key rules it can state alone. The rules that belong to other modules live with them and
are called from here, the one place above them all:
- policy groups (`groups=[...]`): `policies/specs.py: check_group_specs`;
- keys an algorithm reads only in some configs: `algos/micro_batch.py: unused_keys` (`ppo.micro_batch_size`
  where micro-batches cannot add up to the whole mini-batch).
Code that builds a config for a run it trains itself (tests, benchmarks) may use `config.build_config`: the
groups are checked again when a run builds them, and micro-batches stay off where they cannot apply.
"""

from __future__ import annotations

from hypermappo import config as config_mod
from hypermappo.algos import micro_batch
from hypermappo.config import Config
from hypermappo.errors import UserError
from hypermappo.policies.specs import check_group_specs


def unused_keys(cfg: Config) -> dict[str, str]:
    """Every key set to a non-default value that nothing in this config reads -> its one-line error."""
    return {**config_mod.unused_keys(cfg), **micro_batch.unused_keys(cfg)}


def check(cfg: Config, allow_unused: bool = False) -> None:
    """The checks config.py leaves to the modules that own them (UserError on the first failing one)."""
    if cfg.groups:
        check_group_specs(cfg)
    if not allow_unused:
        for message in unused_keys(cfg).values():
            raise UserError(message)


def build_config(preset: str | None = None, overrides: list[str] = (), base: dict | None = None,
                 allow_unused: bool = False) -> Config:
    """`config.build_config` (defaults <- preset or `base` <- overrides, validated) and then `check`."""
    cfg = config_mod.build_config(preset, overrides, base, allow_unused=True)
    check(cfg, allow_unused)
    return cfg
