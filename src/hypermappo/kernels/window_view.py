"""The stag hunt's co-player view for egocentric windows as one C pass per row (window_view.c), with the env's
PyTorch composition (envs/staghunt.window_view) as the fallback.

Why: the Bayesian co-player model re-centres the learner's window on each co-player before every prediction, and
its update does the same for every replay sample it trains on. Composed from ATen ops that is some 60 small ops:
~7 ms per env step at E = 1024 on one thread of a 2-core Intel Xeon, about a third of the belief's cost in
collection, and again for the update's 16k samples. The kernel reads each row once (benchmarks/kernels/window_view.py
times both).

Used on CPU for float32 rows once the kernel is built; elsewhere (CUDA, float64, no C compiler) the composition
runs, with the same result (tested equal). `HYPERMAPPO_WINDOW_VIEW_KERNEL=0` keeps the composition (side-by-side
timing). Layers: the env declares the view (EnvSpec.coplayer_view) without knowing of kernels; the co-player model
asks `fast(view)` for the same function through this kernel where it has one.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from hypermappo.compile import switch
from hypermappo.envs import staghunt
from hypermappo.kernels import c_kernel

_SOURCE = Path(__file__).with_suffix(".c")


def library() -> ctypes.CDLL | str:
    """The built kernel, or why it could not be built."""
    return c_kernel.load(_SOURCE, "window_view", ["-march=native"], {"window_view_f32": None})


def fast(view):
    """An EnvSpec.coplayer_view -> the same function, through the C kernel where this module has one for it."""
    if isinstance(view, functools.partial) and view.func is staghunt.window_view and not view.args:
        return functools.partial(apply, **view.keywords)
    return view


def apply(obs: torch.Tensor, rel: torch.Tensor, *, size: int, n_hunters: int, radius: int) -> torch.Tensor:
    """envs/staghunt.window_view(obs [..., D], rel [...]) computed by the C kernel where it can be."""
    lib = None
    if obs.device.type == "cpu" and obs.dtype == torch.float32 and n_hunters == 2 and switch(
            "HYPERMAPPO_WINDOW_VIEW_KERNEL"):
        lib = library()
        lib = None if isinstance(lib, str) else lib
    if lib is None:
        return staghunt.window_view(obs, rel, size=size, n_hunters=n_hunters, radius=radius)
    D = obs.shape[-1]
    o = obs.reshape(-1, D).contiguous()
    r = rel.expand(obs.shape[:-1]).reshape(-1).to(torch.long).contiguous()
    out = torch.empty_like(o)
    p = c_kernel.ptr
    lib.window_view_f32(p(o), p(r), p(out), ctypes.c_long(o.shape[0]), ctypes.c_long(D), ctypes.c_long(n_hunters),
                        ctypes.c_long(radius), ctypes.c_long(size), ctypes.c_int(torch.get_num_threads()))
    return out.view(obs.shape)
