"""The compiled path's oneDNN products (src/hypermappo/compile/onednn_gemm.py) against MKL, measured two ways.

  products  the MAPPO paper setting's matrix products (76,800 agent samples; actor 14-64-64-9, critic 45-64-64-1),
            each as its forward, input-gradient and weight-gradient product, MKL (torch.addmm / mm) vs the oneDNN
            op, interleaved, median of `--rounds` x 10 calls.
  update    the compiled MAPPO row of speed_vs_peers.py (VMAS simple_spread, E = 1024, paper settings) in fresh
            processes with HYPERMAPPO_ONEDNN_GEMM=1 and =0 alternately, `--rounds` pairs: collect and update ms per
            update and the ratio within each pair.

    python benchmarks/kernels/onednn_gemm.py --rounds 3

Writes benchmarks/results/onednn_gemm.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parents[1]  # benchmarks/: throughput.py (the shared harness), results/
sys.path.insert(0, str(BENCH))
from throughput import VARIANTS, case, machine, switch_pairs  # noqa: E402

from hypermappo.compile import onednn_gemm  # noqa: E402

RESULTS = BENCH / "results"
ROWS = 1024 * 25 * 3
LAYERS = [(14, 64), (64, 64), (64, 9), (45, 64), (64, 1)]  # (in, out): the actor's and the critic's layers on VMAS


def timed(fn, calls: int = 10) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t) / calls


def layer_products(k: int, n: int, rounds: int) -> list[dict]:
    op = torch.ops.hypermappo.onednn_linear
    x, w, b, g = torch.randn(ROWS, k), torch.randn(k, n), torch.randn(n), torch.randn(ROWS, n)
    if n < k:  # AgentLinear's layout for narrow outputs: an [out, in] copy of the weight (models/agent_layers.py)
        w = w.t().contiguous().t()
    kinds = {"forward": (lambda: torch.addmm(b, x, w), lambda: op(x, w, b)),
             "input gradient": (lambda: torch.mm(g, w.t()), lambda: op(g, w.t(), None)),
             "weight gradient": (lambda: torch.mm(x.t(), g), lambda: op(x.t(), g, None))}
    out = []
    for kind, (mkl, dnnl) in kinds.items():
        ts = {"mkl": [], "onednn": []}
        for _ in range(rounds):
            ts["mkl"].append(timed(mkl))
            ts["onednn"].append(timed(dnnl))
        m, d = statistics.median(ts["mkl"]), statistics.median(ts["onednn"])
        out.append({"layer": f"{k}x{n}", "product": kind, "mkl_ms": m * 1e3, "onednn_ms": d * 1e3,
                    "mkl_over_onednn": m / d, "rewritten": kind != "weight gradient" and ROWS >= onednn_gemm.MIN_ROWS})
        print(f"{k:>3}x{n:<3} {kind:<16} MKL {m * 1e3:6.2f} ms  oneDNN {d * 1e3:6.2f} ms  {m / d:.2f}x", flush=True)
    return out


def update(rounds: int, threads: int) -> list[dict]:
    c = case("mappo compiled", "vmas:simple_spread", 1024, threads, [*VARIANTS["mappo"], "ppo.compile=on"])
    return switch_pairs(c, "HYPERMAPPO_ONEDNN_GEMM", rounds, lambda p: (
        f"round {p['round']}: update oneDNN {p['on']['update_s'] * 1e3:.0f} ms, MKL {p['off']['update_s'] * 1e3:.0f} ms "
        f"({p['update_off_over_on']:.2f}x); env-steps/s {p['on']['e2e_sps']:,.0f} vs {p['off']['e2e_sps']:,.0f}"))


def markdown(meta: dict, prods: list[dict], pairs: list[dict]) -> str:
    lines = [f"# oneDNN vs MKL products on the compiled path ({meta['date']})", "",
             f"`{meta['command']}` on {meta['cpu']} ({meta['threads']} threads), torch {meta['torch']}, "
             f"load average {meta['load_average_start']} at the start. MIN_ROWS = {onednn_gemm.MIN_ROWS:,}.", "",
             f"## Products ({ROWS:,} rows, median of {meta['rounds']} rounds of 10 calls)", "",
             "| layer (in x out) | product | MKL ms | oneDNN ms | MKL / oneDNN | rewritten by the pass |",
             "|---|---|---:|---:|---:|---|"]
    for p in prods:
        lines.append(f"| {p['layer']} | {p['product']} | {p['mkl_ms']:.2f} | {p['onednn_ms']:.2f} | "
                     f"{p['mkl_over_onednn']:.2f}x | {'yes' if p['rewritten'] else 'no'} |")
    lines += ["", "## Compiled MAPPO update, paper setting (fresh processes, alternating)", "",
              "| round | update ms, oneDNN | update ms, MKL | MKL / oneDNN | env-steps/s oneDNN | env-steps/s MKL |",
              "|---|---:|---:|---:|---:|---:|"]
    for p in pairs:
        lines.append(f"| {p['round']} | {p['on']['update_s'] * 1e3:.0f} | {p['off']['update_s'] * 1e3:.0f} | "
                     f"{p['update_off_over_on']:.2f}x | {p['on']['e2e_sps']:,.0f} | {p['off']['e2e_sps']:,.0f} |")
    med = statistics.median(p["update_off_over_on"] for p in pairs)
    sps = statistics.median(p["sps_on_over_off"] for p in pairs)
    lines += ["", f"Median: the update is {med:.2f}x as fast with oneDNN products; env-steps/s {sps:.2f}x.", ""]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    if not onednn_gemm.enabled():
        raise SystemExit("this torch has no oneDNN (or HYPERMAPPO_ONEDNN_GEMM=0): nothing to compare")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    meta = {**machine(), "threads": args.threads, "rounds": args.rounds,
            "command": "python benchmarks/kernels/onednn_gemm.py" + "".join(f" {a}" for a in sys.argv[1:])}
    prods = [p for k, n in LAYERS for p in layer_products(k, n, args.rounds)]
    pairs = update(args.rounds, args.threads)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "onednn_gemm.json").write_text(json.dumps({"meta": meta, "products": prods, "update": pairs}, indent=1))
    md = markdown(meta, prods, pairs)
    (RESULTS / "onednn_gemm.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
