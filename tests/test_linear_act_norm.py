"""The 64-wide hidden blocks' products fused with their LayerNorm(ReLU) (linear_act_norm.py / .c): the ops against
the product followed by the act_norm kernel, and the graph pass's rewrites (where it must and must not apply).
Inside the compiled MAPPO step: tests/test_compiled.py (`mlp-linear-act-norm`, against the eager run)."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from hypermappo.compile import linear_act_norm as lan
from hypermappo.kernels import act_norm

pytestmark = pytest.mark.skipif(isinstance(lan.library(), str) or act_norm.unavailable() is not None,
                                reason="no C compiler for the kernels")
EPS = 1e-5


@pytest.fixture(autouse=True)
def fused_at_every_admitted_product(monkeypatch):
    """These tests are about the rewrites: every product the pass's rule admits is taken (switch 1), with no timed
    probe deciding (compile/probe.py; tests/test_cpu_tuning.py tests the probe)."""
    monkeypatch.setenv("HYPERMAPPO_LINEAR_ACT_NORM", "1")


def affine(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(64, generator=g) + 0.5, torch.randn(64, generator=g) * 0.1


def operand(rows, k, strided, seed):
    g = torch.Generator().manual_seed(seed)
    full = torch.randn(rows, k + (3 if strided else 0), generator=g)
    return full[:, :k]


def close(a, b):
    torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-5 * float(b.abs().max()))


# rows: the kernel takes 7 rows at a time; 7 * 9 + 4 leaves a shorter last run on each thread's side
@pytest.mark.parametrize("k, rows, strided, with_bias", [(64, 67, False, True), (14, 67, True, True),
                                                        (1, 100, False, False), (9, 1000, True, True)])
def test_forward_is_the_product_then_the_act_norm_kernel(k, rows, strided, with_bias):
    x = operand(rows, k, strided, 1)
    w = torch.randn(64, k, generator=torch.Generator().manual_seed(2)).t()  # a Linear's weight as addmm takes it
    bias = torch.randn(64) if with_bias else None
    gamma, beta = affine()
    h, mean, rstd, z = lan.linear_act_norm_op(x, w, bias, gamma, beta, EPS)
    z_ref = torch.addmm(bias, x, w) if with_bias else x @ w
    h_ref, mean_ref, rstd_ref = act_norm.act_norm_op(z_ref, gamma, beta, act_norm.ACTS["relu"], EPS)
    for got, want in ((z, z_ref), (h, h_ref), (mean, mean_ref), (rstd, rstd_ref)):
        close(got, want)


@pytest.mark.parametrize("k, rows, strided, threads", [(64, 67, False, 1), (9, 1000, True, 1), (1, 100, True, 1),
                                                      (64, 1000, False, 2)])
def test_backward_is_the_product_then_the_act_norm_backward_kernel(monkeypatch, k, rows, strided, threads):
    """(threads = 2: the affine gradients' per-thread sums are all added)"""
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)  # the ops pass this count to the kernel
    gamma, beta = affine()
    z = torch.randn(rows, 64, generator=torch.Generator().manual_seed(3))
    _, mean, rstd = act_norm.act_norm_op(z, gamma, beta, act_norm.ACTS["relu"], EPS)
    g = operand(rows, k, strided, 4)
    w = torch.randn(k, 64, generator=torch.Generator().manual_seed(5))
    got = lan.linear_act_norm_backward_op(g, w, z, gamma, mean, rstd)
    want = act_norm.act_norm_backward_op(g @ w, z, gamma, mean, rstd, act_norm.ACTS["relu"])
    assert len(got) == 4
    for a, b in zip(got, [*want, want[0].sum(0)]):  # the 4th: dz's column sums (the block's bias gradient)
        close(a, b)


def test_same_threads_give_the_same_bits():
    gamma, beta = affine()
    x, w = operand(5000, 64, False, 6), torch.randn(64, 64)
    first = lan.linear_act_norm_op(x, w, None, gamma, beta, EPS)
    again = lan.linear_act_norm_op(x, w, None, gamma, beta, EPS)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    back = [lan.linear_act_norm_backward_op(x, w, first[3], gamma, first[1], first[2]) for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(*back))


