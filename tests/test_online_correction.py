"""The goal belief's online-correction kernel (kernels/online_correction.py): the C passes against the PyTorch
composition they replace."""

from __future__ import annotations

import pytest
import torch

from hypermappo.kernels import online_correction

pytestmark = pytest.mark.skipif(isinstance(online_correction.library(), str),
                                reason=f"kernel: {online_correction.library()}")


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(7, 2, 1, 5, 33, generator=g)  # H = 33: a tail past every vector width
    h = torch.randn(7, 2, 1, 33, generator=g).relu()
    err = torch.randn(7, 2, 1, 5, generator=g)
    err[3] = 0.0  # a co-player not seen this step
    return W, h, err


def test_apply_is_the_matrix_vector_product(monkeypatch):
    W, h, _ = _inputs()
    got = online_correction.apply(W, h)
    monkeypatch.setenv("HYPERMAPPO_ONLINE_CORRECTION_KERNEL", "0")
    want = online_correction.apply(W, h)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(want, torch.einsum("...ah,...h->...a", W, h))


def test_update_is_one_normalised_outer_product_step(monkeypatch):
    W, h, err = _inputs(1)
    lr = 0.7
    got = W.clone()
    online_correction.update_(got, err, h, lr)
    monkeypatch.setenv("HYPERMAPPO_ONLINE_CORRECTION_KERNEL", "0")
    composed = W.clone()
    online_correction.update_(composed, err, h, lr)
    want = W + lr * err.unsqueeze(-1) * h.unsqueeze(-2) / (h.square().sum(-1) + 1.0)[..., None, None]
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(composed, want)
    assert torch.equal(got[3], W[3]), "an unseen co-player's correction is left as it was"


def test_other_dtypes_take_the_composition():
    W, h, err = (x.double() for x in _inputs(2))
    want = W + 0.5 * err.unsqueeze(-1) * h.unsqueeze(-2) / (h.square().sum(-1) + 1.0)[..., None, None]
    online_correction.update_(W, err, h, 0.5)
    torch.testing.assert_close(W, want)


def test_inside_a_graph_the_product_is_the_kernel_as_a_custom_op():
    """A compiled belief (BayesCoplayer.compile) calls the product through the custom op `hypermappo::
    online_correction`: its registration passes torch's checks (schema, fake tensor, no aliasing), and a compiled
    function calling `apply` gives the kernel's values and calls the op rather than tracing the composition."""
    W, h, _ = _inputs(3)
    torch.library.opcheck(torch.ops.hypermappo.online_correction.default, (W, h),
                          test_utils=("test_schema", "test_faketensor"))

    def corrected(W, h, logits):
        return (logits + online_correction.apply(W, h).unsqueeze(-2)).log_softmax(-1)

    logits = torch.randn(7, 2, 1, 4, 5)
    graph = torch.compile(corrected, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(graph(W, h, logits), corrected(W, h, logits))
    explained = torch._dynamo.explain(corrected)(W, h, logits)
    assert explained.graph_break_count == 0
    ops = {str(n.target) for g in explained.graphs for n in g.graph.nodes if n.op == "call_function"}
    assert any("online_correction" in op for op in ops), ops
