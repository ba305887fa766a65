"""Hyper-MAPPO's observation-context hypernetwork (hyper.context=[obs], attention) as one C kernel per direction.

Why: with an observation context the hypernetwork runs per sample. In the PPO update at the MAPPO paper's setting
that is 76,800 rows through an encoder (obs dim -> 16), the attention's projections (16 -> 48, 16 -> 16), the
attention, a LayerNorm and the MLP (32 -> 16 -> 16): each a product or an elementwise pass over narrow rows that
reads and writes main memory, forward and backward, ~0.8x the time of MAPPO's whole update on top of it
(benchmarks/results/throughput_compiled_obs.md). `obs_context.c` computes a sample's whole chain with its
activations in L1, and the backward recomputes the sample's forward instead of saving activations.

Same maths as `ContextEncoder` + the hypernetwork MLP (tested against them, values and parameter gradients), to
float rounding. It takes over where it applies: an observation-only context aggregated by attention, at least one
MLP layer, CPU, float32 / float64, and the kernel built (`HyperNetwork.context_kernel` says which; recorded in the
run's summary.json as the attention kernel is). Like the attention kernel it is two torch ops with shape-only fake
versions and an autograd.Function formula (c_kernel.define_op), so `ppo.compile` keeps it as one call with no graph
break and torch.func differentiates it. `HYPERMAPPO_OBS_CONTEXT_KERNEL=0` keeps the PyTorch modules (side-by-side
timing). The observations get no gradient (they are data).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from hypermappo.compile import switch
from hypermappo.kernels import c_kernel

_SOURCE = Path(__file__).with_suffix(".c")


def enabled() -> bool:
    return switch("HYPERMAPPO_OBS_CONTEXT_KERNEL")


_MAX_SCRATCH_BYTES = 1 << 20  # per thread, on its stack (obs_context.c): larger sizes keep the modules


def scratch_bytes(agents: int, obs_dim: int, width: int, heads: int, hidden: int, layers: int) -> int:
    """An upper bound of the kernel's per-thread stack scratch in float64: the packed parameters twice (the gradient
    block, the transposed weights) and a block's activations and their gradients (obs_context.c's state and locals)."""
    params = (obs_dim * width + width + width * 3 * width + 3 * width + width * width + width + 2 * width * hidden
              + hidden + (layers - 1) * (hidden * hidden + hidden))
    rows = 4 * agents  # BS samples of a block
    per_row = 2 * obs_dim + 14 * width + (layers + 5) * hidden + agents * width + heads * agents
    return 8 * (2 * params + rows * per_row)


def library(agents: int, obs_dim: int, width: int, heads: int, hidden: int, layers: int) -> ctypes.CDLL | str:
    """The kernel for these sizes (compiled on first use, cached), or why it cannot be built."""
    key = (agents, obs_dim, width, heads, hidden, layers)
    if scratch_bytes(*key) > _MAX_SCRATCH_BYTES:
        return f"sizes {key} need {scratch_bytes(*key):,} bytes of per-thread scratch, over {_MAX_SCRATCH_BYTES:,}"
    return c_kernel.load(_SOURCE, "obs_context_" + "x".join(map(str, key)),
                         [f"-D{name}={v}" for name, v in zip(("NA", "DO", "EE", "HH", "ZZ", "LL"), key)]
                         # GCC 12 at -O3 peels the constant-count loops completely and then vectorises them badly
                         # (3.5x slower here): the inner loops stay loops
                         + ["-march=native", "-Wno-psabi", "--param", "max-completely-peel-times=1"],
                         {"obs_context_params": ctypes.c_long,
                          **{f"obs_context_forward_{s}": None for s in ("f32", "f64")},
                          **{f"obs_context_backward_{s}": ctypes.c_int for s in ("f32", "f64")}})


def _call_library(obs: torch.Tensor, params: torch.Tensor, sizes: list[int]) -> ctypes.CDLL:
    lib = library(obs.shape[-2], obs.shape[-1], *sizes)
    if isinstance(lib, str):
        raise RuntimeError(f"the observation-context kernel for sizes {sizes}: {lib}")
    if params.numel() != lib.obs_context_params():
        raise RuntimeError(f"observation-context kernel: {params.numel()} packed parameters, the kernel for sizes "
                           f"{sizes} takes {lib.obs_context_params()}")
    return lib


def _alive_ptr(alive: torch.Tensor | None) -> tuple[ctypes.c_void_p, torch.Tensor | None]:
    if alive is None:
        return ctypes.c_void_p(None), None
    alive = alive.to(torch.bool).contiguous()  # [..., N], one byte per agent slot
    return c_kernel.ptr(alive), alive


def _samples(obs: torch.Tensor) -> int:
    """Samples (groups of N agent slots) in obs [..., N, D]."""
    return obs.numel() // (obs.shape[-2] * obs.shape[-1])


def _suffix(dtype: torch.dtype) -> str:
    return "f32" if dtype == torch.float32 else "f64"


def _forward_cpu(obs: torch.Tensor, alive: torch.Tensor | None, params: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    obs, params = obs.contiguous(), params.contiguous()
    lib = _call_library(obs, params, sizes)
    alive_ptr, _keep = _alive_ptr(alive)
    z = obs.new_empty(*obs.shape[:-1], sizes[2])
    getattr(lib, f"obs_context_forward_{_suffix(obs.dtype)}")(
        c_kernel.ptr(obs), alive_ptr, c_kernel.ptr(params), c_kernel.ptr(z), ctypes.c_long(_samples(obs)),
        ctypes.c_int(torch.get_num_threads()))
    return z


def _backward_cpu(obs: torch.Tensor, alive: torch.Tensor | None, params: torch.Tensor, grad_z: torch.Tensor,
                  sizes: list[int]) -> torch.Tensor:
    obs, params, grad_z = obs.contiguous(), params.contiguous(), grad_z.contiguous()
    lib = _call_library(obs, params, sizes)
    alive_ptr, _keep = _alive_ptr(alive)
    grad = torch.empty_like(params)
    status = getattr(lib, f"obs_context_backward_{_suffix(obs.dtype)}")(
        c_kernel.ptr(obs), alive_ptr, c_kernel.ptr(params), c_kernel.ptr(grad_z), c_kernel.ptr(grad),
        ctypes.c_long(_samples(obs)), ctypes.c_int(torch.get_num_threads()))
    if status:
        raise MemoryError("observation-context kernel: no memory for the per-thread gradient sums")
    return grad


obs_context_op = c_kernel.define_op(
    "obs_context", "(Tensor obs, Tensor? alive, Tensor params, int[] sizes) -> Tensor", _forward_cpu,
    lambda obs, alive, params, sizes: obs.new_empty(*obs.shape[:-1], sizes[2]))
obs_context_backward_op = c_kernel.define_op(
    "obs_context_backward", "(Tensor obs, Tensor? alive, Tensor params, Tensor grad_z, int[] sizes) -> Tensor",
    _backward_cpu, lambda obs, alive, params, grad_z, sizes: torch.empty_like(params), backward_op=True)


class _ObsContext(torch.autograd.Function):
    """The ops' autograd formula: the gradient w.r.t. the packed parameters (none for the observations)."""

    @staticmethod
    def forward(obs, alive, params, sizes):
        return obs_context_op(obs, alive, params, sizes)

    @staticmethod
    def setup_context(ctx, inputs, output):
        obs, alive, params, sizes = inputs
        ctx.save_for_backward(obs, alive, params)
        ctx.sizes = sizes

    @staticmethod
    def backward(ctx, grad_z):
        obs, alive, params = ctx.saved_tensors
        return None, None, obs_context_backward_op(obs, alive, params, grad_z, ctx.sizes), None


def pack(encoder: torch.nn.Linear, attention: torch.nn.MultiheadAttention, mlp: list[torch.nn.Linear]) -> torch.Tensor:
    """The parameters in the kernel's layout (obs_context.c): each weight input-major, then its bias. Built from the
    modules' tensors with differentiable ops, so autograd takes the kernel's packed gradient back to each module."""
    parts = [encoder.weight, encoder.bias, attention.in_proj_weight, attention.in_proj_bias,
             attention.out_proj.weight, attention.out_proj.bias]
    for lin in mlp:
        parts += [lin.weight, lin.bias]
    return torch.cat([p.t().reshape(-1) if p.dim() == 2 else p for p in parts])


def obs_context(obs: torch.Tensor, alive: torch.Tensor | None, params: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """obs [..., N, D], alive [..., N] bool or None (all alive), params from `pack`, sizes [width, heads, hidden,
    layers] -> the hypernetwork code z [..., N, hidden]."""
    if alive is not None:
        alive = alive.reshape(obs.shape[:-1])
    return _ObsContext.apply(obs, alive, params, sizes)