def test_outputs_not_on_a_cache_line_are_written_with_plain_stores():
    """The kernels stream aligned output rows past the cache; an output that is not 64-byte aligned (a caller's
    view) must take plain stores and get the same values (a streaming store there faults)."""
    import ctypes

    from hypermappo.kernels import c_kernel

    lib, p, long = lan._lib(), c_kernel.ptr, ctypes.c_long
    gamma, beta = affine()
    rows, k = 67, 14
    x, w, bias = operand(rows, k, False, 7), torch.randn(k, 64), torch.randn(64)

    def forward(offset):
        z, h = torch.empty(rows * 64 + offset)[offset:], torch.empty(rows * 64 + offset)[offset:]
        mean, rstd = torch.empty(rows), torch.empty(rows)
        lib.linear_act_norm_forward(p(x), long(k), p(w), p(bias), p(gamma), p(beta), p(z), p(h), p(mean), p(rstd),
                                    long(rows), long(k), ctypes.c_double(EPS), ctypes.c_int(2))
        return z.view(rows, 64), h.view(rows, 64), mean, rstd

    def backward(offset, z, mean, rstd):
        gz = torch.empty(rows * 64 + offset)[offset:]
        sums, partial = [torch.empty(64) for _ in range(3)], torch.empty(3 * 2 * 64, dtype=torch.float64)
        lib.linear_act_norm_backward(p(x), long(k), p(w), p(z), p(gamma), p(mean), p(rstd), p(gz), *map(p, sums),
                                     p(partial), long(rows), long(k), ctypes.c_int(2))
        return gz.view(rows, 64), *sums

    aligned, shifted = forward(0), forward(1)
    assert shifted[0].data_ptr() % 64 != 0
    assert all(torch.equal(a, b) for a, b in zip(aligned, shifted))
    _, _, mean, rstd = aligned
    z = torch.randn(rows, 64)
    assert all(torch.equal(a, b) for a, b in zip(backward(0, z, mean, rstd), backward(3, z, mean, rstd)))


def test_bad_operands_are_refused():
    gamma, beta = affine()
    with pytest.raises(RuntimeError, match=r"w \[K, 64\]"):
        lan.linear_act_norm_op(torch.randn(10, 8), torch.randn(8, 32), None, gamma, beta, EPS)


# ------------------------------------------------------------------ the graph pass

def block(x, w1, b1, gamma, beta, w2, g2, act):
    """A hidden block forward and, by hand, its backward as the post-grad graphs have them."""
    z = torch.addmm(b1, x, w1)
    h, mean, rstd = act_norm.act_norm_op(z, gamma, beta, act, EPS)
    grad_h = g2 @ w2
    grad_z, grad_gamma, grad_beta = act_norm.act_norm_backward_op(grad_h, z, gamma, mean, rstd, act)
    return h, grad_z, grad_gamma, grad_beta, grad_z.sum(0, keepdim=True).view(-1)  # the last: the bias gradient


def inputs(width=64, rows=300, k=14, k2=9):
    g = torch.Generator().manual_seed(7)
    return (torch.randn(rows, k, generator=g), torch.randn(k, width, generator=g) / 4, torch.randn(width, generator=g),
            torch.rand(width, generator=g) + 0.5, torch.randn(width, generator=g), torch.randn(k2, width, generator=g),
            torch.randn(rows, k2, generator=g))


def rewritten(fn, args):
    gm = make_fx(fn, tracing_mode="fake")(*args)
    before = dict(lan.PASS.rewritten)
    lan.PASS(gm.graph)
    gm.graph.lint()
    gm.recompile()
    return gm, {k: v - before[k] for k, v in lan.PASS.rewritten.items()}


@pytest.mark.parametrize("form", ["shared", "per-agent"])
def test_pass_fuses_both_directions_and_computes_the_same(form):
    """Shared layer (mm / addmm) or per-agent layers (bmm / baddbmm, `per_agent_block` below): the block's product,
    LayerNorm, input-gradient product and bias sum all become the two fused ops."""
    fn, args, products = ((block, inputs(), (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)) if form == "shared"
                          else (per_agent_block, per_agent_inputs(),
                                (torch.ops.aten.bmm.default, torch.ops.aten.baddbmm.default)))
    relu = act_norm.ACTS["relu"]
    gm, counts = rewritten(lambda *a: fn(*a, relu), args)
    assert counts == {"forward": 1, "backward": 1, "bias": 1}
    targets = {n.target for n in gm.graph.nodes}
    assert {lan.linear_act_norm_op, lan.linear_act_norm_backward_op} <= targets
    assert not {act_norm.act_norm_op, act_norm.act_norm_backward_op, *products,
                torch.ops.aten.sum.dim_IntList} & targets
    for got, want in zip(gm(*args), fn(*args, relu)):
        close(got, want)


@pytest.mark.parametrize("case", ["tanh", "width 32"])
def test_pass_leaves_blocks_the_kernel_does_not_cover(case):
    act = act_norm.ACTS["tanh" if case == "tanh" else "relu"]
    args = inputs(width=32 if case == "width 32" else 64)
    _, counts = rewritten(lambda *a: block(*a, act), args)
    assert counts == {"forward": 0, "backward": 0, "bias": 0}


