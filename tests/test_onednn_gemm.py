"""The compiled path's oneDNN products (onednn_gemm.py): which products it rewrites, and that the values stay."""

from __future__ import annotations

import pytest
import torch

from hypermappo.compile import configure, cxx_compiler, onednn_gemm

pytestmark = [pytest.mark.skipif(cxx_compiler() is None, reason="no C++ compiler for Inductor's CPU backend"),
              pytest.mark.skipif(not onednn_gemm.enabled(), reason="this torch has no oneDNN")]


@pytest.fixture(autouse=True)
def onednn_at_every_admitted_product(monkeypatch):
    """These tests are about the rewrites: every product the pass's rule admits is taken (switch 1), with no timed
    probe deciding (compile/probe.py; tests/test_cpu_tuning.py tests the probe)."""
    monkeypatch.setenv("HYPERMAPPO_ONEDNN_GEMM", "1")


def two_layers(x, w1, b1, w2):
    return (torch.relu(torch.addmm(b1, x, w1)) @ w2).square().mean()


def grads_of(fn, rows: int):
    torch.manual_seed(0)
    x = torch.randn(rows, 8)
    w1, b1, w2 = torch.randn(8, 16, requires_grad=True), torch.randn(16, requires_grad=True), torch.randn(16, 4,
                                                                                                        requires_grad=True)
    loss = fn(x, w1, b1, w2)
    return (loss, *torch.autograd.grad(loss, (w1, b1, w2)))


@pytest.mark.parametrize("rows, min_rows, rewritten", [(256, 4, 3), (32, 64, 0)])
def test_large_row_major_products_go_to_onednn_and_the_values_stay(monkeypatch, rows, min_rows, rewritten):
    """Forward products (2) and the second layer's input gradient (1) are rewritten at >= MIN_ROWS rows; the weight
    gradients (first operand transposed; with MIN_ROWS = 4 its 8 or 16 rows would pass) never are; the loss and
    every gradient equal eager's to float rounding."""
    configure()
    monkeypatch.setattr(onednn_gemm, "MIN_ROWS", min_rows)
    torch._dynamo.reset()
    before = onednn_gemm.PASS.rewritten
    # a graph from the cache would skip the pass
    with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(enable_autograd_cache=False):
        compiled = grads_of(torch.compile(two_layers, dynamic=False), rows)
    assert onednn_gemm.PASS.rewritten - before == rewritten
    for c, e in zip(compiled, grads_of(two_layers, rows)):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-5)


def test_onednn_linear_op_is_registered_correctly():
    a, b, bias = torch.randn(40, 8), torch.randn(8, 5), torch.randn(5)
    torch.library.opcheck(torch.ops.hypermappo.onednn_linear.default, (a, b, bias))
    torch.library.opcheck(torch.ops.hypermappo.onednn_linear.default, (a, b.t().contiguous().t(), None))
    torch.testing.assert_close(torch.ops.hypermappo.onednn_linear(a, b, bias), torch.addmm(bias, a, b))
    torch.testing.assert_close(torch.ops.hypermappo.onednn_linear(a, b, None), a @ b)
