"""Two builds of one of the compiled graphs' C kernels, alternating update by update in one process.

The graphs call the kernels through `linear_act_norm._lib()` / `weight_grad.library()`, so one compiled run can
switch the shared library under them between updates: the same graphs, the same data, the same process, only the
kernel's code differs. That removes what made fresh-process A/B pairs unreadable on these machines (adjacent
processes differ by up to ~30%). Each round runs one collection + update per build, in alternating order; the
kernel's own time per update is summed over its calls (wall time around each call). `--row` (default mappo),
compiled, on VMAS simple_spread at the paper's settings (E = 1024, T = 25, 10 epochs x 1 mini-batch, 64x64).

    python benchmarks/kernels/kernel_builds.py linear_act_norm --baseline c5b7363~1 --rounds 8
    python benchmarks/kernels/kernel_builds.py weight_grad --baseline c5b7363~1 --rounds 8
    python benchmarks/kernels/kernel_builds.py act_norm --row hyper-id --baseline HEAD~1 --rounds 8

`--baseline` is a git revision whose kernel source is built as the other arm (the current file is the first).
Writes benchmarks/results/kernel_builds_<kernel>[_<row>].{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]  # benchmarks/: throughput.py (the shared harness), results/
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
from throughput import VARIANTS, case, collect_and_update, machine, span, started_run, write_results  # noqa: E402

SOURCES = {"linear_act_norm": "src/hypermappo/kernels/linear_act_norm.c",
           "weight_grad": "src/hypermappo/kernels/weight_grad.c", "act_norm": "src/hypermappo/kernels/act_norm.c"}
# where each source was before the package layout moved it to kernels/ (a --baseline from before that commit)
OLD_SOURCES = {"linear_act_norm": "src/hypermappo/linear_act_norm.c", "weight_grad": "src/hypermappo/weight_grad.c",
               "act_norm": "src/hypermappo/models/act_norm.c"}
FLAGS = {"act_norm": ["-march=native", "-DREAL=float", "-DSUFFIX=f32"]}  # the float32 build (act_norm.library)


class Switch:
    """Stands in for the kernel's ctypes library: forwards each call to the build `current`, timing it."""

    def __init__(self, builds):
        self.builds, self.current, self.seconds = builds, 0, defaultdict(float)

    def __getattr__(self, name):
        fn = getattr(self.builds[self.current], name)

        def timed(*args):
            t0 = time.perf_counter()
            fn(*args)
            self.seconds[name] += time.perf_counter() - t0

        return timed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kernel", choices=sorted(SOURCES))
    p.add_argument("--baseline", required=True, help="git revision of the other build's source")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--row", default="mappo", choices=["mappo", "hyper-id", "hyper-obs-last"])
    args = p.parse_args(argv)

    from hypermappo.compile import linear_act_norm, weight_grad
    from hypermappo.kernels import act_norm, c_kernel

    source = SOURCES[args.kernel]
    old = subprocess.run(["git", "show", f"{args.baseline}:{source}"], cwd=ROOT, capture_output=True, text=True)
    if old.returncode != 0:
        old = subprocess.run(["git", "show", f"{args.baseline}:{OLD_SOURCES[args.kernel]}"], cwd=ROOT,
                             capture_output=True, text=True)
    if old.returncode != 0:
        sys.exit(f"kernel_builds: cannot read {source} at {args.baseline!r}: {old.stderr.strip()}")
    info = machine()
    with tempfile.TemporaryDirectory() as tmp:
        baseline_src = Path(tmp) / f"{args.kernel}_baseline.c"
        baseline_src.write_text(old.stdout)
        flags = FLAGS.get(args.kernel, ["-march=native", "-Wno-psabi"])
        builds = [c_kernel.build(ROOT / source, f"{args.kernel}_current", flags),
                  c_kernel.build(baseline_src, f"{args.kernel}_baseline", flags)]
        if any(isinstance(b, str) for b in builds):
            sys.exit(f"kernel_builds: a build failed: {builds}")
        exp = started_run(case(args.row, "vmas:simple_spread", 1024, args.threads,
                               [*VARIANTS[args.row], "ppo.compile=on"]), f"{tmp}/run")
        for _ in range(2):  # compile, then one steady step
            collect_and_update(exp)
        switch = Switch(builds)
        if args.kernel == "linear_act_norm":
            linear_act_norm._lib = lambda: switch
        elif args.kernel == "act_norm":
            act_norm._lib = lambda t: switch
        else:
            weight_grad.library = lambda: switch
        arms = ("current", "baseline")
        rounds = []
        for r in range(args.rounds):
            row = {}
            for arm in (arms if r % 2 == 0 else arms[::-1]):
                switch.current = arms.index(arm)
                switch.seconds.clear()
                collect, update = collect_and_update(exp)
                row[arm] = {"update_s": update, "kernel_s": sum(switch.seconds.values())}
            rounds.append(row)
            print({a: {k: round(v * 1e3, 1) for k, v in x.items()} for a, x in row.items()}, flush=True)
        exp.logger.close()

    def med(arm, key):
        return statistics.median(x[arm][key] for x in rounds) * 1e3

    text = "\n".join([
        f"# {args.kernel}: this build against {args.baseline}'s, alternating per update in one process "
        f"({info['date']})", "",
        f"`python benchmarks/kernels/kernel_builds.py {args.kernel} --row {args.row} --baseline {args.baseline} --rounds "
        f"{args.rounds}` on "
        f"{info['cpu']} ({args.threads} threads), torch {info['torch']}, load average {info['load_average_start']} "
        f"at the start. {args.row} compiled, VMAS simple_spread, E = 1024, paper settings; medians over rounds, ratios "
        "within a round.", "",
        "| build | kernel ms per update | update ms |", "|---|---:|---:|",
        *[f"| {arm} | {med(arm, 'kernel_s'):.1f} | {med(arm, 'update_s'):.0f} |" for arm in arms], "",
        f"baseline / current: kernel {span([x['baseline']['kernel_s'] / x['current']['kernel_s'] for x in rounds])}, "
        f"update {span([x['baseline']['update_s'] / x['current']['update_s'] for x in rounds])}", ""])
    suffix = "" if args.row == "mappo" else f"_{args.row}"
    write_results(f"kernel_builds_{args.kernel}{suffix}", {"machine": info, "baseline": args.baseline, "rounds": rounds},
                  text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
