"""Learning benchmark: MADDPG on MPE simple_spread, evaluation return at 250k / 500k / 1M env steps.

Same task and metric as benchmarks/learn_spread.py (batched torch `mpe:simple_spread`, mpe2 simple_spread_v3
semantics; 100 deterministic evaluation episodes per milestone; uniformly random -27.0, scripted Hungarian
heuristic -9.2). MADDPG at its config defaults (algos/maddpg.py, config `maddpg:`): lr 1e-3, gamma 0.95,
tau 0.01, batch 1024, replay 200k, warm-up 25k env steps, one gradient step per 100 env steps, 128 envs.
Target: >= -20.0 within 1M env steps. Each run is a plain `hypermappo train` in its own process with one
torch thread; wall time and env-steps/s (training, evaluation excluded) come from its summary.json.

    python benchmarks/learn_maddpg.py                         # 3 seeds, 1M steps each, 3 runs in parallel
    python benchmarks/learn_maddpg.py --steps 200000 --seeds 0 --milestones 100000,200000   # quick look

Writes benchmarks/results/learn_maddpg.{md,json,png} (eval return against env steps, one line per seed).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RANDOM, HEURISTIC, TARGET = -27.0, -9.2, -20.0


def run_one(seed: int, args) -> dict:
    run_dir = Path(args.runs) / f"maddpg_s{seed}"
    if not args.report_only:
        if run_dir.exists():
            shutil.rmtree(run_dir)
        cmd = [sys.executable, "-m", "hypermappo.cli", "train", "mpe/simple_spread", "algo=maddpg", f"seed={seed}",
               f"total_env_steps={args.steps}", f"num_envs={args.num_envs}", f"run_dir={run_dir}",
               f"eval_at_steps={','.join(str(m) for m in args.milestones)}", "eval_interval=0",
               f"eval_episodes={args.eval_episodes}", "checkpoint_interval=0", "log.tensorboard=false",
               f"torch_threads={args.threads}", "--quiet"]
        t = time.time()
        subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
        print(f"[done] maddpg seed {seed} in {time.time() - t:.0f}s", flush=True)
    with (run_dir / "metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r.get("eval_return_mean")]
    summary = json.loads((run_dir / "summary.json").read_text())
    curve = [(int(r["env_steps"]), float(r["eval_return_mean"])) for r in rows]
    at = {m: next((v for s, v in curve if s >= m), None) for m in args.milestones}
    return {"seed": seed, "eval_at": at, "curve": curve, "wall_s": summary["wall_s"],
            "train_sps": summary["train_sps"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--milestones", default="100000,250000,500000,750000,1000000")
    p.add_argument("--num-envs", type=int, default=128)
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--workers", type=int, default=3, help="runs in parallel (one torch thread each)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", default=str(ROOT / "runs" / "bench_learn_maddpg"))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "learn_maddpg"))
    p.add_argument("--load", default="", help="what else ran on the machine, written into the results")
    p.add_argument("--report-only", action="store_true", help="tabulate finished runs without training")
    args = p.parse_args(argv)
    args.milestones = [int(float(m)) for m in args.milestones.split(",") if int(float(m)) <= args.steps]
    seeds = [int(s) for s in args.seeds.split(",")]
    with ThreadPoolExecutor(args.workers) as pool:
        results = list(pool.map(lambda s: run_one(s, args), seeds))

    head = " | ".join(f"eval return @ {m / 1e6:g}M" for m in args.milestones)
    lines = [f"| algo | {head} | wall time per run (s) | env-steps/s |", "|---|" + "---|" * len(args.milestones)
             + "---|---|"]
    cells = []
    for m in args.milestones:
        vals = [r["eval_at"][m] for r in results if r["eval_at"][m] is not None]
        cells.append(f"{np.mean(vals):.2f} ± {np.std(vals):.2f} ({', '.join(f'{v:.1f}' for v in vals)})"
                     if vals else "n/a")
    wall = np.mean([r["wall_s"] for r in results])
    sps = np.mean([r["train_sps"] for r in results])
    lines.append("| maddpg | " + " | ".join(cells) + f" | {wall:.0f} | {sps:,.0f} |")
    final = [r["eval_at"][args.milestones[-1]] for r in results]
    verdict = (f"target >= {TARGET} at {args.milestones[-1]:,} env steps: "
               + ("met" if all(v is not None and v >= TARGET for v in final) else "NOT met") + " by every seed")
    notes = [f"{len(results)} seeds, mean ± std (per-seed values), {args.eval_episodes} deterministic evaluation "
             f"episodes each; E = {args.num_envs} envs; {args.workers} runs in parallel, {args.threads} torch "
             f"thread each; random policy {RANDOM}, heuristic {HEURISTIC}; {verdict}."]
    if args.load:
        notes.append(f"Machine load: {args.load}")
    notes.append(f"Reproduce: `python benchmarks/learn_maddpg.py --seeds {args.seeds} --steps {args.steps}`")
    md = "\n".join(lines + [""] + notes)
    print(md)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(md + "\n")
    out.with_suffix(".json").write_text(json.dumps({"args": vars(args), "results": results}, indent=2, default=str))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        ax.plot([s for s, _ in r["curve"]], [v for _, v in r["curve"]], marker="o", label=f"seed {r['seed']}")
    for y, name in ((RANDOM, "random"), (HEURISTIC, "heuristic"), (TARGET, "target")):
        ax.axhline(y, ls="--", lw=0.8, color="grey")
        ax.text(0, y, name, fontsize=7, va="bottom")
    ax.set_xlabel("env steps"), ax.set_ylabel("eval return (100 episodes)"), ax.set_title("MADDPG, mpe:simple_spread")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=100)
    print(f"saved {out.with_suffix('.md')}, .json and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
