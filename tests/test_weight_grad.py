"""The compiled graphs' weight-gradient kernel (weight_grad.py): its product against float64, which products the
pass rewrites, and that a compiled gradient through it is eager's."""

from __future__ import annotations

import os

import pytest
import torch

from hypermappo.compile import configure, cxx_compiler, weight_grad
from hypermappo.errors import UserError

pytestmark = pytest.mark.skipif(not weight_grad.enabled(), reason=f"kernel: {weight_grad.status()}")


@pytest.fixture(autouse=True)
def weight_grad_at_every_admitted_product(monkeypatch):
    """These tests are about the rewrites: every product the pass's rule admits is taken (switch 1), with no timed
    probe deciding (compile/probe.py; tests/test_cpu_tuning.py tests the probe)."""
    monkeypatch.setenv("HYPERMAPPO_WEIGHT_GRAD", "1")


def reference(a, b):
    return (a.double().t() @ b.double()).float()


# (K, m, n): both orientations (the kernel vectorises over the wider side), widths that are and are not whole
# vectors, a single column or row, row counts that are not whole tiles (256) and fewer rows than threads
SHAPES = [(3000, 64, 64), (1037, 45, 64), (777, 64, 14), (513, 1, 64), (700, 64, 1), (1000, 17, 18), (300, 16, 48),
          (1, 5, 7), (2, 33, 3), (0, 4, 4)]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("k, m, n", SHAPES)
def test_kernel_is_the_product_to_float_rounding_and_repeatable(k, m, n, threads):
    torch.manual_seed(k + m + n)
    a, b = torch.randn(k, m), torch.randn(k, n)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out, again = weight_grad.weight_grad_op(a, b), weight_grad.weight_grad_op(a, b)
    finally:
        torch.set_num_threads(before)
    assert out.shape == (m, n)
    torch.testing.assert_close(out, reference(a, b), rtol=1e-5, atol=1e-5 * max(k, 1) ** 0.5)
    assert torch.equal(out, again)  # per-thread partial sums added in thread order


def test_non_contiguous_operands_are_taken_as_their_values():
    a, b = torch.randn(64, 900).t(), torch.randn(900, 40)[:, ::2]
    torch.testing.assert_close(weight_grad.weight_grad_op(a, b), reference(a, b), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("layout", ["contiguous", "agent-major view"])
@pytest.mark.parametrize("m, n", [(9, 64), (64, 14), (17, 18)])
def test_batched_products_one_per_group(layout, m, n):
    """G products at once (per-agent weights): each group's own rows, also as the agent-major view [N, B, in] of a
    [B, N, in] tensor (rows strided by N x width, groups by width), as Hyper-MAPPO's agent-id layers take them."""
    torch.manual_seed(m * n)
    if layout == "contiguous":
        a, b = torch.randn(3, 1100, m), torch.randn(3, 1100, n)
    else:
        a, b = torch.randn(1100, 3, m).transpose(0, 1), torch.randn(1100, 3, n).transpose(0, 1)
    out = weight_grad.weight_grad_op(a, b)
    ref = torch.bmm(a.double().transpose(1, 2), b.double()).float()
    assert out.shape == (3, m, n)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-3)


def test_op_registration_and_bad_operands():
    a, b = torch.randn(40, 8), torch.randn(40, 5)
    torch.library.opcheck(weight_grad.weight_grad_op, (a, b), test_utils=("test_schema", "test_faketensor"))
    with pytest.raises(RuntimeError, match=r"float32 \[\(G,\) K, <= 64\] operands with the same \(G, K\), got "
                                           r"torch.float32 \(40, 65\)"):
        weight_grad.weight_grad_op(torch.randn(40, 65), b)
    with pytest.raises(RuntimeError, match=r"same \(G, K\), got torch.float32 \(2, 40, 8\) and torch.float32 "
                                           r"\(3, 40, 5\)"):
        weight_grad.weight_grad_op(torch.randn(2, 40, 8), torch.randn(3, 40, 5))
    with pytest.raises(RuntimeError, match="differentiated only through"):  # no autograd formula: never differentiated
        weight_grad.weight_grad_op(a.requires_grad_(), b)


def two_layers(x, w1, b1, w2):
    return (torch.relu(torch.addmm(b1, x, w1)) @ w2).square().mean()


CASES = [(256, 32, 2), (255, 32, 0), (256, 65, 0), (256, 16, 0)]  # rows, width, weight gradients rewritten


def grads_of(fn):
    """Every case's loss and gradients, from one call of `fn` over all of them (one graph set to compile)."""
    torch.manual_seed(0)
    inputs = []
    for rows, width, _ in CASES:
        x = torch.randn(rows, 8)
        w1, b1 = torch.randn(8, width, requires_grad=True), torch.randn(width, requires_grad=True)
        inputs.append((x, w1, b1, torch.randn(width, 4, requires_grad=True)))
    losses = fn(inputs)
    out = []
    for loss, (_, *weights) in zip(losses, inputs):
        out += [loss, *torch.autograd.grad(loss, weights, retain_graph=True)]
    return out


