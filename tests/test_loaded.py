"""The one seam for a trained run's policy (policies/loaded.py): what eval, crossplay and frozen groups load."""

from __future__ import annotations

import pytest
import torch
from test_groups import TINY

from hypermappo import config as config_mod
from hypermappo.checkpoint import read_checkpoint
from hypermappo.errors import UserError
from hypermappo.experiment import Experiment
from hypermappo.policies.groups import Phase, sub_spec
from hypermappo.policies.loaded import load_frozen_actor, load_policy

FED = ["coplayer.enabled=true", "coplayer.model=gru", "coplayer.hidden=16", "coplayer.feed=policy"]
TWO = "groups=[{name: a, agents: [0]}, {name: b, agents: [1], actor: mlp, model: {hidden_sizes: [8]}}]"


def _train(tmp_path, name: str, extra=()) -> Experiment:
    cfg = config_mod.build_config("staghunt/default", [*TINY, "total_env_steps=80", *extra])
    exp = Experiment(cfg, tmp_path / name, quiet=True)
    exp.run()
    return exp


def test_a_learner_group_of_a_run_loads_with_its_own_config_and_weights(tmp_path):
    exp = _train(tmp_path, "run", [TWO])
    policy = load_policy(exp.run_dir, group="b", checkpoint="newest_intact", env_spec=sub_spec(exp.spec, [1]),
                         device="cpu", command="frozen")
    assert policy.cfg.model.hidden_sizes == [8] and policy.checkpoint.name == "ckpt_0000002.pt"
    want = read_checkpoint(policy.checkpoint, "cpu")["groups"]["b"]["learner"]["actor"]
    for name, tensor in policy.actor.state_dict().items():
        assert torch.equal(tensor, want[name]), name
    assert not any(p.requires_grad for p in policy.actor.parameters()) and not policy.actor.training


def test_a_run_whose_actor_reads_a_belief_acts_with_its_coplayer_model_but_is_no_frozen_partner(tmp_path):
    exp = _train(tmp_path, "fed", FED)
    acting = load_policy(exp.run_dir).actor
    assert type(acting).__name__ == "BeliefActor"  # its co-player model computes the belief it reads
    with pytest.raises(UserError, match=r"frozen run_dir .*: its actor reads a co-player belief") as info:
        load_frozen_actor(Phase(0, "frozen", run_dir=str(exp.run_dir)), sub_spec(exp.spec, [1]), "cpu")
    assert "\n" not in str(info.value)
