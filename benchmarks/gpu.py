"""One prepared script for a GPU machine: this library's training step beside JaxMARL's on the same device.

Rows (each in a fresh process, benchmarks/throughput.py's harness: warm-up updates untimed, then collect + update
timed; env-steps/s exclude compilation, as JaxMARL's own figures do, the compile seconds beside them), in this order:

  eager     IPPO at JaxMARL's settings on MPE simple_spread (our batched torch port; 128 steps, 4 epochs x 4
            mini-batches, 64x64 Tanh), E = 16, 1024, 4096; MAPPO at the MAPPO paper's settings (25 steps, 10 epochs,
            1 mini-batch, 64x64), E = 8192
  jaxmarl   JaxMARL IPPO-FF (benchmarks/peers/jaxmarl_ippo.py) at the IPPO rows' E, where `jax` and `jaxmarl` import
            in this interpreter or in --jaxmarl-python
  compiled  ppo.compile=on (unless --no-compile): IPPO at E = 1024 (with --cudagraphs also with CUDA graphs,
            HYPERMAPPO_CUDA_GRAPHS=1: Inductor's, the tensors the graphs write marked static; the perf hints naming
            any graph still run without one are kept), MAPPO at E = 8192, IPPO at E = 4096

A fresh machine compiles from a cold cache, so the compiled rows are the slow ones and come last: rows not started
within --budget seconds are reported as not run, a row past its timeout as timed out (with the end of its stderr
in the JSON), never dropped. With the defaults the script ends within about 8 minutes.

  seeds     IPPO at JaxMARL's settings, E = 1024, eager, one torch thread per process: one run alone, then
            --seed-processes runs of other seeds started together on the same device (what a sweep with as many
            workers gives today), their env-steps/s summed: how much of the device one host-bound run leaves idle

  batched   `seeds=` (S seeds as one batched run in one process): benchmarks/seed_batch_speed.py at the MAPPO paper's
            settings, E = 1024 per seed, S = 1 and 10, after the seeds rows (--batched-seeds 0 skips it); written to
            benchmarks/results/seed_batch_<device>.{json,md}

Aim (the fast-path goals): IPPO >= 0.5x JaxMARL at E = 1024 and 4096, MAPPO >= 2M env-steps/s at E = 8192, 10 seeds
>= 5x one seed's throughput. `benchmarks/gpu_profile.py` says where one update's time goes (host or device).

    python benchmarks/gpu.py                      # on the machine with the GPU
    python benchmarks/gpu.py --device cpu --quick # a smoke test of the script itself (E = 16, short rows)

Writes benchmarks/results/gpu_<device>.{json,md}.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from throughput import JAXMARL, case, fmt, machine, run_worker, write_results  # noqa: E402

PEER = HERE / "peers" / "jaxmarl_ippo.py"


def rows(device: str, quick: bool, compile_rows: bool, cudagraphs: bool) -> list[tuple[str, dict, dict]]:
    """(setting, case, extra environment) in the order they run: every eager row first (the baseline), then the
    compiled ones (each compiles from a cold cache on a fresh machine: the slow rows, cut first by --budget)."""
    ippo_e, mappo_e = ([16], [16]) if quick else ([16, 1024, 4096], [8192])
    threads = min(4, os.cpu_count() or 1)  # the host's side: Python, the launches
    modes = {"eager": ("ppo.compile=off", {})}
    if compile_rows:
        modes["compiled"] = ("ppo.compile=on", {})
        if cudagraphs:  # Inductor's CUDA graphs with the written tensors marked static (compile/cuda_graphs.py); the
            # perf hints name every graph Inductor still ran without one, and why
            modes["compiled+cudagraphs"] = ("ppo.compile=on", {"HYPERMAPPO_CUDA_GRAPHS": "1",
                                                                "TORCH_LOGS": "perf_hints"})
    settings = {"ippo": JAXMARL, "mappo": ["algo=mappo", "actor=mlp"]}

    def row(setting: str, e: int, mode: str) -> tuple[str, dict, dict]:
        flag, env = modes[mode]
        return setting, case(f"{setting} {mode}", "mpe:simple_spread", e, threads,
                             [*settings[setting], f"device={device}", flag]), env

    compiled = [m for m in modes if m != "eager"]
    out = [*(row("ippo", e, "eager") for e in ippo_e), *(row("mappo", e, "eager") for e in mappo_e)]
    # compiled: the headline point first (IPPO at E = 1024, plain then with CUDA graphs), then the rest
    out += [row("ippo", e, m) for e in (ippo_e if quick else [1024]) for m in compiled]
    out += [row("mappo", e, m) for e in mappo_e for m in compiled[:1]]
    out += [row("ippo", e, m) for e in ([] if quick else [e for e in ippo_e if e > 1024]) for m in compiled]
    return out


def seed_rows(device: str, quick: bool, processes: int) -> list[dict]:
    """The seeds rows: IPPO at JaxMARL's settings, eager, one torch thread, seed 0 alone; then one row whose `group`
    holds the cases of seeds 1..S, run together."""
    e = 16 if quick else 1024
    one = case("ippo eager, 1 process", "mpe:simple_spread", e, 1, [*JAXMARL, f"device={device}", "ppo.compile=off"])
    group = [{**one, "variant": f"ippo eager, {processes} processes", "overrides": [*one["overrides"], f"seed={s}"]}
             for s in range(1, processes + 1)]
    return [one, {**group[0], "group": group}]


def concurrent_seeds(cases: list[dict], warmup: int, iters: int, min_s: float, max_s: float, timeout: float) -> dict:
    """Every case at once, each in its own process (run_worker), started together: the summed env-steps/s (each
    process's rate over its own timed updates, which overlap since all start together and time the same number
    of updates), and every process's own rate."""
    with ThreadPoolExecutor(len(cases)) as pool:
        rows = list(pool.map(lambda c: run_worker(c, warmup, iters, min_s, max_s, timeout, None), cases))
    done = [r for r in rows if "skipped" not in r]
    if len(done) < len(rows):
        return {**cases[0], "skipped": f"{len(rows) - len(done)} of {len(rows)} processes failed: "
                                       f"{next(r['skipped'] for r in rows if 'skipped' in r)}"}
    return {**cases[0], "e2e_sps": sum(r["e2e_sps"] for r in done), "processes": len(done),
            "per_process_sps": [r["e2e_sps"] for r in done], "collect_s": statistics.median(r["collect_s"] for r in done),
            "update_s": statistics.median(r["update_s"] for r in done), "compile_s": None}


