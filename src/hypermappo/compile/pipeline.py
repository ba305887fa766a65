"""ppo.compile: the CPU graph passes as the one object each Inductor hook takes.

Inductor calls `post_grad_custom_post_pass` (and `joint_custom_post_pass`) on every graph it compiles, and keys its
FX graph cache on the hook's `uuid()`. torch 2.13 also accepts a list of passes there; torch 2.11's contract is a
single callable, and a list crashed every compiled run at its first update ("TypeError: 'list' object is not
callable", issue 40). So the hook gets one `GraphPasses`: a `CustomGraphPass` that runs the enabled passes in order
and whose uuid combines theirs. The passes are written for Inductor's CPU backend: a graph with a tensor on another
device (a CUDA learner in the same process) is left alone.
"""

from __future__ import annotations

import hashlib

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass


def on_cpu(graph: torch.fx.Graph) -> bool:
    """Whether every tensor the graph's nodes record is on the CPU (a graph without tensors counts as CPU)."""
    for node in graph.nodes:
        val = node.meta.get("val")
        for v in val if isinstance(val, (list, tuple)) else (val,):
            if isinstance(v, torch.Tensor) and v.device.type != "cpu":
                return False
    return True


class GraphPasses(CustomGraphPass):
    """`passes` (each a CustomGraphPass: a callable on an FX graph with a uuid) run in order on CPU graphs."""

    def __init__(self, passes):
        self.passes = tuple(passes)

    def __call__(self, graph: torch.fx.Graph) -> None:
        if not on_cpu(graph):
            return
        for graph_pass in self.passes:
            graph_pass(graph)

    def uuid(self) -> bytes:
        key = hashlib.sha256()
        for graph_pass in self.passes:  # each pass's name and key, in order: a change to either recompiles
            key.update(type(graph_pass).__qualname__.encode() + b"\0" + repr(graph_pass.uuid()).encode() + b"\0")
        return key.digest()

    def names(self) -> list[str]:
        return [type(p).__module__.rsplit(".", 1)[-1] for p in self.passes]
