"""Time to a result: wall-clock for MAPPO to reach an evaluation return on simple_spread, eager vs compiled.

Each run is the `mpe/simple_spread` preset (E = 128, T = 25, 10 epochs, 1 mini-batch; mpe2's reward scale, random
≈ -27, heuristic ≈ -9.2) with `ppo.compile=off` or `on`, evaluated every `--eval-every` updates (100 deterministic
episodes, as the preset). A run stops at the first evaluation at or above the last threshold, or at `--max-steps`.
The time to a threshold is `wall_s` of the first metrics row whose evaluation reaches it: seconds since the run's
training loop started, so compiling (on the first update, cold or warm cache as found), evaluations and
checkpoints are in it; process start-up and imports (~2-3 s, the same for both) are not. Per seed, eager and
compiled run back to back in alternating order, in separate processes, so both see the same machine load.

    python benchmarks/time_to_result.py --seeds 0,1,2 --thresholds=-15,-10 --max-steps 10000000 --threads 1

Writes benchmarks/results/time_to_result.{json,md} and prints the table.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def run(seed: int, mode: str, args, out_dir: Path) -> dict:
    run_dir = out_dir / f"{mode}_s{seed}"
    cmd = [sys.executable, "-m", "hypermappo.cli", "train", "mpe/simple_spread", f"seed={seed}", f"ppo.compile={mode}",
           f"total_env_steps={args.max_steps}", f"eval_interval={args.eval_every}", f"torch_threads={args.threads}",
           "checkpoint_interval=0", "log.tensorboard=false", f"run_dir={run_dir}", "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stopped = False
    while proc.poll() is None:  # stop the run (SIGTERM: it finishes the update and exits 143) once the last
        time.sleep(2.0)         # threshold is reached, instead of training on to --max-steps
        if not stopped and any(float(r["eval_return_mean"]) >= max(args.thresholds) for r in eval_rows(run_dir)):
            proc.terminate()
            stopped = True
    _, err = proc.communicate()
    process_s = time.perf_counter() - t0
    if proc.returncode not in ((0, 143) if stopped else (0,)):
        raise SystemExit(f"run {mode} seed {seed} failed ({proc.returncode}): {err.strip()[-500:]}")
    rows = eval_rows(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    reached = {}
    for th in args.thresholds:
        hit = next((r for r in rows if float(r["eval_return_mean"]) >= th), None)
        reached[str(th)] = None if hit is None else {"wall_s": float(hit["wall_s"]), "env_steps": int(hit["env_steps"])}
    return {"seed": seed, "mode": mode, "reached": reached, "compile_s": compile_s(run_dir),
            "final_eval": float(rows[-1]["eval_return_mean"]), "env_steps": int(rows[-1]["env_steps"]),
            "stopped_at_threshold": stopped, "wall_s": summary.get("wall_s"),
            "process_s": process_s, "evals": [(int(r["env_steps"]), float(r["wall_s"]), float(r["eval_return_mean"]))
                                              for r in rows]}


def eval_rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.csv"
    if not path.exists():
        return []
    with open(path) as f:
        return [r for r in csv.DictReader(f) if r.get("eval_return_mean") not in (None, "", "nan")]


def compile_s(run_dir: Path) -> float | None:
    """The compile time the run printed (summary.json may be missing for a run stopped at its threshold)."""
    with open(run_dir / "metrics.csv") as f:
        walls = [float(r["update_s"]) + float(r["collect_s"]) for r in csv.DictReader(f)][:2]
    return max(0.0, walls[0] - walls[1]) if len(walls) == 2 else None


def fmt_hit(hit) -> str:
    return "not reached" if hit is None else f"{hit['wall_s']:,.0f} s ({hit['env_steps'] / 1e6:.2f}M)"


def table(results: list[dict], args, meta: dict) -> str:
    lines = ["# Time to a result: MAPPO on simple_spread, eager vs compiled", "",
             f"{meta['date']}; torch {meta['torch']}, {args.threads} torch thread(s) per run, runs one at a time; load "
             f"average {meta['load_start']} at start, {meta['load_end']} at end (other jobs shared the 2 cores). "
             f"Preset `mpe/simple_spread` (E = 128, T = 25, 10 epochs, 1 mini-batch), evaluation every "
             f"{args.eval_every} updates ({args.eval_every * 3200:,} env steps), stop at "
             f"{max(args.thresholds)} or {args.max_steps:,} steps. Time = `wall_s` of the first evaluation at or "
             "above the threshold (compile, evaluations included; process start-up not).", "",
             f"Reproduce: `{meta['command']}`", ""]
    head = ["seed", "mode", *[f"to {th}" for th in args.thresholds], "first update - second (s)", "last eval",
            "steps run"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        lines.append("| " + " | ".join([str(r["seed"]), r["mode"], *[fmt_hit(r["reached"][str(th)])
                                                                     for th in args.thresholds],
                                        "-" if r["compile_s"] is None else f"{r['compile_s']:.1f}",
                                        f"{r['final_eval']:.2f}", f"{r['env_steps']:,}"]) + " |")
    lines += ["", "Median over seeds (only where every seed reached it):", ""]
    for th in args.thresholds:
        parts = []
        for mode in ("off", "on"):
            hits = [r["reached"][str(th)] for r in results if r["mode"] == mode]
            if hits and all(hits):
                parts.append(f"{'eager' if mode == 'off' else 'compiled'} "
                             f"{statistics.median(h['wall_s'] for h in hits):,.0f} s")
            else:
                parts.append(f"{'eager' if mode == 'off' else 'compiled'}: {sum(map(bool, hits))}/{len(hits)} seeds "
                             f"reached it")
        ratio = ""
        eager = [r["reached"][str(th)] for r in results if r["mode"] == "off"]
        comp = [r["reached"][str(th)] for r in results if r["mode"] == "on"]
        if eager and comp and all(eager) and all(comp):
            ratio = (f"; eager / compiled = "
                     f"{statistics.median(h['wall_s'] for h in eager) / statistics.median(h['wall_s'] for h in comp):.2f}")
        lines.append(f"- eval return {th}: " + ", ".join(parts) + ratio)
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--thresholds", default="-15,-10", help="eval returns, comma-separated (e.g. --thresholds=-15,-10)")
    p.add_argument("--max-steps", type=int, default=10_000_000)
    p.add_argument("--eval-every", type=int, default=10, help="updates between evaluations")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--name", default="time_to_result")
    args = p.parse_args(argv)
    args.thresholds = sorted(float(x) for x in args.thresholds.split(","))
    import torch

    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
            "load_start": " / ".join(f"{x:.1f}" for x in os.getloadavg()),
            "command": "python benchmarks/time_to_result.py " + " ".join(
                a if not a.startswith("--thresholds") else a for a in (argv or sys.argv[1:]))}
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, seed in enumerate(int(s) for s in args.seeds.split(",")):
            for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
                r = run(seed, mode, args, Path(tmp))
                print(f"seed {seed} {mode}: " + ", ".join(f"{th}: {fmt_hit(r['reached'][str(th)])}"
                                                           for th in args.thresholds), flush=True)
                results.append(r)
    meta["load_end"] = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    md = table(sorted(results, key=lambda r: (r["seed"], r["mode"])), args, meta)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.md").write_text(md)
    (RESULTS / f"{args.name}.json").write_text(json.dumps({"meta": meta, "args": {k: v for k, v in vars(args).items()},
                                                           "results": results}, indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
