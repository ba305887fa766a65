"""A compiled goal-belief run with the belief's own graphs on and off, side by side.

The `mappo-coplayer-ego-compiled` row of benchmarks/throughput.py (the egocentric stag hunt, E = 1024, the MAPPO
paper's settings, the Bayesian goal belief, ppo.compile=on) in fresh processes with HYPERMAPPO_COPLAYER_GRAPHS=1
(the belief's predictions, its Bayes update and the goal model's Adam steps as graphs, algos/coplayer_bayes.py
`compile`) and =0 (those three eager beside the compiled policy step and PPO update) alternately, `--rounds` pairs:
collect and update ms per update (the update includes the co-player model's own) and the ratios within each pair.

    python benchmarks/kernels/coplayer_graphs.py --rounds 3

Writes benchmarks/results/coplayer_graphs.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # benchmarks/: throughput.py (the shared harness), results/
sys.path.insert(0, str(BENCH))
from throughput import COMPILED, COPLAYER, EGOCENTRIC, VARIANTS, case, machine, switch_pairs  # noqa: E402

RESULTS = BENCH / "results"
OVERRIDES = [*VARIANTS["mappo"], *COPLAYER["mappo-coplayer"][0], EGOCENTRIC, *COMPILED]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    meta = {**machine(), "threads": args.threads, "rounds": args.rounds,
            "command": "python benchmarks/kernels/coplayer_graphs.py" + "".join(f" {a}" for a in sys.argv[1:])}
    c = case("mappo-coplayer-ego-compiled", "staghunt", 1024, args.threads, OVERRIDES)
    pairs = switch_pairs(c, "HYPERMAPPO_COPLAYER_GRAPHS", args.rounds, lambda q: (
        f"round {q['round']}: collect + update, belief as graphs {q['on']['collect_s'] * 1e3:.0f} + "
        f"{q['on']['update_s'] * 1e3:.0f} ms, eager {q['off']['collect_s'] * 1e3:.0f} + "
        f"{q['off']['update_s'] * 1e3:.0f} ms; env-steps/s {q['sps_on_over_off']:.2f}x"))
    for q in pairs:
        q["collect_off_over_on"] = q["off"]["collect_s"] / q["on"]["collect_s"]
    lines = [f"# The goal belief's graphs on / off in a compiled run ({meta['date']})", "",
             f"`{meta['command']}` on {meta['cpu']} ({args.threads} thread(s)), torch {meta['torch']}, load average "
             f"{meta['load_average_start']} at the start. The egocentric stag hunt, E = 1024, paper settings, "
             f"`{' '.join(OVERRIDES)}`; fresh processes, alternating HYPERMAPPO_COPLAYER_GRAPHS=1 / =0. Update: "
             "the PPO update and the co-player model's own.", "",
             "| round | collect + update ms, graphs | collect + update ms, eager | collect off / on | update off / on "
             "| env-steps/s on | env-steps/s off |", "|---|---:|---:|---:|---:|---:|---:|"]
    for q in pairs:
        on, off = q["on"], q["off"]
        lines.append(f"| {q['round']} | {on['collect_s'] * 1e3:.0f} + {on['update_s'] * 1e3:.0f} | "
                     f"{off['collect_s'] * 1e3:.0f} + {off['update_s'] * 1e3:.0f} | {q['collect_off_over_on']:.2f}x | "
                     f"{q['update_off_over_on']:.2f}x | {on['e2e_sps']:,.0f} | {off['e2e_sps']:,.0f} |")
    med = statistics.median
    lines += ["", f"Median within pairs: collection {med(q['collect_off_over_on'] for q in pairs):.2f}x and the update "
                  f"{med(q['update_off_over_on'] for q in pairs):.2f}x as fast with the graphs; env-steps/s "
                  f"{med(q['sps_on_over_off'] for q in pairs):.2f}x.", ""]
    md = "\n".join(lines)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "coplayer_graphs.json").write_text(json.dumps({"meta": meta, "pairs": pairs}, indent=1))
    (RESULTS / "coplayer_graphs.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
