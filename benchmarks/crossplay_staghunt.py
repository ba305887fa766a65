"""Cross-play in the stag hunt: 3 MAPPO runs (seeds) x 3 scripted partners, mean episode return of every pairing.

Training: `staghunt/egocentric` (5x5 grid, 2 hunters, 1 stag, 2 hares, 25 steps, shared reward 10 per stag and 1
per hare; each hunter sees a radius-4 window), 600k env steps per seed, the budget at which
benchmarks/results/learn_staghunt.md finds the stag with 3/3 seeds. The runs are a sweep (`hypermappo sweep`), so
re-running this script skips finished runs and resumes interrupted ones.

Cross-play: the learned actor acts for hunter 0 (two reference rows: a scripted stag / hare hunter instead), a
scripted partner for hunter 1: `staghunt_stag` (walks to the
stag and waits there), `staghunt_hare` (walks to its nearest hare), `staghunt_follow` (walks to the other hunter).
EPISODES episodes per pairing, deterministic actions, the same start states for every pairing.

    python benchmarks/crossplay_staghunt.py                  # train what is missing, then cross-play
    python benchmarks/crossplay_staghunt.py --episodes 500

Writes benchmarks/results/crossplay_staghunt.{md,csv,png}; the same table as
`hypermappo crossplay --rows runs/crossplay_staghunt/seed=0 runs/crossplay_staghunt/seed=1
runs/crossplay_staghunt/seed=2 scripted:staghunt_stag scripted:staghunt_hare
--cols scripted:staghunt_stag scripted:staghunt_hare scripted:staghunt_follow --episodes 500 --out OUT`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARTNERS = ["scripted:staghunt_stag", "scripted:staghunt_hare", "scripted:staghunt_follow"]
REFERENCE_ROWS = ["scripted:staghunt_stag", "scripted:staghunt_hare"]  # what a scripted hunter gets with each partner


def rel(path: Path) -> Path:
    path = path.resolve()
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="staghunt/egocentric")
    p.add_argument("--seeds", default="0..2", help="seed grid of the sweep (default 0..2)")
    p.add_argument("--steps", type=int, default=600_000, help="env steps per training run")
    p.add_argument("--workers", type=int, default=2, help="training runs at a time (one torch thread each)")
    p.add_argument("--episodes", type=int, default=500, help="cross-play episodes per pairing")
    p.add_argument("--runs", type=Path, default=ROOT / "runs" / "crossplay_staghunt")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "crossplay_staghunt",
                   help="output prefix: writes OUT.md, OUT.csv, OUT.png")
    args = p.parse_args(argv)

    from hypermappo import cli
    from hypermappo.crossplay import crossplay
    from hypermappo.sweep import sweep

    start = time.time()
    code = sweep(args.preset, [f"seed={args.seeds}", f"total_env_steps={args.steps}", "torch_threads=1",
                               "log.tensorboard=false", "diagnostics.every=0"], args.runs, args.workers, main=cli.main)
    if code:
        print("some training runs failed; see their run directories", file=sys.stderr)
        return code
    names = json.loads((args.runs / "sweep.json").read_text())["runs"]  # this sweep's runs, in grid order
    runs = [rel(args.runs / name) for name in names]
    os.chdir(ROOT)  # run directories relative to the repository in the report
    with tempfile.TemporaryDirectory() as tmp:
        result = crossplay([str(d) for d in runs] + REFERENCE_ROWS, PARTNERS, Path(tmp), env_arg=args.preset,
                           episodes=args.episodes)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        for f in result["files"]:
            shutil.copy(f, args.out.with_suffix(f.suffix))
    md = args.out.with_suffix(".md")
    command = (f"python benchmarks/crossplay_staghunt.py --episodes {args.episodes}  # or: hypermappo crossplay --rows "
               + " ".join([*map(str, runs), *REFERENCE_ROWS]) + " --cols " + " ".join(PARTNERS)
               + f" --env {args.preset} --episodes {args.episodes}")
    md.write_text(md.read_text() + f"\nRuns: `{args.preset}`, {args.steps:,} env steps each (`hypermappo sweep`). "
                  f"Reproduce: `{command}`. This invocation took {time.time() - start:.0f}s (finished training runs "
                  f"are skipped).\n")
    print(md.read_text(), end="")
    print(f"wrote {md}, {args.out.with_suffix('.csv')}, {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
