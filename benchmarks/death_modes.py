"""Do both `ppo.death` settings train on an env with deaths, and where do they differ?

Env: the sacrifice game of `benchmarks/death_env.py` (PettingZoo, 2 agents, 10-step episodes
truncated at the time limit, team reward, env kwarg `team_reward: true`). An agent may sacrifice
itself; the team earns 1.0 per step afterwards instead of 0.1. Reported return: the library's
episode return (sum over steps of the mean reward over agent slots, dead slots 0), deterministic
evaluation. Reference points on that metric: nobody sacrifices 1.0 (the best an agent that ignores
post-death team reward can do), one agent sacrifices at once 4.6 (the optimum), both at once 0.1.

Settings: MAPPO defaults, 16 envs x 20 steps, `ppo.death=episode` vs `agent`, each for SEEDS.

    python benchmarks/death_modes.py                 # 3 seeds x 2 modes x 20k steps, ~3 min on 1 core
    python benchmarks/death_modes.py --seeds 0 --steps 5000
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # so `pettingzoo:death_env:make` imports benchmarks/death_env.py
MODES = ("episode", "agent")
REFERENCE = {"nobody sacrifices": 1.0, "one sacrifices at step 1 (optimum)": 4.6, "both sacrifice at step 1": 0.1}


def run(mode: str, seed: int, steps: int) -> dict:
    from hypermappo.config import build_config
    from hypermappo.experiment import Experiment

    with tempfile.TemporaryDirectory() as tmp:
        cfg = build_config(None, ["env=pettingzoo:death_env:make", "env_kwargs={team_reward: true}", "num_envs=16",
                                  "rollout_length=20", f"total_env_steps={steps}", f"seed={seed}", f"ppo.death={mode}",
                                  f"run_dir={tmp}/r", "eval_episodes=16", "checkpoint_interval=0",
                                  "log.tensorboard=false", "log.progress=false", "diagnostics.every=0",
                                  "torch_threads=1"])
        exp = Experiment(cfg, quiet=True)
        start = exp.evaluate()["return_mean"]
        t0 = time.perf_counter()
        summary = exp.run()
        return {"mode": mode, "seed": seed, "env_steps": summary["env_steps"], "start_return": start,
                "end_return": summary["eval_return_mean"], "wall_s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--out", default=str(HERE / "results" / "death_modes"))
    args = ap.parse_args()
    rows = []
    for mode in MODES:
        for seed in args.seeds:
            rows.append(run(mode, seed, args.steps))
            print(json.dumps(rows[-1]), flush=True)
    lines = ["| ppo.death | start return | end return (mean ± std) | per seed | wall s / run |", "|---|---|---|---|---|"]
    for mode in MODES:
        r = [x for x in rows if x["mode"] == mode]
        end = np.array([x["end_return"] for x in r])
        lines.append(f"| {mode} | {np.mean([x['start_return'] for x in r]):.2f} | {end.mean():.2f} ± {end.std():.2f} "
                     f"| {', '.join(f'{v:.2f}' for v in end)} | {np.mean([x['wall_s'] for x in r]):.0f} |")
    lines.append("")
    lines.append("Reference returns: " + "; ".join(f"{k} {v}" for k, v in REFERENCE.items()) + ".")
    lines.append(f"Sacrifice game (benchmarks/death_env.py), {args.steps} env steps per run, seeds {args.seeds}, "
                 f"16 envs x 20 steps, MAPPO defaults, 16 deterministic evaluation episodes.")
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(table + "\n")
    out.with_suffix(".json").write_text(json.dumps({"steps": args.steps, "seeds": args.seeds, "runs": rows,
                                                    "reference": REFERENCE}, indent=1) + "\n")


if __name__ == "__main__":
    main()
