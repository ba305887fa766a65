"""The package's layers (pyproject.toml, [tool.importlinter]; `lint-imports` checks every import) and the few facts
that keep config.py a leaf."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from hypermappo import config as config_mod
from hypermappo import run_config
from hypermappo.errors import UserError
from hypermappo.models.actor import ACTORS

SRC = Path(__file__).resolve().parents[1] / "src" / "hypermappo"


def test_config_imports_no_other_module_of_the_package_but_its_errors():
    tree = ast.parse((SRC / "config.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | \
        {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in imported if m.startswith("hypermappo")} == {"hypermappo.errors"}


def test_the_actor_choices_are_the_actor_registry():
    field = next(f for f in config_mod.dataclasses.fields(config_mod.Config) if f.name == "actor")
    assert field.metadata["choices"] == list(ACTORS)


def test_run_config_adds_the_checks_owned_by_groups_and_algorithms():
    groups = "groups=[{name: a, agents: [0], kind: scripted, policy: random}]"  # nobody learns
    config_mod.build_config("staghunt/default", [groups])  # the leaf alone cannot know group rules
    with pytest.raises(UserError, match="groups: no group learns"):
        run_config.build_config("staghunt/default", [groups])
    blocked = ["actor=rnn", "ppo.micro_batch_size=1024"]
    config_mod.build_config("staghunt/default", blocked)
    with pytest.raises(UserError, match="ppo.micro_batch_size=1024 has no effect"):
        run_config.build_config("staghunt/default", blocked)
    assert "ppo.micro_batch_size" in run_config.unused_keys(config_mod.build_config("staghunt/default", blocked))
