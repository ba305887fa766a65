"""The compiled collection step (src/hypermappo/compile/collect_step.py) and the graphs' C++ calling code
(compile/decision.py's `cpp_wrapper`), each against what the compiled path did before, side by side in one process.

  collect  one rollout's collection (`Experiment.collect`) with ppo.compile=on, three ways in turn each round:
           the two-call path (compiled policy step, compiled env core, eager buffer writes between them), one graph
           per step with Python calling code, and one graph per step with C++ calling code (the default).
  update   the compiled update (`algo.update` on the same filled buffer) with the graphs' calling code in Python
           and in C++ (the default), in turn each round.

Rows: IPPO at JaxMARL's settings (16 envs x 128 steps, MPE simple_spread, 4 epochs x 4 mini-batches), MAPPO on the
mpe/simple_spread preset's batch (128 envs x 25 steps) and, for the update only, MAPPO at the paper's E = 1024 on
VMAS simple_spread (its collection has no step core: VMAS steps eagerly). Ratios are taken within a round (the
variants of a round run back to back in one process, so a slow phase of the machine hits all of them), and the
median over rounds is reported with the range; compile time is excluded (every variant runs twice first).

    python benchmarks/kernels/collect_step.py --rounds 12

Writes benchmarks/results/collect_step.{json,md}.
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

ROWS = [("ippo, JaxMARL's settings", "mpe:simple_spread", 16, [*JAXMARL], True),
        ("mappo, mpe/simple_spread preset batch", "mpe:simple_spread", 128, VARIANTS["mappo"], True),
        ("mappo, paper settings", "vmas:simple_spread", 1024, VARIANTS["mappo"], False)]


def measure(name: str, env: str, e: int, overrides: list[str], collect: bool, rounds: int, threads: int) -> dict:

    from hypermappo.algos.fused_step import FusedMinibatchStep
    from hypermappo.compile import collect_step, compile_fn
    c = case(name, env, e, threads, [*overrides, "ppo.compile=on"])
    with tempfile.TemporaryDirectory() as tmp:
        exp = started_run(c, f"{tmp}/run")
        L = exp.primary
        collectors = {}
        if collect:
            assert exp.collect_graph is not None, exp.summary_extra.get("collect")
            collectors = {"two calls": None,
                          "one graph, Python calling code": collect_step.CollectStep(
                              L, exp.env, lambda f: compile_fn(f, cpp_wrapper=False)),
                          "one graph, C++ calling code": exp.collect_graph}
        updaters = {"Python calling code": FusedMinibatchStep(L.algo, lambda f: compile_fn(f, cpp_wrapper=False)),
                    "C++ calling code": L.algo.fused}

        def run_collect(v):
            exp.collect_graph = v
            t0 = time.perf_counter()
            exp.collect()
            return time.perf_counter() - t0

        def run_update(v):
            L.algo.fused = v
            t0 = time.perf_counter()
            L.algo.update(L.buffer, L.batch_generator)
            return time.perf_counter() - t0

        for _ in range(2):  # compile (or load) every variant's graphs, then one steady call each
            for v in collectors.values():
                run_collect(v)
            exp.collect_graph = None if not collect else collectors["one graph, C++ calling code"]
            exp.collect()
            for v in updaters.values():
                run_update(v)
        times = {k: [] for k in [*collectors, *updaters]}
        for _ in range(rounds):
            for k, v in collectors.items():
                times[k].append(run_collect(v))
            for k, v in updaters.items():
                times[k].append(run_update(v))
        exp.logger.close()
    ms = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    out = {"name": name, "env": env, "num_envs": e, "rounds": rounds, "ms": ms, "times": times}
    if collect:
        base = times["two calls"]
        out["collect_ratio"] = {k: span([a / b for a, b in zip(base, times[k])]) for k in collectors if k != "two calls"}
    out["update_ratio"] = span([a / b for a, b in zip(times["Python calling code"], times["C++ calling code"])])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    info = machine()
    results = measure_rows(ROWS, measure, args.rounds, args.threads)
    lines = [f"# The compiled collection step and the graphs' C++ calling code ({info['date']})", "",
             f"`python benchmarks/kernels/collect_step.py --rounds {args.rounds}` on {info['cpu']} "
             f"({args.threads} threads), "
             f"torch {info['torch']}, load average {info['load_average_start']} at the start. Variants side by side "
             "in one process, in turn each round; medians over rounds, ratios within a round [range]; compile "
             "excluded.", "",
             "| row | collection ms: two calls / one graph (Python) / one graph (C++) | two calls / one graph (C++) | "
             "update ms: Python / C++ calling code | Python / C++ |", "|---|---:|---:|---:|---:|"]
    for r in results:
        m = r["ms"]
        col = (f"{m['two calls']:.1f} / {m['one graph, Python calling code']:.1f} / "
               f"{m['one graph, C++ calling code']:.1f}" if "collect_ratio" in r else "– (VMAS: no step core)")
        ratio = r["collect_ratio"]["one graph, C++ calling code"] if "collect_ratio" in r else "–"
        lines.append(f"| {r['name']} ({r['env']}, E = {r['num_envs']}) | {col} | {ratio} | "
                     f"{m['Python calling code']:.1f} / {m['C++ calling code']:.1f} | {r['update_ratio']} |")
    text = "\n".join(lines) + "\n"
    write_results("collect_step", {"machine": info, "rounds": args.rounds, "rows": results}, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
