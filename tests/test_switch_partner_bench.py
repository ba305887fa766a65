"""The switch-partner benchmark's measures: windows around the switch row and the recovery time."""

import importlib.util
from pathlib import Path

import numpy as np

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "switch_partner.py"
spec = importlib.util.spec_from_file_location("switch_partner", PATH)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_windows_and_recovery_time():
    # 12 updates at 70 with the stag partner, then a drop to 5 recovering linearly to 15 and staying there
    pre = np.full(12, 70.0)
    post = np.concatenate([np.linspace(5.0, 15.0, 11), np.full(19, 15.0)])
    ret = np.concatenate([pre, post])
    stags = np.concatenate([np.full(12, 7.0), np.zeros(30)])
    m = bench.measure({"ret": ret, "stags": stags, "switch": 12, "steps": np.arange(42)})
    assert m["return_before"] == 70.0 and m["stags_before"] == 7.0
    assert m["return_end"] == 15.0 and m["stags_end"] == 0.0
    # post-switch returns are 5, 6, ..., 15 at k = 1..11; the trailing 5-update mean reaches 0.9 * 15 = 13.5
    # first at k = 12 (12, 13, 14, 15, 15 -> 13.8; at k = 11: 11, ..., 15 -> 13.0)
    assert m["recovery_updates"] == 12


def test_recovery_is_one_update_when_the_return_does_not_drop():
    ret = np.concatenate([np.full(12, 15.0), np.full(10, 15.0)])
    m = bench.measure({"ret": ret, "stags": np.zeros(22), "switch": 12, "steps": np.arange(22)})
    assert m["recovery_updates"] == 1  # the first post-switch mean is over the one update there is
