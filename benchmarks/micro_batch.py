"""Micro-batches (ppo.micro_batch_size, src/hypermappo/algos/micro_batch.py): the update's time by block size.

VMAS simple_spread, E = 1024, the MAPPO paper's settings (one mini-batch of 76,800 agent samples), each row in a
fresh process, rows interleaved within each of `--rounds` rounds: MAPPO eager and compiled at every `--sizes`
value (0 = one pass, the config default), and the compiled Hyper-MAPPO rows (agent id; observation context,
which trains as a forward / backward pair of graphs) at 0 and 16,384. Per row: update-only ms (the floor:
`algo.update` on a filled buffer), env-steps/s end to end and peak RSS; per round, each size's update time over
size 0's of the same path (> 1 = faster).

    python benchmarks/micro_batch.py --rounds 3

Writes benchmarks/results/micro_batch.{json,md} (`--name` to change). An earlier sweep of sizes:
`python benchmarks/micro_batch.py --rounds 3 --sizes 0,4096,8192,16384 --name micro_batch_sizes`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from throughput import VARIANTS, case, machine, run_worker  # noqa: E402

RESULTS = HERE / "results"
DEFAULT = 16384  # the size the Hyper-MAPPO rows run at (the config default is 0, off: see docs/guides/compiled.md)


def rows_for(sizes: list[int], threads: int) -> list[dict]:
    out = []
    for path, flag in (("eager", "ppo.compile=off"), ("compiled", "ppo.compile=on")):
        for s in sizes:
            out.append(case(f"mappo {path}", "vmas:simple_spread", 1024, threads,
                            [*VARIANTS["mappo"], flag, f"ppo.micro_batch_size={s}"], note=str(s)))
    for name, variant in (("hyper-id", "hyper-id"), ("hyper-obs", "hyper-obs-last")):
        for s in (0, DEFAULT):
            out.append(case(f"{name} compiled", "vmas:simple_spread", 1024, threads,
                            [*VARIANTS[variant], "ppo.compile=on", f"ppo.micro_batch_size={s}"], note=str(s)))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sizes", default=f"0,{DEFAULT},32768", help="MAPPO's micro-batch sizes, comma-separated")
    p.add_argument("--name", default="micro_batch", help="results file name (benchmarks/results/NAME.{json,md})")
    args = p.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",")} | {0})
    meta = {**machine(), "threads": args.threads, "rounds": args.rounds, "default_size": DEFAULT,
            "command": "python benchmarks/micro_batch.py" + "".join(f" {a}" for a in sys.argv[1:])}
    cases = rows_for(sizes, args.threads)
    rounds: list[list[dict]] = []
    for r in range(args.rounds):
        done = []
        for c in cases:
            row = run_worker(c, 2, 3, 4.0, 90.0, 900.0, None)
            if "skipped" in row:
                raise SystemExit(f"{c['variant']} micro_batch_size={c['note']}: {row['skipped']}")
            row["size"] = int(c["note"])
            done.append(row)
            print(f"round {r + 1}: {c['variant']:<18} size {row['size']:>6}: update-only {row['floor_s'] * 1e3:5.0f} ms, "
                  f"{row['e2e_sps']:,.0f} env-steps/s, peak RSS {row['peak_rss_mb']:.0f} MB", flush=True)
        rounds.append(done)
    table = []
    for i, c in enumerate(cases):
        runs = [rnd[i] for rnd in rounds]
        ref = next(j for j, d in enumerate(cases) if d["variant"] == c["variant"] and d["note"] == "0")
        ratios = [rnd[ref]["floor_s"] / rnd[i]["floor_s"] for rnd in rounds]
        med = statistics.median
        table.append({"variant": c["variant"], "size": int(c["note"]),
                      "floor_ms": med(x["floor_s"] for x in runs) * 1e3, "e2e_sps": med(x["e2e_sps"] for x in runs),
                      "peak_rss_mb": med(x["peak_rss_mb"] for x in runs), "speedup_vs_one_pass": med(ratios),
                      "speedup_range": [min(ratios), max(ratios)]})
    lines = [f"# Micro-batch size and the update's time ({meta['date']})", "",
             f"`{meta['command']}` on {meta['cpu']} ({args.threads} threads), torch {meta['torch']}, load average "
             f"{meta['load_average_start']} at the start. VMAS simple_spread, E = 1024, T = 25, 10 epochs x 1 "
             f"mini-batch (76,800 agent samples), 64x64; fresh processes, rows interleaved; median of "
             f"{args.rounds} rounds. Hyper-MAPPO rows at ppo.micro_batch_size = 0 and {DEFAULT:,}.", "",
             "| row | ppo.micro_batch_size | update-only ms | one pass / this (update), median [range] | "
             "env-steps/s | peak RSS MB |", "|---|---:|---:|---:|---:|---:|"]
    for t in table:
        lo, hi = t["speedup_range"]
        lines.append(f"| {t['variant']} | {t['size']:,} | {t['floor_ms']:.0f} | {t['speedup_vs_one_pass']:.2f}x "
                     f"[{lo:.2f}-{hi:.2f}] | {t['e2e_sps']:,.0f} | {t['peak_rss_mb']:.0f} |")
    md = "\n".join(lines) + "\n"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps({"meta": meta, "table": table, "rounds": rounds}, indent=1))
    (RESULTS / f"{args.name}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
