"""Throughput of S seeds trained as one batched run (`seeds=`) beside one seed alone, side by side on one machine.

Each row is a real training run through the CLI (`hypermappo train mpe/simple_spread ...`) in a fresh process, at
the MAPPO paper's settings (25 steps, 10 epochs, 1 mini-batch, 64x64) with E envs per seed; its env-steps/s is
S * T * E over the median of the run's own per-update collect_s + update_s (metrics.csv), the first updates left
out (warm-up). Rounds alternate the rows, so a ratio compares runs made minutes apart, never across sessions.

    python benchmarks/seed_batch_speed.py                         # CPU: E = 64, S = 1, 4
    python benchmarks/seed_batch_speed.py --device cuda --num-envs 1024 --seeds 1,10 --rounds 1

Writes benchmarks/results/seed_batch_<device>.{json,md}.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from throughput import fmt, machine, span, write_results  # noqa: E402

PAPER = ["ppo.ppo_epoch=10", "ppo.num_mini_batch=1", "rollout_length=25", "eval_episodes=2", "checkpoint_interval=0",
         "diagnostics.every=0", "diagnostics.audit_updates=0", "ppo.compile=off"]


def one_run(device: str, e: int, s: int, updates: int, threads: int, work: Path, mode: str = "auto") -> dict:
    """A training run of S seeds batched (S = 1: the seed alone, a plain run; `mode`: HYPERMAPPO_SEED_BATCH, how
    the seeds' networks are called) -> its measured figures."""
    run_dir = work / f"e{e}_s{s}_{time.monotonic_ns()}"
    keys = [*PAPER, f"device={device}", f"num_envs={e}", f"total_env_steps={updates * 25 * e}",
            f"torch_threads={threads}", f"run_dir={run_dir}"]
    keys += [f"seeds=[{','.join(map(str, range(s)))}]"] if s > 1 else ["seed=0"]
    cmd = [sys.executable, "-m", "hypermappo.cli", "train", "mpe/simple_spread", *keys, "--quiet"]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HYPERMAPPO_SEED_BATCH": mode})
    if done.returncode:
        raise SystemExit(f"seed_batch_speed.py: {' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    metrics = run_dir / ("seed_0" if s > 1 else "") / "metrics.csv"
    rows = list(csv.DictReader(open(metrics)))[2:]  # warm-up: the first two updates
    per_update = statistics.median(float(r["collect_s"]) + float(r["update_s"]) for r in rows)
    return {"num_envs": e, "seeds": s, "mode": mode if s > 1 else "alone", "sps": s * 25 * e / per_update,
            "update_wall_s": per_update, "timed_updates": len(rows)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--num-envs", default="64", help="envs per seed, comma-separated")
    p.add_argument("--seeds", default="1,4", help="seed counts S, comma-separated (1: one seed alone)")
    p.add_argument("--updates", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=0, help="torch threads per run (0: the library's default)")
    p.add_argument("--modes", default="auto", help="HYPERMAPPO_SEED_BATCH values for the S > 1 rows, comma-separated "
                                                   "(auto, batched, each)")
    p.add_argument("--name", default=None)
    args = p.parse_args(argv)
    envs = [int(x) for x in args.num_envs.split(",")]
    counts = [int(x) for x in args.seeds.split(",")]
    modes = args.modes.split(",")
    cases = [(s, "alone") if s == 1 else (s, m) for s in counts for m in (["alone"] if s == 1 else modes)]
    results: dict[tuple[int, int, str], list[dict]] = {}
    with tempfile.TemporaryDirectory() as work:
        for r in range(args.rounds):
            for e in envs:
                for s, mode in (cases if r % 2 == 0 else cases[::-1]):
                    row = one_run(args.device, e, s, args.updates, args.threads, Path(work),
                                  "auto" if mode == "alone" else mode)
                    results.setdefault((e, s, mode), []).append(row)
                    print(f"  round {r + 1}: E={e} S={s} {mode}: {fmt(row['sps'])} env-steps/s", flush=True)
    meta = {**machine(), "device": args.device, "updates": args.updates, "rounds": args.rounds,
            "command": " ".join(["python", "benchmarks/seed_batch_speed.py", *(sys.argv[1:] if argv is None else argv)])}
    lines = [f"### `seeds=`: S seeds batched in one process beside one seed alone ({args.device}; {meta['cpu']}, "
             f"{meta['cores']} cores; torch {meta['torch']})", "",
             "MPE simple_spread, MAPPO paper settings (T = 25, 10 epochs, 1 mini-batch, 64x64), eager; env-steps/s of "
             "all S seeds together (median over rounds), and their ratio to one seed alone measured in the same "
             "rounds (median [range]).", "",
             "Networks: `HYPERMAPPO_SEED_BATCH` (auto: each seed's actor, critic and update in turn on a CPU, vmapped "
             "over the seeds on a GPU; batched: vmapped; each: in turn); the env is one batched env either way.", "",
             "| E per seed | S | networks | env-steps/s | x one seed alone |", "|---|---|---|---|---|"]
    for e in envs:
        base = results.get((e, 1, "alone"))
        for s, mode in cases:
            rows = results[(e, s, mode)]
            sps = statistics.median(x["sps"] for x in rows)
            ratio = "1 (itself)" if s == 1 else span([x["sps"] / b["sps"] for x, b in zip(rows, base)]) if base \
                else "n/a"
            lines.append(f"| {e} | {s} | {mode} | {fmt(sps)} | {ratio} |")
    lines += ["", f"Command: `{meta['command']}`; {meta['date']}."]
    data = {"meta": meta, "rows": [x for rows in results.values() for x in rows]}
    write_results(args.name or f"seed_batch_{args.device}", data, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
