"""Sanity benchmark: does MAPPO learn to collect coins in the coin game, and which coins does it take?

Task: `coingame/default` (3x3 grid, 2 players, one coin, 50 steps; +1 for any coin picked, -2 to the owner
when the other player takes it). MAPPO here optimises each player's own reward (general-sum, no team reward),
so the expected outcome is the one LOLA reports for naive learners: both players learn to pick up coins
(many more than random play) and take the other's coins as readily as their own (own share about 0.5),
so the mean return per player stays near 0 although coins are collected.

Per seed: the stochastic training policy's coins per episode and own-coin share over the last updates
(from metrics.csv: `own_coins`, `other_coins` of the episodes finished in each rollout). Reference rows,
measured on the env directly (256 episodes): uniformly random play, both players `coin_cooperative`
(only own coins), both `coin_selfish` (nearest coin).

    python benchmarks/learn_coingame.py --seeds 0,1 --steps 150000
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAST_UPDATES = 3  # training rows averaged for the "end" figures


def scripted_reference(rules: dict[str, list[int]] | None, episodes: int = 256) -> dict:
    """Coins per episode, own share and return per player of scripted (or random, rules=None) play."""
    import torch

    from hypermappo.envs.coingame import CoinGameVecEnv
    from hypermappo.policies.scripted import ScriptedContext, get_scripted

    env = CoinGameVecEnv(episodes)
    step = env.reset(seed=123)
    g = torch.Generator().manual_seed(0)
    contexts = {name: ScriptedContext(env, torch.tensor(slots), g) for name, slots in (rules or {}).items()}
    while True:
        actions = torch.randint(0, 5, (episodes, 2), generator=g)
        for name, ctx in contexts.items():
            actions[:, ctx.slots] = get_scripted(name)(step, ctx)
        step = env.step(actions)
        if step.episode_done.all():
            break
    own, other = step.extras["own_coins"].float().mean().item(), step.extras["other_coins"].float().mean().item()
    return {"coins": own + other, "own_share": own / max(own + other, 1e-9),
            "return": step.episode_return.mean().item()}


def train(seed: int, steps: int, out: Path) -> dict:
    from hypermappo.config import build_config
    from hypermappo.experiment import Experiment

    run_dir = out / f"seed{seed}"
    cfg = build_config("coingame/default", [f"seed={seed}", f"total_env_steps={steps}", f"run_dir={run_dir}",
                                            "checkpoint_interval=0", "log.tensorboard=false", "log.progress=false",
                                            "diagnostics.every=0", "torch_threads=1", "eval_interval=0"])
    t0 = time.time()
    summary = Experiment(cfg, quiet=True).run()
    with open(run_dir / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("own_coins")]

    def figures(part):
        own = sum(float(r["own_coins"]) for r in part) / len(part)
        other = sum(float(r["other_coins"]) for r in part) / len(part)
        ret = sum(float(r["episode_return_mean"]) for r in part) / len(part)
        return {"coins": own + other, "own_share": own / max(own + other, 1e-9), "return": ret}

    return {"seed": seed, "env_steps": summary["env_steps"], "wall_s": time.time() - t0,
            "start": figures(rows[:1]), "end": figures(rows[-LAST_UPDATES:])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1")
    p.add_argument("--steps", type=int, default=150_000)
    p.add_argument("--out", default="/tmp/learn_coingame_runs")
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    load = [round(x, 1) for x in os.getloadavg()]
    refs = {"random": scripted_reference(None),
            "both coin_cooperative": scripted_reference({"coin_cooperative": [0, 1]}),
            "both coin_selfish": scripted_reference({"coin_selfish": [0, 1]})}
    runs = [train(int(s), args.steps, Path(args.out)) for s in args.seeds.split(",")]
    lines = ["# MAPPO on the coin game (sanity check)", "",
             f"`coingame/default`, {args.steps:,} env steps per seed, 1 torch thread, load average at start {load} "
             f"(2-core machine shared with other jobs). Training-policy figures (stochastic actions) of the first "
             f"update and the mean of the last {LAST_UPDATES}; reference rows: 256 episodes on the env.", "",
             "| policy | coins / episode | own-coin share | return / player |", "|---|---:|---:|---:|"]
    for name, r in refs.items():
        lines.append(f"| {name} | {r['coins']:.1f} | {r['own_share']:.2f} | {r['return']:.2f} |")
    for r in runs:
        for when in ("start", "end"):
            f = r[when]
            lines.append(f"| MAPPO seed {r['seed']} ({when}) | {f['coins']:.1f} | {f['own_share']:.2f} | "
                         f"{f['return']:.2f} |")
    lines += ["", "Reproduce: `OMP_NUM_THREADS=1 python benchmarks/learn_coingame.py "
              f"--seeds {args.seeds} --steps {args.steps}` (wall time per seed: "
              + ", ".join(f"{r['wall_s']:.0f} s" for r in runs) + ")."]
    text = "\n".join(lines) + "\n"
    print(text)
    results = ROOT / "benchmarks" / "results"
    (results / "learn_coingame.md").write_text(text)
    (results / "learn_coingame.json").write_text(json.dumps({"load": load, "refs": refs, "runs": runs}, indent=2))


if __name__ == "__main__":
    sys.exit(main())
