"""Multi-head self-attention over the agents of each sample (the hypernetwork's observation context).

With N a handful of agents, attention is N^2 tiny dot products per sample. Torch's kernels for it
(scaled_dot_product_attention, bmm) spend their time on per-(sample, head) overhead, and a dense PyTorch
formulation on [samples, N, N, E] temporaries: in the Hyper-MAPPO update the attention cost more than the rest of
the hypernetwork. So there are two implementations of the same maths (nn.MultiheadAttention's; both tested
against it):

- `fused`: a small C kernel (`agent_attention.c`) that computes scores, softmax and the weighted sum of values,
  and their gradients, in one pass per sample. It is compiled on first use with the system C compiler, for the
  given (agents, width, heads), and cached (`$HYPERMAPPO_CACHE`, default ~/.cache/hypermappo); CPU only. It is
  two torch ops (forward, backward) with shape-only fake versions and an autograd.Function formula
  (c_kernel.define_op), so `torch.compile` (`ppo.compile`) keeps it as one call inside the graph, with no graph
  break, and torch.func differentiates it (the one-graph compiled step).
  In float32 at width 16 (the observation context's default) the kernel works on 16-lane vectors, heads as groups
  of lanes (1.9x forward, 3.4x backward the scalar loops, benchmarks/kernels/attention_kernel.py).
- `dense`: pure PyTorch, every step one elementwise op or one dense matmul over all (query, key) pairs. Used on
  CUDA, for dtypes other than float32/float64, and wherever the kernel cannot be built.

Dead and zero-padded agent slots (`alive` = False) are never attended to as keys (nn.MultiheadAttention's
`key_padding_mask = ~alive`); their own queries still attend to the alive agents. A sample without any alive agent
gets a zero attention output (where nn.MultiheadAttention would give NaN).

`kernel="auto"` takes `fused` where it can; `AgentAttention.implementation` says which one runs (recorded in the
run's summary.json).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from hypermappo.compile import switch
from hypermappo.errors import UserError
from hypermappo.kernels import c_kernel

_SOURCE = Path(__file__).parent.parent / "kernels" / "agent_attention.c"
_MAX_STACK_BYTES = 1 << 16  # per-sample scratch lives on the stack: larger agent counts use the dense path


def vector_path() -> bool:
    """Whether float32 at width 16 runs on vectors (agent_attention.c). HYPERMAPPO_ATTENTION_VECTOR=0 builds the
    scalar loops instead: side-by-side timing, and runs recorded before the vector path (tests/test_groups.py)."""
    return switch("HYPERMAPPO_ATTENTION_VECTOR")


def _build(agents: int, width: int, heads: int, vector: bool) -> ctypes.CDLL | str:
    """Compile (or load the cached) kernel for these sizes; the reason as a string when it cannot."""
    if agents * 3 * width * 8 + 2 * agents * heads * 8 > _MAX_STACK_BYTES:
        return f"{agents} agents x width {width} exceeds the kernel's per-sample scratch"
    # the vector path for this CPU's widest vectors; the scalar one exactly as it was built before (generic x86-64)
    return c_kernel.load(_SOURCE, f"agent_attention_{agents}x{width}x{heads}{'' if vector else '_scalar'}",
                         [f"-DNA={agents}", f"-DEE={width}", f"-DHH={heads}",
                          *(["-march=native", "-Wno-psabi"] if vector else ["-DSCALAR_F32"])],
                         {f"attention_{d}_{s}": None for d in ("forward", "backward") for s in ("f32", "f64")})


def fused_library(agents: int, width: int, heads: int) -> ctypes.CDLL | str:
    return _build(agents, width, heads, vector_path())


_ptr = c_kernel.ptr


def _real(dtype: torch.dtype):
    return (ctypes.c_float, "f32") if dtype == torch.float32 else (ctypes.c_double, "f64")


def _library(agents: int, width: int, heads: int) -> ctypes.CDLL:
    lib = fused_library(agents, width, heads)
    if isinstance(lib, str):  # AgentAttention only takes the fused path once the kernel is built; a direct call may not
        raise RuntimeError(f"the fused attention kernel for {agents} agents, width {width}, {heads} heads: {lib}")
    return lib


# The C kernel as two torch ops with fake (shape-only) implementations and an autograd.Function formula
# (c_kernel.define_op): Dynamo and Inductor treat each as one opaque call inside the graph, so a compiled actor keeps
# the fused kernel with no graph break (`ppo.compile`), torch.func differentiates it (the one-graph compiled step),
# and eager runs take the same ops.
def _forward_cpu(qkv: torch.Tensor, alive: torch.Tensor | None, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """qkv [B, N, 3E], alive [B, N] bool or None -> (attention output [B, N, E], weights [B, N, heads, N])."""
    qkv = qkv.contiguous()
    b, n, e3 = qkv.shape
    e = e3 // 3
    lib = _library(n, e, heads)
    alive_ptr = ctypes.c_void_p(None)
    if alive is not None:
        alive = alive.to(torch.bool).contiguous()  # [B, N], one byte per agent slot
        alive_ptr = _ptr(alive)
    real, suffix = _real(qkv.dtype)
    out, weights = qkv.new_empty(b, n, e), qkv.new_empty(b, n, heads, n)
    getattr(lib, f"attention_forward_{suffix}")(_ptr(qkv), alive_ptr, _ptr(out), _ptr(weights), ctypes.c_long(b),
                                                real((e // heads) ** -0.5), ctypes.c_int(torch.get_num_threads()))
    return out, weights


def _backward_cpu(qkv: torch.Tensor, weights: torch.Tensor, grad_out: torch.Tensor, heads: int) -> torch.Tensor:
    """Gradient of the attention output w.r.t. qkv (the weights are the forward's softmax, saved)."""
    qkv, weights, grad_out = qkv.contiguous(), weights.contiguous(), grad_out.contiguous()
    b, n, e3 = qkv.shape
    lib = _library(n, e3 // 3, heads)
    real, suffix = _real(qkv.dtype)
    grad_qkv = torch.empty_like(qkv)
    getattr(lib, f"attention_backward_{suffix}")(_ptr(qkv), _ptr(weights), _ptr(grad_out), _ptr(grad_qkv),
                                                 ctypes.c_long(b), real((e3 // 3 // heads) ** -0.5),
                                                 ctypes.c_int(torch.get_num_threads()))
    return grad_qkv


def _forward_fake(qkv, alive, heads):
    b, n, e3 = qkv.shape
    return qkv.new_empty(b, n, e3 // 3), qkv.new_empty(b, n, heads, n)


fused_attention_op = c_kernel.define_op(
    "agent_attention", "(Tensor qkv, Tensor? alive, int heads) -> (Tensor, Tensor)", _forward_cpu, _forward_fake)
fused_attention_backward_op = c_kernel.define_op(
    "agent_attention_backward", "(Tensor qkv, Tensor weights, Tensor grad_out, int heads) -> Tensor", _backward_cpu,
    lambda qkv, weights, grad_out, heads: torch.empty_like(qkv), backward_op=True)


class _Attention(torch.autograd.Function):
    """The ops' autograd formula: the gradient w.r.t. qkv (none for the alive mask or the weights output)."""

    @staticmethod
    def forward(qkv, alive, heads):
        return fused_attention_op(qkv, alive, heads)

    @staticmethod
    def setup_context(ctx, inputs, output):
        qkv, _alive, heads = inputs
        ctx.save_for_backward(qkv, output[1])
        ctx.heads = heads
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx, grad_out, _grad_weights):
        qkv, weights = ctx.saved_tensors
        return fused_attention_backward_op(qkv, weights, grad_out, ctx.heads), None, None


def fused_attention(qkv: torch.Tensor, heads: int, alive: torch.Tensor | None = None) -> torch.Tensor:
    """qkv [B, N, 3E] (alive [B, N] bool or None) -> [B, N, E] through the C kernel (gradient w.r.t. qkv only)."""
    return _Attention.apply(qkv, alive, heads)[0]


def dense_attention(qkv: torch.Tensor, heads: int, alive: torch.Tensor | None = None) -> torch.Tensor:
    """qkv [B, N, 3E] (alive [B, N] bool or None) -> [B, N, E] in plain PyTorch: per-head dot products of all
    (query i, key j) pairs are one matmul of q_i * k_j with a 0/1 head-indicator matrix (reducing 4-wide head slices
    directly is slower)."""
    b, n, e3 = qkv.shape
    e = e3 // 3
    q, k, v = qkv.unflatten(-1, (3, e)).unbind(-2)  # [B, N, E]
    pairs = q.unsqueeze(2) * (k * (e // heads) ** -0.5).unsqueeze(1)  # [B, Nq, Nk, E]
    any_alive = None
    if alive is not None:
        alive = alive.to(torch.bool)
        any_alive = alive.any(-1, keepdim=True)  # [B, 1]
        # a sample without alive keys attends to all of them (finite), and its output is zeroed below
        hidden_key = (~(alive | ~any_alive)).view(b, 1, n, 1)  # [B, 1, Nk, 1]
    if heads == 1:
        scores = pairs.sum(-1, keepdim=True)  # [B, Nq, Nk, 1]
        if alive is not None:
            scores = scores.masked_fill(hidden_key, float("-inf"))
        out = (scores.softmax(2) * v.unsqueeze(1)).sum(2)
    else:
        indicator = torch.zeros(e, heads, dtype=qkv.dtype, device=qkv.device)
        indicator[torch.arange(e, device=qkv.device), torch.arange(e, device=qkv.device) // (e // heads)] = 1.0
        scores = (pairs.reshape(-1, e) @ indicator).view(b, n, n, heads)  # [B, Nq, Nk, H]
        if alive is not None:
            scores = scores.masked_fill(hidden_key, float("-inf"))
        weights = scores.softmax(2)  # over keys
        weights = (weights.reshape(-1, heads) @ indicator.t()).view(b, n, n, e)  # per feature of its head
        out = (weights * v.unsqueeze(1)).sum(2)  # [B, Nq, E]
    return out if any_alive is None else out * any_alive.unsqueeze(-1).to(out.dtype)


class AgentAttention(nn.MultiheadAttention):
    """nn.MultiheadAttention's parameters and maths for self-attention over agents, computed by `attend`
    (its own `forward` stays the reference the tests compare against)."""

    def __init__(self, agents: int, width: int, heads: int, kernel: str = "auto"):
        super().__init__(width, heads, batch_first=True)
        self.sizes = (agents, width, heads)
        self.fused = False
        self.implementation = "dense"
        if kernel == "dense":
            return
        lib = fused_library(*self.sizes)
        if isinstance(lib, str):
            if kernel == "fused":
                raise UserError(f"hyper.attention_kernel: 'fused' asked for, but the C kernel cannot be built "
                                f"({lib}); use auto or dense")
            self.implementation = f"dense (fused kernel unavailable: {lib})"
            return
        self.fused, self.implementation = True, "fused"

    def attend(self, x: torch.Tensor, alive: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, N, E], alive [B, N] bool or None (all alive) -> [B, N, E]: each agent's encoding is the query over
        the alive agents' encodings."""
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)  # [B, N, 3E]
        if self.fused and qkv.device.type == "cpu" and qkv.dtype in (torch.float32, torch.float64):
            out = fused_attention(qkv, self.num_heads, alive)
        else:
            out = dense_attention(qkv, self.num_heads, alive)
        return F.linear(out, self.out_proj.weight, self.out_proj.bias)
