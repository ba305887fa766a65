"""The observation context's attention kernel (kernels/agent_attention.c): its float32 16-wide vector path against
the scalar loops it replaced (HYPERMAPPO_ATTENTION_VECTOR=0: the same source built with -DSCALAR_F32), side by
side in one process.

  kernel  forward and backward alone at the paper setting's mini-batch (76,800 agent samples = 25,600 samples of
          3 agents, width 16, 4 heads), in turn each round.
  step    one training step (collection + update) of Hyper-MAPPO with the observation context (the lean defaults,
          last layer generated) on the compiled path at the paper's settings (VMAS simple_spread, E = 1024), with
          the vector kernel and with the scalar one (the compiled graphs call the kernel through a torch op, so the
          two builds are swapped under the same graphs), and compiled MAPPO's step in the same rounds: the ratio
          the speed target is about (Hyper-MAPPO's env-steps/s over MAPPO's, >= 0.667 = within 1.5x of its time).

Medians over rounds, ratios within a round [range]; compile excluded (every variant runs twice first).

    python benchmarks/kernels/attention_kernel.py --rounds 6

Writes benchmarks/results/attention_kernel.{json,md}.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # benchmarks/: throughput.py (the shared harness), results/
sys.path.insert(0, str(BENCH))
from throughput import VARIANTS, case, collect_and_update, machine, span, started_run, write_results  # noqa: E402

AGENTS, WIDTH, HEADS, SAMPLES = 3, 16, 4, 25_600
SWITCH = "HYPERMAPPO_ATTENTION_VECTOR"


def use(build: str) -> None:
    """The kernel build the attention ops call from now on (read on every call)."""
    os.environ[SWITCH] = "1" if build == "vector" else "0"


def builds() -> dict:
    from hypermappo.models import agent_attention

    libs = {}
    for build in ("vector", "scalar"):
        use(build)
        libs[build] = agent_attention.fused_library(AGENTS, WIDTH, HEADS)
        assert not isinstance(libs[build], str), libs[build]
    use("vector")
    return libs


def kernel_rounds(libs: dict, rounds: int, threads: int) -> dict:
    import torch

    from hypermappo.kernels import c_kernel

    torch.manual_seed(0)
    qkv = torch.randn(SAMPLES, AGENTS, 3 * WIDTH)
    grad = torch.randn(SAMPLES, AGENTS, WIDTH)
    scale = ctypes.c_float((WIDTH // HEADS) ** -0.5)
    p = c_kernel.ptr
    out = {k: (qkv.new_empty(SAMPLES, AGENTS, WIDTH), qkv.new_empty(SAMPLES, AGENTS, HEADS, AGENTS),
               torch.empty_like(qkv)) for k in libs}

    def forward(k):
        o, w, _ = out[k]
        libs[k].attention_forward_f32(p(qkv), None, p(o), p(w), ctypes.c_long(SAMPLES), scale, threads)

    def backward(k):
        _, w, g = out[k]
        libs[k].attention_backward_f32(p(qkv), p(w), p(grad), p(g), ctypes.c_long(SAMPLES), scale, threads)

    times = {f"{k} {d}": [] for k in libs for d in ("forward", "backward")}
    for _ in range(rounds + 1):
        for k in libs:
            for d, fn in (("forward", forward), ("backward", backward)):
                t0 = time.perf_counter()
                for _ in range(10):
                    fn(k)
                times[f"{k} {d}"].append((time.perf_counter() - t0) / 10)
    times = {k: v[1:] for k, v in times.items()}  # the first round warms both builds' pages
    diff = {"output": float((out["vector"][0] - out["scalar"][0]).abs().max()),
            "weights": float((out["vector"][1] - out["scalar"][1]).abs().max()),
            "grad_qkv": float((out["vector"][2] - out["scalar"][2]).abs().max())}
    return {"us": {k: statistics.median(v) * 1e6 for k, v in times.items()}, "times": times, "max_abs_diff": diff,
            "ratio": {d: span([a / b for a, b in zip(times[f"scalar {d}"], times[f"vector {d}"])])
                      for d in ("forward", "backward")}}


def step_rounds(rounds: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        hyper = started_run(case("hyper-obs-last", "vmas:simple_spread", 1024, threads,
                                 [*VARIANTS["hyper-obs-last"], "ppo.compile=on"]), f"{tmp}/hyper")
        mappo = started_run(case("mappo", "vmas:simple_spread", 1024, threads, [*VARIANTS["mappo"], "ppo.compile=on"]),
                            f"{tmp}/mappo")
        assert hyper.summary_extra["attention_kernel"] == "fused", hyper.summary_extra.get("attention_kernel")

        def step(name):
            if name == "mappo":
                return sum(collect_and_update(mappo))
            use(name.split()[-1])
            return sum(collect_and_update(hyper))

        names = ["hyper-obs vector", "hyper-obs scalar", "mappo"]
        for _ in range(2):
            for n in names:
                step(n)
        times = {n: [] for n in names}
        for _ in range(rounds):
            for n in names:
                times[n].append(step(n))
        use("vector")
        for exp in (hyper, mappo):
            exp.logger.close()
    return {"ms": {k: statistics.median(v) * 1e3 for k, v in times.items()}, "times": times,
            "scalar_over_vector": span([a / b for a, b in zip(times["hyper-obs scalar"], times["hyper-obs vector"])]),
            "hyper_over_mappo_rate": {k: span([m / h for m, h in zip(times["mappo"], times[f"hyper-obs {k}"])])
                                      for k in ("vector", "scalar")}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    info = machine()
    libs = builds()
    kernel = kernel_rounds(libs, max(args.rounds, 10), args.threads)
    print(kernel["us"], kernel["ratio"], kernel["max_abs_diff"], flush=True)
    step = step_rounds(args.rounds, args.threads)
    print(step["ms"], step["scalar_over_vector"], step["hyper_over_mappo_rate"], flush=True)
    us, ms = kernel["us"], step["ms"]
    lines = [f"# The attention kernel's float32 vector path against its scalar loops ({info['date']})", "",
             f"`python benchmarks/kernels/attention_kernel.py --rounds {args.rounds}` on {info['cpu']} "
             f"({args.threads} threads), "
             f"torch {info['torch']}, load average {info['load_average_start']} at the start. Both builds side by "
             "side in one process, in turn each round; medians over rounds, ratios within a round [range].", "",
             f"Kernel alone ({SAMPLES:,} samples x {AGENTS} agents, width {WIDTH}, {HEADS} heads; "
             f"{max(args.rounds, 10)} rounds of 10 calls):", "",
             "| direction | scalar us | vector us | scalar / vector |", "|---|---:|---:|---:|"]
    for d in ("forward", "backward"):
        lines.append(f"| {d} | {us[f'scalar {d}']:.0f} | {us[f'vector {d}']:.0f} | {kernel['ratio'][d]} |")
    diff = kernel["max_abs_diff"]
    lines += ["", f"Largest difference between the builds: output {diff['output']:.1e}, weights {diff['weights']:.1e}, "
              f"input gradient {diff['grad_qkv']:.1e} (inputs ~N(0, 1)).", "",
              "Training step (collection + update) on the compiled path, VMAS simple_spread, E = 1024, paper settings:",
              "", "| row | step ms | env-steps/s over compiled MAPPO's (same round) |", "|---|---:|---:|",
              f"| hyper-obs (lean defaults), vector kernel | {ms['hyper-obs vector']:.0f} | "
              f"{step['hyper_over_mappo_rate']['vector']} |",
              f"| hyper-obs (lean defaults), scalar kernel | {ms['hyper-obs scalar']:.0f} | "
              f"{step['hyper_over_mappo_rate']['scalar']} |",
              f"| mappo | {ms['mappo']:.0f} | – |", "",
              f"Hyper-obs step, scalar / vector kernel: {step['scalar_over_vector']}."]
    text = "\n".join(lines) + "\n"
    write_results("attention_kernel", {"machine": info, "rounds": args.rounds, "kernel": kernel, "step": step}, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
