"""The compiled / eager-floor ratio measured in one process: MAPPO compiled (collection + update) against the eager update
alone, at the MAPPO paper's settings (VMAS simple_spread, E = 1024, T = 25, 10 epochs, 1 mini-batch, 64x64).

speed_vs_peers.py takes this ratio between two fresh processes of a round; on this machine the speed of adjacent
processes differs by up to ~30%, and over four runs of the same code its median read 1.20-1.78x. Here one process
builds both runs (eager: ppo.compile=off; compiled: ppo.compile=on) and alternates them each round: the eager run's
collection (untimed) and update (timed: the floor), then the compiled run's collection and update (timed: a whole
training step). The ratio is taken within a round; the median over rounds is reported with the range; compile
excluded (two warm-up rounds).

    python benchmarks/compile_floor.py --rounds 8

Writes benchmarks/results/compile_floor.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from throughput import VARIANTS, case, collect_and_update, machine, span, started_run, write_results  # noqa: E402

ENV, E = "vmas:simple_spread", 1024


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)

    info = machine()
    with tempfile.TemporaryDirectory() as tmp:
        runs = {mode: started_run(case("mappo", ENV, E, args.threads, [*VARIANTS["mappo"], f"ppo.compile={mode}"]),
                                  f"{tmp}/{mode}") for mode in ("off", "on")}
        step = collect_and_update
        for _ in range(2):
            step(runs["off"]), step(runs["on"])
        rounds = []
        for r in range(args.rounds):
            (_, eager_update), (collect, update) = step(runs["off"]), step(runs["on"])
            rounds.append({"eager_update_s": eager_update, "compiled_collect_s": collect, "compiled_update_s": update,
                           "ratio": eager_update / (collect + update)})
            print(json.dumps({"round": r + 1, **{k: round(v, 4) for k, v in rounds[-1].items()}}), flush=True)
        for exp in runs.values():
            exp.logger.close()

    def med(key):
        return statistics.median(x[key] for x in rounds)

    ratios = [x["ratio"] for x in rounds]
    steps = E * 25
    text = "\n".join([
        f"# MAPPO compiled (collection + update) / eager update alone, one process ({info['date']})", "",
        f"`python benchmarks/compile_floor.py --rounds {args.rounds}` on {info['cpu']} ({args.threads} threads), torch "
        f"{info['torch']}, load average {info['load_average_start']} at the start. VMAS simple_spread, E = {E}, T = 25, "
        "10 epochs x 1 mini-batch, 64x64; both runs in one process, alternating each round; medians over rounds; "
        "compile excluded.", "",
        "| eager update ms (the floor) | compiled collection ms | compiled update ms | floor env-steps/s | "
        "compiled env-steps/s | compiled / floor, median [range] |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {med('eager_update_s') * 1e3:.0f} | {med('compiled_collect_s') * 1e3:.0f} | "
        f"{med('compiled_update_s') * 1e3:.0f} | {steps / med('eager_update_s'):,.0f} | "
        f"{steps / statistics.median(x['compiled_collect_s'] + x['compiled_update_s'] for x in rounds):,.0f} | "
        f"{span(ratios)} |", ""])
    write_results("compile_floor", {"machine": info, "rounds": rounds}, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
