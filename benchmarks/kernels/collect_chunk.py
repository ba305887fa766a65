"""Runs of steps without an episode end as one graph call (collect_step.py's chunks) against one graph call per
step, side by side in one process.

One rollout's collection (`Experiment.collect`, ppo.compile=on) both ways in turn each round: with the chunk graph
(collect_step.CHUNK steps per call wherever no episode can end in them, the default) and without it (one graph call
per step, HYPERMAPPO_COLLECT_CHUNK=0's path). Also the compiled update on the same buffer, so the collection's
share of a training step is in the table. Rows: IPPO at JaxMARL's settings (16 envs x 128 steps, MPE
simple_spread) and MAPPO on the mpe/simple_spread preset's batch (128 envs x 25 steps). Ratios are taken within a
round; medians over rounds with the range; compile excluded (both ways run twice first). The chunk graph's compile
time, from this process's first chunked collection, is reported apart (it depends on the Inductor cache's state,
said in the table).

    python benchmarks/kernels/collect_chunk.py --rounds 12

Writes benchmarks/results/collect_chunk.{json,md}.
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
from throughput import JAXMARL, VARIANTS, case, machine, measure_rows, span, started_run, write_results  # noqa: E402

ROWS = [("ippo, JaxMARL's settings", "mpe:simple_spread", 16, [*JAXMARL]),
        ("mappo, mpe/simple_spread preset batch", "mpe:simple_spread", 128, [*VARIANTS["mappo"], "rollout_length=25"])]


def measure(name: str, env: str, e: int, overrides: list[str], rounds: int, threads: int) -> dict:
    c = case(name, env, e, threads, [*overrides, "ppo.compile=on"])
    with tempfile.TemporaryDirectory() as tmp:
        exp = started_run(c, f"{tmp}/run")
        L, graph = exp.primary, exp.collect_graph
        assert graph is not None and graph.chunked is not None, exp.summary_extra.get("collect")
        chunked = graph.chunked

        def run_collect(chunks: bool) -> tuple[float, int]:
            graph.chunked = chunked if chunks else None
            before = graph.chunks_run
            t0 = time.perf_counter()
            exp.collect()
            return time.perf_counter() - t0, graph.chunks_run - before

        def run_update() -> float:
            t0 = time.perf_counter()
            L.algo.update(L.buffer, L.batch_generator)
            return time.perf_counter() - t0

        run_collect(False)  # the one-step graph and the update compiled first, so the next call times the chunk's
        run_update()
        first, _ = run_collect(True)
        for _ in range(2):
            for chunks in (True, False):
                run_collect(chunks)
            run_update()
        times = {"chunks": [], "one step per call": [], "update": []}
        calls = []
        for _ in range(rounds):
            for chunks, key in ((True, "chunks"), (False, "one step per call")):
                seconds, n = run_collect(chunks)
                times[key].append(seconds)
                if chunks:
                    calls.append(n)
            times["update"].append(run_update())
        exp.logger.close()
    ms = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return {"name": name, "env": env, "num_envs": e, "rollout_length": exp.cfg.rollout_length, "rounds": rounds,
            "ms": ms, "times": times, "chunks_per_rollout": statistics.median(calls),
            "first_chunked_collect_s": first,
            "ratio": span([a / b for a, b in zip(times["one step per call"], times["chunks"])])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    from hypermappo.compile import DEFAULT_CACHE
    from hypermappo.compile.collect_step import CHUNK

    cache = Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR", DEFAULT_CACHE))
    warm = cache.exists() and any(cache.iterdir())
    info = machine()
    results = measure_rows(ROWS, measure, args.rounds, args.threads)
    lines = [f"# Chunked collection: {CHUNK} steps per graph call where no episode can end ({info['date']})", "",
             f"`python benchmarks/kernels/collect_chunk.py --rounds {args.rounds}` on {info['cpu']} "
             f"({args.threads} threads), "
             f"torch {info['torch']}, load average {info['load_average_start']} at the start. Both ways side by side "
             "in one process, in turn each round; medians over rounds, ratios within a round [range]; compile "
             f"excluded. The first chunked collection (compiling the chunk graph, or loading it when Inductor's "
             f"cache has it; the cache was {'not empty' if warm else 'empty'} at the start) is reported apart.", "",
             "| row | collection ms: one step per call / chunks | one step / chunks | chunk calls per rollout | "
             "update ms (same buffer) | first chunked collection s |", "|---|---:|---:|---:|---:|---:|"]
    for r in results:
        m = r["ms"]
        lines.append(f"| {r['name']} ({r['env']}, E = {r['num_envs']}, T = {r['rollout_length']}) | "
                     f"{m['one step per call']:.1f} / {m['chunks']:.1f} | {r['ratio']} | {r['chunks_per_rollout']:g} | "
                     f"{m['update']:.1f} | {r['first_chunked_collect_s']:.1f} |")
    text = "\n".join(lines) + "\n"
    write_results("collect_chunk", {"machine": info, "rounds": args.rounds, "chunk": CHUNK, "rows": results}, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
