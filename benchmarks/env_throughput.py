"""Random-action throughput of every env backend through the same registry + contract path, as a table.

Each (env, E) pair runs in a fresh Python process, so its peak memory is its own: `peak RSS` is the
process's resident-set high-water mark (`resource.getrusage(RUSAGE_SELF).ru_maxrss`, includes the Python,
torch and backend imports), `env RSS` is that peak minus the high-water mark measured right after the
imports, i.e. what building and stepping E envs added. A timed step is `random_actions` (from
`hypermappo.envs.contract`, respecting available actions) plus `env.step`, after `--warmup` untimed steps
(which also absorb JAX compilation for SMAX).

    python benchmarks/env_throughput.py --num-envs 1,64,1024 --steps 200 --threads 1

The batched MPE suite next to its mpe2 adapters (issue 16; mpe2 at E=1024 would need ~2 GB, so the
adapters run at smaller E and their per-env-step rate is compared):

    python benchmarks/env_throughput.py --envs mpe_suite --num-envs 1,64,1024 --adapter-num-envs 1,64 \
        --name env_throughput_mpe_suite
    python benchmarks/env_throughput.py --envs mpe_comm --num-envs 1,64,1024 --name env_throughput_comm

`--threads` defaults to 1: on a 2-core machine shared with other processes, 2 torch threads made every
parallelised op wait for a descheduled thread (torch.min over a [64, 3] tensor: 8 ms instead of 8 us), and
VMAS / mpe:simple_spread ran 5-8x slower than with 1 thread.

Writes benchmarks/results/env_throughput.{json,md} and prints the Markdown table, plus the per-env-step
speed-up of the batched simple_spread backends at E=1024 over the PettingZoo (mpe2) adapter.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

DEFAULT_ENVS = "matrix:climbing,staghunt,mpe:simple_spread,mpe2:simple_spread_v3,vmas:simple_spread,smax:3m"
# coin game (issue 15): batched in torch like the stag hunt
DEFAULT_ENVS += ",coingame"
SLOW_PREFIXES = ("mpe2", "pettingzoo", "gym")  # one Python env per copy: steps are capped (--max-env-steps)
BATCHED_SPREAD = ("mpe:simple_spread", "vmas:simple_spread")
ADAPTER_SPREAD = "mpe2:simple_spread_v3"
REQUIRED_SPEEDUP = 20.0
# the batched MPE suite (issue 16): each torch scenario and its mpe2 adapter, >= 100x per env-step at E=1024
MPE_SUITE = {"mpe:simple": "mpe2:simple_v3", "mpe:simple_adversary": "mpe2:simple_adversary_v3",
             "mpe:simple_push": "mpe2:simple_push_v3", "mpe:simple_tag": "mpe2:simple_tag_v3",
             "mpe:simple_world_comm": "mpe2:simple_world_comm_v3"}
# the communication scenarios (the same >= 100x requirement); `mpe_comm` in --envs
MPE_COMM = {"mpe:simple_speaker_listener": "mpe2:simple_speaker_listener_v4",
            "mpe:simple_reference": "mpe2:simple_reference_v3", "mpe:simple_crypto": "mpe2:simple_crypto_v3"}
MPE_SUITE_ENVS = ",".join(f"{k},{v}" for k, v in MPE_SUITE.items())
MPE_COMM_ENVS = ",".join(f"{k},{v}" for k, v in MPE_COMM.items())
SUITE_REQUIRED_SPEEDUP = 100.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def measure(env_name: str, num_envs: int, steps: int, warmup: int, threads: int) -> dict:
    """Runs in the worker process: build, warm up, time `steps` random-action steps."""
    import torch

    torch.set_num_threads(threads)
    from hypermappo.envs.contract import random_actions
    from hypermappo.envs.registry import BACKENDS, make_env

    prefix = env_name.partition(":")[0]
    importlib.import_module(BACKENDS[prefix][0].partition(":")[0])  # "module:function" -> module
    if prefix == "smax":  # JAX and SMAX count as imports, like torch for the others
        from hypermappo.envs.smax import _import_smax

        _import_smax()
    elif prefix in ("vmas", "mpe2"):
        importlib.import_module(prefix)
    rss_after_imports = peak_rss_mb()

    t0 = time.perf_counter()
    env = make_env(env_name, num_envs)
    g = torch.Generator().manual_seed(0)
    s = env.reset(seed=0)
    for _ in range(warmup):
        s = env.step(random_actions(env, s, g))
    setup_s = time.perf_counter() - t0
    episodes = 0
    t0 = time.perf_counter()
    for _ in range(steps):
        s = env.step(random_actions(env, s, g))
        episodes += int(s.episode_done.sum()) if s.episode_done is not None else 0
    elapsed = time.perf_counter() - t0
    env.close()
    env_steps = num_envs * steps / elapsed
    return {
        "env": env_name, "num_envs": num_envs, "num_agents": env.spec.num_agents, "steps": steps,
        "warmup": warmup, "seconds": elapsed, "setup_seconds": setup_s, "episodes_ended": episodes,
        "env_steps_per_s": env_steps, "agent_steps_per_s": env_steps * env.spec.num_agents,
        "peak_rss_mb": peak_rss_mb(), "env_rss_mb": peak_rss_mb() - rss_after_imports,
    }


def run_worker(env_name: str, num_envs: int, steps: int, warmup: int, threads: int, timeout: float) -> dict:
    """One measurement in a fresh process (own memory high-water mark, own RNG and JAX state)."""
    cmd = [sys.executable, __file__, "--worker", env_name, str(num_envs), str(steps), str(warmup), str(threads)]
    try:
        done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"env": env_name, "num_envs": num_envs, "skipped": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        err = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"env": env_name, "num_envs": num_envs, "skipped": err[:200]}
    return json.loads(lines[-1])


def fmt(x: float) -> str:
    return f"{x:,.0f}"


def speedups(rows: list[dict]) -> list[dict]:
    """Batched simple_spread at the largest E vs the PettingZoo adapter's best E, per env-step."""
    ok = [r for r in rows if "skipped" not in r]
    adapter = [r for r in ok if r["env"] == ADAPTER_SPREAD]
    if not adapter:
        return []
    best = max(adapter, key=lambda r: r["env_steps_per_s"])
    out = []
    for name in BATCHED_SPREAD:
        mine = [r for r in ok if r["env"] == name]
        if mine:
            top = max(mine, key=lambda r: r["num_envs"])
            ratio = top["env_steps_per_s"] / best["env_steps_per_s"]
            out.append({"batched": name, "batched_num_envs": top["num_envs"], "adapter": ADAPTER_SPREAD,
                        "adapter_num_envs": best["num_envs"], "speedup": ratio, "meets_20x": ratio >= REQUIRED_SPEEDUP})
    return out


