"""Where a training update's time goes on a GPU: host (Python, launches) or device (kernels).

For one row (default: IPPO at JaxMARL's settings on MPE simple_spread, eager), after warm-up updates: one
collection and one PPO update under torch.profiler, and for each phase its wall seconds, the number of device
kernels it launched, and the seconds the device was busy with them. Busy / wall near 1 means the kernels are the
cost (make them faster); near 0 means the host is (fewer launches: fusing, graph capture). Also the ops with the
most host time. A diagnosis for the GPU path's design, not a throughput figure (the profiler slows the host).

    python benchmarks/gpu_profile.py --num-envs 1024            # on the machine with the GPU
    python benchmarks/gpu_profile.py --num-envs 1024 --compile --cuda-graphs   # compiled, CUDA graphs per graph
    python benchmarks/gpu_profile.py --device cpu --num-envs 16  # the script itself, on a CPU (no kernel counts)

Writes benchmarks/results/gpu_profile_<device>_<E>.{json,md} unless --name says otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from throughput import JAXMARL, case, machine, started_run, train_iteration, write_results  # noqa: E402


def phase(fn, device: str) -> dict:
    """`fn()` under the profiler: wall seconds, device kernels launched, device-busy seconds, top host ops."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy_us = sum(e.device_time for e in kernels)
    top = sorted(prof.key_averages(), key=lambda a: a.self_cpu_time_total, reverse=True)[:12]
    return {"wall_s": wall, "kernels": len(kernels), "device_busy_s": busy_us / 1e6,
            "top_host_ops": [{"op": a.key, "calls": a.count, "self_host_ms": a.self_cpu_time_total / 1e3}
                             for a in top]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default=None)
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--setting", choices=["ippo", "mappo"], default="ippo",
                   help="ippo: JaxMARL's settings; mappo: the MAPPO paper's (25 steps, 10 epochs, 1 mini-batch)")
    p.add_argument("--compile", action="store_true", help="ppo.compile=on (compiled in the warm-up)")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="with --compile: HYPERMAPPO_CUDA_GRAPHS=1 (CUDA graphs per compiled graph, written tensors static)")
    p.add_argument("--name", default=None)
    args = p.parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.cuda_graphs:
        if not args.compile:
            print("gpu_profile.py: error: --cuda-graphs needs --compile", file=sys.stderr)
            return 2
        os.environ["HYPERMAPPO_CUDA_GRAPHS"] = "1"  # read when the learner is built, below
    over = [*JAXMARL] if args.setting == "ippo" else ["algo=mappo", "actor=mlp"]
    c = case(args.setting, "mpe:simple_spread", args.num_envs, 4,
             [*over, f"device={device}", f"ppo.compile={'on' if args.compile else 'off'}"])
    with tempfile.TemporaryDirectory() as tmp:
        exp = started_run(c, f"{tmp}/run")
        for _ in range(2):
            train_iteration(exp)
        learner = exp.primary
        collect = phase(exp.collect, device)
        update = phase(lambda: learner.algo.update(learner.buffer, learner.batch_generator), device)
        steps = exp.cfg.rollout_length * exp.cfg.num_envs
    meta = {**machine(), "device": device, "num_envs": args.num_envs, "setting": args.setting,
            "compiled": args.compile, "cuda_graphs": args.cuda_graphs, "env_steps": steps,
            "device_name": torch.cuda.get_device_name(0) if device == "cuda" else "cpu"}
    lines = [f"# Where an update's time goes: {args.setting} E = {args.num_envs:,} on {meta['device_name']}"
             f" ({'compiled' if args.compile else 'eager'}{' + CUDA graphs' if args.cuda_graphs else ''})", "",
             f"{meta['date']}; CPU {meta['cpu']}, torch {meta['torch']}; under torch.profiler (host slowed).", "",
             "| phase | wall ms | kernels launched | device busy ms | busy / wall | host us per kernel |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, ph in (("collection", collect), ("update", update)):
        per = ph["wall_s"] * 1e6 / ph["kernels"] if ph["kernels"] else float("nan")
        lines.append(f"| {name} | {ph['wall_s'] * 1e3:.1f} | {ph['kernels']:,} | {ph['device_busy_s'] * 1e3:.1f} | "
                     f"{ph['device_busy_s'] / ph['wall_s']:.2f} | {per:.1f} |")
    for name, ph in (("collection", collect), ("update", update)):
        lines += ["", f"Top host ops, {name}:", "", "| op | calls | self host ms |", "|---|---:|---:|"]
        lines += [f"| `{o['op']}` | {o['calls']:,} | {o['self_host_ms']:.1f} |" for o in ph["top_host_ops"]]
    name = args.name or (f"gpu_profile_{device}_{args.setting}_{args.num_envs}" + ("_compiled" if args.compile else "")
                         + ("_cudagraphs" if args.cuda_graphs else ""))
    write_results(name, {"meta": meta, "collection": collect, "update": update}, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
