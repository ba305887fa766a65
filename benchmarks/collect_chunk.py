"""Runs of steps without an episode end as one graph call (collect_step.py's chunks) against one graph call per
step, side by side in one process.

One rollout's collection (`Experiment.collect`, ppo.compile=on) three ways in turn each round: as the run does it
(collect_step.CHUNK steps per call wherever no episode can end in them; the graphs' kernels single-threaded up to
collect_step.SINGLE_THREAD_ROWS rows per step), without the chunks (one graph call per step,
HYPERMAPPO_COLLECT_CHUNK=0's path), and with the chunks but the other thread setting (all threads where the run uses
one, one where it uses all). Also the compiled update on the same buffer, so the collection's share of a training
step is in the table. Rows: IPPO at JaxMARL's settings (16 envs x 128 steps, MPE simple_spread: 48 rows per step)
and MAPPO on the mpe/simple_spread preset's batch at 64 and 128 envs (192 and 384 rows per step). Ratios are taken
within a round; medians over rounds with the range; compile excluded (every way runs twice first). The chunk
graph's compile time, from this process's first chunked collection, is reported apart (it depends on the Inductor
cache's state, said in the table).

    python benchmarks/collect_chunk.py --rounds 12

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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from throughput import JAXMARL, VARIANTS, case, machine, measure_rows, span, started_run, write_results  # noqa: E402

ROWS = [("ippo, JaxMARL's settings", "mpe:simple_spread", 16, [*JAXMARL]),
        ("mappo, mpe/simple_spread preset at 64 envs", "mpe:simple_spread", 64, [*VARIANTS["mappo"], "rollout_length=25"]),
        ("mappo, mpe/simple_spread preset batch", "mpe:simple_spread", 128, [*VARIANTS["mappo"], "rollout_length=25"])]
OTHER = "chunks, other thread setting"


def measure(name: str, env: str, e: int, overrides: list[str], rounds: int, threads: int) -> dict:
    from hypermappo import collect_step
    from hypermappo.compiled import compile_fn

    c = case(name, env, e, threads, [*overrides, "ppo.compile=on"])
    with tempfile.TemporaryDirectory() as tmp:
        exp = started_run(c, f"{tmp}/run")
        L, graph = exp.primary, exp.collect_graph
        assert graph is not None and graph.chunked is not None, exp.summary_extra.get("collect")
        chunked = graph.chunked
        single = exp.env.num_envs * exp.env.spec.num_agents <= collect_step.SINGLE_THREAD_ROWS
        other = collect_step.CollectStep(L, exp.env, compile_fn if single else
                                         (lambda f: compile_fn(f, **{"cpp.threads": 1})))

        def run_collect(chunks: bool, way=graph) -> tuple[float, int]:
            exp.collect_graph = way
            graph.chunked = chunked if chunks else None
            before = way.chunks_run
            t0 = time.perf_counter()
            exp.collect()
            exp.collect_graph = graph
            return time.perf_counter() - t0, way.chunks_run - before

        def run_update() -> float:
            t0 = time.perf_counter()
            L.algo.update(L.buffer, L.batch_generator)
            return time.perf_counter() - t0

        run_collect(False)  # the one-step graph and the update compiled first, so the next call times the chunk's
        run_update()
        first, _ = run_collect(True)
        ways = {"chunks": (True, graph), "one step per call": (False, graph), OTHER: (True, other)}
        for _ in range(2):
            for chunks, way in ways.values():
                run_collect(chunks, way)
            run_update()
        times = {**{k: [] for k in ways}, "update": []}
        calls = []
        for _ in range(rounds):
            for key, (chunks, way) in ways.items():
                seconds, n = run_collect(chunks, way)
                times[key].append(seconds)
                if key == "chunks":
                    calls.append(n)
            times["update"].append(run_update())
        exp.logger.close()
    ms = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return {"name": name, "env": env, "num_envs": e, "rows_per_step": exp.env.num_envs * exp.env.spec.num_agents,
            "kernel_threads": 1 if single else threads, "other_threads": threads if single else 1,
            "rollout_length": exp.cfg.rollout_length, "rounds": rounds,
            "ms": ms, "times": times, "chunks_per_rollout": statistics.median(calls),
            "first_chunked_collect_s": first,
            "ratio": span([a / b for a, b in zip(times["one step per call"], times["chunks"])]),
            "threads_ratio": span([a / b for a, b in zip(times[OTHER], times["chunks"])])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    from hypermappo.collect_step import CHUNK
    from hypermappo.compiled import DEFAULT_CACHE

    cache = Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR", DEFAULT_CACHE))
    warm = cache.exists() and any(cache.iterdir())
    info = machine()
    results = measure_rows(ROWS, measure, args.rounds, args.threads)
    lines = [f"# Chunked collection: {CHUNK} steps per graph call where no episode can end ({info['date']})", "",
             f"`python benchmarks/collect_chunk.py --rounds {args.rounds}` on {info['cpu']} ({args.threads} threads), "
             f"torch {info['torch']}, load average {info['load_average_start']} at the start. Both ways side by side "
             "in one process, in turn each round; medians over rounds, ratios within a round [range]; compile "
             f"excluded. The first chunked collection (compiling the chunk graph; Inductor cache "
             f"{'warm' if warm else 'empty'} at the start) is reported apart.", "",
             "| row | rows per step | collection ms: one step per call / chunks | one step / chunks | chunk calls "
             "per rollout | kernel threads: run's / other | other / run's | update ms (same buffer) | first chunked "
             "collection s |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        m = r["ms"]
        lines.append(f"| {r['name']} ({r['env']}, E = {r['num_envs']}, T = {r['rollout_length']}) | "
                     f"{r['rows_per_step']} | {m['one step per call']:.1f} / {m['chunks']:.1f} | {r['ratio']} | "
                     f"{r['chunks_per_rollout']:g} | {r['kernel_threads']} ({m['chunks']:.1f} ms) / "
                     f"{r['other_threads']} ({m[OTHER]:.1f} ms) | {r['threads_ratio']} | {m['update']:.1f} | "
                     f"{r['first_chunked_collect_s']:.1f} |")
    text = "\n".join(lines) + "\n"
    write_results("collect_chunk", {"machine": info, "rounds": args.rounds, "chunk": CHUNK, "rows": results}, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
