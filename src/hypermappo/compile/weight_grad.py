"""ppo.compile on the CPU: the weight gradients of the compiled graphs in a C kernel (`weight_grad.c`).

Why: a linear layer's weight gradient over a batch is `grad_out^T @ input`, a reduction over all the batch's rows
into a small matrix (at the MAPPO paper setting 76,800 rows into 64 x 64, 64 x 45, 64 x 14, 1 x 64; Hyper-MAPPO
adds 16 x 16, 16 x 48, ...). MKL runs these transposed products at 20-100 GFLOP/s here, the narrow ones worst (it
blocks over the small output, not the long reduction), and oneDNN slower still (onednn_gemm.py). The kernel gives
each thread a run of rows and keeps a block of the output in registers while a tile of rows streams through:
1.7-2.8x less time than MKL at 76,800 rows for the shapes at least 32 wide, 1.8-11x for the per-agent form
(`benchmarks/kernels/weight_grad.py`, operands from memory); at 8,192-9,600 rows 0.85-1.2x, at 1,536 rows slower (call
overhead, threads woken for little work), and the narrow outputs (16 x 16, 18 x 17) lost up to 9,600 rows, so
those stay on MKL.

How: an Inductor post-grad pass (after autograd, so it sees the backward) rewrites each fp32 CPU `mm(a, b)` whose
`a` is the transpose of a [K, m] tensor with contiguous rows and `b` a [K, n] one likewise, with K >= `MIN_ROWS`
and m, n <= 64 (the wider at least 32), into `hypermappo::weight_grad`, one opaque call; and each such `bmm` (G of
them: the per-agent weight gradients of Hyper-MAPPO's agent-id layers, 3 x 25,600 rows at the paper setting, where
MKL's batched product of a 64 x 9 output took ~9-12 ms). Same product to float rounding (another summation
order; per-thread partial sums added in thread order, so one thread count gives the same bits every run). The
eager path is unchanged. Those figures are an AVX-512 Xeon's: on a CPU without AVX-512 the kernel's register
blocks spill and it lost to MKL (probe.py), so by default (`HYPERMAPPO_WEIGHT_GRAD` unset or `auto`) a product the
rule admits is rewritten only where a timed probe on this machine finds the kernel faster (compile/probe.py);
`HYPERMAPPO_WEIGHT_GRAD=1` rewrites every one the rule admits, `=0` none (side-by-side timing); a kernel that cannot
be built (no C compiler) leaves MKL in place, said by `status()`.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from hypermappo.compile import pass_key, probe
from hypermappo.compile.rewrite_pass import RewritePass
from hypermappo.kernels import c_kernel

_SOURCE = Path(__file__).parent.parent / "kernels" / "weight_grad.c"
MIN_ROWS = 8_192  # reduction length from which the pass rewrites (benchmarks/kernels/weight_grad.py)
MAX_WIDTH = 64  # both sides of the output at most this (the kernel's tile buffer)
# the wider side at least this: with one vector of 16 columns (16 x 16, 18 x 17) the kernel lost to MKL up to 9,600
# rows and did not reliably win at 76,800 (benchmarks/kernels/weight_grad.py)
MIN_WIDTH = 32
aten = torch.ops.aten


def library() -> ctypes.CDLL | str:
    """The built kernel, or why it could not be built."""
    return c_kernel.load(_SOURCE, "weight_grad", ["-march=native"], {"weight_grad": None})


def status() -> str:
    """For summary.json: whether compiled graphs take their weight gradients from the kernel, and if not why."""
    mode = probe.setting("HYPERMAPPO_WEIGHT_GRAD")
    if mode == "0":
        return "off (HYPERMAPPO_WEIGHT_GRAD=0)"
    lib = library()
    if isinstance(lib, str):
        return f"off ({lib})"
    where = "every such product" if mode == "1" else "where a probe on this CPU finds it faster"
    return f"on in compiled graphs from {MIN_ROWS:,} rows, {where}"


def enabled() -> bool:
    return probe.setting("HYPERMAPPO_WEIGHT_GRAD") != "0" and not isinstance(library(), str)


def _weight_grad_cpu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [(G,) K, m], b [(G,) K, n] (float32, m, n <= MAX_WIDTH; rows may be strided) -> a^T b [(G,) m, n]."""
    lib = library()
    if isinstance(lib, str):
        raise RuntimeError(f"the weight_grad kernel: {lib}")
    if (a.dtype != torch.float32 or b.dtype != torch.float32 or a.dim() != b.dim() or a.dim() not in (2, 3)
            or a.shape[:-1] != b.shape[:-1] or max(a.shape[-1], b.shape[-1]) > MAX_WIDTH):
        raise RuntimeError(f"weight_grad takes float32 [(G,) K, <= {MAX_WIDTH}] operands with the same (G, K), got "
                           f"{a.dtype} {tuple(a.shape)} and {b.dtype} {tuple(b.shape)}")
    batched = a.dim() == 3
    a, b = (a, b) if batched else (a.unsqueeze(0), b.unsqueeze(0))
    a, b = (t if t.stride(-1) == 1 else t.contiguous() for t in (a, b))  # rows may be strided, columns not
    (groups, rows, m), n = a.shape, b.shape[-1]
    threads = torch.get_num_threads()
    out = a.new_empty(groups, m, n)
    partial = a.new_empty(threads * MAX_WIDTH * MAX_WIDTH)
    p, long = c_kernel.ptr, ctypes.c_long
    lib.weight_grad(p(a), p(b), p(out), long(groups), long(rows), long(m), long(n), long(a.stride(0)),
                    long(a.stride(1)), long(b.stride(0)), long(b.stride(1)), ctypes.c_int(threads), p(partial))
    return out if batched else out[0]


