"""Random-action throughput of the batched MPE communication scenarios vs the mpe2 PettingZoo adapter.

For simple_speaker_listener, simple_reference and simple_crypto: `mpe:<scenario>` (batched torch) and
`mpe2:<scenario>_vN` (one mpe2 env per copy, stepped in this process) at E = 1, 64, 1024, each (env, E) in
a fresh process through `env_throughput.run_worker` (same timing, warm-up and memory columns as
`benchmarks/env_throughput.py`; the adapter's timed steps are capped at `--max-env-steps` env-steps).

    OMP_NUM_THREADS=1 python benchmarks/env_throughput_comm.py --num-envs 1,64,1024 --steps 200 --threads 1

Speed-up = batched env-steps/s at the largest E over the adapter's at that same E (the issue asks for
>= 100x at E = 1024), and over the adapter's best E (its most favourable rate). Writes
benchmarks/results/env_throughput_comm.{json,md} and prints the Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from env_throughput import run_worker  # noqa: E402  (the shared one-process-per-row harness)

PAIRS = [("mpe:simple_speaker_listener", "mpe2:simple_speaker_listener_v4"),
         ("mpe:simple_reference", "mpe2:simple_reference_v3"),
         ("mpe:simple_crypto", "mpe2:simple_crypto_v3")]
REQUIRED_SPEEDUP = 100.0


def speedups(rows: list[dict]) -> list[dict]:
    """Per scenario: batched at its largest E vs the adapter at that E and at the adapter's best E."""
    ok = [r for r in rows if "skipped" not in r]
    out = []
    for batched, adapter in PAIRS:
        mine = [r for r in ok if r["env"] == batched]
        theirs = [r for r in ok if r["env"] == adapter]
        if not mine or not theirs:
            continue
        top = max(mine, key=lambda r: r["num_envs"])
        same = [r for r in theirs if r["num_envs"] == top["num_envs"]]
        best = max(theirs, key=lambda r: r["env_steps_per_s"])
        q = {"batched": batched, "adapter": adapter, "num_envs": top["num_envs"],
             "adapter_best_num_envs": best["num_envs"], "speedup_vs_best": top["env_steps_per_s"] / best["env_steps_per_s"]}
        if same:
            q["speedup_same_e"] = top["env_steps_per_s"] / same[0]["env_steps_per_s"]
            q["meets_100x"] = q["speedup_same_e"] >= REQUIRED_SPEEDUP
        out.append(q)
    return out


def markdown(rows: list[dict], ratios: list[dict], meta: dict) -> str:
    lines = [
        "# Env throughput: MPE communication scenarios (random actions)", "",
        f"{meta['date']}, {meta['cpu_count']} CPUs ({meta['machine']}), {meta['threads']} torch thread(s), load average "
        f"at start {meta['load_average']}, at end {meta.get('load_average_end')} (shared 2-core machine, other jobs "
        f"running). `--steps {meta['steps']}` timed steps per row (adapter capped at {meta['max_env_steps']} env-steps) "
        f"after {meta['warmup']} warm-up steps; "
        f"each row in a fresh process (`env_throughput.run_worker`).", "",
        "| env | E | N | env-steps/s | agent-steps/s | peak RSS (MB) | env RSS (MB) | timed steps |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['env']} | {r['num_envs']} | | skipped: {r['skipped']} | | | | |")
        else:
            lines.append(f"| {r['env']} | {r['num_envs']} | {r['num_agents']} | {r['env_steps_per_s']:,.0f} | "
                         f"{r['agent_steps_per_s']:,.0f} | {r['peak_rss_mb']:.0f} | {r['env_rss_mb']:.0f} | {r['steps']} |")
    if ratios:
        lines += ["", f"Per env-step speed-up of the batched env (required: >= {REQUIRED_SPEEDUP:.0f}x at E = 1024):", ""]
        for q in ratios:
            same = ""
            if "speedup_same_e" in q:
                verdict = "meets" if q["meets_100x"] else "MISSES"
                same = f"{q['speedup_same_e']:.0f}x vs {q['adapter']} at the same E ({verdict} {REQUIRED_SPEEDUP:.0f}x), "
            lines.append(f"- {q['batched']} at E={q['num_envs']}: {same}{q['speedup_vs_best']:.0f}x vs its best "
                         f"E={q['adapter_best_num_envs']}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-envs", default="1,64,1024", help="comma-separated E values")
    p.add_argument("--steps", type=int, default=200, help="timed steps per (env, E)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads in each measurement")
    p.add_argument("--max-env-steps", type=int, default=20_000, help="cap on timed env-steps (E x steps) for mpe2")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per measurement before giving up")
    p.add_argument("--out", default=str(Path(__file__).parent / "results"), help="directory for json + md")
    args = p.parse_args(argv)

    import torch

    meta = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "cpu_count": os.cpu_count(),
            "machine": platform.processor() or platform.machine(), "torch": torch.__version__,
            "threads": args.threads, "steps": args.steps, "warmup": args.warmup,
            "max_env_steps": args.max_env_steps, "load_average": [round(x, 1) for x in os.getloadavg()]}
    rows = []
    for pair in PAIRS:
        for name in pair:
            for e in [int(x) for x in args.num_envs.split(",")]:
                steps, warmup = args.steps, args.warmup
                if name.startswith("mpe2:"):
                    steps, warmup = max(3, min(steps, args.max_env_steps // e)), min(warmup, 2)
                row = run_worker(name, e, steps, warmup, args.threads, args.timeout)
                rows.append(row)
                status = row.get("skipped") or f"{row['env_steps_per_s']:,.0f} env-steps/s"
                print(f"{name} E={e}: {status}", file=sys.stderr, flush=True)
    ratios = speedups(rows)
    meta["load_average_end"] = [round(x, 1) for x in os.getloadavg()]
    text = markdown(rows, ratios, meta)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "env_throughput_comm.json").write_text(json.dumps({"meta": meta, "rows": rows, "speedups": ratios}, indent=2))
    (out / "env_throughput_comm.md").write_text(text)


if __name__ == "__main__":
    main()