def each_case(inputs):
    return [two_layers(*case) for case in inputs]


@pytest.mark.skipif(cxx_compiler() is None, reason="no C++ compiler for Inductor's CPU backend")
def test_weight_gradients_over_many_rows_go_to_the_kernel_and_the_values_stay(monkeypatch):
    """Both weight gradients (a reduction over the rows) are rewritten from MIN_ROWS rows and widths 32-64, none
    below, wider or narrower; the input gradient (row-major first operand) never is; the loss and every gradient equal
    eager's to float rounding. The four cases are four independent pairs of layers in one compiled function."""
    configure()
    monkeypatch.setattr(weight_grad, "MIN_ROWS", 256)
    monkeypatch.setattr(weight_grad.PASS, "uuid", lambda key=os.urandom(16): key)  # no graph from the cache
    torch._dynamo.reset()
    before = weight_grad.PASS.rewritten
    compiled = grads_of(torch.compile(each_case, dynamic=False))
    assert weight_grad.PASS.rewritten - before == sum(r for *_, r in CASES)  # the 256-row, 32-wide case's two
    for c, e in zip(compiled, grads_of(each_case), strict=True):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-5)


def per_agent_layers(x, w1, w2):
    """Two layers with per-agent weights, agent-major as AgentLinear runs them: x [B, N, in] -> [N, B, in]."""
    xt = x.transpose(0, 1)
    return torch.bmm(torch.relu(torch.bmm(xt, w1)), w2).square().mean()


@pytest.mark.skipif(cxx_compiler() is None, reason="no C++ compiler for Inductor's CPU backend")
def test_per_agent_weight_gradients_go_to_the_kernel_and_the_values_stay(monkeypatch):
    configure()
    monkeypatch.setattr(weight_grad, "MIN_ROWS", 256)
    monkeypatch.setattr(weight_grad.PASS, "uuid", lambda key=os.urandom(16): key)
    torch._dynamo.reset()

    def grads(fn):
        torch.manual_seed(0)
        x = torch.randn(300, 3, 9)
        w1, w2 = torch.randn(3, 9, 32, requires_grad=True), torch.randn(3, 32, 5, requires_grad=True)
        loss = fn(x, w1, w2)
        return (loss, *torch.autograd.grad(loss, (w1, w2)))

    before = weight_grad.PASS.rewritten
    compiled = grads(torch.compile(lambda *a: per_agent_layers(*a), dynamic=False))
    assert weight_grad.PASS.rewritten - before == 2  # both per-agent weight gradients
    for c, e in zip(compiled, grads(per_agent_layers)):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(cxx_compiler() is None, reason="no C++ compiler for Inductor's CPU backend")
def test_only_a_transposed_first_operand_is_rewritten(monkeypatch):
    """The same long product with its first operand row-major [m, K] (not the transpose of a [K, m] tensor) stays
    on MKL; as a transposed view it goes to the kernel; both give the product."""
    configure()
    monkeypatch.setattr(weight_grad, "MIN_ROWS", 256)
    monkeypatch.setattr(weight_grad.PASS, "uuid", lambda key=os.urandom(16): key)
    torch._dynamo.reset()
    torch.manual_seed(0)
    b = torch.randn(300, 8)
    for a, rewritten in ((torch.randn(32, 300), 0), (torch.randn(300, 32).t(), 1)):
        before = weight_grad.PASS.rewritten
        out = torch.compile(lambda a, b: (a @ b) * 2, dynamic=False)(a, b)
        assert weight_grad.PASS.rewritten - before == rewritten
        torch.testing.assert_close(out, (a @ b) * 2, rtol=1e-5, atol=1e-4)


def test_switch_and_status(monkeypatch):
    assert weight_grad.status() == f"on in compiled graphs from {weight_grad.MIN_ROWS:,} rows, every such product"
    monkeypatch.delenv("HYPERMAPPO_WEIGHT_GRAD")
    assert weight_grad.status() == (f"on in compiled graphs from {weight_grad.MIN_ROWS:,} rows, where a probe on this "
                                    "CPU finds it faster")
    monkeypatch.setenv("HYPERMAPPO_WEIGHT_GRAD", "0")
    assert not weight_grad.enabled() and weight_grad.status() == "off (HYPERMAPPO_WEIGHT_GRAD=0)"
    configure()
    assert weight_grad.PASS not in torch._inductor.config.post_grad_custom_post_pass.passes
    monkeypatch.setenv("HYPERMAPPO_WEIGHT_GRAD", "true")
    with pytest.raises(UserError, match="HYPERMAPPO_WEIGHT_GRAD='true': expected 0, 1 or auto"):
        weight_grad.enabled()
    monkeypatch.delenv("HYPERMAPPO_WEIGHT_GRAD")
    configure()
    assert weight_grad.PASS in torch._inductor.config.post_grad_custom_post_pass.passes
    monkeypatch.setattr(weight_grad, "library", lambda: "no C compiler found (set CC)")
    assert not weight_grad.enabled() and weight_grad.status() == "off (no C compiler found (set CC))"
