"""Held-out-partner evaluation (adaptation.py, `hypermappo adapt`): K consecutive episodes per partner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_groups import TINY

from hypermappo import config as config_mod
from hypermappo.adaptation import HeldOutMatch, adapt, parse_partner
from hypermappo.cli import main
from hypermappo.errors import UserError
from hypermappo.experiment import Experiment

GROUPS = ("groups=[{name: learner, agents: [0]}, {name: partner, agents: [1], kind: scripted, "
          "policy: staghunt_stag}]")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A tiny trained run: a learner on slot 0, a scripted stag hunter on slot 1 (shared team reward)."""
    run = tmp_path_factory.mktemp("adapt") / "run"
    cfg = config_mod.build_config("staghunt/default", [*TINY, "total_env_steps=80", GROUPS])
    exp = Experiment(cfg, run, quiet=True)
    exp.run()
    (run / "eval16.json").write_text(json.dumps(exp.evaluate(episodes=16)))  # its own evaluation, 16 episodes
    return run


def test_the_first_episode_is_the_runs_own_evaluation_and_later_ones_continue_the_envs(run):
    """Against the partner it trained with, episode 1 of every env is what the run's evaluation played (same env
    seed, learner mode, deterministic partner); the K = 3 curve is the K = 2 curve plus one episode."""
    cfg = config_mod.from_run_dir(run)
    want = json.loads((run / "eval16.json").read_text())["group_returns"]["learner"]
    match = HeldOutMatch(run, None, 16, torch.device("cpu"))
    partner = parse_partner("scripted:staghunt_stag")
    seed = cfg.seed + 1_000_003
    three = match.play(partner, 3, True, seed)
    two = match.play(partner, 2, True, seed)
    assert three["return"].shape == (16, 3)
    assert float(three["return"][:, 0].mean()) == pytest.approx(want)
    assert torch.equal(three["return"][:, :2], two["return"])
    assert torch.equal(three["return"], three["team"])  # shared reward: the learner's return is the team's
    assert three["return"].sum() > 0 and not torch.equal(three["return"][:, 1], three["return"][:, 0])


def test_adapt_writes_a_curve_per_partner_and_memory_setting(run, tmp_path, capsys):
    assert main(["adapt", str(run), "--partners", "scripted:staghunt_hare", "scripted:fixed@action=0",
                 "--episodes", "4", "--num-envs", "8", "--out", str(tmp_path / "out")]) == 0
    report = json.loads((tmp_path / "out" / "adaptation.json").read_text())
    got = [(r["partner"], r["memory"], len(r["return"]["mean"])) for r in report["results"]]
    assert got == [("staghunt_hare", True, 4), ("staghunt_hare", False, 4), ("fixed@action=0", True, 4),
                   ("fixed@action=0", False, 4)]
    assert "| fixed@action=0 | off |" in capsys.readouterr().out


@pytest.mark.parametrize("args, expected", [
    (["--partners", "scripted:nope"], "unknown scripted policy 'nope'"),
    (["--partners", "/nonexistent"], "partner '/nonexistent': expected scripted:NAME[@key=value] or a run directory"),
    (["--partners", "scripted:random", "--episodes", "0"], "--episodes 0 is invalid; expected consecutive episodes"),
    (["--partners", "scripted:random", "--group", "nobody"], "--group 'nobody' is not a group of run"),
    (["--partners", "scripted:random", "--group", "learner"], "neither learn nor are the partner group"),
])
def test_adapt_mistakes_are_one_line_errors(run, args, expected, capsys):
    assert main(["adapt", str(run), *args]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1


def test_a_run_without_a_partner_group_is_refused(tmp_path):
    cfg = config_mod.build_config("staghunt/default", [*TINY, "total_env_steps=40"])
    Experiment(cfg, tmp_path / "plain", quiet=True).run()
    with pytest.raises(UserError, match="has no groups, so no partner slot"):
        adapt(tmp_path / "plain", ["scripted:random"])


def test_sampled_partners_are_reproducible_and_without_a_coplayer_model_memory_changes_nothing(run):
    """A frozen partner samples its actions (as in training), as does the learner with deterministic=False:
    both draw from a generator seeded per call, so the memory settings face the same draws."""
    torch.manual_seed(123)
    report = adapt(run, [f"{run}#learner"], episodes=3, num_envs=8, deterministic=False)
    on, off = report["results"]
    torch.manual_seed(456)  # the caller's random state does not matter
    again = adapt(run, [f"{run}#learner"], episodes=3, num_envs=8, memory=(True,), deterministic=False)
    assert again["results"][0]["return"] == on["return"]
    assert (on["memory"], off["memory"]) == (True, False)
    assert on["return"] == off["return"] and on["team_return"] == off["team_return"]
    assert adapt(run, [f"{run}#learner"], episodes=3, num_envs=8, memory=(True,), deterministic=False,
                 seed=5)["results"][0]["return"] != on["return"]
