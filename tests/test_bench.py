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