def jaxmarl_python(given: str | None) -> str | None:
    if given:
        return given
    if importlib.util.find_spec("jax") and importlib.util.find_spec("jaxmarl"):
        return sys.executable
    return None


def jaxmarl_row(python: str, e: int, calls: int, timeout: float) -> dict:
    cmd = [python, str(PEER), "--num-envs", str(e), "--calls", str(calls)]
    try:
        done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"num_envs": e, "skipped": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"num_envs": e, "skipped": (done.stderr.strip().splitlines() or ["no output"])[-1][:200]}
    return json.loads(lines[-1])


def markdown(results: list[dict], peers: dict, meta: dict) -> str:
    lines = [f"# GPU throughput: this library beside JaxMARL ({meta['device']})", "",
             f"{meta['date']}; device: {meta['device_name']}; CPU: {meta['cpu']}, {meta['cores']} cores; torch "
             f"{meta['torch']}; JaxMARL: {meta['jaxmarl'] or 'not importable (no row)'}. Each row in a fresh process; "
             "env-steps/s exclude compilation (the compile seconds beside them).", "",
             f"Reproduce: `{meta.get('command', 'python benchmarks/gpu.py')}`", "",
             "| setting | row | E | env-steps/s | collect + update ms | compile s | JaxMARL IPPO-FF | ours / JaxMARL |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for setting, r in results:
        e = r["num_envs"]
        peer = peers.get(e, {}) if setting == "ippo" else {}
        if "skipped" in r:
            lines.append(f"| {setting} | {r['variant']} | {e:,} | {r['skipped']} | | | | |")
            continue
        jax_sps = peer.get("sps")
        ratio = f"{r['e2e_sps'] / jax_sps:.2f}x" if jax_sps else "–"
        jax_cell = fmt(jax_sps) if jax_sps else (peer.get("skipped", "–") if peer else "–")
        lines.append(f"| {setting} | {r['variant']} | {e:,} | {fmt(r['e2e_sps'])} | "
                     f"{r['collect_s'] * 1e3:.0f} + {r['update_s'] * 1e3:.0f} | "
                     f"{(r['compile_s'] or 0):.1f} | {jax_cell} | {ratio} |")
    alone = next((r for s, r in results if s == "seeds" and r.get("processes") is None and "skipped" not in r), None)
    together = next((r for s, r in results if s == "seeds" and r.get("processes") and "skipped" not in r), None)
    if alone and together:
        lines += ["", f"Seeds as processes: {together['processes']} runs at once make {fmt(together['e2e_sps'])} "
                      f"env-steps/s in all, {together['e2e_sps'] / alone['e2e_sps']:.2f}x one run alone "
                      f"({fmt(alone['e2e_sps'])}); each process: " +
                      ", ".join(fmt(x) for x in together["per_process_sps"]) + "."]
    lines += ["", "Aims: IPPO at JaxMARL's settings >= 0.5x JaxMARL at E = 1024 and 4096; MAPPO at the paper's "
              "settings >= 2,000,000 env-steps/s at E = 8192; 10 seeds batched in one process >= 5x one seed's "
              "throughput (batched seeds in one process: not built; the seeds rows are separate processes)."]
    for _, r in results:
        if r.get("cudagraph_skips") is not None:
            lines += ["", f"Graphs Inductor ran without a CUDA graph in row {r['variant']}, E = {r['num_envs']:,} "
                          f"(its perf hints): " + ("; ".join(f"`{x}`" for x in r["cudagraph_skips"]) or "none")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default=None, help="cuda (default where available) or cpu")
    p.add_argument("--quick", action="store_true", help="E = 16 only, short rows: a smoke test of the script")
    p.add_argument("--no-compile", action="store_true", help="eager rows only")
    p.add_argument("--timeout", type=float, default=90.0, help="seconds per eager row and per JaxMARL row")
    p.add_argument("--compile-timeout", type=float, default=200.0, help="seconds per compiled row (compile included)")
    p.add_argument("--budget", type=float, default=460.0,
                   help="seconds for all rows: a row not started by then is reported as not run")
    p.add_argument("--cudagraphs", action="store_true",
                   help="also a compiled row with Inductor's CUDA graphs (TORCHINDUCTOR_CUDAGRAPHS=1)")
    p.add_argument("--jaxmarl-python", default=None, help="an interpreter in which jax and jaxmarl import")
    p.add_argument("--seed-processes", type=int, default=None,
                   help="runs of other seeds started together on the device for the seeds rows (default 10; "
                        "2 with --quick; 0: no seeds rows)")
    p.add_argument("--batched-seeds", type=int, default=10, help="S of the batched seeds rows (0: none)")
    p.add_argument("--name", default=None)
    args = p.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("gpu.py: error: --device cuda asked for, but torch sees no CUDA device", file=sys.stderr)
        return 2
    command = shlex.join(["python", "benchmarks/gpu.py", *(sys.argv[1:] if argv is None else argv)])
    meta = {**machine(), "device": device, "command": command,
            "device_name": torch.cuda.get_device_name(0) if device == "cuda" else "cpu"}
    warmup, iters, min_s, max_s = (1, 2, 0.5, 5.0) if args.quick else (2, 5, 3.0, 20.0)
    start = time.perf_counter()

    def left() -> float:
        return args.budget - (time.perf_counter() - start)

    plan = rows(device, args.quick, not args.no_compile, args.cudagraphs)
    results, peers = [], {}
    python = jaxmarl_python(args.jaxmarl_python)
    eager = [r for r in plan if "eager" in r[1]["variant"]]
    meta["jaxmarl"] = python
    name = args.name or f"gpu_{device}" + ("_quick" if args.quick else "")

    def save(echo: bool = False) -> None:  # after every row: a script cut short still leaves the rows done so far
        meta["wall_s"] = time.perf_counter() - start
        write_results(name, {"meta": meta, "rows": [{"setting": s, **r} for s, r in results], "jaxmarl": peers},
                      markdown(results, peers, meta), echo)

    processes = args.seed_processes if args.seed_processes is not None else (2 if args.quick else 10)
    if processes > 0:  # after the eager rows, before the compiled ones (the slow rows, cut first by --budget)
        at = max(i for i, (_, c, _) in enumerate(plan) if "eager" in c["variant"]) + 1
        plan[at:at] = [("seeds", c, {}) for c in seed_rows(device, args.quick, processes)]
    batched_done = args.batched_seeds <= 0
    for setting, c, env in plan:
        if not batched_done and setting != "seeds" and "eager" not in c["variant"]:  # before the compiled rows
            batched_done = batched_seeds(device, args, left())
        if "group" in c:  # several processes at once (the seeds rows)
            r = (concurrent_seeds(c["group"], warmup, iters, min_s, max_s, min(args.timeout, left())) if left() >= 20
                 else {**c, "skipped": f"not run: the --budget of {args.budget:.0f} s was spent"})
            results.append((setting, r))
            print(f"  {c['variant']} E={c['num_envs']}: {r.get('skipped') or fmt(r['e2e_sps']) + ' env-steps/s'} "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
            save()
            continue
        if left() < 20:
            results.append((setting, {**c, "skipped": f"not run: the --budget of {args.budget:.0f} s was spent"}))
        else:
            timeout = min(args.timeout if "eager" in c["variant"] else args.compile_timeout, left())
            results.append((setting, {**run_worker(c, warmup, iters, min_s, max_s, timeout, None, env),
                                      "extra_env": env}))
        r = results[-1][1]
        print(f"  {c['variant']} E={c['num_envs']}: "
              f"{r.get('skipped') or fmt(r['e2e_sps']) + ' env-steps/s'} ({time.perf_counter() - start:.0f} s)",
              flush=True)
        save()
        if python and (setting, c, env) == eager[-1]:  # the peer right after our eager rows, before any compiling
            for e in sorted({c2["num_envs"] for s2, c2, _ in plan if s2 == "ippo"}):
                peers[e] = (jaxmarl_row(python, e, 2 if args.quick else 5, min(args.timeout, left())) if left() >= 20
                            else {"num_envs": e, "skipped": "not run: budget spent"})
                print(f"  jaxmarl E={e}: {peers[e].get('skipped') or fmt(peers[e]['sps']) + ' env-steps/s'}",
                      flush=True)
                save()
    if not batched_done:
        batched_seeds(device, args, left())
    save(echo=True)
    return 0


def batched_seeds(device: str, args, left: float) -> bool:
    """The batched seeds rows (benchmarks/seed_batch_speed.py), where at least a minute of the budget is left."""
    if left >= 60:
        import seed_batch_speed

        seed_batch_speed.main(["--device", device, "--num-envs", "16" if args.quick else "1024",
                               "--seeds", f"1,{args.batched_seeds}", "--rounds", "1",
                               "--updates", "4" if args.quick else "6",
                               "--name", f"seed_batch_{device}" + ("_quick" if args.quick else "")])
    else:
        print(f"  batched seeds: not run (the --budget of {args.budget:.0f} s was spent)", flush=True)
    return True


if __name__ == "__main__":
    sys.exit(main())
