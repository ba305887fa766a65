"""ppo.compile on the CPU: a graph pass's kernel is taken only where a timed probe on this machine finds it faster.

Why: the C kernels and the oneDNN products the graph passes put into compiled graphs (linear_act_norm.py,
weight_grad.py, onednn_gemm.py) were written and tuned on a 2-core Intel Xeon with AVX-512, where they gave the
compiled MAPPO update 1.7x its ATen floor. On the 2-core AMD EPYC this package is developed on (`lscpu`: "AMD EPYC",
family 25, model 1; its hypervisor exposes AVX2 and FMA but no AVX-512; torch 2.13.0+cpu) the same defaults made
the compiled MAPPO paper setting (E = 1024, 2 threads) 5x slower than eager (issue 40). Whether a kernel pays
depends on the CPU's vector width, the thread count and the product's shape, so it is measured where it runs.
There, at the paper setting's 76,800 rows, one thread (best of the probe's interleaved calls; the machine was
shared, so single figures move by tens of percent between probes):
- linear_act_norm (fused product + LayerNorm(ReLU)) against the product and the act_norm kernel: 0.10-0.21x
  forward, 0.10-0.48x backward (its 64-wide blocks of 7 rows need 28 AVX-512 registers; built for AVX2 they
  spill). Never taken there.
- weight_grad against MKL: 0.06-0.26x as first written (the same spills), 0.7-1.8x after its AVX2 block
  (weight_grad.c): taken per shape, where the probe finds it at least 1/`MARGIN` faster.
- oneDNN against MKL: 1.2-2.2x for the products with at least 9 columns in and out (MKL's fp32 GEMM is slow on
  this CPU), 0.5-0.7x for the value head's 64 -> 1 and its input gradient: taken for the former only.
With the probe deciding (and column_sum.py, the act_norm kernel's AVX2 build), the compiled MAPPO update there
took 1.2-1.3x less CPU time than eager's in the same process (README / the run's summary.json: cpu_kernels).

How: each of those passes first applies its own static rule (rows, widths, strides), then, for a product it would
rewrite, asks `pays(name, shape, make, code)`: `make()` gives the kernel and the ATen op(s) it replaces as closures
over random tensors of the graph's shapes and strides; both run interleaved, `REPEATS` times after a warm-up each
(under a second for the paper setting's largest products), and the kernel is taken only if its best time is at
most `MARGIN` of ATen's (the best time: a shared machine's other load only ever adds; with one thread the calling
thread's CPU time, which preemption does not inflate either). The answer is kept in
`$TORCHINDUCTOR_CACHE_DIR/hypermappo_probes.json` under a key of this CPU's model and feature flags and the torch
version, per pass, shape, thread count and kernel source, so a machine probes each shape once;
`HYPERMAPPO_PROBE_CACHE=0` re-probes (and rewrites the entry). A compiled graph in Inductor's cache was built with
this machine's answers (the passes' cache keys have the CPU key and thread count). Each pass's switch
(`HYPERMAPPO_LINEAR_ACT_NORM`, `HYPERMAPPO_WEIGHT_GRAD`, `HYPERMAPPO_ONEDNN_GEMM`) is `auto` (this probe, the
default), `1` (every product the static rule admits: side-by-side timing and tests) or `0` (off). `report()` says
what was taken and why, for the run's `compile:` line and summary.json.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path

import torch

from hypermappo.compile.cache_dir import cache_file, read_record, write_record
from hypermappo.errors import UserError

MARGIN = 0.9  # a kernel is taken where its best time is at most this fraction of the ATen op's
REPEATS = 7  # timed calls of each, interleaved, after one warm-up call each
FILE = "hypermappo_probes.json"
seen: dict[str, dict[str, dict]] = {}  # pass -> probe key -> record, for the products this process's passes met


def setting(name: str) -> str:
    """A probed pass's switch: "auto" (unset: the probe decides), "1" (every product its static rule admits), "0"."""
    flag = os.environ.get(name, "auto")
    if flag not in ("0", "1", "auto"):
        raise UserError(f"{name}={flag!r}: expected 0, 1 or auto")
    return flag


def cpu_model() -> str:
    from hypermappo.kernels.c_kernel import cpu_identity

    for line in cpu_identity().decode(errors="replace").splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    import platform

    return platform.processor() or "unknown CPU"


