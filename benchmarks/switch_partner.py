"""Benchmark: a learner whose partner switches from stag-hunting to hare-hunting mid-training.

Task: `staghunt/egocentric` (5x5 grid, 2 hunters, shared team reward 10 per stag and 1 per hare, each
hunter sees a radius-4 window). Slot 0 is group `learner` (trained); slot 1 is group `partner`, scripted
`staghunt_stag` (walks to the stag) until `switch_step` env steps, then `staghunt_hare` (walks to its
nearest hare) via a `switch` schedule. Before the switch the learner's best response is to hunt the stag
with its partner; after it a lone stag hunter catches nothing, so it must turn to the hares.

Methods (3 seeds each, otherwise the preset's settings; only the learner group differs):
  mappo        actor=mlp
  hyper-mappo  actor=hyper with hyper.context=[obs], obs_aggregation=own, layers=last, hidden=32,
               mlp_layers=1: the learner group has a single agent, so an agent-id context would be a
               constant (the hypernetwork would collapse to a fixed weight offset); conditioning the policy
               head on the learner's own observation is the context that can carry what changed (where the
               partner goes). Lean (own-obs, last layer only) because the attention context costs ~20x the
               env steps/s here.

Measures, from the training rows of metrics.csv (one row per update of 256 envs x 25 steps; returns are
`learner/episode_return_mean`, the learner's mean episode return over the episodes that ended in that
rollout; stags are `stag_captures`, stags caught per episode):
  before      mean over the last WINDOW updates before the switch (the row whose `switch` column is set is
              the first rollout with the hare-hunting partner)
  after       mean over the first SMOOTH updates after the switch (the drop)
  end         mean over the last WINDOW updates of training
  recovery    s_k = trailing moving average (over the last SMOOTH updates, within the post-switch rows only,
              so fewer for k < SMOOTH) of the learner's return at the k-th update after the switch (k = 1 is
              the switch rollout);
              recovery = the first k with s_k >= 0.9 * max_k s_k (updates after the switch until the
              smoothed return reaches 90% of its best post-switch level). Recovery = 1 means the return right
              after the switch was already within 10% of the best it reached later (little or no improvement
              after the drop), so read it together with `after` and `end`.
Per method: mean ± std over seeds and a 95% percentile-bootstrap CI of the mean over seeds
(hypermappo.report.stats.bootstrap_ci; with 3 seeds the interval is rough).

    python benchmarks/switch_partner.py                 # trains what is missing, then writes the table
    python benchmarks/switch_partner.py --report-only   # table and plot from existing runs
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
sys.path.insert(0, str(ROOT / "src"))
WINDOW = 10  # updates averaged before the switch and at the end
SMOOTH = 5  # trailing moving-average length for the recovery time
RECOVERY_FRACTION = 0.9
HYPER = "{context: [obs], obs_aggregation: own, layers: last, hidden: 32, mlp_layers: 1}"
METHODS = {"mappo": "actor: mlp", "hyper-mappo": f"actor: hyper, hyper: {HYPER}"}


def groups_override(method: str, switch_step: int) -> str:
    return (f"groups=[{{name: learner, agents: [0], {METHODS[method]}}}, "
            f"{{name: partner, agents: [1], kind: scripted, policy: staghunt_stag, "
            f"switch: [{{at_step: {switch_step}, kind: scripted, policy: staghunt_hare}}]}}]")


def run_one(method: str, seed: int, args) -> Path:
    run_dir = Path(args.runs) / f"{method}_s{seed}"
    if (run_dir / "summary.json").exists() and not args.fresh:
        print(f"[skip] {run_dir} already finished", flush=True)
        return run_dir
    if run_dir.exists():
        shutil.rmtree(run_dir)
    cmd = [sys.executable, "-m", "hypermappo.cli", "train", "staghunt/egocentric",
           groups_override(method, args.switch_step), f"seed={seed}", f"total_env_steps={args.steps}",
           "ppo.compile=off",  # the published figures were measured eager (compiled runs differ at float level)
           f"run_dir={run_dir}", "eval_interval=50", "eval_episodes=64", "checkpoint_interval=0",
           "log.tensorboard=false", "log.progress=false", "diagnostics.every=0", "torch_threads=1"]
    t = time.time()
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
                   stdout=subprocess.DEVNULL)
    print(f"[done] {method} seed {seed} in {time.time() - t:.0f}s", flush=True)
    return run_dir


def read_run(run_dir: Path) -> dict:
    """The learner's per-update return and stags per episode, and the index of the switch row."""
    with open(run_dir / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("learner/episode_return_mean")]
    steps = np.array([int(r["env_steps"]) for r in rows])
    ret = np.array([float(r["learner/episode_return_mean"]) for r in rows])
    stags = np.array([float(r["stag_captures"]) for r in rows])
    switch = [i for i, r in enumerate(rows) if r.get("switch")]
    if not switch:
        raise SystemExit(f"{run_dir}: no switch row in metrics.csv (did the run reach the switch step?)")
    return {"steps": steps, "ret": ret, "stags": stags, "switch": switch[0]}


