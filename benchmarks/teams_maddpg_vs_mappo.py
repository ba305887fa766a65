"""Per-team returns in a mixed game, MADDPG vs MAPPO: one learner group per team, each on its own agents' rewards.

Takes the env string: the first group is the agents whose names match --first (adversaries / predators), the
second the rest (good agents / prey). Both teams use the same algorithm in a run; each (algo, seed) is a run.

    python benchmarks/teams_maddpg_vs_mappo.py --env mpe:simple_tag --steps 1000000 --seeds 0,1,2
    python benchmarks/teams_maddpg_vs_mappo.py --env mpe2:simple_adversary_v3 --steps 2000 --seeds 0  # smoke

Writes benchmarks/results/teams_<env>.{md,json}: per algo and team, the final evaluation return (mean over seeds)
and the last training return, wall time and env-steps/s.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def run(env: str, algo: str, seed: int, args, tmp: Path) -> dict:
    from hypermappo.config import build_config
    from hypermappo.experiment import train

    groups = (f"groups=[{{name: first, agents: ['{args.first}'], algo: {algo}}}, "
              f"{{name: second, agents: ['{args.second}'], algo: {algo}}}]")
    overrides = [f"env={env}", f"seed={seed}", f"total_env_steps={args.steps}", f"num_envs={args.num_envs}",
                 "rollout_length=25", "eval_interval=0", f"eval_episodes={args.eval_episodes}", "checkpoint_interval=0",
                 f"torch_threads={args.threads}", "log.tensorboard=false", "log.progress=false", groups,
                 *(["maddpg.warmup_steps=" + str(args.warmup)] if algo == "maddpg" and args.warmup is not None else []),
                 *(["env_kwargs={continuous_actions: false}"] if env.startswith("mpe2:") else [])]
    summary = train(build_config(None, overrides), tmp / f"{algo}_s{seed}", quiet=True)
    return {"algo": algo, "seed": seed, "wall_s": summary["wall_s"], "train_sps": summary["train_sps"],
            "groups": {g: {"eval": v["eval_return_mean"], "train": v["episode_return_recent"]}
                       for g, v in summary["groups"].items()}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", required=True, help="e.g. mpe:simple_adversary, mpe:simple_tag, mpe2:simple_adversary_v3")
    p.add_argument("--first", default="adversary_*", help="agent-name pattern of the first team")
    p.add_argument("--second", default="agent_*", help="agent-name pattern of the second team")
    p.add_argument("--algos", default="maddpg,mappo")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--num-envs", type=int, default=128)
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=None, help="maddpg.warmup_steps (default: the config default)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for algo in args.algos.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                results.append(run(args.env, algo, seed, args, Path(tmp)))
    lines = ["| algo | team | eval return (final) | train return (last 100 episodes) | wall s | env-steps/s |",
             "|---|---|---:|---:|---:|---:|"]
    for algo in args.algos.split(","):
        rs = [r for r in results if r["algo"] == algo]
        for team, pattern in (("first", args.first), ("second", args.second)):
            ev = [r["groups"][team]["eval"] for r in rs]
            tr = [r["groups"][team]["train"] for r in rs if r["groups"][team]["train"] is not None]
            lines.append(f"| {algo} | {team} ({pattern}) | {np.mean(ev):.2f} ± {np.std(ev):.2f} | "
                         + (f"{np.mean(tr):.2f}" if tr else "n/a")
                         + f" | {np.mean([r['wall_s'] for r in rs]):.0f} | {np.mean([r['train_sps'] for r in rs]):,.0f} |")
    md = "\n".join([f"# {args.env}: per-team returns, MADDPG vs MAPPO ({len(args.seeds.split(','))} seed(s), "
                    f"{args.steps:,} env steps, E={args.num_envs})", "", *lines, "",
                    f"Both teams of a run use the same algorithm (each team's return is against the other team trained "
                    f"by the same algorithm, not a cross-play). eval return: the final deterministic evaluation "
                    f"({args.eval_episodes} episodes), mean ± std over seeds; {args.threads} torch thread(s).", "",
                    f"Reproduce: `python benchmarks/teams_maddpg_vs_mappo.py --env {args.env} --steps {args.steps} "
                    f"--seeds {args.seeds}`"])
    print(md)
    out = args.out or RESULTS / f"teams_{args.env.replace(':', '_')}"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(md + "\n")
    out.with_suffix(".json").write_text(json.dumps({"args": vars(args), "results": results}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
