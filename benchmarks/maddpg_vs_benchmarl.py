"""MADDPG env-steps/s beside BenchMARL's MADDPG on VMAS simple_spread (Box actions), measured in one script run.

Ours: the `hypermappo bench` rows `maddpg-continuous/vmas:simple_spread/{16,128}` (benchmarks/throughput.py: the real
Experiment, collect + the gradient steps due, default maddpg.* settings, no warm-up, median over timed updates).
Peer: benchmarks/peers/benchmarl_maddpg.py in BenchMARL's own virtualenv (benchmarks/peers/benchmarl_maddpg.sh),
BenchMARL's default MADDPG experiment (10 envs, 6000 frames per batch, 1000 optimiser steps of 128 per batch),
wall time of `Experiment.run()` over --frames env steps. One torch thread each, run one after the other.

    bash benchmarks/peers/benchmarl_maddpg.sh && python benchmarks/maddpg_vs_benchmarl.py
Writes benchmarks/results/maddpg_vs_benchmarl.{md,json}.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--peer-python", default="/work/peers/benchmarl/bin/python")
    p.add_argument("--frames", type=int, default=12_000)
    p.add_argument("--out", type=Path, default=HERE / "results" / "maddpg_vs_benchmarl")
    args = p.parse_args()
    spec = importlib.util.spec_from_file_location("throughput", HERE / "throughput.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    load_start = [round(x, 1) for x in os.getloadavg()]
    name, env, counts = bench.MADDPG_CONTINUOUS
    ours = [bench.run_worker(bench.case(name, env, e, 1, [*bench.MADDPG, "env_kwargs={continuous_actions: true}"]),
                             1, 3, 4.0, 120.0, 1200.0, None) for e in counts]
    matched = bench.case(name, env, 10, 1, [*bench.MADDPG, "env_kwargs={continuous_actions: true}",
                                            "maddpg.update_interval=6", "maddpg.batch_size=128"],
                         note="BenchMARL's ratio: 10 envs, a step of batch 128 per 6 env steps")
    ours.append(bench.run_worker(matched, 1, 3, 4.0, 120.0, 1200.0, None))
    done = subprocess.run([args.peer_python, str(HERE / "peers" / "benchmarl_maddpg.py"), "--frames", str(args.frames)],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    peer = json.loads(lines[-1]) if lines else {"skipped": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    load_end = [round(x, 1) for x in os.getloadavg()]
    rows = ["| implementation | envs | env-steps/s | vs BenchMARL |", "|---|---:|---:|---:|"]
    peer_sps = peer.get("env_steps_per_s")
    for r in ours:
        sps = r.get("e2e_sps")
        rows.append(f"| hypermappo maddpg ({r.get('note') or 'default maddpg.*'}) | {r['num_envs']} | "
                    + (f"{sps:,.0f} | {sps / peer_sps:.1f}x |" if sps and peer_sps else f"{r.get('skipped')} | |"))
    rows.append(f"| BenchMARL MADDPG (defaults) | {peer.get('n_envs', '?')} | "
                + (f"{peer_sps:,.0f} | 1.0x |" if peer_sps else f"{peer.get('skipped')} | |"))
    md = "\n".join(["# MADDPG throughput vs BenchMARL, VMAS simple_spread (Box actions), 1 torch thread", "",
                    *rows, "",
                    "Settings differ as each library's defaults do: hypermappo one gradient step (batch 1024) per 100 "
                    "env steps; BenchMARL 1000 optimiser steps (batch 128) per 6000 frames, i.e. one per 6 env steps.",
                    f"Load average {load_start} at start, {load_end} at end (2 cores shared with other helpers' jobs).",
                    "Reproduce: `bash benchmarks/peers/benchmarl_maddpg.sh && python benchmarks/maddpg_vs_benchmarl.py`"])
    print(md)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(md + "\n")
    args.out.with_suffix(".json").write_text(json.dumps({"ours": ours, "peer": peer}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
