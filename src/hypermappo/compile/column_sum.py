"""ppo.compile on the CPU: column sums over many rows (a linear layer's bias gradient) in ATen, not in Inductor's loop.

Why: a bias gradient is `sum(dz, [0])` over the mini-batch's rows, [76,800, 64] -> [64] at the MAPPO paper setting.
Inductor's CPU code for such a reduction walks the whole tensor once per vector of columns (8 strided passes at
AVX2's width, 4 at AVX-512's) with a cascade summation helper per lane: 9.4 ms at 76,800 x 64 on one AMD EPYC
thread (AVX2) where ATen's `x.sum(0)` took 1.9 ms, and 7 ms a call (141 ms of the 2.5 s update, 20 calls) in the
compiled MAPPO update there (torch.profiler). The eager update takes these sums from ATen already (addmm's
backward). On the 2-core Xeon the same loop was ~1 ms a block, "4 strided passes" (linear_act_norm.py, which takes
the fused blocks' sums from its own kernel where it runs).

How: an Inductor post-grad pass rewrites each `sum(x, [0])` of a 2-D contiguous fp32 CPU tensor with at least
`MIN_ROWS` rows into `hypermappo::column_sum(x)` (ATen's sum, one opaque call), but only where x is in memory
anyway: the output of a product or of another opaque op (the act_norm kernel's input gradient), or read by one (the
policy head's logit gradient feeds its weight-gradient product). A sum Inductor would fuse into the loop that
computes x stays: there the rewrite would add a write and a read of x. Same values to float rounding (ATen's
summation order). It runs after the passes that swap products (their outputs are opaque calls too) and before
bias_epilogue.py (which leaves an addmm with a non-element-wise use, such as this sum, alone). A pure graph rewrite
with a static rule, not probed (probe.py can time two callables, not Inductor's generated loop);
`HYPERMAPPO_COLUMN_SUMS=0` turns it off (side-by-side timing).
"""

from __future__ import annotations

import operator

import torch

from hypermappo.compile import pass_key, switch
from hypermappo.compile.rewrite_pass import RewritePass

MIN_ROWS = 8_192  # below this a column sum is a few microseconds either way
aten = torch.ops.aten
_VIEWS = (aten.view.default, aten.reshape.default, aten._unsafe_view.default)
_ALIASES = (*_VIEWS, aten.t.default, aten.permute.default, aten.transpose.int)  # a product may read x through these
_PRODUCTS = (aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default)


def enabled() -> bool:
    return switch("HYPERMAPPO_COLUMN_SUMS")


@torch.library.custom_op("hypermappo::column_sum", mutates_args=())
def column_sum(x: torch.Tensor) -> torch.Tensor:
    """x [R, C] -> its column sums [C] (ATen's reduction)."""
    return x.sum(0)


@column_sum.register_fake
def _(x):
    return x.new_empty(x.shape[1])


def _opaque(node) -> bool:
    """Whether Inductor calls `node` as an extern kernel (its output is a buffer in memory)."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return _opaque(node.args[0])
    target = node.target
    return target in _PRODUCTS or getattr(target, "namespace", None) == "hypermappo"


def _in_memory(x: torch.fx.Node) -> bool:
    """x (through reshaping views) is computed by an opaque op, or read by one: Inductor writes it out anyway."""
    base, chain = x, [x]
    while isinstance(base, torch.fx.Node) and base.op == "call_function" and base.target in _VIEWS:
        base = base.args[0]
        chain.append(base)
    if _opaque(base) or (isinstance(base, torch.fx.Node) and base.op == "placeholder"):
        return True
    readers = [user for node in chain for user in node.users]
    readers += [user for alias in readers if alias.target in _ALIASES for user in alias.users]  # e.g. mm(t(x), g)
    return any(_opaque(user) for user in readers)


def _eligible(node: torch.fx.Node) -> torch.fx.Node | None:
    """x of a `sum(x, [0][, keepdim])` node the pass rewrites, else None."""
    if node.op != "call_function" or node.target is not aten.sum.dim_IntList or node.kwargs.get("dtype") is not None:
        return None
    x, dims = node.args[0], node.args[1]
    vx = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if vx is None or vx.dim() != 2 or list(dims or []) not in ([0], [-2]):
        return None
    if vx.dtype != torch.float32 or vx.device.type != "cpu" or not vx.is_contiguous() or vx.shape[0] < MIN_ROWS:
        return None
    return x if _in_memory(x) else None


class ColumnSumPass(RewritePass):
    """One of the CPU graph passes (compile/pipeline.py): the rewrite the module docstring describes."""

    def replacement(self, graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
        x = _eligible(node)
        if x is None:
            return None
        summed = graph.call_function(torch.ops.hypermappo.column_sum.default, (x,))
        summed.meta["val"] = x.meta["val"].new_empty(x.meta["val"].shape[1])
        if list(node.meta["val"].shape) == [x.meta["val"].shape[1]]:
            return summed
        return graph.call_function(aten.reshape.default, (summed, list(node.meta["val"].shape)))  # keepdim: [1, C]

    def uuid(self) -> bytes:
        return pass_key(__file__, MIN_ROWS)


PASS = ColumnSumPass()
