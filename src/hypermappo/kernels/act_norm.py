"""LayerNorm(act(z)), the second half of the MAPPO reference's hidden block (Linear -> ReLU/Tanh -> LayerNorm), as
one C kernel forward and one backward (act_norm.c).

At the MAPPO paper's setting (76,800 agent samples x 64 features per mini-batch) each activation is ~20 MB, more
than this CPU's caches, so the hidden blocks' cost is memory traffic. Composed from ATen kernels (eager) or as
Inductor generates it (`ppo.compile`), the block's backward walks those activations three or four times: the column
sums of the LayerNorm's affine gradients (Inductor: a separate pass per 16 columns), the row statistics, the input
gradient, the activation's mask. The kernel reads each row once per direction (benchmarks/kernels/act_norm.py times it
against both, alone and inside MAPPO's update).

It is a torch op with a shape-only fake version and an autograd.Function formula (c_kernel.define_op), so a compiled
update keeps it as one opaque call inside its graph, the one-graph step included (its neighbours are matrix
products, which Inductor does not fuse into anyway), and eager runs take the same op. The per-thread column sums
are added in thread order, so a run with the same thread count is bitwise repeatable.

Used for shared-weight blocks (`groups=1`) on CPU in float32/float64 from `MIN_ROWS` rows; below that (collection's
per-step forward, small mini-batches) the op's Python dispatch costs about what its passes save and Inductor's
fused kernels beat it, and the ATen / Inductor composition runs. `HYPERMAPPO_ACT_NORM=0` turns it off (side-by-side
timing); a kernel that cannot be built (no C compiler) leaves the composition in place, reported by `status()`.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from pathlib import Path

import torch

from hypermappo.kernels import c_kernel

_SOURCE = Path(__file__).with_suffix(".c")
MIN_ROWS = 16_384  # benchmarks/kernels/act_norm.py: from about here on the kernel beats the composition, dispatch included
ACTS = {"relu": 0, "tanh": 1}
calls = Counter()  # kernel calls in this process, "forward" / "backward" (tests see where it ran, e.g. in a graph)


def library(suffix: str) -> ctypes.CDLL | str:
    """The kernel for float32 ("f32") or float64 ("f64"), or why it cannot be built."""
    real = "float" if suffix == "f32" else "double"
    # -fno-trapping-math: without it gcc will not turn the ReLU's `z > 0 ? v : 0` into a vector select where it has
    # no AVX-512 masks, and the backward's row loop stayed scalar: 51 -> ~8 ms at 76,800 x 64 on one AMD EPYC (AVX2)
    # thread (act_norm.c's BLOCK comment); the values are the same, only FP exception flags differ
    return c_kernel.load(_SOURCE, f"act_norm_{suffix}",
                         ["-march=native", "-fno-trapping-math", f"-DREAL={real}", f"-DSUFFIX={suffix}"],
                         {f"act_norm_forward_{suffix}": None, f"act_norm_backward_{suffix}": None})


def _suffix(t: torch.Tensor) -> str:
    return "f32" if t.dtype == torch.float32 else "f64"


def _lib(t: torch.Tensor) -> ctypes.CDLL:
    lib = library(_suffix(t))
    if isinstance(lib, str):  # `usable` only takes the op once the kernel is built; a direct call may not
        raise RuntimeError(f"the act_norm kernel: {lib}")
    return lib


def _forward_cpu(z: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, act: int, eps: float):
    """z [R, C] -> (LayerNorm(act(z)) [R, C], row mean [R], row 1/std [R])."""
    calls["forward"] += 1
    z, weight, bias = z.contiguous(), weight.contiguous(), bias.contiguous()
    rows, width = z.shape
    h, mean, rstd = torch.empty_like(z), z.new_empty(rows), z.new_empty(rows)
    p = c_kernel.ptr
    getattr(_lib(z), f"act_norm_forward_{_suffix(z)}")(
        p(z), p(weight), p(bias), p(h), p(mean), p(rstd), ctypes.c_long(rows), ctypes.c_long(width), ctypes.c_int(act),
        ctypes.c_double(eps), ctypes.c_int(torch.get_num_threads()))
    return h, mean, rstd


def _backward_cpu(grad_h: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, mean: torch.Tensor,
                  rstd: torch.Tensor, act: int):
    """-> gradients of z [R, C], weight [C], bias [C]."""
    calls["backward"] += 1
    grad_h, z, weight = grad_h.contiguous(), z.contiguous(), weight.contiguous()
    rows, width = z.shape
    threads = torch.get_num_threads()
    grad_z, grad_w, grad_b = torch.empty_like(z), weight.new_empty(width), weight.new_empty(width)
    partial = torch.empty(2 * threads * width, dtype=torch.float64)
    p = c_kernel.ptr
    getattr(_lib(z), f"act_norm_backward_{_suffix(z)}")(
        p(grad_h), p(z), p(weight), p(mean), p(rstd), p(grad_z), p(grad_w), p(grad_b), p(partial),
        ctypes.c_long(rows), ctypes.c_long(width), ctypes.c_int(act), ctypes.c_int(threads))
    return grad_z, grad_w, grad_b


act_norm_op = c_kernel.define_op(
    "act_norm", "(Tensor z, Tensor weight, Tensor bias, int act, float eps) -> (Tensor, Tensor, Tensor)", _forward_cpu,
    lambda z, weight, bias, act, eps: (torch.empty_like(z), z.new_empty(z.shape[0]), z.new_empty(z.shape[0])))
act_norm_backward_op = c_kernel.define_op(
    "act_norm_backward", "(Tensor grad_h, Tensor z, Tensor weight, Tensor mean, Tensor rstd, int act) "
    "-> (Tensor, Tensor, Tensor)", _backward_cpu,
    lambda grad_h, z, weight, mean, rstd, act: (torch.empty_like(z), weight.new_empty(weight.shape),
                                                weight.new_empty(weight.shape)), backward_op=True)


class _ActNorm(torch.autograd.Function):
    """The ops' autograd formula (c_kernel.define_op: the form torch.func differentiates)."""

    @staticmethod
    def forward(z, weight, bias, act, eps):
        return act_norm_op(z, weight, bias, act, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        z, weight, _bias, act, _eps = inputs
        _h, mean, rstd = output
        ctx.save_for_backward(z, weight, mean, rstd)
        ctx.act = act
        ctx.mark_non_differentiable(mean, rstd)

    @staticmethod
    def backward(ctx, grad_h, _grad_mean, _grad_rstd):
        z, weight, mean, rstd = ctx.saved_tensors
        grad_z, grad_w, grad_b = act_norm_backward_op(grad_h, z, weight, mean, rstd, ctx.act)
        return grad_z, grad_w, grad_b, None, None


def unavailable() -> str | None:
    """Why the kernel is not used in this process (switched off, or it cannot be built); None = it is. Asked when a
    model is built, so compiled forwards read a plain attribute."""
    from hypermappo.compile import switch

    if not switch("HYPERMAPPO_ACT_NORM"):
        return "HYPERMAPPO_ACT_NORM=0"
    lib = library("f32")
    return f"cannot be built: {lib}" if isinstance(lib, str) else None


def status() -> str:
    """For the run's summary.json: whether the kernel is in use here, and why not."""
    reason = unavailable()
    return f"off ({reason})" if reason else f"on from {MIN_ROWS:,} rows"


def usable(z: torch.Tensor, act: str) -> bool:
    """Whether LayerNorm(act(z)) takes the kernel (once `unavailable()` said it can): CPU, float32/64, an activation
    it knows, `MIN_ROWS` rows or more, and not inside torch.func.vmap (the kernel has no batching rule: the seeds of
    a batched run, seed_batch.py, take the composition, the same function up to float rounding)."""
    return (z.device.type == "cpu" and z.dtype in (torch.float32, torch.float64) and act in ACTS
            and z.numel() >= MIN_ROWS * z.shape[-1] and not torch._C._functorch.is_batchedtensor(z))


def act_norm(z: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, act: str, eps: float) -> torch.Tensor:
    """LayerNorm(act(z)) over the last dim through the kernel; weight and bias [C]."""
    h, _mean, _rstd = _ActNorm.apply(z.reshape(-1, z.shape[-1]), weight, bias, ACTS[act], eps)
    return h.view(z.shape)