def measure(run: dict) -> dict:
    s, ret, stags = run["switch"], run["ret"], run["stags"]
    post = ret[s:]
    kernel = np.ones(SMOOTH)
    smooth = np.convolve(post, kernel)[: post.size] / np.minimum(np.arange(1, post.size + 1), SMOOTH)  # trailing
    recovery = int(np.argmax(smooth >= RECOVERY_FRACTION * smooth.max())) + 1
    before = slice(max(0, s - WINDOW), s)
    return {"return_before": float(ret[before].mean()), "stags_before": float(stags[before].mean()),
            "return_end": float(ret[-WINDOW:].mean()), "stags_end": float(stags[-WINDOW:].mean()),
            "return_after_switch": float(post[:SMOOTH].mean()), "best_post_smoothed": float(smooth.max()),
            "recovery_updates": recovery}


def report(args, seeds: list[int]) -> None:
    from hypermappo.report.stats import bootstrap_ci

    runs = {m: [read_run(Path(args.runs) / f"{m}_s{s}") for s in seeds] for m in METHODS}
    keys = ["return_before", "stags_before", "return_after_switch", "return_end", "stags_end", "best_post_smoothed",
            "recovery_updates"]
    table = {}
    for m, rs in runs.items():
        per_seed = [measure(r) for r in rs]
        table[m] = {}
        for k in keys:
            x = np.array([p[k] for p in per_seed], dtype=float)
            lo, hi = bootstrap_ci(x)
            table[m][k] = {"mean": float(x.mean()), "std": float(x.std(ddof=1)) if x.size > 1 else 0.0,
                           "ci": [lo, hi], "per_seed": x.tolist()}
    switch_steps = int(runs["mappo"][0]["steps"][runs["mappo"][0]["switch"]])
    out = Path(args.out)
    meta = {"preset": "staghunt/egocentric", "total_env_steps": args.steps, "switch_at_step": args.switch_step,
            "first_rollout_after_switch_ends_at": switch_steps, "seeds": seeds, "window": WINDOW,
            "smooth": SMOOTH, "hyper": HYPER}
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "table": table}, indent=2))

    names = {"return_before": "learner return, before switch", "stags_before": "stags / episode, before",
             "return_after_switch": f"return, first {SMOOTH} updates after", "return_end": "learner return, end",
             "best_post_smoothed": "best smoothed post-switch return", "stags_end": "stags / episode, end",
             "recovery_updates": "recovery (updates)"}
    lines = ["| method | " + " | ".join(names[k] for k in keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for m in METHODS:
        cells = []
        for k in keys:
            c = table[m][k]
            cells.append(f"{c['mean']:.2f} ± {c['std']:.2f} [{c['ci'][0]:.2f}, {c['ci'][1]:.2f}]")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines += ["", f"Mean ± std over seeds {seeds} [95% bootstrap CI of the mean]; {args.steps:,} env steps, partner "
              f"switches stag -> hare at {args.switch_step:,} steps; windows of the last {WINDOW} updates before the "
              f"switch and of training; recovery = first post-switch update whose {SMOOTH}-update trailing mean of "
              f"the learner's return reaches {RECOVERY_FRACTION:.0%} of its best post-switch value. Training "
              "returns (stochastic actions), per-seed values in switch_partner.json. Recovery per seed: "
              + "; ".join(f"{m} {[int(v) for v in table[m]['recovery_updates']['per_seed']]}" for m in METHODS)
              + " (1 = already within 10% of the post-switch best at the first update after the switch)."]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(runs, args, out.with_suffix(".png"))


def plot(runs: dict, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for m, rs in runs.items():
        n = min(r["ret"].size for r in rs)
        curves = np.stack([r["ret"][:n] for r in rs])  # [seeds, updates]
        mean, std = curves.mean(0), curves.std(0)
        steps = rs[0]["steps"][:n]
        ax.plot(steps, mean, label=f"{m} (mean of {len(rs)} seeds)")
        ax.fill_between(steps, mean - std, mean + std, alpha=0.25)
    ax.axvline(args.switch_step, color="k", ls="--", lw=1, label="partner: stag -> hare")
    ax.set_xlabel("env steps")
    ax.set_ylabel("learner episode return (training)")
    ax.set_title("Stag hunt: partner switches from stag to hare hunting (band: ± std)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=1_200_000)
    p.add_argument("--switch-step", type=int, default=600_000)
    p.add_argument("--workers", type=int, default=2, help="runs in parallel (one torch thread each)")
    p.add_argument("--runs", default=str(ROOT / "runs" / "bench_switch_partner"))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "switch_partner"))
    p.add_argument("--fresh", action="store_true", help="rerun finished runs")
    p.add_argument("--report-only", action="store_true", help="only re-make the table and plot from existing runs")
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    if not args.report_only:
        jobs = [(m, s) for s in seeds for m in METHODS]
        with ThreadPoolExecutor(args.workers) as pool:
            list(pool.map(lambda job: run_one(*job, args), jobs))
    report(args, seeds)


if __name__ == "__main__":
    main()
