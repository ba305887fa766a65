"""ppo.compile on the CPU: large row-major matrix products of the compiled graphs run in oneDNN instead of MKL.

Why: PyTorch's CPU builds send every fp32 `mm` / `addmm` to MKL, which on this machine's CPU (AMD EPYC, AVX-512)
ran the MAPPO paper setting's large products (76,800 rows x 64 wide) slower than oneDNN: the compiled MAPPO update
was 1.1-1.3x as fast with the forward and input-gradient products in oneDNN (`benchmarks/kernels/onednn_gemm.py`, fresh
processes side by side; products timed alone swing between runs by more than that). The weight-gradient products
(a long reduction over the rows, first operand transposed) ran 0.15-0.5x as fast in oneDNN and stay on MKL.

How: an Inductor post-grad pass (it sees forward and backward) rewrites each fp32 CPU `mm(a, b)` /
`addmm(bias, a, b)` whose `a` is row-major with at least `MIN_ROWS` rows into `hypermappo::onednn_linear`, a
custom op that Inductor calls as one opaque kernel. The values are the same product to float rounding (another
summation order). Below `MIN_ROWS` (the per-step policy forward at small env counts, JaxMARL's mini-batches)
the extra call costs more than it saves, so those stay on MKL. The eager path is unchanged: its autograd would
need a custom backward for this op. Which library is faster depends on the CPU and the shape, so by default
(`HYPERMAPPO_ONEDNN_GEMM` unset or `auto`) a product the rule admits goes to oneDNN only where a timed probe on
this machine finds oneDNN faster (compile/probe.py); `HYPERMAPPO_ONEDNN_GEMM=1` sends every one the rule admits,
`=0` none (side-by-side timing).
"""

from __future__ import annotations

import torch

from hypermappo.compile import pass_key, probe
from hypermappo.compile.rewrite_pass import RewritePass

MIN_ROWS = 32_768  # rows of the product's first operand from which oneDNN is used (benchmarks/kernels/onednn_gemm.py)
aten = torch.ops.aten


def enabled() -> bool:
    """On where this torch has oneDNN, unless HYPERMAPPO_ONEDNN_GEMM=0 (for side-by-side timing against MKL)."""
    return (probe.setting("HYPERMAPPO_ONEDNN_GEMM") != "0" and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


@torch.library.custom_op("hypermappo::onednn_linear", mutates_args=())
def onednn_linear(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """a [M, K] @ b [K, N] (+ bias [N]) through oneDNN's inner-product primitive (which takes b as [N, K])."""
    return torch.ops.mkldnn._linear_pointwise(a.contiguous(), b.t().contiguous(), bias, "none", [], "")


@onednn_linear.register_fake
def _(a, b, bias):
    return a.new_empty(a.shape[0], b.shape[1])


def _eligible(node: torch.fx.Node) -> tuple | None:
    """(a, b, bias) of an mm / addmm node worth sending to oneDNN, else None."""
    if node.op != "call_function" or node.target not in (aten.mm.default, aten.addmm.default) or node.kwargs:
        return None
    bias, a, b = node.args if node.target is aten.addmm.default else (None, *node.args)
    va, vb = a.meta.get("val"), b.meta.get("val")
    if va is None or vb is None or va.dtype != torch.float32 or va.device.type != "cpu" or va.dim() != 2:
        return None
    if va.shape[0] < MIN_ROWS or va.stride(-1) != 1:  # small, or a transposed operand (a weight gradient)
        return None
    if bias is not None:
        vbias = bias.meta.get("val")
        if vbias is None or tuple(vbias.shape) != (vb.shape[1],) or vbias.dtype != torch.float32:
            return None
    vbias = bias.meta.get("val") if bias is not None else None
    if probe.setting("HYPERMAPPO_ONEDNN_GEMM") == "auto" and not probe.pays(
            "onednn_gemm", probe.describe(va, vb, vbias), lambda: _probe(va, vb, vbias)):
        return None
    return a, b, bias


def _probe(va, vb, vbias) -> tuple:
    """(oneDNN, MKL) on real operands like the graph's."""
    a, b, bias = probe.real(va), probe.real(vb), probe.real(vbias)
    mkl = (lambda: torch.mm(a, b)) if bias is None else (lambda: torch.addmm(bias, a, b))
    return (lambda: onednn_linear(a, b, bias)), mkl


class OneDNNGemmPass(RewritePass):
    """One of the CPU graph passes (compile/pipeline.py): the rewrite the module docstring describes."""

    def replacement(self, graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
        args = _eligible(node)
        return None if args is None else graph.call_function(torch.ops.hypermappo.onednn_linear.default, args)

    def uuid(self) -> bytes:
        return pass_key(__file__, MIN_ROWS, probe.setting("HYPERMAPPO_ONEDNN_GEMM"), probe.fingerprint())


PASS = OneDNNGemmPass()
