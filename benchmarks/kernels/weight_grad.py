"""The compiled graphs' weight-gradient kernel (src/hypermappo/compile/weight_grad.py) against MKL's product (what the graphs
call without it), at the shapes the library meets, and MAPPO's / Hyper-MAPPO's compiled update with and without it.

  kernel  a [K, m]^T b [K, n] for the weight gradients of the MAPPO paper network (64 x 64, 45 x 64, 14 x 64,
          9 x 64, 1 x 64) and Hyper-MAPPO's observation context (16 x 48, 16 x 16, 18 x 17), at K = 1,536 (JaxMARL's
          IPPO mini-batch), 8,192 (MIN_ROWS), 9,600 (the mpe/simple_spread preset's: 128 envs x 25 steps x 3 agents,
          the time-to-result runs) and 76,800 (the paper's mini-batch). The kernel through its torch op (dispatch
          included) vs `torch.mm(a.t(), b)`; and the per-agent form (3 agents x 25,600 rows: Hyper-MAPPO's agent-id
          layers at the paper setting, 64 x 9, 14 x 64, 64 x 64) vs `torch.bmm`.
          Interleaved rounds (every variant once per round, in turn); medians over rounds of the per-round median
          over `--reps` calls; before each call 64 MB are written so the operands come from memory, as in an update.
  update  the compiled update in fresh processes with HYPERMAPPO_WEIGHT_GRAD=1 and =0 alternately
          (`--update-rounds` pairs): MAPPO and Hyper-MAPPO (agent-id context; observation context, lean defaults) on
          VMAS simple_spread at E = 1024 (76,800 rows), MAPPO on MPE simple_spread at E = 128 (9,600 rows), and IPPO
          at JaxMARL's settings (1,536 rows, below MIN_ROWS: a control, both arms run the same code).

    python benchmarks/kernels/weight_grad.py --rounds 5 --update-rounds 2

Writes benchmarks/results/weight_grad.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parents[1]  # benchmarks/: throughput.py (the shared harness), results/
sys.path.insert(0, str(BENCH))
from throughput import JAXMARL, VARIANTS, case, machine, pair_line, pair_summary, switch_pairs  # noqa: E402

SHAPES = [(64, 64), (45, 64), (14, 64), (9, 64), (1, 64), (16, 48), (16, 16), (18, 17)]
ROWS = [1536, 8192, 9600, 76_800]
BATCHED = [(3, 25_600, 64, 9), (3, 25_600, 14, 64), (3, 25_600, 64, 64)]  # (agents, rows per agent, m, n)
FLUSH = torch.zeros(16 * 2 ** 20)  # 64 MB


def time_call(fn, a, b, reps: int) -> float:
    times = []
    for _ in range(reps):
        FLUSH.add_(1.0)
        t0 = time.perf_counter()
        fn(a, b)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


UPDATE_CASES = [("mappo", "vmas:simple_spread", 1024, VARIANTS["mappo"]),
                ("hyper-id", "vmas:simple_spread", 1024, VARIANTS["hyper-id"]),
                ("hyper-obs (lean)", "vmas:simple_spread", 1024, ["algo=mappo", "actor=hyper", "hyper.context=[obs]"]),
                ("mappo", "mpe:simple_spread", 128, VARIANTS["mappo"]),
                ("ippo, JaxMARL's settings", "mpe:simple_spread", 16, JAXMARL)]


def update_pairs(rounds: int, threads: int) -> list[dict]:
    out = []
    for name, env, e, overrides in UPDATE_CASES:
        c = case(name, env, e, threads, [*overrides, "ppo.compile=on"])
        label = f"{name} {env} E={e}"
        pairs = switch_pairs(c, "HYPERMAPPO_WEIGHT_GRAD", rounds, pair_line(label, sps=True))
        rows = 16 * 128 * 3 // 4 if name.startswith("ippo") else e * 25 * 3
        out.append({"name": name, "env": env, "num_envs": e, "rows": rows, "pairs": pairs})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=15, help="calls per variant per round")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument("--update-rounds", type=int, default=2, help="HYPERMAPPO_WEIGHT_GRAD=1/0 pairs per update row")
    p.add_argument("--out", type=Path, default=BENCH / "results")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from hypermappo.compile import weight_grad

    if not weight_grad.enabled():
        print(f"weight_grad kernel: {weight_grad.status()}")
        return 1
    fns = {"kernel": weight_grad.weight_grad_op, "MKL": lambda a, b: torch.mm(a.t(), b)}
    torch.manual_seed(0)
    data = {(k, m, n): (torch.randn(k, m), torch.randn(k, n)) for k in ROWS for m, n in SHAPES}
    data.update({(g, k, m, n): (torch.randn(g, k, m), torch.randn(g, k, n)) for g, k, m, n in BATCHED})
    mkl = {2: fns["MKL"], 3: lambda a, b: torch.bmm(a.transpose(1, 2), b)}
    for (a, b) in data.values():
        torch.testing.assert_close(fns["kernel"](a, b), mkl[a.dim()](a, b), rtol=1e-4, atol=1e-2)
    results = {key: {name: [] for name in fns} for key in data}
    for r in range(args.rounds):
        for key, (a, b) in data.items():
            for name, fn in fns.items():
                results[key][name].append(time_call(fn if name == "kernel" else mkl[a.dim()], a, b, args.reps))
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    meta = {**machine(), "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "rounds": args.rounds,
            "reps": args.reps, "torch_threads": torch.get_num_threads(), "min_rows": weight_grad.MIN_ROWS}
    lines = ["# Weight gradients a[K, m]^T b[K, n]: the weight_grad kernel vs MKL", "",
             f"{meta['date']}; {meta.get('cpu', '')}; {meta['torch_threads']} torch threads; {args.rounds} interleaved "
             f"rounds x {args.reps} calls, operands from memory; medians over rounds [min-max]; ratio = MKL's time / "
             f"the kernel's (same round). Compiled graphs take the kernel from K = {weight_grad.MIN_ROWS:,}.", "",
             "Reproduce: `python benchmarks/kernels/weight_grad.py --rounds 5 --update-rounds 2`", "",
             "| K | m x n | kernel us | MKL us | kernel GFLOP/s | MKL / kernel |", "|---:|---|---:|---:|---:|---:|"]
    table = {}
    for key, res in results.items():
        (g, k, m, n) = key if len(key) == 4 else (1, *key)
        med = {name: statistics.median(v) * 1e6 for name, v in res.items()}
        ratios = [o / q for o, q in zip(res["MKL"], res["kernel"])]
        label = f"{g} x {k:,} (bmm)" if len(key) == 4 else f"{k:,}"
        table[f"{g}:{k}:{m}x{n}"] = {"us": med, "ratios": ratios}
        lines.append(f"| {label} | {m} x {n} | {med['kernel']:,.0f} | {med['MKL']:,.0f} | "
                     f"{2 * g * k * m * n / med['kernel'] / 1e3:.0f} | {statistics.median(ratios):.2f}x "
                     f"[{min(ratios):.2f}-{max(ratios):.2f}] |")
    updates = update_pairs(args.update_rounds, args.threads) if args.update_rounds else []
    if updates:
        lines += ["", f"Compiled update (`ppo.compile=on`) in fresh processes, HYPERMAPPO_WEIGHT_GRAD=1 then =0, "
                  f"{args.update_rounds} pairs: median ms per update, the ratio without / with the kernel within each "
                  "pair [range], and the end-to-end env-steps/s ratio (collection included).", "",
                  "| row | env, E | rows per mini-batch | update ms, kernel | update ms, without | without / with | "
                  "env-steps/s with / without |", "|---|---|---:|---:|---:|---:|---:|"]
        for u in updates:
            m = pair_summary(u["pairs"])
            control = " (below MIN_ROWS: both arms run MKL, so this pair measures the machine's noise)" \
                if u["rows"] < weight_grad.MIN_ROWS else ""
            lines.append(f"| {u['name']} | {u['env']}, {u['num_envs']:,} | {u['rows']:,}{control} | "
                         f"{m['on_ms']:,.0f} | {m['off_ms']:,.0f} | {m['update']} | {m['sps']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "weight_grad.md").write_text(text)
    (args.out / "weight_grad.json").write_text(json.dumps({"meta": meta, "products": table, "update": updates},
                                                           indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
