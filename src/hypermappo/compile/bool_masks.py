"""ppo.compile: comparison masks (a ReLU's `x <= 0`) are recomputed in the backward graph, never saved as bool.

Why: where a loss is compiled as a forward and a backward graph (the three-graph mini-batch step: Hyper-MAPPO's
observation context, `ppo.minibatch_over=agents`), the partitioner saves whatever is smallest for the backward,
and for a ReLU that is its bool mask, 1 byte per element. Inductor's CPU code stores a bool tensor through
`VecMask<float,1>::store(bool*)`, which ran 17-47x slower than eager's comparison here
(`benchmarks/kernels/inductor_mask_store.py`): two such stores of a [76,800 x 16] mask took ~5 ms each per mini-batch
step of the hyper-obs update, more than the products around them. Marked MUST_RECOMPUTE (the tag selective
activation checkpointing uses), each comparison of large float tensors is recomputed in the backward from the
float it compares, which is saved instead (or was already): the same values, a few MB more saved, and no bool
store. `HYPERMAPPO_RECOMPUTE_MASKS=0` turns it off; `benchmarks/kernels/bool_masks.py` times both.
"""

from __future__ import annotations

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch.utils.checkpoint import CheckpointPolicy

from hypermappo.compile import pass_key, switch

MIN_ELEMENTS = 4096  # smaller masks cost nothing worth a recompute
aten = torch.ops.aten
COMPARISONS = {getattr(getattr(aten, name), overload)
               for name in ("le", "lt", "ge", "gt", "eq", "ne") for overload in ("Scalar", "Tensor")}


def enabled() -> bool:
    """On unless HYPERMAPPO_RECOMPUTE_MASKS=0 (for side-by-side timing)."""
    return switch("HYPERMAPPO_RECOMPUTE_MASKS")


def _is_float_comparison(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target not in COMPARISONS:
        return False
    out, src = node.meta.get("val"), node.args[0]
    src = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
    return (out is not None and src is not None and out.dtype == torch.bool and src.dtype.is_floating_point
            and out.numel() >= MIN_ELEMENTS)


class RecomputeMasksPass(CustomGraphPass):
    """Inductor `joint_custom_post_pass` (runs on the joint forward + backward graph, before the partition)."""

    def __init__(self):
        self.marked = 0  # comparisons marked by this process (tests read it)

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in graph.nodes:
            if _is_float_comparison(node):
                node.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
                self.marked += 1

    def uuid(self) -> bytes:
        return pass_key(__file__, MIN_ELEMENTS)


PASS = RecomputeMasksPass()
