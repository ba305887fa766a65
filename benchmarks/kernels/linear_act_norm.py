"""The 64-wide ReLU blocks' products fused with their LayerNorm (src/hypermappo/compile/linear_act_norm.py) against the
product (oneDNN) followed by the act_norm kernel: the kernels alone, and compiled training steps, side by side.

Kernels: at the MAPPO paper's mini-batch (76,800 rows), each shape's fused op and its two separate ops in turn,
`--repeat` times per round; median ms per call and the ratio within a round. Training steps: for each row, two
runs in one process, one compiled with the fusion (the default) and one with HYPERMAPPO_LINEAR_ACT_NORM=0 (each
compiles its own graphs); each round times one training step (collection + update) of each in turn; compile
excluded (two warm-up rounds). Rows: MAPPO, Hyper-MAPPO agent-id and observation context (lean defaults), compiled,
VMAS simple_spread, E = 1024, T = 25, 10 epochs, 1 mini-batch, 64x64.

    python benchmarks/kernels/linear_act_norm.py --rounds 6

Writes benchmarks/results/linear_act_norm.{json,md}.
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

ROWS_76800 = 76_800
FORWARD_K = (14, 45, 64)  # the actor's first layer (VMAS obs), the critic's first layer (state + id), a hidden one
BACKWARD_K = (64, 9, 1)  # from the next hidden layer, the actor's 9-way head, the value head
STEP_ROWS = ["mappo", "hyper-id", "hyper-obs-last"]
ENV, E = "vmas:simple_spread", 1024
SWITCH = "HYPERMAPPO_LINEAR_ACT_NORM"


def kernels(rounds: int, repeat: int) -> list[dict]:
    import torch

    import hypermappo.compile.onednn_gemm  # noqa: F401  (registers hypermappo::onednn_linear)
    from hypermappo.compile import linear_act_norm as lan
    from hypermappo.kernels import act_norm

    relu, eps = act_norm.ACTS["relu"], 1e-5
    g = torch.Generator().manual_seed(0)
    gamma, beta = torch.rand(64, generator=g) + 0.5, torch.randn(64, generator=g)
    z = torch.randn(ROWS_76800, 64, generator=g)
    _, mean, rstd = act_norm.act_norm_op(z, gamma, beta, relu, eps)
    cases = []
    for k in FORWARD_K:
        x, w, b = torch.randn(ROWS_76800, k, generator=g), torch.randn(64, k, generator=g).t(), torch.randn(64)
        cases.append((f"forward, K = {k}", lambda x=x, w=w, b=b: lan.linear_act_norm_op(x, w, b, gamma, beta, eps),
                      lambda x=x, w=w, b=b: act_norm.act_norm_op(torch.ops.hypermappo.onednn_linear(x, w, b), gamma,
                                                                 beta, relu, eps)))
    for k in BACKWARD_K:
        gr, w = torch.randn(ROWS_76800, k, generator=g), torch.randn(k, 64, generator=g)
        cases.append((f"backward, K = {k}", lambda gr=gr, w=w: lan.linear_act_norm_backward_op(gr, w, z, gamma, mean,
                                                                                                 rstd),
                      lambda gr=gr, w=w: act_norm.act_norm_backward_op(
                          torch.ops.hypermappo.onednn_linear(gr, w, None), z, gamma, mean, rstd, relu)))

    def per_call(fn) -> float:
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        return (time.perf_counter() - t0) / repeat

    out = []
    for name, fused, separate in cases:
        fused(), separate()
        t = {"fused": [], "separate": []}
        for _ in range(rounds):
            t["fused"].append(per_call(fused))
            t["separate"].append(per_call(separate))
        out.append({"name": name, "ms": {k: statistics.median(v) * 1e3 for k, v in t.items()},
                    "ratio": span([s / f for s, f in zip(t["separate"], t["fused"])]), "times": t})
        print(name, out[-1]["ms"], out[-1]["ratio"], flush=True)
    return out


def steps(variant: str, rounds: int, threads: int) -> dict:
    from hypermappo.compile import configure, linear_act_norm

    c = case(variant, ENV, E, threads, [*VARIANTS[variant], "ppo.compile=on"])
    with tempfile.TemporaryDirectory() as tmp:
        runs = {arm: started_run(c, f"{tmp}/{arm}") for arm in ("fused", "separate")}

        def step(arm: str) -> tuple[float, float]:
            return collect_and_update(runs[arm])

        calls = {}
        for arm in ("fused", "separate"):  # each compiles its graphs under its own setting of the pass
            os.environ[SWITCH] = "1" if arm == "fused" else "0"
            configure()
            before = dict(linear_act_norm.calls)
            step(arm)
            calls[arm] = {k: linear_act_norm.calls[k] - before.get(k, 0) for k in ("forward", "backward")}
        os.environ[SWITCH] = "1"
        configure()
        assert calls["fused"]["backward"] > 0 and not any(calls["separate"].values()), calls
        step("fused"), step("separate")
        times = {"fused": [], "separate": []}
        for _ in range(rounds):
            for arm in times:
                times[arm].append(step(arm))
        for exp in runs.values():
            exp.logger.close()
    total = {arm: [a + b for a, b in ts] for arm, ts in times.items()}
    result = {"name": variant, "calls": calls["fused"],
              "collect_ms": {a: statistics.median(x[0] for x in ts) * 1e3 for a, ts in times.items()},
              "update_ms": {a: statistics.median(x[1] for x in ts) * 1e3 for a, ts in times.items()},
              "step_ratio": span([s / f for s, f in zip(total["separate"], total["fused"])]),
              "update_ratio": span([s[1] / f[1] for s, f in zip(times["separate"], times["fused"])]), "times": times}
    print({k: v for k, v in result.items() if k != "times"}, flush=True)
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--repeat", type=int, default=10, help="kernel calls per round and op")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    info = machine()
    kernel_rows = kernels(args.rounds, args.repeat)
    step_rows = [steps(v, args.rounds, args.threads) for v in STEP_ROWS]
    lines = [f"# 64-wide blocks' products fused with their LayerNorm(ReLU) vs separate ({info['date']})", "",
             f"`python benchmarks/kernels/linear_act_norm.py --rounds {args.rounds}` on {info['cpu']} "
             f"({args.threads} threads), "
             f"torch {info['torch']}, load average {info['load_average_start']} at the start. Medians over rounds; "
             "ratios within a round, median [range]; compile excluded.", "",
             f"Kernels at {ROWS_76800:,} rows x 64 features (separate: oneDNN product, then the act_norm kernel):", "",
             "| op | fused ms | separate ms | separate / fused |", "|---|---:|---:|---:|"]
    for r in kernel_rows:
        lines.append(f"| {r['name']} | {r['ms']['fused']:.2f} | {r['ms']['separate']:.2f} | {r['ratio']} |")
    lines += ["", f"Compiled training steps, VMAS simple_spread, E = {E}, T = 25, 10 epochs x 1 mini-batch, 64x64; "
              f"both runs in one process, in turn each round (separate: {SWITCH}=0):", "",
              "| row | fused kernel calls in a step (forward, backward) | collect + update ms, fused | "
              "collect + update ms, separate | step: separate / fused | update: separate / fused |",
              "|---|---|---:|---:|---:|---:|"]
    for r in step_rows:
        c, u = r["collect_ms"], r["update_ms"]
        lines.append(f"| {r['name']} compiled | {r['calls']['forward']}, {r['calls']['backward']} | "
                     f"{c['fused']:.0f} + {u['fused']:.0f} | {c['separate']:.0f} + {u['separate']:.0f} | "
                     f"{r['step_ratio']} | {r['update_ratio']} |")
    text = "\n".join(lines) + "\n"
    write_results("linear_act_norm", {"machine": info, "rounds": args.rounds, "kernels": kernel_rows,
                                      "steps": step_rows}, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
