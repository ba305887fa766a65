"""The compiled graphs' node-for-node rewrites (onednn_gemm.py, weight_grad.py): the one loop they share."""

from __future__ import annotations

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass


class RewritePass(CustomGraphPass):
    """An Inductor graph pass that replaces single nodes: `replacement` inserts the new node for one it takes (at
    the node's place) and returns it, or returns None to leave the node alone."""

    def __init__(self):
        self.rewritten = 0  # nodes rewritten by this process (tests read it)

    def replacement(self, graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
        raise NotImplementedError

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in list(graph.nodes):
            with graph.inserting_before(node):
                new = self.replacement(graph, node)
            if new is None:
                continue
            new.meta.update(node.meta)
            node.replace_all_uses_with(new)
            graph.erase_node(node)
            self.rewritten += 1
