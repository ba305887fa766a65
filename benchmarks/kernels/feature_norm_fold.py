"""The input LayerNorm folded into the first layer (agent_layers.fold_norm) against applying it separately: the
update's time, side by side in one process.

Each row builds one run, fills its buffer, then times `algo.update` with the fold on and off in turn each round
(the trunks' `fold_feature_norm` flag; a compiled row compiles a graph for each), a fresh rollout before each
round. Ratios are taken within a round; the median over rounds is reported with the range; compile excluded (each
arm runs twice first).

Rows: MAPPO at the paper's settings (VMAS simple_spread, E = 1024, 10 epochs, 1 mini-batch: 76,800 agent samples)
eager and compiled, Hyper-MAPPO agent-id and observation context (lean defaults) compiled there, and IPPO at
JaxMARL's settings (16 envs x 128 steps, 4 x 4 mini-batches of 1,536) compiled.

    python benchmarks/kernels/feature_norm_fold.py --rounds 6

Writes benchmarks/results/feature_norm_fold.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # benchmarks/: throughput.py (the shared harness), results/
sys.path.insert(0, str(BENCH))
from throughput import JAXMARL, VARIANTS, case, machine, measure_rows, span, started_run, write_results  # noqa: E402

PAPER = ("vmas:simple_spread", 1024)
ROWS = [("mappo eager, paper", *PAPER, [*VARIANTS["mappo"], "ppo.compile=off"]),
        ("mappo compiled, paper", *PAPER, [*VARIANTS["mappo"], "ppo.compile=on"]),
        ("hyper-id compiled, paper", *PAPER, [*VARIANTS["hyper-id"], "ppo.compile=on"]),
        ("hyper-obs compiled, paper", *PAPER, ["algo=mappo", "actor=hyper", "hyper.context=[obs]", "ppo.compile=on"]),
        ("ippo compiled, JaxMARL's settings", "mpe:simple_spread", 16, [*JAXMARL, "ppo.compile=on"])]


def measure(name: str, env: str, e: int, overrides: list[str], rounds: int, threads: int) -> dict:
    from hypermappo.models.agent_layers import AgentMLP

    c = case(name, env, e, threads, overrides)
    with tempfile.TemporaryDirectory() as tmp:
        exp = started_run(c, f"{tmp}/run")
        L = exp.primary
        trunks = [m for net in (L.actor, L.critic) for m in net.modules() if isinstance(m, AgentMLP)]
        assert trunks and all(t.fold_feature_norm for t in trunks), "the fold is not on by default here"

        def update(fold: bool) -> float:
            for t in trunks:
                t.fold_feature_norm = fold
            t0 = time.perf_counter()
            L.algo.update(L.buffer, L.batch_generator)
            return time.perf_counter() - t0

        exp.collect()
        for _ in range(2):
            update(True), update(False)
        times = {"folded": [], "separate": []}
        for _ in range(rounds):
            exp.collect()
            times["folded"].append(update(True))
            times["separate"].append(update(False))
        exp.logger.close()
    ms = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    ratio = span([a / b for a, b in zip(times["separate"], times["folded"])])
    return {"name": name, "env": env, "num_envs": e, "rounds": rounds, "ms": ms, "ratio": ratio, "times": times}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    info = machine()
    results = measure_rows(ROWS, measure, args.rounds, args.threads)
    lines = [f"# The input LayerNorm folded into the first layer vs applied separately ({info['date']})", "",
             f"`python benchmarks/kernels/feature_norm_fold.py --rounds {args.rounds}` on {info['cpu']} ({args.threads} "
             f"threads), torch {info['torch']}, load average {info['load_average_start']} at the start. Both arms in "
             "one process, in turn each round (a fresh rollout before each round); medians over rounds, ratio within "
             "a round [range]; compile excluded.", "",
             "| row | update ms, folded | update ms, separate | separate / folded |", "|---|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['name']} ({r['env']}, E = {r['num_envs']}) | {r['ms']['folded']:.0f} | "
                     f"{r['ms']['separate']:.0f} | {r['ratio']} |")
    text = "\n".join(lines) + "\n"
    write_results("feature_norm_fold", {"machine": info, "rounds": args.rounds, "rows": results}, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
