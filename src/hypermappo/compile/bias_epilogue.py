"""ppo.compile on the CPU: a linear layer's bias added by the kernel that reads its product, not copied in first.

Why: ATen's CPU `addmm` (what a compiled graph calls for every biased product the other passes leave) first copies
the broadcast bias into each row of its output, through a broadcasting copy, then multiplies with beta = 1. At
JaxMARL's IPPO settings that copy was 4 passes of 1,536 x 64 per mini-batch step (~17 us each, one thread) and, in
collection, an expand and a copy call on top of each of the 6 products of every step. Where every use of the
product is element-wise (the activation after a hidden layer, the softmax's subtraction), the bias add can be one
more operation of that use's fused kernel instead: `mm(x, w) + b`.

How: an Inductor post-grad pass (the last of the CPU graph passes, compile/pipeline.py, so the fused LayerNorm blocks
and oneDNN products keep the products they take) rewrites each fp32 CPU `addmm(b, x, w)` with a 1-D bias,
alpha = beta = 1 and only element-wise uses into `add(mm(x, w), b)`. Same values to float rounding (the bias added
after the product instead of before its accumulation). `HYPERMAPPO_BIAS_EPILOGUE=0` turns it off (side-by-side
timing).
"""

from __future__ import annotations

import torch
from torch._inductor.utils import is_pointwise_use

from hypermappo.compile import pass_key, switch
from hypermappo.compile.rewrite_pass import RewritePass

aten = torch.ops.aten


def enabled() -> bool:
    return switch("HYPERMAPPO_BIAS_EPILOGUE")


def _eligible(node: torch.fx.Node) -> tuple | None:
    """(bias, x, w) of an `addmm` the pass rewrites, else None."""
    if node.op != "call_function" or node.target is not aten.addmm.default or node.kwargs or len(node.args) != 3:
        return None
    bias, x, w = node.args
    vals = [n.meta.get("val") for n in (bias, x, w, node)]
    if any(v is None or v.dtype != torch.float32 or v.device.type != "cpu" for v in vals) or vals[0].dim() != 1:
        return None
    if not node.users or not all(is_pointwise_use(use) for use in node.users):
        return None
    return bias, x, w


class BiasEpiloguePass(RewritePass):
    """One of the CPU graph passes (compile/pipeline.py): the rewrite the module docstring describes."""

    def replacement(self, graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
        args = _eligible(node)
        if args is None:
            return None
        bias, x, w = args
        product = graph.call_function(aten.mm.default, (x, w))
        product.meta["val"] = node.meta["val"]
        return graph.call_function(aten.add.Tensor, (product, bias))

    def uuid(self) -> bytes:
        return pass_key(__file__)


PASS = BiasEpiloguePass()
