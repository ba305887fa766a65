"""The goal belief's online correction as two C passes over its weights (online_correction.c), with the PyTorch
composition as the fallback.

Why: the correction's weights W [E, K, N - 1, A, H] are ~5 MB at E = 1024, more than this CPU's caches, and they are
read for every prediction and updated after every move. Composed from ATen ops that is a broadcast product, a sum
and an in-place multiply-add per step (~6 ms per env step at E = 1024 on one AMD EPYC thread, a third of the belief's
cost); each C pass reads each row once (benchmarks/kernels/online_correction.py times both).

Used on CPU for contiguous float32 tensors once the kernel is built; elsewhere (CUDA, float64, no C compiler) the
composition runs, with the same maths (tested against each other). `HYPERMAPPO_ONLINE_CORRECTION_KERNEL=0` keeps
the composition (side-by-side timing).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from hypermappo.compile import switch
from hypermappo.kernels import c_kernel

_SOURCE = Path(__file__).with_suffix(".c")


def library() -> ctypes.CDLL | str:
    """The built kernel, or why it could not be built."""
    return c_kernel.load(_SOURCE, "online_correction", ["-march=native"],
                         {"correction_apply_f32": None, "correction_update_f32": None})


def _kernel(*tensors: torch.Tensor) -> ctypes.CDLL | None:
    """The library when every tensor suits it (CPU, float32, contiguous) and the switch is on, else None."""
    if not all(t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous() for t in tensors):
        return None
    if not switch("HYPERMAPPO_ONLINE_CORRECTION_KERNEL"):
        return None
    lib = library()
    return None if isinstance(lib, str) else lib


def apply(W: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """W [..., A, H], h [..., H] -> W h [..., A]. Inside a compiled graph as the custom op `hypermappo::
    online_correction` (Inductor calls it as it is: fused into its consumers, the product's reduction would be
    recomputed in every pass of the log-softmax that follows, ~4x the kernel's time)."""
    if torch.compiler.is_compiling():
        return _apply_op(W, h)
    return _apply(W, h)


@torch.library.custom_op("hypermappo::online_correction", mutates_args=())
def _apply_op(W: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    return _apply(W, h)


@_apply_op.register_fake
def _(W: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    return W.new_empty(W.shape[:-1])


def _apply(W: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    lib = _kernel(W, h)
    if lib is None:
        return torch.linalg.vecdot(W, h.unsqueeze(-2))
    A, H = W.shape[-2:]
    out = W.new_empty(W.shape[:-1])
    p = c_kernel.ptr
    lib.correction_apply_f32(p(W), p(h), p(out), ctypes.c_long(out.numel() // A), ctypes.c_long(A), ctypes.c_long(H),
                             ctypes.c_int(torch.get_num_threads()))
    return out


def update_(W: torch.Tensor, err: torch.Tensor, h: torch.Tensor, lr: float) -> None:
    """In place: W [..., A, H] += lr err [..., A] (x) h [..., H] / (|h|^2 + 1), an outer product per leading index
    (one normalised step of online logistic regression; the normaliser is computed inside the pass)."""
    lib = _kernel(W, err, h)
    if lib is None:
        step = lr * h / (h.square().sum(-1, keepdim=True) + 1.0)
        W.addcmul_(err.unsqueeze(-1), step.unsqueeze(-2))
        return
    A, H = W.shape[-2:]
    p = c_kernel.ptr
    lib.correction_update_f32(p(W), p(err), p(h), ctypes.c_float(lr), ctypes.c_long(err.numel() // A),
                              ctypes.c_long(A), ctypes.c_long(H), ctypes.c_int(torch.get_num_threads()))
