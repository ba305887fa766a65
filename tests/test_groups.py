"""Policy groups (policies/groups.py): config rules, per-group learning, scripted / frozen groups, switches, resume.

The no-groups test compares against metrics.csv files and checkpoint digests written by the code before groups
existed (tests/data/no_groups_reference, made at commit 9c9789b by make_reference.py there).
"""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest
import torch

from hypermappo import config as config_mod
from hypermappo.errors import UserError
from hypermappo.experiment import Experiment

REFERENCE = Path(__file__).parent / "data" / "no_groups_reference"
TIMING_COLUMNS = {"train_sps", "collect_s", "update_s", "diagnostics_s"}  # wall-clock, never reproducible


def _reference_module():
    spec = importlib.util.spec_from_file_location("make_reference", REFERENCE / "make_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in csv.DictReader(f)]


@pytest.mark.parametrize("case", ["staghunt_mlp", "staghunt_rnn", "staghunt_hyper", "climbing_mlp"])
def test_no_groups_reproduces_the_pre_groups_metrics_and_checkpoint(tmp_path, case):
    ref = _reference_module()
    metrics = ref.run_case(case, tmp_path)
    got, want = rows(metrics), rows(REFERENCE / f"{case}.csv")
    assert list(got[0]) == list(want[0])  # same columns in the same order
    for g, w in zip(got, want, strict=True):
        assert g == w, f"update {w['update']} differs from the pre-groups run"
    digest = json.loads((REFERENCE / "checkpoints.json").read_text())[case]
    assert ref.checkpoint_digest(metrics.parent) == digest
