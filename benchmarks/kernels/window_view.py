"""The stag hunt's co-player view through its C kernel (kernels/window_view.py) against the env's PyTorch
composition (envs/staghunt.window_view), at the sizes the Bayesian co-player model calls it with.

Rows: B = 1024 (one collection step at E = 1024 with two learner hunters: one view per learner agent and
co-player) and B = 16,384 (the co-player update's 32 mini-batches of 512 replay samples, viewed at once), on
windows of radius 4 from random play in the 5 x 5 stag hunt (the `staghunt/egocentric` observation). Each round
times 20 calls with the kernel, then 20 with the composition; medians over rounds, ratios within a round [range].
Every call's output is checked equal to the composition's once before timing.

    python benchmarks/kernels/window_view.py --rounds 7

Writes benchmarks/results/window_view.{json,md}.
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

SIZES = (1024, 16_384)


def windows(rows: int):
    import torch

    from hypermappo.envs.registry import make_env

    env = make_env("staghunt", rows // 2, "cpu", observation="partial", view_radius=4)
    s = env.reset(seed=0)
    g = torch.Generator().manual_seed(0)
    for _ in range(7):
        s = env.step(torch.randint(0, 5, (rows // 2, 2), generator=g))
    obs = s.obs.reshape(rows, -1)
    rel = torch.ones(rows, dtype=torch.long)
    return obs, rel, env.spec.coplayer_view.keywords


def measure(rows: int, rounds: int) -> dict:
    import torch

    from hypermappo.envs import staghunt
    from hypermappo.kernels import window_view

    obs, rel, kw = windows(rows)
    if not torch.equal(window_view.apply(obs, rel, **kw), staghunt.window_view(obs, rel, **kw)):
        raise SystemExit("the kernel's view differs from the composition's")
    fns = {"kernel": lambda: window_view.apply(obs, rel, **kw), "composition": lambda: staghunt.window_view(obs, rel, **kw)}
    times = {k: [] for k in fns}
    for r in range(rounds + 1):
        for name, fn in fns.items():
            t0 = time.process_time()
            for _ in range(20):
                fn()
            if r:  # the first round warms up
                times[name].append((time.process_time() - t0) / 20)
    ms = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return {"rows": rows, "ms": ms, "times": times,
            "composition_over_kernel": span([a / b for a, b in zip(times["composition"], times["kernel"])])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    import torch

    from hypermappo.kernels import window_view

    torch.set_num_threads(1)
    lib = window_view.library()
    if isinstance(lib, str):
        print(f"the kernel cannot be built here: {lib}")
        return 1
    info = machine()
    results = []
    for rows in SIZES:
        r = measure(rows, args.rounds)
        print({k: r[k] for k in r if k != "times"}, flush=True)
        results.append(r)
    lines = [f"# The co-player view of egocentric windows: C kernel against the PyTorch composition ({info['date']})",
             "", f"`python benchmarks/kernels/window_view.py --rounds {args.rounds}` on {info['cpu']} (1 thread), "
             f"torch {info['torch']}, load average {info['load_average_start']} at the start. Windows of radius 4 "
             "(329 features) from random play in the 5 x 5 stag hunt; both ways in turn each round; medians over "
             "rounds, ratio within a round [range].", "",
             "| rows | ms per call: kernel / composition | composition / kernel |", "|---:|---:|---:|"]
    for r in results:
        m = r["ms"]
        lines.append(f"| {r['rows']:,} | {m['kernel']:.2f} / {m['composition']:.2f} | {r['composition_over_kernel']} |")
    write_results("window_view", {"machine": info, "rounds": args.rounds, "rows": results}, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