def machine_key() -> str:
    """This CPU (model and feature flags) and torch version: what the probes' answers depend on besides the shape."""
    from hypermappo.kernels.c_kernel import cpu_identity

    return hashlib.sha256(cpu_identity() + torch.__version__.encode()).hexdigest()[:16]


def fingerprint() -> tuple:
    """What a compiled graph's passes decided from, for the passes' FX-graph-cache keys."""
    return machine_key(), torch.get_num_threads(), MARGIN, REPEATS


def cache_path() -> Path:
    return cache_file(FILE)


def _read() -> dict:
    return read_record(cache_path())


def cached(key: str) -> dict | None:
    if os.environ.get("HYPERMAPPO_PROBE_CACHE", "1") == "0":
        return None
    return _read().get(machine_key(), {}).get("probes", {}).get(key)


def _store(key: str, record: dict) -> None:
    data = _read()
    entry = data.setdefault(machine_key(), {"cpu": cpu_model(), "torch": torch.__version__, "probes": {}})
    entry["probes"][key] = record
    write_record(cache_path(), data)


def describe(*vals) -> str:
    """Graph values' shapes and strides, for a probe's key."""
    return " ".join(f"{list(v.shape)}/{list(v.stride())}" if v is not None else "-" for v in vals)


def real(val) -> torch.Tensor | None:
    """A real tensor with a graph value's shape, strides and dtype, values from N(0, 1) (None for None); `val` may be
    a fake tensor of the graph's metadata."""
    if val is None:
        return None
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        t = torch.empty_strided(tuple(val.shape), tuple(val.stride()), dtype=val.dtype)
        return t.normal_() if t.is_floating_point() else t.zero_()


def _timed(fn: Callable[[], object], times: list[float]) -> None:
    # one thread: the calling thread's CPU time, which time the OS gives other processes does not inflate; more:
    # wall time (the workers' share of the work is on other threads)
    clock = time.thread_time if torch.get_num_threads() == 1 else time.perf_counter
    start = clock()
    fn()
    times.append(clock() - start)


def measure(candidate: Callable[[], object], reference: Callable[[], object]) -> tuple[float, float]:
    """(best candidate seconds, best reference seconds) over `REPEATS` interleaved calls after a warm-up each."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    tc, tr = [], []
    with unset_fake_temporarily(), torch.no_grad():
        candidate(), reference()
        for _ in range(REPEATS):
            _timed(candidate, tc)
            _timed(reference, tr)
    return min(tc), min(tr)


def pays(name: str, shape: str, make: Callable[[], tuple[Callable, Callable]], code: bytes = b"") -> bool:
    """Whether pass `name` takes its kernel for a product of `shape` (a string naming shapes and strides) on this
    machine: from the cache, else timed now. `make()` builds (candidate, reference), closures over real inputs;
    `code`: the sources both run (a changed kernel is probed afresh)."""
    version = hashlib.sha256(code).hexdigest()[:8]
    key = f"{name} {shape} threads={torch.get_num_threads()} code={version}"
    record = cached(key)
    if record is None:
        candidate, reference = make()
        tc, tr = measure(candidate, reference)
        record = {"kernel_s": tc, "aten_s": tr, "speedup": round(tr / tc, 3), "taken": tc <= MARGIN * tr}
        _store(key, record)
    seen.setdefault(name, {})[key] = record
    return record["taken"]


def report(names: list[str]) -> str:
    """What this process's passes `names` took: e.g. `weight_grad 0 of 4 products (0.41-0.78x of ATen's speed)`;
    passes that met no product here (graphs from Inductor's cache) say what this machine's probes found before."""
    parts = []
    for name in names:
        records = list(seen.get(name, {}).values())
        source = ""
        if not records:
            stored = _read().get(machine_key(), {}).get("probes", {})
            here = f" threads={torch.get_num_threads()} "
            records = [r for k, r in stored.items() if k.startswith(name + " ") and here in k]
            source = " earlier on this CPU" if records else ""
        if not records:
            parts.append(f"{name} met no product")
            continue
        taken = sum(r["taken"] for r in records)
        speedups = sorted(r["speedup"] for r in records)
        span = f"{speedups[0]:.2f}x" if speedups[0] == speedups[-1] else f"{speedups[0]:.2f}-{speedups[-1]:.2f}x"
        parts.append(f"{name} taken for {taken} of {len(records)} product shapes probed{source} ({span} ATen's speed)")
    return ", ".join(parts)
