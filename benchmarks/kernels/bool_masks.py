"""The compiled path's mask pass (src/hypermappo/compile/bool_masks.py) on and off, side by side.

The compiled Hyper-MAPPO observation-context row of speed_vs_peers.py (VMAS simple_spread, E = 1024, the MAPPO
paper's settings; its mini-batch step is a forward / backward pair of graphs, where the pass acts) in fresh
processes with HYPERMAPPO_RECOMPUTE_MASKS=1 and =0 alternately, `--rounds` pairs: collect and update ms per
update and the ratio within each pair.

    python benchmarks/kernels/bool_masks.py --rounds 3

Writes benchmarks/results/bool_masks.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # benchmarks/: throughput.py (the shared harness), results/
sys.path.insert(0, str(BENCH))
from throughput import case, machine, switch_pairs  # noqa: E402

RESULTS = BENCH / "results"
OVERRIDES = ["algo=mappo", "actor=hyper", "hyper.context=[obs]", "ppo.compile=on"]  # speed_vs_peers' hyper-obs row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    meta = {**machine(), "threads": args.threads, "rounds": args.rounds,
            "command": "python benchmarks/kernels/bool_masks.py" + "".join(f" {a}" for a in sys.argv[1:])}
    c = case("hyper-obs compiled", "vmas:simple_spread", 1024, args.threads, OVERRIDES)
    pairs = switch_pairs(c, "HYPERMAPPO_RECOMPUTE_MASKS", args.rounds, lambda q: (
        f"round {q['round']}: update, masks recomputed {q['on']['update_s'] * 1e3:.0f} ms, saved as bool "
        f"{q['off']['update_s'] * 1e3:.0f} ms ({q['update_off_over_on']:.2f}x); env-steps/s "
        f"{q['on']['e2e_sps']:,.0f} vs {q['off']['e2e_sps']:,.0f}"))
    lines = [f"# Mask pass on / off, compiled hyper-obs row ({meta['date']})", "",
             f"`{meta['command']}` on {meta['cpu']} ({args.threads} threads), torch {meta['torch']}, load average "
             f"{meta['load_average_start']} at the start. VMAS simple_spread, E = 1024, paper settings, "
             f"{' '.join(OVERRIDES)}; fresh processes, alternating.", "",
             "| round | collect + update ms, recomputed | collect + update ms, saved as bool | update off / on | "
             "env-steps/s on | env-steps/s off |", "|---|---:|---:|---:|---:|---:|"]
    for q in pairs:
        on, off = q["on"], q["off"]
        lines.append(f"| {q['round']} | {on['collect_s'] * 1e3:.0f} + {on['update_s'] * 1e3:.0f} | "
                     f"{off['collect_s'] * 1e3:.0f} + {off['update_s'] * 1e3:.0f} | {q['update_off_over_on']:.2f}x | "
                     f"{on['e2e_sps']:,.0f} | {off['e2e_sps']:,.0f} |")
    lines += ["", f"Median: the update is {statistics.median(q['update_off_over_on'] for q in pairs):.2f}x as fast "
                  f"with the pass; env-steps/s {statistics.median(q['sps_on_over_off'] for q in pairs):.2f}x.", ""]
    md = "\n".join(lines)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bool_masks.json").write_text(json.dumps({"meta": meta, "pairs": pairs}, indent=1))
    (RESULTS / "bool_masks.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
