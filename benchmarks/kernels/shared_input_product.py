"""Hyper-MAPPO's last layer in a compiled graph: the shared base layer's and the weight generator's products of the
same input (models/hyper.py, `_SharedInputProducts`) as one product over [W | G] against two, side by side.

At the paper setting's mini-batch the input is the last hidden layer's output, 76,800 x 64 (19.7 MB): each product
reads it from memory. Shapes as the lean observation context has them (VMAS simple_spread: 9 base outputs; the
rank-1 generator: 17 = hidden 16 + 1), through oneDNN as the compiled graphs run products of this many rows
(onednn_gemm.py). Medians over rounds; ratios within a round [range].

    python benchmarks/kernels/shared_input_product.py --rounds 12

Writes benchmarks/results/shared_input_product.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # benchmarks/: throughput.py (the shared harness), results/
sys.path.insert(0, str(BENCH))
from throughput import machine, span, write_results  # noqa: E402

ROWS, IN, BASE, GENERATED = 76_800, 64, 9, 17


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    import torch

    from hypermappo.compile import onednn_gemm

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    x, w, b, g = torch.randn(ROWS, IN), torch.randn(IN, BASE), torch.randn(BASE), torch.randn(IN, GENERATED)
    both_w, both_b = torch.cat([w, g], 1), torch.cat([b, torch.zeros(GENERATED)])
    ways = {"two products": lambda: (onednn_gemm.onednn_linear(x, w, b), onednn_gemm.onednn_linear(x, g, None)),
            "one product": lambda: onednn_gemm.onednn_linear(x, both_w, both_b)}
    sep, one = ways["two products"](), ways["one product"]()
    diff = max(float((one[:, :BASE] - sep[0]).abs().max()), float((one[:, BASE:] - sep[1]).abs().max()))
    times = {k: [] for k in ways}
    for _ in range(args.rounds + 1):
        for k, fn in ways.items():
            t0 = time.perf_counter()
            for _ in range(10):
                fn()
            times[k].append((time.perf_counter() - t0) / 10)
    times = {k: v[1:] for k, v in times.items()}
    us = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    ratio = span([a / b for a, b in zip(times["two products"], times["one product"])])
    info = machine()
    text = "\n".join([
        f"# Hyper-MAPPO's shared-input products: one over [W | G] against two ({info['date']})", "",
        f"`python benchmarks/kernels/shared_input_product.py --rounds {args.rounds}` on {info['cpu']} "
        f"({args.threads} threads), "
        f"torch {info['torch']}, load average {info['load_average_start']} at the start; {args.rounds} rounds of 10 "
        "calls each way, in turn.", "",
        "| x | outputs | two products us | one product us | two / one |", "|---|---|---:|---:|---:|",
        f"| {ROWS:,} x {IN} | {BASE} (base) + {GENERATED} (generator) | {us['two products']:.0f} | "
        f"{us['one product']:.0f} | {ratio} |", "",
        f"Largest difference between the ways: {diff:.1e}."]) + "\n"
    write_results("shared_input_product", {"machine": info, "rounds": args.rounds, "us": us, "ratio": ratio,
                                           "max_abs_diff": diff, "times": times}, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
