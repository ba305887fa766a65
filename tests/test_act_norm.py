"""The LayerNorm(act(z)) kernel of the hidden blocks (kernels/act_norm.py): its maths against the PyTorch
composition, where it is used, and that nothing differentiates it except through its own formula."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from hypermappo.errors import UserError
from hypermappo.kernels import act_norm, c_kernel
from hypermappo.models.agent_layers import AgentMLP

pytestmark = pytest.mark.skipif(act_norm.unavailable() is not None, reason=f"kernel: {act_norm.unavailable()}")


def composition(z, w, b, act):
    return F.layer_norm(torch.relu(z) if act == "relu" else torch.tanh(z), (z.shape[-1],), w, b, 1e-5)


@pytest.mark.parametrize("act", ["relu", "tanh"])
@pytest.mark.parametrize("rows, width", [(37, 9), (5, 64), (130, 3)])
def test_kernel_matches_the_composition_and_its_gradients(act, rows, width):
    """float64: values and the gradients of z, weight and bias (gradcheck: the formula against finite differences)."""
    torch.manual_seed(0)
    z = torch.randn(rows, width, dtype=torch.float64, requires_grad=True)
    w = torch.randn(width, dtype=torch.float64, requires_grad=True)
    b = torch.randn(width, dtype=torch.float64, requires_grad=True)
    g = torch.randn(rows, width, dtype=torch.float64)
    out = act_norm.act_norm(z, w, b, act, 1e-5)
    ref = composition(z, w, b, act)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    grads = torch.autograd.grad(out, (z, w, b), g)
    ref_grads = torch.autograd.grad(ref, (z, w, b), g)
    for name, a, r in zip("zwb", grads, ref_grads):
        torch.testing.assert_close(a, r, rtol=1e-9, atol=1e-9, msg=name)
    assert torch.autograd.gradcheck(lambda z, w, b: act_norm.act_norm(z, w, b, act, 1e-5), (z, w, b))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_float32_kernel_is_repeatable_and_close_to_aten(threads):
    """Per-thread column sums added in thread order: the same threads give the same bits; any thread count gives
    ATen's values to float rounding."""
    torch.manual_seed(1)
    z, w, b, g = torch.randn(1001, 64), torch.randn(64), torch.randn(64), torch.randn(1001, 64)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        runs = []
        for _ in range(2):
            zz, ww, bb = (t.clone().requires_grad_() for t in (z, w, b))
            out = act_norm.act_norm(zz, ww, bb, "relu", 1e-5)
            runs.append((out, *torch.autograd.grad(out, (zz, ww, bb), g)))
    finally:
        torch.set_num_threads(before)
    for a, c in zip(*runs):
        assert torch.equal(a, c)
    zz, ww, bb = (t.clone().requires_grad_() for t in (z, w, b))
    ref = composition(zz, ww, bb, "relu")
    for a, r in zip(runs[0], (ref, *torch.autograd.grad(ref, (zz, ww, bb), g))):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-4)


def test_mlp_takes_the_kernel_from_min_rows_and_computes_the_same(monkeypatch):
    """AgentMLP's hidden blocks: the kernel at >= MIN_ROWS rows (counted), the composition below; same outputs
    and parameter gradients as a module built with the kernel switched off (float64: the maths, not rounding)."""
    torch.manual_seed(2)
    fused = AgentMLP(7, [16, 16]).double()
    monkeypatch.setenv("HYPERMAPPO_ACT_NORM", "0")
    plain = AgentMLP(7, [16, 16]).double()
    monkeypatch.delenv("HYPERMAPPO_ACT_NORM")
    plain.load_state_dict(fused.state_dict())
    assert fused.fused_norms and not plain.fused_norms
    calls = []
    real = act_norm._ActNorm.apply
    monkeypatch.setattr(act_norm._ActNorm, "apply", lambda *a: calls.append(a[0].shape) or real(*a))
    monkeypatch.setattr(act_norm, "MIN_ROWS", 12)
    x = torch.randn(4, 3, 7, dtype=torch.float64)  # 12 rows: the kernel
    outs = []
    for m in (fused, plain):
        y, _ = m(x)
        grads = torch.autograd.grad(y.square().sum(), list(m.parameters()))
        outs.append((y, *grads))
    assert calls == [torch.Size([12, 16])] * 2
    for a, r in zip(*outs):
        torch.testing.assert_close(a, r, rtol=1e-9, atol=1e-9)
    calls.clear()
    fused(torch.randn(11, 7, dtype=torch.float64))  # 11 rows: the composition
    assert calls == []


def test_the_op_refuses_to_be_differentiated_directly():
    """Only `_ActNorm` differentiates the op; reached with inputs that need a gradient it raises (a silent fallthrough
    would give zero gradients, e.g. where a compiler inlined the autograd.Function's forward)."""
    z, w, b = torch.randn(4, 8, requires_grad=True), torch.randn(8), torch.randn(8)
    with pytest.raises(RuntimeError, match="differentiated only through its autograd.Function"):
        act_norm.act_norm_op(z, w, b, 0, 1e-5)
    with torch.no_grad():
        h, mean, rstd = act_norm.act_norm_op(z, w, b, 0, 1e-5)
    torch.testing.assert_close(h, composition(z.detach(), w, b, "relu"))


def test_switch_and_status(monkeypatch, tmp_path):
    """HYPERMAPPO_ACT_NORM=0 turns it off (said in the status), another value is an error; without a C compiler the
    composition runs and the status says why."""
    assert act_norm.status() == f"on from {act_norm.MIN_ROWS:,} rows"
    monkeypatch.setenv("HYPERMAPPO_ACT_NORM", "0")
    assert act_norm.status() == "off (HYPERMAPPO_ACT_NORM=0)" and not AgentMLP(4, [8]).fused_norms
    monkeypatch.setenv("HYPERMAPPO_ACT_NORM", "yes")
    with pytest.raises(UserError, match="HYPERMAPPO_ACT_NORM='yes': expected 0 or 1"):
        act_norm.unavailable()
    monkeypatch.delenv("HYPERMAPPO_ACT_NORM")
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("HYPERMAPPO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(c_kernel, "_LOADED", {})  # loaded earlier in this process: built again, without a compiler
    assert act_norm.status().startswith("off (cannot be built: cannot run the C compiler")
    assert not AgentMLP(4, [8]).fused_norms
