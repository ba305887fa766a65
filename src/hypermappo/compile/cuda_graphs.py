"""CUDA graphs for the compiled path's graphs on a GPU (`HYPERMAPPO_CUDA_GRAPHS`: auto, 0 or 1).

Why: on a GPU the compiled path is host-bound. Profiled on one H200 (IPPO at JaxMARL's settings, E = 1024), the
device was busy for about a tenth of a compiled update's wall time: the rest is the host launching each graph's
kernels one by one. A CUDA graph replays a graph's kernels with one launch. Inductor records one per compiled graph
(`triton.cudagraphs`, what torch.compile's "reduce-overhead" mode turns on), but only where every tensor the graph
writes in place keeps its address from call to call: parameters, and tensors marked static
(`torch._dynamo.mark_static_address`); a graph that writes any other input runs without one (a "skipping
cudagraphs due to mutated inputs" perf hint). The compiled path writes in place into the rollout buffer (collection),
the env's state (its step core) and Adam's moments and step counts (the update), so with CUDA graphs on those are
marked static (`mark_static`): the learner's buffer and the env at each rollout's start, Adam's state when the update
plans it.

auto is off: Inductor's CUDA graphs without the marks were measured faster than the compiled path without them on
one H200 (benchmarks/results/gpu_cuda.md), the marks are not measured on a GPU yet. On a CPU the switch does nothing
(Inductor records CUDA graphs of CUDA graphs only).
"""

from __future__ import annotations

import os

from hypermappo.errors import UserError

VAR = "HYPERMAPPO_CUDA_GRAPHS"
_ON: set[str] = set()  # the device types for which configure_for() turned CUDA graphs on in this process


def decide(device) -> tuple[bool, str]:
    """(on, the run header's words) for a compiled learner on `device`."""
    flag = os.environ.get(VAR, "auto")
    if flag not in ("auto", "0", "1"):
        raise UserError(f"{VAR}={flag!r}: expected auto, 0 or 1")
    if device.type != "cuda":
        return False, f"CUDA graphs: no (device {device.type})"
    if flag == "auto":
        return False, f"CUDA graphs: off (auto: not yet measured with static buffers on a GPU; {VAR}=1 turns them on)"
    if flag == "0":
        return False, f"CUDA graphs: off ({VAR}=0)"
    return True, (f"CUDA graphs: on ({VAR}=1; Inductor's, with the rollout buffer, the env's state and Adam's state "
                  "marked static)")


def configure_for(device) -> str:
    """Record the decision for `device` (compile_fn reads it); the run header's words."""
    on, note = decide(device)
    if on:
        _ON.add(device.type)
    return note


def inductor_options() -> dict:
    """The options compile_fn adds to every graph: Inductor's CUDA graphs once a learner on CUDA asked for them."""
    return {"triton.cudagraphs": True} if "cuda" in _ON else {}


def active(device) -> bool:
    """Whether a compiled learner on `device` runs its graphs as CUDA graphs (then its written tensors are marked)."""
    import torch

    return torch.device(device).type in _ON


def tensors_of(holder, depth: int = 2) -> list:
    """Every tensor held by `holder`'s attributes, directly, inside a dict, list or tuple attribute, or (to `depth`
    levels) inside an attribute that is itself a plain object (an env's episode tracker)."""
    import torch

    found = []
    for value in vars(holder).values():
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else [value]
        for v in items:
            if isinstance(v, torch.Tensor):
                found.append(v)
            elif depth > 1 and hasattr(v, "__dict__") and not isinstance(v, torch.nn.Module | type):
                found += tensors_of(v, depth - 1)
    return found


def mark_static(tensors) -> int:
    """Mark `tensors` as keeping their address across graph calls (unguarded: a changed address re-records the
    CUDA graph rather than recompiling); returns how many."""
    import torch

    n = 0
    for t in tensors:
        torch._dynamo.mark_static_address(t)
        n += 1
    return n
