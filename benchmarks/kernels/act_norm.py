"""The hidden blocks' LayerNorm(act(z)) kernel (src/hypermappo/kernels/act_norm.py) against the same maths composed
from ATen kernels (eager) and as Inductor compiles it, forward + backward, at the row counts the library meets: a
collection step at 1,024 envs (3,072 rows), JaxMARL's IPPO mini-batch (1,536), MIN_ROWS (8,192), the
time-to-result preset's mini-batch (9,600 x 3 agents), the MAPPO paper's mini-batch (76,800).

  kernel  interleaved rounds (every variant once per round, in turn); medians over rounds of the per-round median
          over `--reps` calls. Each call: the forward, then the backward from a fixed upstream gradient (the gradients
          of z, weight and bias), as a training step runs it; width 64, ReLU, float32, the process's torch threads.
  update  MAPPO's update in fresh processes with HYPERMAPPO_ACT_NORM=1 and =0 alternately (`--update-rounds`
          pairs), eager and compiled, on MPE simple_spread at E = 128 (the time-to-result preset: 9,600 agent samples
          per mini-batch, below MIN_ROWS, so a control: both arms run the same code) and on VMAS simple_spread at
          E = 1024 (the MAPPO paper's 76,800).

    python benchmarks/kernels/act_norm.py --rounds 5 --update-rounds 2

Writes benchmarks/results/act_norm.{json,md}.
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
import torch.nn.functional as F

BENCH = Path(__file__).resolve().parents[1]  # benchmarks/: throughput.py (the shared harness), results/
sys.path.insert(0, str(BENCH))
from throughput import VARIANTS, case, machine, pair_line, pair_summary, switch_pairs  # noqa: E402

ROWS = [1536, 3072, 8192, 28_800, 76_800]
WIDTH = 64


def composition(z, w, b):
    return F.layer_norm(torch.relu(z), (z.shape[-1],), w, b, 1e-5)


def variants():
    from hypermappo.compile import configure
    from hypermappo.kernels import act_norm

    configure()  # the library's Inductor settings
    compiled = torch.compile(composition, dynamic=False)
    return {"kernel": lambda z, w, b: act_norm.act_norm(z, w, b, "relu", 1e-5),
            "ATen (eager)": composition,
            "Inductor (compiled)": compiled}


def time_call(fn, tensors, grad, reps: int) -> float:
    z, w, b = tensors
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn(z, w, b)
        torch.autograd.grad(out, (z, w, b), grad)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


UPDATE_CASES = [("eager", "mpe:simple_spread", 128), ("compiled", "mpe:simple_spread", 128),
                ("eager", "vmas:simple_spread", 1024), ("compiled", "vmas:simple_spread", 1024)]


def update_pairs(rounds: int, threads: int) -> list[dict]:
    out = []
    for mode, env, e in UPDATE_CASES:
        c = case("mappo", env, e, threads, [*VARIANTS["mappo"], f"ppo.compile={'on' if mode == 'compiled' else 'off'}"])
        label = f"{mode} {env} E={e}"
        pairs = switch_pairs(c, "HYPERMAPPO_ACT_NORM", rounds, pair_line(label))
        out.append({"mode": mode, "env": env, "num_envs": e, "rows": e * 25 * 3, "pairs": pairs})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=20, help="calls per variant per round")
    p.add_argument("--threads", type=int, default=2, help="torch threads")
    p.add_argument("--update-rounds", type=int, default=2, help="HYPERMAPPO_ACT_NORM=1/0 pairs per update row")
    p.add_argument("--out", type=Path, default=BENCH / "results")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from hypermappo.kernels import act_norm

    if act_norm.unavailable():
        print(f"act_norm kernel: {act_norm.unavailable()}")
        return 1
    fns = variants()
    torch.manual_seed(0)
    data = {}
    for rows in ROWS:
        tensors = (torch.randn(rows, WIDTH, requires_grad=True), torch.randn(WIDTH, requires_grad=True),
                   torch.randn(WIDTH, requires_grad=True))
        data[rows] = (tensors, torch.randn(rows, WIDTH))
        for fn in fns.values():  # warm-up (compiles Inductor's graphs, builds the kernel)
            time_call(fn, *data[rows], 3)
    results = {rows: {name: [] for name in fns} for rows in ROWS}
    for r in range(args.rounds):
        for rows in ROWS:
            for name, fn in fns.items():
                results[rows][name].append(time_call(fn, *data[rows], args.reps))
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    meta = {**machine(), "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "rounds": args.rounds,
            "reps": args.reps, "torch_threads": torch.get_num_threads(), "min_rows": act_norm.MIN_ROWS}
    lines = [f"# LayerNorm(ReLU(z)) forward + backward: the act_norm kernel vs ATen and Inductor (width {WIDTH})", "",
             f"{meta['date']}; {meta.get('cpu', '')}; {meta['torch_threads']} torch threads; {args.rounds} interleaved "
             f"rounds x {args.reps} calls; medians over rounds [min-max]; ratio = the other's time / the kernel's "
             f"(same round). The library takes the kernel from {act_norm.MIN_ROWS:,} rows.", "",
             "Reproduce: `python benchmarks/kernels/act_norm.py --rounds 5 --update-rounds 2`", "",
             "| rows | kernel us | ATen (eager) us | Inductor (compiled) us | ATen / kernel | Inductor / kernel |",
             "|---:|---:|---:|---:|---:|---:|"]
    table = {}
    for rows in ROWS:
        res = results[rows]
        med = {n: statistics.median(v) * 1e6 for n, v in res.items()}
        ratios = {n: [o / k for o, k in zip(res[n], res["kernel"])] for n in ("ATen (eager)", "Inductor (compiled)")}
        span = {n: f"{statistics.median(v):.2f}x [{min(v):.2f}-{max(v):.2f}]" for n, v in ratios.items()}
        table[rows] = {"us": med, "ratios": ratios}
        lines.append(f"| {rows:,} | {med['kernel']:,.0f} | {med['ATen (eager)']:,.0f} | "
                     f"{med['Inductor (compiled)']:,.0f} | {span['ATen (eager)']} | {span['Inductor (compiled)']} |")
    updates = update_pairs(args.update_rounds, args.threads) if args.update_rounds else []
    if updates:
        lines += ["", f"MAPPO's update (MAPPO-reference network, 10 epochs, 1 mini-batch) in fresh processes, "
                  f"HYPERMAPPO_ACT_NORM=1 then =0, {args.update_rounds} pairs: median ms per update and the "
                  "ratio without / with the kernel within each pair [range].", "",
                  "| path | env, E | agent samples per mini-batch | update ms, kernel | update ms, without | "
                  "without / with |", "|---|---|---:|---:|---:|---:|"]
        for u in updates:
            m = pair_summary(u["pairs"])
            control = " (below MIN_ROWS: both run the composition, so this pair measures the machine's noise)" \
                if u["rows"] < act_norm.MIN_ROWS else ""
            lines.append(f"| {u['mode']} | {u['env']}, {u['num_envs']:,} | {u['rows']:,}{control} | "
                         f"{m['on_ms']:,.0f} | {m['off_ms']:,.0f} | {m['update']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "act_norm.md").write_text(text)
    (args.out / "act_norm.json").write_text(json.dumps({"meta": meta, "rows": {str(k): v for k, v in table.items()},
                                                        "update": updates}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
