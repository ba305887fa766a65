"""Benchmark: how held-out partner inference moves with the goal belief's own settings, with no retraining.

The belief's settings (`coplayer.hazard`, `online_lr`, `prior_weight`, `floor`, ...) act only where the belief
predicts: a learner that does not read it (`coplayer.feed=none`, the partner-inference benchmark's `bayes`) trains
the same policy and the same goal network whatever they are. So each setting is judged on the very runs
`coplayer_adaptation.py` trained: a copy of every run directory (its config.yaml with the one key changed, its last
checkpoint) is evaluated again against its held-out partner (`coplayer_adaptation.py --reeval`), and every seed and
fold is paired with the runs' own defaults, evaluated the same way.

    python benchmarks/coplayer_adaptation.py --games staghunt --variants bayes --seeds 0,1,2 \
        --folds stag,hare,follower,learned,learned-early --runs /tmp/cp       # train (or reuse) the runs
    python benchmarks/coplayer_belief_settings.py --runs /tmp/cp --seeds 0,1,2 \
        --folds stag,hare,follower,learned,learned-early --settings hazard=0.02,hazard=0.1,online_lr=0.5

Writes benchmarks/results/<name>.{json,md}: per setting, held-out action accuracy per fold and over the folds, the
paired difference from the defaults with a bootstrap CI, and the in-distribution accuracy against the frozen learner.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from coplayer_adaptation import _bootstrap_ci  # noqa: E402
from throughput import machine, write_results  # noqa: E402

sys.path.insert(0, str(HERE.parent / "src"))
from hypermappo.config import CoplayerConfig  # noqa: E402


def copy_runs(src: Path, dst: Path, game: str, key: str | None, value: str | None) -> None:
    """The game's trained `bayes` runs and its learned partners into dst, `coplayer.KEY` set to VALUE in each run's
    config.yaml (the partners' configs as they are); the last checkpoint only."""
    for run in sorted((src / game).iterdir()):
        if not (run.name.startswith("bayes_minus_") or run.name.startswith("learned_partner")):
            continue
        out = dst / game / run.name
        if out.exists():
            shutil.rmtree(out)
        (out / "checkpoints").mkdir(parents=True)
        for name in ("config.yaml", "summary.json", "metrics.csv"):
            if (run / name).exists():
                shutil.copy2(run / name, out / name)
        last = sorted((run / "checkpoints").glob("ckpt_*.pt"))[-1]
        for f in (last, last.with_name(last.name + ".crc32")):
            if f.exists():
                shutil.copy2(f, out / "checkpoints" / f.name)
        if key and run.name.startswith("bayes_minus_"):
            text = (out / "config.yaml").read_text()
            section = re.search(r"^coplayer:\n((?:  .*\n)+)", text, re.M)
            if section is None:
                raise SystemExit(f"coplayer_belief_settings: {run / 'config.yaml'} has no coplayer section")
            if re.search(rf"^  {key}: ", section.group(1), re.M):
                body = re.sub(rf"^  {key}: .*$", f"  {key}: {value}", section.group(1), count=1, flags=re.M)
            elif key in {f.name for f in fields(CoplayerConfig)}:  # a key newer than the run: the run had its default
                body = section.group(1) + f"  {key}: {value}\n"
            else:
                raise SystemExit(f"coplayer_belief_settings: coplayer.{key} is not a co-player setting")
            (out / "config.yaml").write_text(text[:section.start(1)] + body + text[section.end(1):])


KEPT = ("seed", "held_out", "action_acc", "goal_acc_from5", "nll", "seen_learned_acc", "seen_scripted_acc")


def evaluate(dst: Path, args) -> list[dict]:
    """coplayer_adaptation.py's held-out evaluation again on the copies; -> its inference json's rows for `bayes`."""
    cmd = [sys.executable, str(HERE / "coplayer_adaptation.py"), "--games", args.game, "--variants", "bayes",
           "--seeds", args.seeds, "--steps", str(args.steps), "--num-envs", str(args.num_envs), "--k", str(args.k),
           "--runs", str(dst), "--out", str(dst / "out"), "--workers", str(args.workers), "--reeval"]
    if args.src:
        cmd += ["--src", args.src]
    if args.folds:
        cmd += ["--folds", args.folds]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    rows = json.loads((dst / "out_inference.json").read_text())["results"][args.game]["bayes"]
    return [{k: r[k] for k in KEPT if k in r} for r in rows]


def summarise(rows: list[dict]) -> dict:
    """Per fold and over the folds: held-out action accuracy (mean over seeds); the frozen learner met in training."""
    folds = sorted({r["held_out"] for r in rows})
    per = {f: float(np.mean([r["action_acc"] for r in rows if r["held_out"] == f])) for f in folds}
    seen = [r["seen_learned_acc"] for r in rows if np.isfinite(r.get("seen_learned_acc", float("nan")))]
    return {"folds": per, "mean": float(np.mean(list(per.values()))), "seen_learned": float(np.mean(seen))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", required=True, help="coplayer_adaptation.py's --runs of the trained `bayes` runs")
    p.add_argument("--game", default="staghunt")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--folds", default="")
    p.add_argument("--settings", required=True, help="comma-separated KEY=VALUE of coplayer.*, one setting each")
    p.add_argument("--steps", type=int, default=300_000, help="the runs' training budget (as they were trained)")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--work", default="/tmp/coplayer_belief_settings", help="where the copies are evaluated")
    p.add_argument("--name", default="coplayer_belief_settings")
    p.add_argument("--note", default="")
    p.add_argument("--src", help="source tree the evaluations import (default: this checkout's src)")
    args = p.parse_args()
    runs, work = Path(args.runs), Path(args.work)
    settings = [None, *[tuple(s.split("=", 1)) for s in args.settings.split(",") if s]]
    results = {}
    for setting in settings:
        label = "defaults" if setting is None else f"{setting[0]}={setting[1]}"
        dst = work / label.replace("=", "_")
        copy_runs(runs, dst, args.game, *(setting or (None, None)))
        rows = evaluate(dst, args)
        results[label] = {"rows": rows, **summarise(rows)}
        print(f"[done] {label}: held-out action accuracy {results[label]['mean']:.4f}", flush=True)
    base = {(r["seed"], r["held_out"]): r["action_acc"] for r in results["defaults"]["rows"]}
    folds = list(results["defaults"]["folds"])
    lines = [f"### {args.game}: held-out action accuracy by the belief's settings (no retraining; seeds {args.seeds}, "
             f"K = {args.k}, memory on)", "",
             "| setting | " + " | ".join(folds) + " | mean over the folds | minus defaults (95% CI, seed x fold pairs) "
             "| in-distribution, frozen learner |",
             "|---|" + "---:|" * (len(folds) + 3)]
    for label, res in results.items():
        d = np.array([r["action_acc"] - base[(r["seed"], r["held_out"])] for r in res["rows"]
                      if (r["seed"], r["held_out"]) in base])
        lo, hi = _bootstrap_ci(d) if d.size > 1 else (float("nan"), float("nan"))
        res["minus_defaults"] = {"mean": float(d.mean()), "ci": [lo, hi], "pairs": int(d.size)}
        diff = "–" if label == "defaults" else f"{d.mean():+.4f} [{lo:+.4f}, {hi:+.4f}] ({d.size})"
        lines.append(f"| {label} | " + " | ".join(f"{res['folds'][f]:.4f}" for f in folds) +
                     f" | {res['mean']:.4f} | {diff} | {res['seen_learned']:.4f} |")
    argv, shown = sys.argv[1:], []
    for i, a in enumerate(argv):  # the command without its --note (the note follows it)
        if a != "--note" and (i == 0 or argv[i - 1] != "--note") and not a.startswith("--note="):
            shown.append(a)
    lines += ["", f"`{shlex.join(['python', 'benchmarks/coplayer_belief_settings.py', *shown])}`; machine: "
                  f"{machine()['cpu']}. {args.note}"]
    write_results(args.name, {"meta": {"args": vars(args), "machine": machine()}, "results": results},
                  "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
