"""The compiled graphs' column sums in ATen (column_sum.py): which sums the pass rewrites, and that the values stay."""

from __future__ import annotations

import os

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from hypermappo.compile import column_sum, configure, cxx_compiler

ROWS = column_sum.MIN_ROWS


def rewritten(fn, *args) -> tuple[torch.fx.GraphModule, int]:
    gm = make_fx(fn, tracing_mode="fake")(*args)
    before = column_sum.PASS.rewritten
    column_sum.PASS(gm.graph)
    gm.graph.lint()
    gm.recompile()
    return gm, column_sum.PASS.rewritten - before


@pytest.mark.parametrize("name, fn, rows, expected", [
    # a bias gradient: the input gradient of the next product, summed over rows (and read by the weight gradient)
    ("product output", lambda g, w: (g @ w).sum(0, keepdim=True), ROWS, 1),
    ("graph input", lambda g, w: g.sum(0) + w.sum(), ROWS, 1),
    ("element-wise, read by a product", lambda g, w: (lambda r: (r.sum(0), r.t() @ g))(torch.relu(g)), ROWS, 1),
    # a sum Inductor fuses into the loop computing its input: left alone
    ("element-wise only", lambda g, w: (g * 2).sum(0), ROWS, 0),
    ("too few rows", lambda g, w: (g @ w).sum(0), ROWS - 1, 0),
    ("row sums", lambda g, w: (g @ w).sum(1), ROWS, 0),
    ("transposed", lambda g, w: (g @ w).t().sum(1), ROWS, 0),
])
def test_which_column_sums_go_to_aten(name, fn, rows, expected):
    torch.manual_seed(0)
    g, w = torch.randn(rows, 8), torch.randn(8, 8)
    gm, count = rewritten(fn, g, w)
    assert count == expected, name
    ops = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert (torch.ops.hypermappo.column_sum.default in ops) == bool(expected)
    got, want = gm(g, w), fn(g, w)
    for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-3)


def test_column_sum_op_is_registered_correctly():
    x = torch.randn(40, 5)
    torch.library.opcheck(torch.ops.hypermappo.column_sum.default, (x,))
    torch.testing.assert_close(torch.ops.hypermappo.column_sum(x), x.sum(0))


@pytest.mark.skipif(cxx_compiler() is None, reason="no C++ compiler for Inductor's CPU backend")
def test_a_compiled_bias_gradient_takes_atens_sum_and_equals_eager(monkeypatch):
    """Two linear layers' gradients compiled: the second layer's bias gradient (a column sum of its product's input
    gradient... here of the loss gradient, read by the weight-gradient product) goes to ATen; every gradient equals
    eager's."""
    configure()
    monkeypatch.setattr(column_sum.PASS, "uuid", lambda key=os.urandom(16): key)  # compile, do not load
    torch._dynamo.reset()

    def grads(fn):
        torch.manual_seed(0)
        x = torch.randn(ROWS, 8)
        w1, b1 = torch.randn(8, 16, requires_grad=True), torch.randn(16, requires_grad=True)
        w2, b2 = torch.randn(16, 4, requires_grad=True), torch.randn(4, requires_grad=True)
        loss = fn(x, w1, b1, w2, b2)
        return (loss, *torch.autograd.grad(loss, (w1, b1, w2, b2)))

    def two_layers(x, w1, b1, w2, b2):
        return torch.addmm(b2, torch.relu(torch.addmm(b1, x, w1)), w2).square().mean()

    before = column_sum.PASS.rewritten
    compiled = grads(torch.compile(two_layers, dynamic=False))
    assert column_sum.PASS.rewritten - before >= 1
    for c, e in zip(compiled, grads(two_layers)):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-5)


def test_switch(monkeypatch):
    monkeypatch.setenv("HYPERMAPPO_COLUMN_SUMS", "0")
    assert not column_sum.enabled()
    configure()
    assert column_sum.PASS not in torch._inductor.config.post_grad_custom_post_pass.passes
    monkeypatch.delenv("HYPERMAPPO_COLUMN_SUMS")
    configure()
    assert column_sum.PASS in torch._inductor.config.post_grad_custom_post_pass.passes
