"""The goal belief's online correction through its C kernel (kernels/online_correction.py) against the PyTorch
composition, inside the belief's real per-step work.

One training run's goal belief (stag hunt, E = 1024, both hunters learners, the co-player model's defaults) steps
through `begin` (predictions: the goal network, the correction W h) and `observe` (the Bayes update, the correction's
update) on fixed inputs, with ~32 MB of other data touched between steps as the env and the actor do (so W is not
left in cache as it would be in a bare loop). Each round times 20 steps with the kernel, 20 with the composition
(`HYPERMAPPO_ONLINE_CORRECTION_KERNEL=0`) and 20 without the correction (`coplayer.online_lr=0`), in turn;
medians over rounds, ratios within a round [range].

    python benchmarks/kernels/online_correction.py --rounds 7

Writes benchmarks/results/online_correction.{json,md}.
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
from throughput import EGOCENTRIC, VARIANTS, case, machine, span, started_run, write_results  # noqa: E402

MODES = {"kernel": "1", "composition": "0", "no correction": None}


def measure(obs_kind: str, rounds: int, tmp: str) -> dict:
    import torch

    torch.set_num_threads(1)
    extra = [EGOCENTRIC] if obs_kind == "egocentric" else []
    exp = started_run(case("mappo-coplayer", "staghunt", 1024, 1, [*VARIANTS["mappo"], "coplayer.enabled=true",
                                                                     *extra]), f"{tmp}/{obs_kind}")
    belief = exp.primary.coplayer.belief
    E, N = 1024, exp.env.spec.num_agents
    gen = torch.Generator().manual_seed(0)
    obs = torch.rand(E, belief.slots.numel(), exp.env.spec.obs_dim, generator=gen)
    actions = torch.randint(0, belief.A, (E, N), generator=gen)
    active, end = torch.ones(E, N, dtype=torch.bool), torch.zeros(E, dtype=torch.bool)
    other = torch.randn(8_000_000, generator=gen)
    W = belief.W

    def steps(n: int) -> float:
        t0 = time.process_time()
        for _ in range(n):
            with torch.no_grad():
                belief.begin(obs, features=False)
                belief.observe(actions, active, end)
            other.add_(1.0)  # the env's and the actor's memory traffic between two belief steps
        return (time.process_time() - t0) / n

    times = {k: [] for k in MODES}
    for r in range(rounds + 1):
        for mode, flag in MODES.items():
            belief.W = None if flag is None else W
            os.environ["HYPERMAPPO_ONLINE_CORRECTION_KERNEL"] = flag or "1"
            t = steps(20)
            if r:  # the first round warms up
                times[mode].append(t)
    os.environ.pop("HYPERMAPPO_ONLINE_CORRECTION_KERNEL")
    exp.logger.close()
    ms = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    return {"obs": obs_kind, "ms": ms, "times": times,
            "composition_over_kernel": span([a / b for a, b in zip(times["composition"], times["kernel"])]),
            "correction_ms": {k: ms[k] - ms["no correction"] for k in ("kernel", "composition")}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    from hypermappo.kernels import online_correction

    lib = online_correction.library()
    if isinstance(lib, str):
        print(f"the kernel cannot be built here: {lib}")
        return 1
    info = machine()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for obs_kind in ("full", "egocentric"):
            r = measure(obs_kind, args.rounds, tmp)
            print({k: r[k] for k in r if k != "times"}, flush=True)
            results.append(r)
    lines = [f"# The goal belief's online correction: C kernel against the PyTorch composition ({info['date']})", "",
             f"`python benchmarks/kernels/online_correction.py --rounds {args.rounds}` on {info['cpu']} (1 thread), "
             f"torch {info['torch']}, load average {info['load_average_start']} at the start. The belief of a "
             "stag hunt training run (E = 1024, two learner hunters), one `begin` + `observe` per step; the three "
             "modes in turn each round; medians over rounds, ratio within a round [range].", "",
             "| observation | belief step ms: kernel / composition / no correction | composition / kernel | "
             "the correction's own ms: kernel / composition |", "|---|---:|---:|---:|"]
    for r in results:
        m, c = r["ms"], r["correction_ms"]
        lines.append(f"| {r['obs']} | {m['kernel']:.2f} / {m['composition']:.2f} / {m['no correction']:.2f} | "
                     f"{r['composition_over_kernel']} | {c['kernel']:.2f} / {c['composition']:.2f} |")
    write_results("online_correction", {"machine": info, "rounds": args.rounds, "rows": results},
                  "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
