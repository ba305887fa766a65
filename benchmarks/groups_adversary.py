"""mpe2 simple_adversary_v3 with two policy groups (configs/mpe2/simple_adversary.yaml): one learner for the
adversary, one for the two good agents, each with its own reward; both teams' returns against env steps.

    python benchmarks/groups_adversary.py --steps 100000 --seeds 0

Writes benchmarks/results/groups_adversary.{json,md,png}: per group, the training return (mean over the episodes
ending in an update) and the evaluation return, from each run's metrics.csv.
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
GROUPS = ("adversary", "good")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--seeds", default="0")
    p.add_argument("--num-envs", type=int, default=32)
    args = p.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hypermappo.config import build_config
    from hypermappo.experiment import train

    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in [int(s) for s in args.seeds.split(",")]:
            cfg = build_config("mpe2/simple_adversary", [f"seed={seed}", f"total_env_steps={args.steps}",
                                                         f"num_envs={args.num_envs}", "eval_interval=10",
                                                         "log.tensorboard=false", "log.progress=false"])
            summary = train(cfg, Path(tmp) / f"s{seed}", quiet=True)
            with (Path(tmp) / f"s{seed}" / "metrics.csv").open(newline="") as f:
                rows = list(csv.DictReader(f))
            runs[seed] = {"summary": {k: summary[k] for k in ("env_steps", "wall_s", "train_sps", "groups")},
                          "curves": {c: [(int(r["env_steps"]), float(r[c])) for r in rows if r.get(c)]
                                     for g in GROUPS for c in (f"{g}/episode_return_mean", f"{g}/eval_return_mean")}}
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, kind in zip(axes, ("episode_return_mean", "eval_return_mean")):
        for g in GROUPS:
            for seed, run in runs.items():
                xs, ys = zip(*run["curves"][f"{g}/{kind}"])
                ax.plot(xs, ys, label=f"{g} (seed {seed})")
        ax.set_title(f"simple_adversary_v3: <group>/{kind}")
        ax.set_xlabel("env steps")
        ax.legend(fontsize=8)
    fig.tight_layout()
    RESULTS.mkdir(exist_ok=True)
    fig.savefig(RESULTS / "groups_adversary.png", dpi=100)
    (RESULTS / "groups_adversary.json").write_text(json.dumps({"args": vars(args), "runs": runs}, indent=1))
    lines = ["| seed | env steps | wall s | " + " | ".join(f"{g} return (last train) | {g} eval" for g in GROUPS) + " |",
             "|---:|---:|---:|" + "---:|---:|" * len(GROUPS)]
    for seed, run in runs.items():
        s = run["summary"]
        cells = []
        for g in GROUPS:
            cells += [f"{run['curves'][f'{g}/episode_return_mean'][-1][1]:.2f}",
                      f"{s['groups'][g]['eval_return_mean']:.2f}"]
        lines.append(f"| {seed} | {s['env_steps']:,} | {s['wall_s']:.0f} | " + " | ".join(cells) + " |")
    text = (f"Reproduce: `python benchmarks/groups_adversary.py --steps {args.steps} --seeds {args.seeds} "
            f"--num-envs {args.num_envs}`\n\n" + "\n".join(lines) + "\n\n![](groups_adversary.png)\n")
    (RESULTS / "groups_adversary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
