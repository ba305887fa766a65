"""Learning benchmark: does MAPPO learn to hunt the stag together on the built-in stag hunt?

Task: `staghunt` with its default rules (5x5 grid, 2 hunters, 1 stag, 2 hares, 25 steps, shared team
reward 10 per stag and 1 per hare, a stag needs both hunters on its cell, caught prey respawns). Two
equilibria: each hunter chasing hares (safe, about 15 per episode) and both walking to the stag
together (about 70 per episode). Policy-gradient learners tend to settle on the hares.

Presets (same game, 600k env steps, 256 envs x 25 steps, 5 PPO epochs, otherwise library defaults):
  staghunt/default     observations: absolute positions of everything (the env's default)
  staghunt/egocentric  observations: each hunter's window of radius 4 (covers the whole grid)

For each seed, the policy is evaluated (deterministic actions, EVAL episodes) before the first update
("start") and after the last ("end"). Reference rows: a uniformly random policy and two scripted
teams (both hunters walk straight to the stag; each hunter walks to its nearest hare), measured on
the env directly. A seed "hunts the stag" when its final policy catches >= 3 stags per episode (the
hare equilibrium catches well under 1, the scripted stag team 7).

    python benchmarks/learn_staghunt.py                       # both presets x 3 seeds
    python benchmarks/learn_staghunt.py --presets staghunt/default --seeds 0 --steps 300000
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
STAG_THRESHOLD = 3.0  # stags per episode that separate the stag equilibrium from the hare one


def worker(args) -> None:
    """One run in this process: evaluate the untrained policy, train, keep the final evaluation."""
    from hypermappo.config import build_config
    from hypermappo.experiment import Experiment

    run_dir = Path(args.run_dir)
    cfg = build_config(args.preset, [f"seed={args.seed}", f"total_env_steps={args.steps}", f"run_dir={run_dir}",
                                     f"eval_episodes={args.eval_episodes}", "checkpoint_interval=0",
                                     "log.tensorboard=false", "log.progress=false", "diagnostics.every=0",
                                     "torch_threads=1"])
    exp = Experiment(cfg, quiet=True)
    start = exp.evaluate()  # deterministic actions, own eval envs: draws nothing from the training RNG
    summary = exp.run()
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    curve = [(int(r["env_steps"]), float(r["eval_return_mean"])) for r in rows if r.get("eval_return_mean")]
    result = {
        "preset": args.preset, "seed": args.seed, "env_steps": summary["env_steps"], "wall_s": summary["wall_s"],
        "train_sps": summary["train_sps"],
        "start": {"return": start["return_mean"], "stags": start["stag_captures"], "hares": start["hare_captures"]},
        "end": {"return": summary["eval_return_mean"], "stags": summary["eval_stag_captures"],
                "hares": summary["eval_hare_captures"]},
        "eval_curve": curve,
    }
    (run_dir / "result.json").write_text(json.dumps(result, indent=2))


def run_one(preset: str, seed: int, args) -> dict:
    run_dir = Path(args.runs) / f"{preset.replace('/', '_')}_s{seed}"
    if (run_dir / "result.json").exists() and not args.fresh:
        print(f"[skip] {run_dir} already finished", flush=True)
    else:
        if run_dir.exists():
            shutil.rmtree(run_dir)
        cmd = [sys.executable, __file__, "--worker", "--preset", preset, "--seed", str(seed), "--run-dir",
               str(run_dir), "--steps", str(args.steps), "--eval-episodes", str(args.eval_episodes)]
        t = time.time()
        subprocess.run(cmd, check=True, cwd=ROOT)
        print(f"[done] {preset} seed {seed} in {time.time() - t:.0f}s", flush=True)
    return json.loads((run_dir / "result.json").read_text())


def reference_policies(episodes: int, seed: int = 12345) -> dict:
    """Uniformly random and two scripted teams on the default stag hunt, `episodes` episodes each."""
    import torch

    from hypermappo.envs.staghunt import StagHuntVecEnv

    def toward(hunters, target):  # [E, H, 2] positions -> [E, H] actions: rows first, then columns
        dr, dc = target[..., 0] - hunters[..., 0], target[..., 1] - hunters[..., 1]
        a = torch.zeros(hunters.shape[:2], dtype=torch.long)
        a = torch.where(dc > 0, 4, torch.where(dc < 0, 3, a))
        return torch.where(dr > 0, 2, torch.where(dr < 0, 1, a))

    gen = torch.Generator().manual_seed(seed)

    def random_team(env):
        return torch.randint(0, 5, (env.num_envs, env.n_hunters), generator=gen)

    def stag_team(env):  # stags come first in env.prey
        return toward(env.hunters, env.prey[:, :1].expand(-1, env.n_hunters, -1))

    def hare_team(env):
        hares = env.prey[:, env.n_stags:]  # [E, hares, 2]
        dist = (env.hunters.unsqueeze(2) - hares.unsqueeze(1)).abs().sum(-1)  # [E, H, hares]
        nearest = dist.argmin(-1).unsqueeze(-1).expand(-1, -1, 2)  # [E, H, 2] index of each hunter's hare
        return toward(env.hunters, hares.gather(1, nearest))

    out = {}
    for name, policy in (("uniformly random", random_team), ("scripted: both walk to the stag", stag_team),
                         ("scripted: each walks to its nearest hare", hare_team)):
        env = StagHuntVecEnv(episodes)
        s = env.reset(seed=seed)
        done = torch.zeros(episodes, dtype=torch.bool)
        ret, stags, hares = torch.zeros(episodes), torch.zeros(episodes), torch.zeros(episodes)
        while not done.all():
            s = env.step(policy(env))
            new = s.episode_done & ~done  # one complete episode per env
            ret = torch.where(new, s.episode_return, ret)
            stags = torch.where(new, s.extras["stag_captures"].float(), stags)
            hares = torch.where(new, s.extras["hare_captures"].float(), hares)
            done |= new
        out[name] = {"return": float(ret.mean()), "stags": float(stags.mean()), "hares": float(hares.mean())}
    return out


def mean_std(values: list[float]) -> str:
    return f"{np.mean(values):.2f} ± {np.std(values):.2f}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", default="staghunt/default,staghunt/egocentric")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=600_000)
    p.add_argument("--eval-episodes", type=int, default=256)
    p.add_argument("--reference-episodes", type=int, default=2000)
    p.add_argument("--workers", type=int, default=2, help="runs in parallel (one torch thread each)")
    p.add_argument("--runs", default=str(ROOT / "runs" / "bench_learn_staghunt"))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "learn_staghunt"))
    p.add_argument("--fresh", action="store_true", help="rerun finished runs")
    # one run in this process (used by the parallel driver)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--preset", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    p.add_argument("--run-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    presets = [x for x in args.presets.split(",") if x]
    seeds = [int(s) for s in args.seeds.split(",")]
    # the slower egocentric runs first, so the two workers finish at about the same time
    jobs = sorted(((pr, s) for pr in presets for s in seeds), key=lambda j: ("egocentric" not in j[0], j[1]))
    t0 = time.time()
    with ThreadPoolExecutor(args.workers) as pool:
        results = list(pool.map(lambda j: run_one(*j, args), jobs))
    total_wall = time.time() - t0
    reference = reference_policies(args.reference_episodes)

    lines = ["| policy | eval return | stags / episode | hares / episode | seeds hunting the stag | wall per run (s) |",
             "|---|---|---|---|---|---|"]
    for name, r in reference.items():
        lines.append(f"| {name} | {r['return']:.2f} | {r['stags']:.2f} | {r['hares']:.2f} | | |")
    for preset in presets:
        rs = [r for r in results if r["preset"] == preset]
        for when in ("start", "end"):
            vals = {k: [r[when][k] for r in rs] for k in ("return", "stags", "hares")}
            hunting = sum(s >= STAG_THRESHOLD for s in vals["stags"])
            label = f"MAPPO {preset}, {'before training' if when == 'start' else f'after {args.steps / 1e3:g}k steps'}"
            wall = f"{np.mean([r['wall_s'] for r in rs]):.0f}" if when == "end" else ""
            lines.append(f"| {label} | {mean_std(vals['return'])} ({', '.join(f'{v:.1f}' for v in vals['return'])}) "
                         f"| {mean_std(vals['stags'])} | {mean_std(vals['hares'])} | {hunting}/{len(rs)} | {wall} |")
    md = "\n".join(lines)
    note = (f"MAPPO rows: mean ± std over {len(seeds)} seeds (per-seed returns in brackets), {args.eval_episodes} "
            f"evaluation episodes per seed with deterministic actions; 'before training' is the initial policy. "
            f"Reference rows: {args.reference_episodes} episodes on the env. A seed hunts the stag when its final "
            f"policy catches >= {STAG_THRESHOLD:g} stags per episode. Total wall {total_wall / 60:.1f} min "
            f"({args.workers} runs at a time).")
    print(md)
    print("\n" + note)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(md + "\n\n" + note + "\n")
    out.with_suffix(".json").write_text(json.dumps({"args": vars(args), "reference": reference, "runs": results,
                                                    "total_wall_s": total_wall}, indent=2, default=str))
    print(f"saved {out.with_suffix('.md')} and .json")


if __name__ == "__main__":
    main()
