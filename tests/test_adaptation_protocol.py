"""The held-out adaptation protocol: mixes of co-players per slot, the run's own record of its training partners,
oracle runs with the same budget, normalised returns, steps to recognise a goal (adaptation.py,
report/adaptation_curves.py)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from test_groups import TINY

from hypermappo import config as config_mod
from hypermappo.adaptation import HeldOutMatch, _recognition, adapt, parse_mix
from hypermappo.cli import main
from hypermappo.errors import UserError
from hypermappo.experiment import Experiment
from hypermappo.report import adaptation_curves as curves_mod
from hypermappo.report.adaptation_curves import (
    curve_summary,
    normalised_return,
    paired_difference,
    scale_is_resolved,
    steps_to_recognise,
)

FOUR = "env_kwargs={n_hunters: 4, grid_size: 6, episode_length: 10}"
STAG, HARE, RANDOM = "scripted:staghunt_stag", "scripted:staghunt_hare", "scripted:random"


def _mix_run(path: Path, members: str, steps: int = 120, extra=()) -> Path:
    groups = ("groups=[{name: focal, agents: [0]}, {name: coplayers, agents: [1, 2, 3], kind: population, "
              f"draw: slot, members: {members}}}]")
    cfg = config_mod.build_config("staghunt/default", [*TINY, FOUR, f"total_env_steps={steps}", groups, *extra])
    Experiment(cfg, path, quiet=True).run()
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("protocol")
    return {"focal": _mix_run(root / "focal", "[{policy: staghunt_stag}, {policy: random}]"),
            "oracle": _mix_run(root / "oracle", "[{policy: staghunt_hare}, {policy: staghunt_follow}]"),
            "short": _mix_run(root / "short", "[{policy: staghunt_hare}, {policy: staghunt_follow}]", steps=80),
            "other": _mix_run(root / "other", "[{policy: staghunt_hare}]")}


# ---------------------------------------------------------------- normalised returns and their aggregation

def test_normalised_returns_by_hand():
    """A toy table: random 2, oracle 6; returns 2, 4, 6, 8 over K = 4 episodes -> 0, 0.5, 1, 1.5."""
    got = normalised_return([[2.0, 4.0, 6.0, 8.0]], random=2.0, oracle=6.0)
    assert got.tolist() == [[0.0, 0.5, 1.0, 1.5]]
    assert normalised_return([1.0, -3.0], random=-1.0, oracle=3.0).tolist() == [0.5, -0.5]
    assert np.isnan(normalised_return([1.0], 2.0, 2.0)).all()  # no scale: not a number, not a division by zero
    assert np.isnan(normalised_return([1.0], 0.0, 2.0, resolved=False)).all()


def test_a_scale_is_resolved_only_when_the_oracle_beats_random_by_two_standard_errors():
    """oracle 10 +- 3, random 2 +- 4: gap 8 > 2 x 5 = 10? no. With +- 3 and +- 1: 2 x 3.16 = 6.3 < 8: yes."""
    assert not scale_is_resolved({"oracle": 10.0, "random": 2.0, "oracle_sem": 3.0, "random_sem": 4.0})
    assert scale_is_resolved({"oracle": 10.0, "random": 2.0, "oracle_sem": 3.0, "random_sem": 1.0})
    assert not scale_is_resolved({"oracle": 1.0, "random": 2.0, "oracle_sem": 0.0, "random_sem": 0.0})  # below
    # nearly deterministic returns: a gap of 1.25 on 60 is many standard errors but less than a tenth of 60
    assert not scale_is_resolved({"oracle": 60.0, "random": 58.75, "oracle_sem": 0.01, "random_sem": 0.01})
    assert scale_is_resolved({"oracle": -15.0, "random": -38.0, "oracle_sem": 2.0, "random_sem": 2.0})


def test_curve_summary_is_the_iqm_and_mean_per_episode_with_bootstrap_intervals():
    curves = np.array([[0.0, 1.0], [1.0, 1.0], [2.0, 1.0], [3.0, np.nan], [100.0, 1.0]])
    out = curve_summary(curves)
    # episode 1: [0, 1, 2, 3, 100]; the 25 % trimmed mean drops 0 and 100 when trimming 1 of 5 from each end
    assert out["iqm"][0] == pytest.approx(2.0) and out["mean"][0] == pytest.approx(21.2)
    assert out["runs"] == [5, 4] and out["iqm"][1] == 1.0 and out["mean_ci"][1] == [1.0, 1.0]
    lo, hi = out["mean_ci"][0]
    assert lo < 21.2 < hi
    d = paired_difference([3.0, 4.0, 5.0], [1.0, 1.0, 1.0])
    assert d["mean"] == pytest.approx(3.0) and d["runs"] == 3 and 2.0 <= d["ci"][0] <= d["ci"][1] <= 4.0


def test_steps_to_recognise_by_hand():
    T, F = True, False
    correct = np.array([[F, F, T, T, T],   # recognised at step 2
                        [T, F, T, T, T],   # wrong at 1, so from 2
                        [T, T, T, T, F],   # wrong at the end: never
                        [F, T, F, T, T],   # unlabelled steps 0 and 2 neither break nor start a run: from 1
                        [F, F, F, F, F]])  # no label at all: NaN
    labelled = np.array([[T, T, T, T, T], [T, T, T, T, T], [T, T, T, T, T], [F, T, F, T, T], [F, F, F, F, F]])
    got = steps_to_recognise(correct, labelled)
    assert got[:2].tolist() == [2.0, 2.0] and math.isnan(got[2]) and got[3] == 1.0 and math.isnan(got[4])


def test_recognition_per_episode_index_from_a_trace():
    """2 envs, K = 2 episodes of 3 steps, one learner agent, one partner slot: the mean over recognised episodes
    and the fraction of labelled episodes where the goal is recognised, per episode index."""
    episode = torch.tensor([[0, 0], [0, 0], [0, 0], [1, 1], [1, 1], [1, 1]])
    t = torch.tensor([[0, 0], [1, 1], [2, 2], [0, 0], [1, 1], [2, 2]])
    valid = torch.ones(6, 2, dtype=torch.bool)
    correct = torch.tensor([[0, 0], [1, 0], [1, 0], [1, 1], [1, 1], [1, 1]], dtype=torch.bool)[..., None, None]
    labelled = torch.ones_like(correct)
    out = _recognition(episode, t, valid, correct, labelled, 2, 3)
    assert out["steps"] == [1.0, 0.0] and out["recognised"] == [0.5, 1.0] and out["episodes"] == [2, 2]


# ---------------------------------------------------------------- the run's own record; held-out partners

def test_a_held_out_partner_is_checked_against_the_runs_own_record(runs, tmp_path):
    focal = runs["focal"]
    record = json.loads((focal / "summary.json").read_text())["groups"]["coplayers"]["member_episodes"]
    assert set(record) == {"scripted:staghunt_stag", "scripted:random"} and all(n > 0 for n in record.values())
    with pytest.raises(UserError, match=r"partner 'scripted:staghunt_stag' is not held out: run .* trained against "
                                        r"it \(\d+ episodes, from its own records\)"):
        adapt(focal, [f"{HARE}+{STAG}+{HARE}"], episodes=1, num_envs=2, memory=(True,), held_out=True)
    report = adapt(focal, [f"{HARE}+{HARE}+scripted:staghunt_follow", STAG], episodes=2, num_envs=2, memory=(True,))
    assert [r["training_episodes"] for r in report["results"]] == [0, record["scripted:staghunt_stag"]]
    assert report["results"][0]["partner"] == "staghunt_hare+staghunt_hare+staghunt_follow"
    # the record read is summary.json's (an edited count shows through)
    edited = tmp_path / "edited"
    shutil.copytree(focal, edited)
    summary = json.loads((edited / "summary.json").read_text())
    summary["groups"]["coplayers"]["member_episodes"]["scripted:staghunt_stag"] = 12345
    (edited / "summary.json").write_text(json.dumps(summary))
    assert adapt(edited, [STAG], episodes=1, num_envs=2, memory=(True,))["results"][0]["training_episodes"] == 12345
    # without summary.json (a run killed before its end) the record comes from its newest checkpoint
    copy = tmp_path / "unfinished"
    shutil.copytree(focal, copy)
    (copy / "summary.json").unlink()
    again = adapt(copy, [STAG], episodes=1, num_envs=2, memory=(True,))
    ckpt = sorted((copy / "checkpoints").glob("ckpt_*.pt"))[-1]
    counts = torch.load(ckpt, weights_only=False)["groups"]["coplayers"]["population"]["member_episodes"]
    assert again["results"][0]["training_episodes"] == int(counts[0]) > 0


def test_a_mix_plays_one_member_per_partner_slot(runs):
    match = HeldOutMatch(runs["focal"], None, 3, torch.device("cpu"))
    actions = []
    step = match.env.step
    match.env.step = lambda a: (actions.append(a.clone()), step(a))[1]
    match.play(parse_mix("scripted:fixed@action=1+scripted:fixed@action=2+scripted:fixed@action=4"), 1, True, 0)
    taken = torch.stack(actions)[..., 1:]  # [T, E, 3]
    assert (taken == torch.tensor([1, 2, 4])).all()
    with pytest.raises(UserError, match="is a mix of 2; expected one partner for all 3 partner slots or one per slot"):
        match.play(parse_mix(f"{STAG}+{HARE}"), 1, True, 0)


# ---------------------------------------------------------------- oracles: same budget, the held-out mix alone

def test_normalised_returns_use_an_oracle_with_the_same_budget_and_a_random_focal_player(runs, monkeypatch):
    mix = f"{HARE}+scripted:staghunt_follow+{HARE}"
    report = adapt(runs["focal"], [mix], episodes=3, num_envs=4, memory=(True,), held_out=True,
                   oracles=[runs["oracle"]])
    r = report["results"][0]
    match = HeldOutMatch(runs["focal"], None, 4, torch.device("cpu"))
    seed = report["seed"]
    random = float(match.play(parse_mix(mix), 3, True, seed, focal="random")["return"].mean())
    oracle = float(HeldOutMatch(runs["oracle"], None, 4, torch.device("cpu")).play(parse_mix(mix), 3, True, seed)
                   ["return"].mean())
    assert r["bounds"]["random"] == pytest.approx(random) and r["bounds"]["oracle"] == pytest.approx(oracle)
    # this tiny oracle does not beat random play (4.4 vs 4.75): no scale, NaN
    assert not r["bounds"]["resolved"] and not scale_is_resolved(r["bounds"]) and r["bounds"]["oracle_sem"] > 0
    assert all(math.isnan(x) for x in r["normalised_return"])
    # taken as resolved, the formula: (return - random) / (oracle - random) per episode
    monkeypatch.setattr(curves_mod, "scale_is_resolved", lambda bounds: True)
    r = adapt(runs["focal"], [mix], episodes=3, num_envs=4, memory=(True,), held_out=True,
              oracles=[runs["oracle"]])["results"][0]
    want = [(x - random) / (oracle - random) for x in r["return"]["mean"]]
    assert r["normalised_return"] == pytest.approx(want)
    # the random focal player is not the learner: its moves are uniform over the 5 moves, and repeat with the seed
    moves = {}
    step = match.env.step
    for focal in ("random", "learner", "random"):
        taken = []
        match.env.step = lambda a, taken=taken: (taken.append(a[:, 0].clone()), step(a))[1]
        match.play(parse_mix(mix), 10, True, seed, focal=focal)
        moves.setdefault(focal, []).append(torch.cat(taken))
    assert torch.equal(moves["random"][0], moves["random"][1]) and not torch.equal(moves["random"][0],
                                                                                   moves["learner"][0])
    share = torch.bincount(moves["random"][0], minlength=5).float() / moves["random"][0].numel()  # 400 moves
    assert ((share > 0.13) & (share < 0.27)).all(), share


@pytest.mark.parametrize("oracle, expected", [
    ("short", "has total_env_steps=80 where the evaluated run has 120; expected an oracle trained on the same game "
              "with the same budget"),
    ("other", "trained against ['scripted:staghunt_hare']; expected exactly the held-out mix"),
    ("focal", "trained against ['scripted:random', 'scripted:staghunt_stag']; expected exactly the held-out mix"),
])
def test_an_oracle_with_another_budget_or_other_partners_is_refused(runs, oracle, expected, capsys):
    code = main(["adapt", str(runs["focal"]), "--partners", f"{HARE}+scripted:staghunt_follow+{HARE}",
                 "--oracles", str(runs[oracle]), "--episodes", "1", "--num-envs", "2", "--out", "/tmp/unused_adapt"])
    err = capsys.readouterr().err
    assert code == 2 and expected in err and err.count("\n") == 1


def test_adapt_cli_writes_normalised_returns_and_recognition(runs, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["adapt", str(runs["focal"]), "--held-out", "--partners", f"{HARE}+scripted:staghunt_follow+{HARE}",
                 "--oracles", str(runs["oracle"]), "--episodes", "2", "--num-envs", "2", "--memory", "on",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Normalised return per episode" in text and "| staghunt_hare+staghunt_follow+staghunt_hare | on | no |" \
        in text
    report = json.loads((out / "adaptation.json").read_text())
    assert len(report["results"][0]["normalised_return"]) == 2