def test_pass_keeps_a_product_that_has_other_users():
    """The input-gradient product is fused away only when the LayerNorm backward is its one user."""
    relu = act_norm.ACTS["relu"]

    def shared(x, w1, b1, gamma, beta, w2, g2):
        z = torch.addmm(b1, x, w1)
        h, mean, rstd = act_norm.act_norm_op(z, gamma, beta, relu, EPS)
        grad_h = g2 @ w2
        out = act_norm.act_norm_backward_op(grad_h, z, gamma, mean, rstd, relu)
        return (h, *out, grad_h.sum())

    args = inputs()
    gm, counts = rewritten(shared, args)
    assert counts == {"forward": 1, "backward": 0, "bias": 0}
    for got, want in zip(gm(*args), shared(*args)):
        close(got, want)


def test_switch_and_status(monkeypatch):
    monkeypatch.setenv("HYPERMAPPO_LINEAR_ACT_NORM", "0")
    assert not lan.enabled() and lan.status() == "off (HYPERMAPPO_LINEAR_ACT_NORM=0)"
    monkeypatch.setenv("HYPERMAPPO_LINEAR_ACT_NORM", "1")
    assert lan.enabled() and lan.status().startswith("on in compiled graphs")
    monkeypatch.setenv("HYPERMAPPO_ACT_NORM", "0")  # nothing to fuse into without the act_norm kernel
    assert not lan.enabled() and "HYPERMAPPO_ACT_NORM=0" in lan.status()


# ------------------------------------------------------------------ per-agent layers (Hyper-MAPPO's agent-id actor)

def per_agent_block(x, w1, b1, gamma, beta, w2, g2, act):
    """The per-agent form of `block`: G agents' products as baddbmm / bmm on [G, R, K], the LayerNorm (shared
    affine) on the [G * R, 64] view, and the per-agent bias gradient summed over each agent's rows."""
    groups, rows = x.shape[:2]
    z = torch.baddbmm(b1, x, w1)
    h, mean, rstd = act_norm.act_norm_op(z.reshape(-1, 64), gamma, beta, act, EPS)
    grad_h = torch.bmm(g2, w2).reshape(-1, 64)
    grad_z, grad_gamma, grad_beta = act_norm.act_norm_backward_op(grad_h, z.reshape(-1, 64), gamma, mean, rstd, act)
    return h, grad_z, grad_gamma, grad_beta, grad_z.reshape(groups, rows, 64).sum(1, keepdim=True)


def per_agent_inputs(groups=3, rows=100, k=14, k2=9):
    g = torch.Generator().manual_seed(11)
    gamma, beta = affine(12)
    # g2 strided per row as the graphs have it (the head's output gradient [R, G, k2] permuted to [G, R, k2])
    return (torch.randn(groups, rows, k, generator=g), torch.randn(groups, k, 64, generator=g) / 4,
            torch.randn(groups, 1, 64, generator=g), gamma, beta, torch.randn(groups, k2, 64, generator=g),
            torch.randn(rows, groups, k2, generator=g).permute(1, 0, 2))


@pytest.mark.parametrize("threads", [1, 2])
def test_per_agent_ops_are_the_shared_ops_per_agent(monkeypatch, threads):
    """Each agent's rows through its own weights and bias; the shared affine's gradients summed over agents."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    x, w1, b1, gamma, beta, w2, g2 = per_agent_inputs(rows=67)
    h, mean, rstd, z = lan.linear_act_norm_op(x, w1, b1, gamma, beta, EPS)
    assert z.shape == (3, 67, 64) and h.shape == (3 * 67, 64)
    gz, ggamma, gbeta, gbias = lan.linear_act_norm_backward_op(g2, w2, z, gamma, mean, rstd)
    assert gbias.shape == (3, 64)
    sums = torch.zeros(2, 64)
    for i in range(3):
        rows = slice(i * 67, (i + 1) * 67)
        hi, mi, ri, zi = lan.linear_act_norm_op(x[i], w1[i], b1[i, 0], gamma, beta, EPS)
        for got, want in ((h[rows], hi), (mean[rows], mi), (rstd[rows], ri), (z[i], zi)):
            close(got, want)
        gzi, ggi, gbi, gbiasi = lan.linear_act_norm_backward_op(g2[i], w2[i], zi, gamma, mi, ri)
        close(gz[rows], gzi)
        close(gbias[i], gbiasi)
        sums += torch.stack([ggi, gbi])
    close(ggamma, sums[0])
    close(gbeta, sums[1])
