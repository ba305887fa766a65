"""Learning benchmark: MAPPO and IPPO on MPE simple_spread, evaluation return at 2M / 5M / 10M steps.

Task: mpe2 `simple_spread_v3` semantics (N=3, 25 steps, local_ratio 0.5, discrete actions) on the
batched torch backend `mpe:simple_spread`, which tests/test_env_mpe_torch.py shows reproduces
mpe2's observations and rewards on identical action sequences. Settings: the MAPPO reference
code's MPE script (ppo_epoch 10, one mini-batch, lr 7e-4, hidden 64). Each milestone
evaluates 100 episodes with deterministic actions. Envs: 512 by default (the reference
scripts use 128; see --num-envs). Reference points on this metric: uniformly
random -27.0, scripted Hungarian-assignment heuristic -9.2.

    python benchmarks/learn_spread.py                      # 3 seeds x {mappo, ippo}, 10M steps
    python benchmarks/learn_spread.py --steps 2000000 --seeds 0   # quicker look
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def run_one(algo: str, seed: int, args) -> dict:
    run_dir = Path(args.runs) / f"{algo}_s{seed}"
    if args.report_only:
        pass
    elif (run_dir / "summary.json").exists() and not args.fresh:
        print(f"[skip] {run_dir} already finished", flush=True)
    else:
        if run_dir.exists():
            import shutil
            shutil.rmtree(run_dir)
        cmd = [sys.executable, "-m", "hypermappo.cli", "train", "mpe/simple_spread", f"algo={algo}", f"seed={seed}",
               f"total_env_steps={args.steps}", f"num_envs={args.num_envs}", f"run_dir={run_dir}",
               f"eval_at_steps={','.join(str(m) for m in args.milestones)}", "eval_interval=0",
               f"eval_episodes={args.eval_episodes}", "checkpoint_interval=500", "log.tensorboard=false",
               f"torch_threads={args.threads}",
               "ppo.compile=off",  # the published figures were measured eager (compiled runs differ at float level)
               "--quiet"]
        t = time.time()
        subprocess.run(cmd, check=True, cwd=ROOT)
        print(f"[done] {algo} seed {seed} in {time.time() - t:.0f}s", flush=True)
    with (run_dir / "metrics.csv").open() as f:
        all_rows = list(csv.DictReader(f))
    rows = [r for r in all_rows if r.get("eval_return_mean")]
    if (run_dir / "summary.json").exists():
        summary = json.loads((run_dir / "summary.json").read_text())
    else:  # still running: wall time and rate from its rows so far
        summary = {"wall_s": sum(float(r["collect_s"]) + float(r["update_s"]) for r in all_rows),
                   "train_sps": float(all_rows[-1]["env_steps"]) / sum(float(r["collect_s"]) + float(r["update_s"])
                                                                      for r in all_rows),
                   "unfinished_at": int(all_rows[-1]["env_steps"])}
    evals = {int(r["env_steps"]): float(r["eval_return_mean"]) for r in rows}
    at = {}
    for m in args.milestones:
        reached = [s for s in evals if s >= m]
        at[m] = evals[min(reached)] if reached else None
    return {"algo": algo, "seed": seed, "eval_at": at, "wall_s": summary["wall_s"], "train_sps": summary["train_sps"],
            "unfinished_at": summary.get("unfinished_at")}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algos", default="mappo,ippo")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=10_000_000)
    p.add_argument("--milestones", default="2000000,5000000,10000000")
    p.add_argument("--num-envs", type=int, default=512, help="the reference scripts use 128; 512 cuts the "
                   "per-update overhead 4x on a 2-core CPU at the same samples per env step")
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--workers", type=int, default=2, help="runs in parallel (one torch thread each)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", default=str(ROOT / "runs" / "bench_learn_spread"))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "learn_spread"))
    p.add_argument("--fresh", action="store_true", help="rerun finished runs")
    p.add_argument("--report-only", action="store_true", help="only tabulate the runs that have finished")
    args = p.parse_args()
    args.milestones = [int(float(m)) for m in args.milestones.split(",") if int(float(m)) <= args.steps]
    jobs = [(a, int(s)) for s in args.seeds.split(",") for a in args.algos.split(",")]  # seeds interleaved
    if args.report_only:  # finished runs, and runs still going (reported up to the milestones they reached)
        jobs = [j for j in jobs if (Path(args.runs) / f"{j[0]}_s{j[1]}" / "metrics.csv").exists()]
    with ThreadPoolExecutor(args.workers) as pool:
        results = list(pool.map(lambda j: run_one(*j, args), jobs))

    lines = ["| algo | " + " | ".join(f"eval return @ {m / 1e6:g}M" for m in args.milestones)
             + " | wall time per run (s) | env-steps/s |",
             "|---|" + "---|" * len(args.milestones) + "---|---|"]
    table = {}
    notes = []
    for algo in args.algos.split(","):
        rs = [r for r in results if r["algo"] == algo]
        if not rs:
            continue
        cells = []
        for m in args.milestones:
            vals = [r["eval_at"][m] for r in rs if r["eval_at"][m] is not None]
            table.setdefault(algo, {})[m] = vals
            cells.append(f"{np.mean(vals):.2f} ± {np.std(vals):.2f} ({', '.join(f'{v:.1f}' for v in vals)})"
                         if vals else "n/a")
        done = [r for r in rs if r["unfinished_at"] is None]
        wall = f"{np.mean([r['wall_s'] for r in done]):.0f}" if done else "n/a"
        sps = np.mean([r["train_sps"] for r in rs])
        lines.append(f"| {algo} | " + " | ".join(cells) + f" | {wall} | {sps:,.0f} |")
        for r in rs:
            if r["unfinished_at"] is not None:
                notes.append(f"{algo} seed {r['seed']} was still training at {r['unfinished_at']:,} env steps")
    md = "\n".join(lines + ([""] + [f"- {n} when this table was made" for n in notes] if notes else []))
    print(md)
    counts = ", ".join(f"{a}: {sum(r['algo'] == a for r in results)}" for a in args.algos.split(","))
    print(f"\nseeds per algo ({counts}); mean ± std (per-seed values), {args.eval_episodes} deterministic "
          f"evaluation episodes each; E = {args.num_envs} envs; random policy -27.0, heuristic -9.2")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(md + "\n")
    out.with_suffix(".json").write_text(json.dumps({"args": {k: v for k, v in vars(args).items()},
                                                    "results": results}, indent=2, default=str))
    print(f"saved {out.with_suffix('.md')} and .json")


if __name__ == "__main__":
    main()