# no autograd formula: it appears only in graphs after autograd (a direct differentiation is an error)
weight_grad_op = c_kernel.define_op("weight_grad", "(Tensor a, Tensor b) -> Tensor", _weight_grad_cpu,
                                    lambda a, b: a.new_empty(*a.shape[:-2], a.shape[-1], b.shape[-1]))


def _eligible(node: torch.fx.Node) -> tuple | None:
    """(a_t, b) of an `mm(a_t^T, b)` / `bmm(a_t^T, b)` node worth sending to the kernel, else None: `a_t^T` a
    transposed view (its columns are rows of memory), `b` with contiguous rows."""
    if node.op != "call_function" or node.target not in (aten.mm.default, aten.bmm.default) or node.kwargs:
        return None
    a, b = node.args
    va, vb = a.meta.get("val"), b.meta.get("val")
    dim = 2 if node.target is aten.mm.default else 3
    if va is None or vb is None or any(v.dtype != torch.float32 or v.device.type != "cpu" or v.dim() != dim
                                       for v in (va, vb)):
        return None
    (m, rows), n = va.shape[-2:], vb.shape[-1]
    if rows < MIN_ROWS or m > MAX_WIDTH or n > MAX_WIDTH or max(m, n) < MIN_WIDTH:
        return None
    if va.stride(-2) != 1 or vb.stride(-1) != 1:  # a: the transpose of a [K, m] with contiguous rows; b: likewise
        return None
    if probe.setting("HYPERMAPPO_WEIGHT_GRAD") == "auto" and not probe.pays(
            "weight_grad", probe.describe(va, vb), lambda: _probe(va, vb), _SOURCE.read_bytes()):
        return None
    return a, b


def _probe(va, vb) -> tuple:
    """(kernel, ATen) on real operands like the graph's: the transposed view a^T and b."""
    a, b = probe.real(va), probe.real(vb)
    rows_first = a.transpose(-1, -2)
    product = torch.mm if a.dim() == 2 else torch.bmm
    return (lambda: _weight_grad_cpu(rows_first, b)), (lambda: product(a, b))


class WeightGradPass(RewritePass):
    """One of the CPU graph passes (compile/pipeline.py): the rewrite the module docstring describes."""

    def replacement(self, graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
        args = _eligible(node)
        if args is None:
            return None
        a, b = args
        order = [1, 0] if node.target is aten.mm.default else [0, 2, 1]
        rows_first = graph.call_function(aten.permute.default, (a, order))
        rows_first.meta["val"] = a.meta["val"].permute(*order)
        return graph.call_function(weight_grad_op, (rows_first, b))

    def uuid(self) -> bytes:
        return pass_key(__file__, MIN_ROWS, MIN_WIDTH, MAX_WIDTH, _SOURCE.read_bytes(),
                        probe.setting("HYPERMAPPO_WEIGHT_GRAD"), probe.fingerprint())


PASS = WeightGradPass()
