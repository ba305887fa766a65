"""`hypermappo crossplay`: every pairing's returns, checked by hand on fixed matrix-game actions and against `eval`
on a tiny trained run; bad inputs are one-line errors with exit code 2."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from hypermappo.cli import main
from hypermappo.evaluation import EVAL_SEED_OFFSET

STAG, HARE = "scripted:fixed@action=0", "scripted:fixed@action=1"  # matrix:stag_hunt actions
TINY = ["num_envs=4", "rollout_length=25", "ppo.ppo_epoch=2", "eval_episodes=4", "torch_threads=1",
        "log.tensorboard=false", "log.progress=false", "diagnostics.every=0"]


def read_csv(path: Path) -> dict[tuple[str, str], dict]:
    with open(path) as f:
        return {(r["row"], r["col"]): r for r in csv.DictReader(f)}


def stderr_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_matrix_stag_hunt_with_fixed_actions_gives_the_payoff_table(tmp_path, capsys):
    """Payoffs (stag, stag) = (4, 4), (stag, hare) = (0, 3), (hare, hare) = (2, 2); 25 steps per episode."""
    out = tmp_path / "cp"
    assert main(["crossplay", "--env", "matrix:stag_hunt", "--rows", STAG, HARE, "--cols", STAG, HARE,
                 "--episodes", "6", "--num-envs", "4", "--out", str(out), "--quiet"]) == 0
    table = read_csv(out / "crossplay.csv")
    expected = {(STAG, STAG): (100, 100, 100), (STAG, HARE): (37.5, 0, 75), (HARE, STAG): (37.5, 75, 0),
                (HARE, HARE): (50, 50, 50)}  # (return, row side, column side)
    assert set(table) == set(expected)
    for key, (ret, row_side, col_side) in expected.items():
        r = table[key]
        assert (float(r["return_mean"]), float(r["row_return_mean"]), float(r["col_return_mean"])) == \
            (ret, row_side, col_side), key
        assert r["episodes"] == "6"
    md = (out / "crossplay.md").read_text()
    assert f"| {STAG} | 100.00 [100.00, 100.00] | 37.50 [37.50, 37.50] |" in md
    assert (out / "crossplay.png").stat().st_size > 1000
    assert capsys.readouterr().out.startswith("Cross-play on `matrix:stag_hunt`")


@pytest.mark.parametrize("row_slot,sign", [("0", 1), ("1", -1)])
def test_each_side_plays_its_own_slots(tmp_path, row_slot, sign):
    """Matching pennies: slot 0 gets +1 when the actions match, slot 1 gets -1 (and the reverse otherwise)."""
    out = tmp_path / "cp"
    assert main(["crossplay", "--env", "matrix:matching_pennies", "--rows", STAG, "--cols", STAG, HARE, "--row-slots",
                 row_slot, "--col-slots", str(1 - int(row_slot)), "--episodes", "2", "--out", str(out), "--quiet"]) == 0
    table = read_csv(out / "crossplay.csv")
    sides = [(float(r["row_return_mean"]), float(r["col_return_mean"]), float(r["return_mean"])) for r in table.values()]
    assert sides == [(25 * sign, -25 * sign, 0), (-25 * sign, 25 * sign, 0)]


def test_slots_split_a_four_agent_env(tmp_path):
    """specialisation, 4 agents: reward = distinct actions / 4; the row plays 0 on slots 0 and 2, the column 1 or 0
    on slots 1 and 3."""
    out = tmp_path / "cp"
    assert main(["crossplay", "--env", "matrix:specialisation", "--rows", "scripted:fixed@action=0", "--cols",
                 "scripted:fixed@action=1", "scripted:fixed@action=0", "--row-slots", "0,2", "--col-slots", "3,1",
                 "--episodes", "2", "--out", str(out), "--quiet"]) == 0
    table = read_csv(out / "crossplay.csv")
    assert [float(r["return_mean"]) for r in table.values()] == pytest.approx([25 * 2 / 4, 25 / 4])
    assert [float(r["row_return_mean"]) for r in table.values()] == pytest.approx([25 * 2 / 4, 25 / 4])  # shared reward


@pytest.fixture(scope="module")
def staghunt_run(tmp_path_factory) -> Path:
    """A tiny trained stag-hunt run with checkpoints after updates 1 and 2."""
    run = tmp_path_factory.mktemp("cp") / "run"
    assert main(["train", "staghunt/egocentric", "total_env_steps=200", "checkpoint_interval=1", *TINY,
                 f"run_dir={run}", "--quiet"]) == 0
    return run


def test_a_run_playing_itself_matches_eval(staghunt_run, tmp_path, capsys):
    """Self-play through crossplay (the run on slot 0 and on slot 1) gives exactly `eval`'s return on the same
    start states, and a scripted partner changes it."""
    out = tmp_path / "cp"
    assert main(["crossplay", "--rows", str(staghunt_run), "--cols", str(staghunt_run), "scripted:staghunt_stag",
                 "--episodes", "8", "--seed", str(7 + EVAL_SEED_OFFSET), "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["eval", str(staghunt_run), "--episodes", "8", "--seed", "7", "--quiet"]) == 0
    expected = json.loads(capsys.readouterr().out)["return_mean"]
    table = read_csv(out / "crossplay.csv")
    assert float(table["run", "run"]["return_mean"]) == pytest.approx(expected, abs=1e-5)
    assert float(table["run", "scripted:staghunt_stag"]["return_mean"]) != pytest.approx(expected, abs=1e-5)
    assert "stag captures per episode" in (out / "crossplay.md").read_text()
    assert "ckpt_0000002.pt" in (out / "crossplay.md").read_text()


def test_a_corrupt_latest_checkpoint_falls_back_to_the_newest_intact_one(staghunt_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(staghunt_run, run)
    latest = run / "checkpoints" / "ckpt_0000002.pt"
    latest.write_bytes(latest.read_bytes()[:100])
    assert main(["crossplay", "--rows", str(run), "--cols", "scripted:staghunt_hare", "--episodes", "2",
                 "--out", str(tmp_path / "cp"), "--quiet"]) == 0
    err = stderr_lines(capsys)
    assert len(err) == 1 and err[0].startswith(f"crossplay: {run}: skipped ckpt_0000002.pt: ") and \
        err[0].endswith("; using ckpt_0000001.pt"), err
    assert "ckpt_0000001.pt" in (tmp_path / "cp" / "crossplay.md").read_text()


@pytest.mark.parametrize("args,message", [
    (["--rows", "no/such/run", "--cols", "scripted:random"],
     "crossplay: 'no/such/run' is neither a run directory nor a checkpoint file"),
    (["--env", "matrix:stag_hunt", "--rows", "scripted:nope", "--cols", "scripted:random"],
     "unknown scripted policy 'nope'"),
    (["--rows", "scripted:random", "--cols", "scripted:random"], "--env is needed when no run directory"),
    (["--env", "matrix:stag_hunt", "--rows", "scripted:staghunt_stag", "--cols", "scripted:random"],
     "scripted policy 'staghunt_stag' plays the stag hunt (env 'staghunt'); this env is MatrixGameVecEnv"),
    (["--env", "matrix:stag_hunt", "--rows", "scripted:random", "--cols", "scripted:random", "--row-slots", "0",
      "--col-slots", "0"], "--row-slots [0] and --col-slots [0] must split the slots 0..1"),
    (["--env", "matrix:stag_hunt", "--rows", "scripted:random", "--cols", "scripted:random", "--row-slots", "5"],
     "--row-slots '5' is invalid; expected distinct slot indices in 0..1"),
    (["--env", "matrix:specialisation", "--rows", "scripted:random", "--cols", "scripted:random"],
     "this env has 4 agent slots; give both --row-slots and --col-slots"),
    (["--env", "matrix:stag_hunt", "--rows", "scripted:fixed@action", "--cols", "scripted:random"],
     "setting 'action' is not key=value"),
    (["--env", "matrix:stag_hunt", "--rows", "scripted:random", "--cols", "scripted:random", "--episodes", "0"],
     "--episodes must be >= 1, got 0"),
])
def test_bad_inputs_are_one_line_errors(args, message, tmp_path, capsys):
    assert main(["crossplay", *args, "--out", str(tmp_path / "cp"), "--quiet"]) == 2
    err = stderr_lines(capsys)
    assert len(err) == 1 and err[0].startswith("hypermappo crossplay: error: ") and message in err[0], err


def test_a_run_trained_on_another_env_is_a_one_line_error(staghunt_run, tmp_path, capsys):
    assert main(["crossplay", "--env", "staghunt/default", "--rows", str(staghunt_run), "--cols", "scripted:random",
                 "--out", str(tmp_path / "cp"), "--quiet"]) == 2
    err = stderr_lines(capsys)
    assert len(err) == 1 and f"run {staghunt_run} was trained on env=staghunt env_kwargs=" \
        "{'observation': 'partial', 'view_radius': 4}; expected env=staghunt env_kwargs={} (preset staghunt/default)" \
        in err[0], err
    assert not (tmp_path / "cp").exists()
