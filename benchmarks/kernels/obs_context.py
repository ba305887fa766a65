"""The observation-context hypernetwork as one C kernel (kernels/obs_context.c) against the PyTorch modules it stands in
for (HYPERMAPPO_OBS_CONTEXT_KERNEL=0), side by side in one process.

  kernel  the context chain alone (encoder, attention, LayerNorm, MLP) at the paper setting's mini-batch (25,600
          samples x 3 agents, VMAS simple_spread's 18 observation features, the defaults: 16 wide, 4 heads, 2 MLP
          layers): forward, and forward + backward, eager modules against the kernel, in turn each round.
  step    one training step (collection + update) of Hyper-MAPPO with the observation context (the defaults) at the
          paper's settings (VMAS simple_spread, E = 1024), compiled (`ppo.compile=on`) and eager, with the kernel
          and with the modules, and compiled MAPPO's step in the same rounds: the ratio the speed target is about
          (Hyper-MAPPO's env-steps/s over MAPPO's, >= 0.667 = within 1.5x of its time).

Every experiment lives in this one process (each compiled with its own graphs), and a round steps each once in
turn, so a slow phase of the shared machine hits all of them; medians over rounds, ratios within a round [range];
compile excluded (every experiment steps twice first).

    python benchmarks/kernels/obs_context.py --rounds 6

Writes benchmarks/results/obs_context.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # benchmarks/: throughput.py (the shared harness), results/
sys.path.insert(0, str(BENCH))
from throughput import VARIANTS, case, collect_and_update, machine, span, started_run, write_results  # noqa: E402

SWITCH = "HYPERMAPPO_OBS_CONTEXT_KERNEL"
SAMPLES, AGENTS, OBS = 25_600, 3, 18


def kernel_rounds(rounds: int) -> dict:
    import gymnasium as gym
    import torch

    from hypermappo.config import build_config
    from hypermappo.envs.vec import EnvSpec
    from hypermappo.kernels import obs_context
    from hypermappo.models.actor import build_actor

    spec = EnvSpec(num_agents=AGENTS, obs_dim=OBS, state_dim=AGENTS * OBS,
                   observation_space=gym.spaces.Box(-1, 1, (OBS,)), action_space=gym.spaces.Discrete(5))
    torch.manual_seed(0)
    net = build_actor("hyper", spec, build_config(None, ["actor=hyper", "hyper.context=obs"])).hyper
    assert net.context_kernel == "fused", net.context_kernel
    obs, dz = torch.randn(SAMPLES, AGENTS, OBS), torch.randn(SAMPLES, AGENTS, net.kernel_sizes[2])

    def modules():
        ctx, _ = net.context(obs)
        return net.mlp(ctx)

    def kernel():
        return obs_context.obs_context(obs, None, net.context_params(), net.kernel_sizes)

    def timed(fn, backward: bool) -> float:
        t = time.perf_counter()
        for _ in range(5):
            if backward:
                fn().backward(dz)
            else:
                with torch.no_grad():
                    fn()
        return (time.perf_counter() - t) / 5

    names = [f"{impl} {d}" for d in ("forward", "forward + backward") for impl in ("modules", "kernel")]
    fns = {"modules": modules, "kernel": kernel}
    for n in names:  # warm up (builds, allocator)
        timed(fns[n.split()[0]], "backward" in n)
    times = {n: [] for n in names}
    for _ in range(rounds):
        for n in names:
            times[n].append(timed(fns[n.split()[0]], "backward" in n))
    return {"ms": {n: statistics.median(v) * 1e3 for n, v in times.items()}, "times": times,
            "modules_over_kernel": {d: span([m / k for m, k in zip(times[f"modules {d}"], times[f"kernel {d}"])])
                                    for d in ("forward", "forward + backward")}}


def step_rounds(rounds: int, threads: int) -> dict:
    rows = {"hyper-obs compiled, kernel": ("hyper-obs-last", "1", True),
            "hyper-obs compiled, modules": ("hyper-obs-last", "0", True),
            "mappo compiled": ("mappo", "1", True),
            "hyper-obs eager, kernel": ("hyper-obs-last", "1", False),
            "hyper-obs eager, modules": ("hyper-obs-last", "0", False)}
    with tempfile.TemporaryDirectory() as tmp:
        exps = {}
        for i, (name, (variant, flag, compiled)) in enumerate(rows.items()):
            os.environ[SWITCH] = flag  # read when the hypernetwork is built
            exps[name] = started_run(case(variant, "vmas:simple_spread", 1024, threads,
                                          [*VARIANTS[variant], *(["ppo.compile=on"] if compiled else [])]),
                                     f"{tmp}/{i}")
            if variant != "mappo":
                want = "fused" if flag == "1" else f"modules ({SWITCH}=0)"
                assert exps[name].summary_extra["obs_context_kernel"] == want, exps[name].summary_extra
        os.environ.pop(SWITCH)
        for _ in range(2):
            for exp in exps.values():
                collect_and_update(exp)
        times = {n: [] for n in rows}
        for _ in range(rounds):
            for n, exp in exps.items():
                times[n].append(sum(collect_and_update(exp)))
        for exp in exps.values():
            exp.logger.close()
    mappo = times["mappo compiled"]
    return {"ms": {k: statistics.median(v) * 1e3 for k, v in times.items()}, "times": times,
            "rate_over_mappo": {n: span([m / h for m, h in zip(mappo, times[n])]) for n in rows if "mappo" not in n},
            "modules_over_kernel": {mode: span([m / k for m, k in zip(times[f"hyper-obs {mode}, modules"],
                                                                      times[f"hyper-obs {mode}, kernel"])])
                                    for mode in ("compiled", "eager")}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    info = machine()
    kernel = kernel_rounds(max(args.rounds, 5))
    print(kernel["ms"], kernel["modules_over_kernel"], flush=True)
    step = step_rounds(args.rounds, args.threads)
    print(step["ms"], step["rate_over_mappo"], step["modules_over_kernel"], flush=True)
    ms = kernel["ms"]
    lines = [f"# The observation-context kernel against the PyTorch modules ({info['date']})", "",
             f"`python benchmarks/kernels/obs_context.py --rounds {args.rounds}` on {info['cpu']} ({args.threads} threads), "
             f"torch {info['torch']}, load average {info['load_average_start']} at the start. Everything side by "
             "side in one process, in turn each round; medians over rounds, ratios within a round [range].", "",
             f"The context chain alone, eager ({SAMPLES:,} samples x {AGENTS} agents, {OBS} features; "
             f"{max(args.rounds, 5)} rounds of 5 calls):", "",
             "| direction | modules ms | kernel ms | modules / kernel |", "|---|---:|---:|---:|"]
    for d in ("forward", "forward + backward"):
        lines.append(f"| {d} | {ms[f'modules {d}']:.1f} | {ms[f'kernel {d}']:.1f} | "
                     f"{kernel['modules_over_kernel'][d]} |")
    sms = step["ms"]
    lines += ["", "Training step (collection + update), VMAS simple_spread, E = 1024, paper settings:", "",
              "| row | step ms | env-steps/s over compiled MAPPO's (same round) |", "|---|---:|---:|"]
    for n in sms:
        lines.append(f"| {n} | {sms[n]:.0f} | {step['rate_over_mappo'].get(n, '–')} |")
    lines += ["", "Hyper-obs step, modules / kernel: compiled " + step["modules_over_kernel"]["compiled"] +
              ", eager " + step["modules_over_kernel"]["eager"] + "."]
    text = "\n".join(lines) + "\n"
    write_results("obs_context", {"machine": info, "rounds": args.rounds, "kernel": kernel, "step": step}, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
