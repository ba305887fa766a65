"""The throughput harness runs one small configuration end to end and writes its JSON and Markdown."""

import importlib.util
import json
from pathlib import Path

import pytest

from hypermappo.cli import main as cli_main

HARNESS = Path(__file__).resolve().parents[1] / "benchmarks" / "throughput.py"


def _harness():
    spec = importlib.util.spec_from_file_location("throughput_under_test", HARNESS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_harness_measures_one_config_and_writes_json_and_markdown(tmp_path):
    bench = _harness()
    code = bench.main(["--quick", "--threads", "1", "--only", "mappo/matrix:climbing/16", "--out", str(tmp_path),
                       "--name", "t"])
    assert code == 0
    data = json.loads((tmp_path / "t.json").read_text())
    (row,) = data["rows"]
    assert "skipped" not in row, row.get("skipped")
    assert row["key"] == "mappo/matrix:climbing/16" and row["iterations"] >= 2
    assert row["e2e_sps"] > 0 and row["floor_sps"] > 0 and row["cpu_sps"] > 0
    assert row["e2e_s"] == pytest.approx(row["collect_s"] + row["update_s"] + row["diag_s"], rel=0.5)
    assert 0 < row["peak_rss_mb"] < 4096
    md = (tmp_path / "t.md").read_text()
    assert "| mappo | matrix:climbing | 16 | 1 |" in md
    assert data["meta"]["cpu"] in md and "torch" in md and "Reproduce: `" in md


def test_cli_bench_is_the_same_harness(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["bench", "--help"])
    assert exit_info.value.code == 0
    assert "--only" in capsys.readouterr().out


def test_harness_has_maddpg_rows_with_a_floor_of_the_same_gradient_steps(tmp_path):
    bench = _harness()
    code = bench.main(["--quick", "--threads", "1", "--only", "maddpg/mpe:simple_spread/16", "--out", str(tmp_path),
                       "--name", "m", "--set", "maddpg.batch_size=64"])
    assert code == 0
    (row,) = json.loads((tmp_path / "m.json").read_text())["rows"]
    assert "skipped" not in row, row.get("skipped")
    assert row["e2e_sps"] > 0 and row["floor_sps"] > row["e2e_sps"]  # the floor excludes collection
    assert row["update_s"] > 0.1 * row["collect_s"]  # the timed updates ran gradient steps (no warm-up)
    assert 0.3 < row["floor_s"] / row["update_s"] < 3  # the floor: as many gradient steps as the update
    assert "| maddpg | mpe:simple_spread | 16 | 1 |" in (tmp_path / "m.md").read_text()


def test_row_overrides_replace_base_keys():
    """JaxMARL's rows set rollout_length and PPO epochs that BASE also sets: the row's value wins (no duplicate key)."""
    bench = _harness()
    c = bench.case("x", "mpe:simple_spread", 16, 1, [*bench.JAXMARL, "ppo.compile=on"])
    keys = [o.split("=", 1)[0] for o in c["overrides"]]
    assert len(keys) == len(set(keys))
    assert "rollout_length=128" in c["overrides"] and "rollout_length=25" not in c["overrides"]


def test_speed_vs_peers_skips_a_missing_peer_in_one_line_and_takes_ratios_within_rounds(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("speed_vs_peers_under_test", HARNESS.parent / "speed_vs_peers.py")
    svp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(svp)
    monkeypatch.setitem(svp.PEERS, "jaxmarl", (tmp_path / "nowhere", "jaxmarl_ippo.sh", Path("x.py")))
    got = svp.run_peer("jaxmarl", [], 1, 10.0)
    assert got == {"skipped": f"no jaxmarl virtualenv at {tmp_path / 'nowhere'}: run "
                              "`bash benchmarks/peers/jaxmarl_ippo.sh` first"}
    rounds = [{"a": {"sps": 30.0}, "b": {"sps": 10.0, "floor_sps": 20.0}},
              {"a": {"sps": 10.0}, "b": {"sps": 5.0, "floor_sps": 4.0}}]
    assert svp.ratio(rounds, "a", "b") == [2.0, 3.0]  # per round, not ratio of medians
    assert svp.ratio(rounds, "a", "b", "floor_sps") == [1.5, 2.5]
    assert svp.span([2.0, 3.0]) == "2.50× [2.00–3.00]"


def test_gemm_floor_replays_every_matrix_multiply_of_an_update(tmp_path):
    """The GEMM-only floor of an (eager) update: forward (addmm) and backward (mm) of both networks' three layers, per
    mini-batch step, and it costs less than the update it was taken from. (The preset's 2M env steps would compile
    the update, whose C++ calling code calls the products without ATen's dispatcher, so the profiler sees none.)"""
    import time

    from hypermappo.config import build_config
    from hypermappo.experiment import Experiment

    bench = _harness()
    cfg = build_config("mpe/simple_spread", ["num_envs=4", "rollout_length=8", "ppo.ppo_epoch=2", "ppo.num_mini_batch=2",
                                             "model.hidden_sizes=[16,16]", "torch_threads=1", "log.tensorboard=false",
                                             "diagnostics.every=0", "ppo.compile=off", f"run_dir={tmp_path / 'r'}"])
    exp = Experiment(cfg, quiet=True)
    exp._start_episodes()
    exp.collect()
    L = exp.primary
    t0 = time.perf_counter()
    L.algo.update(L.buffer, L.batch_generator)
    update_s = time.perf_counter() - t0
    seconds, calls = bench.gemm_floor_s(L.algo, L.buffer, L.batch_generator)
    steps = 2 * 2
    # per step: 6 forward addmm, 6 weight-gradient and 4 input-gradient mm (the first layers' inputs need none)
    assert calls >= 16 * steps, calls
    assert 0 < seconds < update_s
    exp.logger.close()


def test_speed_vs_peers_gemm_bound_is_collection_plus_gemms(tmp_path):
    spec = importlib.util.spec_from_file_location("speed_vs_peers_under_test", HARNESS.parent / "speed_vs_peers.py")
    svp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(svp)
    rounds = [{"ippo eager": {"gemm_ms": 20.0, "gemm_calls": 288, "floor_sps": 40_000.0},
               "ippo compiled": {"collect_ms": 44.0, "sps": 20_000.0}, "JaxMARL IPPO-FF": {"sps": 64_000.0}}]
    (line,) = svp.gemm_bounds(rounds)
    # 2,048 env steps in (44 + 20) ms = 32,000 env-steps/s = 0.80x the floor = 0.50x the peer
    assert line == ("- jaxmarl: GEMMs 20 ms per update (288 calls) beside the compiled row's collection: at most "
                    "32,000 env-steps/s = 0.80× the eager update-only floor = 0.50× JaxMARL IPPO-FF")
