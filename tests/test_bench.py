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
