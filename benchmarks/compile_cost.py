"""What compiling costs and when it pays back, from an empty graph cache and from a warm one, on this machine.

For each setting (MAPPO at the paper's settings on MPE simple_spread, E = 1024; IPPO at JaxMARL's, E = 16; and the
latter with 4 mini-batch steps per update graph, HYPERMAPPO_STEPS_PER_GRAPH=4), rows in fresh processes
(benchmarks/throughput.py's harness): `ppo.compile=on` with a new, empty TORCHINDUCTOR_CACHE_DIR (cold), the same
again with that cache (warm), and eager. Compile seconds are the first update's excess over a steady one. Break-even
= compile seconds / (eager - compiled seconds per update) x env steps per update: the run length from which compiling
saves time. This is what `ppo.compile=auto` prices (compile/decision.py: from 1M env steps where the cache holds a
learner's graphs, from 10M where it does not).

    python benchmarks/compile_cost.py                  # ~17 minutes on 2 cores
    python benchmarks/compile_cost.py --only mappo     # one setting
    python benchmarks/compile_cost.py --pairs 3 --cache DIR   # warm rows side by side (see below)

Writes benchmarks/results/compile_cost_<cpu>.{json,md} (--name overrides).

`--pairs R`: the running cost of unrolling, side by side. R rounds, each of three fresh-process rows in turn with one
graph cache (`--cache`, compiled first where it is new): IPPO at JaxMARL's settings (E = 16) eager, compiled with one
mini-batch step per update graph, compiled with four. Medians over rounds and the per-round ratios; writes
compile_cost_unroll_<cpu>.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from throughput import JAXMARL, case, fmt, machine, run_worker, write_results  # noqa: E402

SETTINGS = {
    "mappo": ("MAPPO, paper settings (T = 25, 10 epochs, 1 mini-batch)", 1024, ["algo=mappo", "actor=mlp"], {}),
    "ippo": ("IPPO, JaxMARL's settings (T = 128, 4 epochs x 4 mini-batches, tanh)", 16, JAXMARL, {}),
    "ippo-unroll4": ("the same, 4 mini-batch steps per update graph", 16, JAXMARL,
                     {"HYPERMAPPO_STEPS_PER_GRAPH": "4"}),
}


def row(setting: str, mode: str, cache: str, threads: int) -> dict:
    label, e, over, env = SETTINGS[setting]
    c = case(f"{setting} {mode}", "mpe:simple_spread", e, threads,
             [*over, f"ppo.compile={'off' if mode == 'eager' else 'on'}"])
    r = run_worker(c, 2, 5, 3.0, 30.0, 1800, None,
                   {"TORCHINDUCTOR_CACHE_DIR": cache, "HYPERMAPPO_STEPS_PER_GRAPH": None, **env})
    if "skipped" in r:
        raise SystemExit(f"compile_cost.py: {setting} {mode}: {r['skipped']}")
    return r


def pairs(rounds: int, cache: str, threads: int, meta: dict, name: str | None) -> int:
    import statistics

    variants = [("eager", "ippo", "eager"), ("1 step per graph", "ippo", "warm"),
                ("4 steps per graph", "ippo-unroll4", "warm")]
    got = {v[0]: [] for v in variants}
    for r in range(rounds):
        for label, setting, mode in variants:
            got[label].append(row(setting, mode, cache, threads))
            x = got[label][-1]
            print(f"  round {r + 1} {label}: {fmt(x['e2e_sps'])} env-steps/s, update {x['update_s'] * 1e3:.0f} ms",
                  flush=True)
    med = statistics.median
    lines = ["# Unrolled mini-batch steps: what they save while running", "",
             f"{meta['date']}; CPU: {meta['cpu']}, {meta['cores']} cores, {threads} threads per run; torch "
             f"{meta['torch']}. IPPO at JaxMARL's settings on MPE simple_spread, E = 16 (16 mini-batch steps per "
             f"update), warm graph cache; {rounds} rounds, each row in a fresh process, the three in turn.", "",
             "Reproduce: `python benchmarks/compile_cost.py --pairs 3`", "",
             "| row | env-steps/s (median [range]) | update ms (median) | collect ms (median) |", "|---|---:|---:|---:|"]
    for label, _, _ in variants:
        xs = got[label]
        sps = [x["e2e_sps"] for x in xs]
        lines.append(f"| {label} | {fmt(med(sps))} [{fmt(min(sps))}-{fmt(max(sps))}] | "
                     f"{med(x['update_s'] for x in xs) * 1e3:.0f} | {med(x['collect_s'] for x in xs) * 1e3:.0f} |")
    ratio = [a["update_s"] / b["update_s"] for a, b in zip(got["1 step per graph"], got["4 steps per graph"])]
    lines += ["", f"Update time, 1 step per graph over 4 (per round): median {med(ratio):.2f}x "
              f"[{min(ratio):.2f}-{max(ratio):.2f}]. Compiling them from an empty cache: the compile_cost table."]
    cpu = "amd" if "AMD" in meta["cpu"] else "intel" if "Intel" in meta["cpu"] else "cpu"
    write_results(name or f"compile_cost_unroll_{cpu}", {"meta": meta, "rows": got}, "\n".join(lines) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(SETTINGS), help=f"comma-separated, of {', '.join(SETTINGS)}")
    p.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--name", default=None)
    p.add_argument("--pairs", type=int, default=0, help="rounds of the unrolling side-by-side rows instead")
    p.add_argument("--cache", default=None, help="graph cache for --pairs (default: a new one)")
    args = p.parse_args(argv)
    if args.pairs:
        if args.cache:
            return pairs(args.pairs, args.cache, args.threads, machine(), args.name)
        with tempfile.TemporaryDirectory() as cache:
            return pairs(args.pairs, cache, args.threads, machine(), args.name)
    only = args.only.split(",")
    bad = [s for s in only if s not in SETTINGS]
    if bad:
        print(f"compile_cost.py: error: --only {bad[0]!r}: expected one of {', '.join(SETTINGS)}", file=sys.stderr)
        return 2
    meta = machine()
    results = []
    for setting in only:
        with tempfile.TemporaryDirectory() as cache:
            cold = row(setting, "cold", cache, args.threads)
            warm = row(setting, "warm", cache, args.threads)
        eager = row(setting, "eager", cache, args.threads)  # no cache needed
        steps = eager["rollout_length"] * eager["num_envs"]
        saved = eager["e2e_s"] - warm["e2e_s"]
        out = {"setting": setting, "label": SETTINGS[setting][0], "num_envs": eager["num_envs"],
               "env_steps_per_update": steps, "cold_compile_s": cold["compile_s"], "warm_compile_s": warm["compile_s"],
               "eager_s": eager["e2e_s"], "compiled_s": warm["e2e_s"], "eager_sps": eager["e2e_sps"],
               "compiled_sps": warm["e2e_sps"], "saved_s_per_update": saved,
               "break_even_cold": cold["compile_s"] / saved * steps if saved > 0 else None,
               "break_even_warm": warm["compile_s"] / saved * steps if saved > 0 else None,
               "rows": {"cold": cold, "warm": warm, "eager": eager}}
        results.append(out)
        print(f"  {setting}: cold {out['cold_compile_s']:.0f} s, warm {out['warm_compile_s']:.0f} s, eager "
              f"{fmt(out['eager_sps'])} vs compiled {fmt(out['compiled_sps'])} env-steps/s", flush=True)
    lines = ["# What compiling costs, and when it pays back", "",
             f"{meta['date']}; CPU: {meta['cpu']}, {meta['cores']} cores, {args.threads} threads per run; torch "
             f"{meta['torch']}; MPE simple_spread (batched torch port). Each row in a fresh process; compile seconds = "
             "the first update's excess over a steady one; one cold and one warm compile per setting.", "",
             "Reproduce: `python benchmarks/compile_cost.py`", "",
             "| setting | E | compile, empty cache (s) | compile, warm cache (s) | eager env-steps/s | compiled "
             "env-steps/s | saved per update (s) | pays back from (env steps), cold | warm |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        def be(x):
            return f"{x / 1e6:.1f}M" if x is not None else "never"
        lines.append(f"| {r['label']} | {r['num_envs']:,} | {r['cold_compile_s']:.0f} | {r['warm_compile_s']:.0f} | "
                     f"{fmt(r['eager_sps'])} | {fmt(r['compiled_sps'])} | {r['saved_s_per_update']:.3f} | "
                     f"{be(r['break_even_cold'])} | {be(r['break_even_warm'])} |")
    lines += ["", "`ppo.compile=auto` compiles from 1M env steps where the cache holds a learner's graphs (a compiled "
              "run records them) and from 10M where it does not."]
    cpu = "amd" if "AMD" in meta["cpu"] else "intel" if "Intel" in meta["cpu"] else "cpu"
    write_results(args.name or f"compile_cost_{cpu}", {"meta": meta, "results": results}, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
