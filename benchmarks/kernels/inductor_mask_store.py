"""Why the compiled update is not much faster than the eager one: Inductor's CPU code for a boolean output.

Profiling the compiled PPO update (issue 17) shows generated kernels that take 10-15 ms on [76,800 x 16]
activations, where the eager op takes a fraction of a millisecond. The pattern they share is a comparison whose
result is stored as a bool tensor (ReLU's backward mask `x <= 0`, recomputed in the backward graph and kept for a
later kernel). This script times that pattern alone, eager against torch.compile (Inductor, static shapes), on one
thread, so the next person can see whether a newer torch fixes it:

    python benchmarks/kernels/inductor_mask_store.py

Writes benchmarks/results/inductor_mask_store.{json,md}.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
RESULTS = ROOT / "benchmarks" / "results"

CASES = {
    "relu (float out)": lambda a: a.clamp_min(0),
    "mask a <= 0 (bool out)": lambda a: a <= 0,
    "mask as uint8": lambda a: (a <= 0).to(torch.uint8),
    "where(a <= 0, 0, a) (float out)": lambda a: torch.where(a <= 0, 0.0, a),
    "relu + its mask (float + bool out)": lambda a: (a.clamp_min(0), a.clamp_min(0) <= 0),
}


def timed(fn, x, reps: int = 30) -> float:
    for _ in range(3):
        fn(x)
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    from hypermappo.compile import configure
    from hypermappo.experiment import keep_freed_memory

    torch.set_num_threads(1)
    keep_freed_memory()
    configure()  # the compiled path's Inductor settings
    from torch._inductor import cpu_vec_isa

    rows = []
    for shape in ((76_800, 16), (76_800, 64)):
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
        for name, fn in CASES.items():
            eager = timed(fn, x)
            compiled = timed(torch.compile(fn, dynamic=False), x)
            rows.append({"shape": list(shape), "case": name, "eager_ms": eager, "compiled_ms": compiled})
            print(f"{shape} {name}: eager {eager:.3f} ms, compiled {compiled:.3f} ms", flush=True)
    meta = {"torch": torch.__version__, "vec_isa": str(cpu_vec_isa.pick_vec_isa()), "threads": 1,
            "command": "python benchmarks/kernels/inductor_mask_store.py"}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "inductor_mask_store.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    lines = ["# Inductor CPU: a boolean output vs the eager op", "",
             f"torch {meta['torch']}, Inductor vector ISA {meta['vec_isa']}, 1 thread, median of 30 calls. "
             f"Reproduce: `{meta['command']}`", "",
             "| shape | case | eager ms | compiled ms | compiled / eager |", "|---|---|---:|---:|---:|"]
    lines += [f"| {r['shape'][0]:,} x {r['shape'][1]} | {r['case']} | {r['eager_ms']:.3f} | {r['compiled_ms']:.3f} | "
              f"{r['compiled_ms'] / r['eager_ms']:.2f}x |" for r in rows]
    (RESULTS / "inductor_mask_store.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