def suite_speedups(rows: list[dict]) -> list[dict]:
    """Each MPE-suite scenario at its largest E vs its mpe2 adapter's best per-env-step rate (any E measured)."""
    ok = [r for r in rows if "skipped" not in r]
    out = []
    for name, adapter_name in {**MPE_SUITE, **MPE_COMM}.items():
        mine = [r for r in ok if r["env"] == name]
        adapter = [r for r in ok if r["env"] == adapter_name]
        if mine and adapter:
            top, best = max(mine, key=lambda r: r["num_envs"]), max(adapter, key=lambda r: r["env_steps_per_s"])
            ratio = top["env_steps_per_s"] / best["env_steps_per_s"]
            out.append({"batched": name, "batched_num_envs": top["num_envs"], "adapter": adapter_name,
                        "adapter_num_envs": best["num_envs"], "speedup": ratio,
                        "meets_required": ratio >= SUITE_REQUIRED_SPEEDUP, "required": SUITE_REQUIRED_SPEEDUP})
    return out


def markdown(rows: list[dict], ratios: list[dict], meta: dict) -> str:
    header = (f"{meta['date']}, {meta['cpu_count']} CPUs ({meta['machine']}), torch {meta['torch']}, "
              f"{meta['threads']} torch threads, load average at start {meta['load_average']} (shared machine). "
              f"Timed steps per row: `--steps {meta['steps']}` (capped at `--max-env-steps {meta['max_env_steps']}` "
              f"env-steps for the one-Python-env-per-copy adapters), after {meta['warmup']} warm-up steps.")
    memory = ("`peak RSS`: resident-set high-water mark of the fresh process that ran the row "
              "(`getrusage(RUSAGE_SELF).ru_maxrss`, imports included); `env RSS`: that peak minus the mark right "
              "after the imports.")
    lines = [
        "# Env throughput (random actions)", "", header, "", memory, "",
        *([f"Reproduce: `{meta['command']}`", ""] if meta.get("command") else []),
        "| env | E | N | env-steps/s | agent-steps/s | peak RSS (MB) | env RSS (MB) | timed steps |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['env']} | {r['num_envs']} | | skipped: {r['skipped']} | | | | |")
        else:
            lines.append(f"| {r['env']} | {r['num_envs']} | {r['num_agents']} | {fmt(r['env_steps_per_s'])} | "
                         f"{fmt(r['agent_steps_per_s'])} | {r['peak_rss_mb']:.0f} | {r['env_rss_mb']:.0f} | "
                         f"{r['steps']} |")
    for required in sorted({q.get("required", REQUIRED_SPEEDUP) for q in ratios}):
        what = "simple_spread" if required == REQUIRED_SPEEDUP else "the MPE suite"
        lines += ["", f"Per env-step speed-up on {what} (required: >= {required:.0f}x):", ""]
        for q in (q for q in ratios if q.get("required", REQUIRED_SPEEDUP) == required):
            lines.append(f"- {q['batched']} at E={q['batched_num_envs']} vs {q['adapter']} at its best "
                         f"E={q['adapter_num_envs']}: {q['speedup']:.1f}x "
                         f"({'meets' if q.get('meets_required', q.get('meets_20x')) else 'MISSES'} {required:.0f}x)")
    if meta.get("adapter_num_envs"):
        lines += ["", f"The one-Python-env-per-copy adapters were measured at E = {meta['adapter_num_envs']} only "
                  "(mpe2 at E=1024 needs ~2 GB); their per-env-step rate barely depends on E."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        name, e, steps, warmup, threads = argv[1], int(argv[2]), int(argv[3]), int(argv[4]), int(argv[5])
        print(json.dumps(measure(name, e, steps, warmup, threads)))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", default=DEFAULT_ENVS,
                   help=f"comma-separated env strings; `mpe_suite` = {MPE_SUITE_ENVS}; `mpe_comm` = {MPE_COMM_ENVS}")
    p.add_argument("--num-envs", default="1,64,1024", help="comma-separated E values")
    p.add_argument("--steps", type=int, default=200, help="timed steps per (env, E)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first (JAX compiles during reset)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads in each measurement (see docstring)")
    p.add_argument("--max-env-steps", type=int, default=20_000,
                   help=f"cap on timed env-steps (E x steps) for {', '.join(SLOW_PREFIXES)} adapters")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per measurement before giving up")
    p.add_argument("--out", default=str(Path(__file__).parent / "results"), help="directory for json + md")
    p.add_argument("--name", default="env_throughput", help="file stem of the results (<out>/<name>.{json,md})")
    p.add_argument("--adapter-num-envs", default="",
                   help=f"comma-separated E values for the {', '.join(SLOW_PREFIXES)} adapters (default: --num-envs)")
    args = p.parse_args(argv)

    import torch

    meta = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "cpu_count": os.cpu_count(),
            "machine": platform.processor() or platform.machine(), "torch": torch.__version__,
            "threads": args.threads, "steps": args.steps, "warmup": args.warmup,
            "max_env_steps": args.max_env_steps, "load_average": [round(x, 1) for x in os.getloadavg()],
            "adapter_num_envs": args.adapter_num_envs,
            "command": " ".join(["python", "benchmarks/env_throughput.py", *argv])}
    rows = []
    names = [s.strip() for s in args.envs.split(",") if s.strip()]
    groups = {"mpe_suite": MPE_SUITE_ENVS.split(","), "mpe_comm": MPE_COMM_ENVS.split(",")}
    names = [n for name in names for n in groups.get(name, [name])]
    for name in names:
        slow = name.partition(":")[0] in SLOW_PREFIXES
        sizes = args.adapter_num_envs if slow and args.adapter_num_envs else args.num_envs
        for e in [int(x) for x in sizes.split(",")]:
            steps, warmup = args.steps, args.warmup
            if slow:
                steps = max(3, min(steps, args.max_env_steps // e))
                warmup = min(warmup, 2)
            row = run_worker(name, e, steps, warmup, args.threads, args.timeout)
            rows.append(row)
            status = row.get("skipped") or f"{fmt(row['env_steps_per_s'])} env-steps/s"
            print(f"{name} E={e}: {status}", file=sys.stderr, flush=True)
    ratios = speedups(rows) + suite_speedups(rows)
    text = markdown(rows, ratios, meta)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps({"meta": meta, "rows": rows, "speedups": ratios}, indent=2))
    (out / f"{args.name}.md").write_text(text)


if __name__ == "__main__":
    main()
