"""The mutation script picks up every feature-area set in tests/mutation_sets/."""

import importlib.util
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_every_mutation_set_file_is_loaded_and_names_are_unique():
    spec = importlib.util.spec_from_file_location("mutations_under_test", TESTS / "mutations.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    names = [m.name for m in module.MUTATIONS]
    assert "mutation_sets_not_loaded" in names
    assert len(names) == len(set(names)), "duplicate mutation names"
    sets = [p for p in (TESTS / "mutation_sets").glob("*.py")]
    assert len(sets) >= 1
