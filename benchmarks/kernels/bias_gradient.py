"""The 64-wide blocks' bias gradients taken from the fused backward kernel (linear_act_norm.py: the kernel's column
sums of dz) against Inductor's separate column sum of dz, in compiled training steps side by side.

Two runs of each row in one process, one compiled with the kernel's sums (the default) and one with the pass's
`bias_gradients` off while it compiled (each its own graphs); each round times one training step (collection +
update) of each in turn; compile excluded (two warm-up rounds). Rows: MAPPO and Hyper-MAPPO with the observation
context (lean defaults), compiled, VMAS simple_spread, E = 1024, T = 25, 10 epochs, 1 mini-batch, 64x64.

    python benchmarks/kernels/bias_gradient.py --rounds 6

Writes benchmarks/results/bias_gradient.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # benchmarks/: throughput.py (the shared harness), results/
sys.path.insert(0, str(BENCH))
from throughput import VARIANTS, case, collect_and_update, machine, span, started_run, write_results  # noqa: E402

ROWS = ["mappo", "hyper-obs-last"]


def measure(name: str, rounds: int, threads: int, tmp: str) -> dict:
    from hypermappo.compile import linear_act_norm

    runs = {}
    for sums in (True, False):
        linear_act_norm.PASS.bias_gradients = sums
        exp = started_run(case(name, "vmas:simple_spread", 1024, threads, [*VARIANTS[name], "ppo.compile=on"]),
                          f"{tmp}/{name}-{sums}")
        before = dict(linear_act_norm.PASS.rewritten)
        collect_and_update(exp)  # compiles this run's graphs with the setting above
        taken = linear_act_norm.PASS.rewritten["bias"] - before["bias"]
        runs["kernel sums" if sums else "separate sums"] = (exp, taken)
    linear_act_norm.PASS.bias_gradients = True
    for _ in range(2):
        for exp, _ in runs.values():
            collect_and_update(exp)
    times = {k: [] for k in runs}
    for _ in range(rounds):
        for k, (exp, _) in runs.items():
            times[k].append(sum(collect_and_update(exp)))
    for exp, _ in runs.values():
        exp.logger.close()
    return {"name": name, "ms": {k: statistics.median(v) * 1e3 for k, v in times.items()}, "times": times,
            "bias_rewrites": {k: t for k, (_, t) in runs.items()},
            "ratio": span([a / b for a, b in zip(times["separate sums"], times["kernel sums"])])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    info = machine()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ROWS:
            r = measure(name, args.rounds, args.threads, tmp)
            print({k: r[k] for k in r if k != "times"}, flush=True)
            results.append(r)
    lines = [f"# Bias gradients from the fused backward kernel against a separate column sum ({info['date']})", "",
             f"`python benchmarks/kernels/bias_gradient.py --rounds {args.rounds}` on {info['cpu']} "
             f"({args.threads} threads), "
             f"torch {info['torch']}, load average {info['load_average_start']} at the start. Both runs of a row in "
             "one process, in turn each round; medians over rounds, ratios within a round [range]; compile "
             "excluded.", "",
             "| row | step ms: kernel sums / separate sums | separate / kernel | bias sums taken from the kernel "
             "(graphs compiled) |", "|---|---:|---:|---:|"]
    for r in results:
        m, t = r["ms"], r["bias_rewrites"]
        lines.append(f"| {r['name']} compiled | {m['kernel sums']:.0f} / {m['separate sums']:.0f} | {r['ratio']} | "
                     f"{t['kernel sums']} / {t['separate sums']} |")
    text = "\n".join(lines) + "\n"
    write_results("bias_gradient", {"machine": info, "rounds": args.rounds, "rows": results}, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
