"""The library's Adam: one place that says which implementation runs on which device.

CPU: `foreach` (one kernel per step for all tensors; the same values as the per-tensor loop), step counts as CPU
scalars, as torch defaults. CUDA: `fused` and `capturable`: one kernel for every parameter, and the step counts
kept on the device, so a step reads no host scalar and can be captured in a CUDA graph (torch.compile's
"reduce-overhead" mode or torch.cuda.graphs). Values agree to float rounding with the CPU path; they are not
bit-identical across devices, nor are any GPU kernels."""

from __future__ import annotations

import torch


def adam_options(device) -> dict:
    """The implementation switches for torch.optim.Adam on `device`."""
    if torch.device(device).type == "cuda":
        return {"fused": True, "capturable": True}
    return {"foreach": True}


def adam(params, device, **kwargs) -> torch.optim.Adam:
    """torch.optim.Adam over `params` (tensors or groups), with `adam_options(device)`."""
    return torch.optim.Adam(params, **kwargs, **adam_options(device))


def step_tensor(opt: torch.optim.Optimizer, p: torch.Tensor) -> torch.Tensor:
    """A fresh step count for parameter `p` where `opt` (an Adam) would create it: on p's device when the
    optimiser is capturable or fused (so the count never leaves the device), else a CPU scalar."""
    on_device = opt.defaults.get("capturable") or opt.defaults.get("fused")
    return torch.zeros((), dtype=torch.float32, device=p.device if on_device else "cpu")
