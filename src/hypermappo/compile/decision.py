"""The compiled training step (`ppo.compile`): which runs get it, and how Inductor is set up for them.

With it on, each learner's per-step policy forward of collection (actor, sampling, log-probs, critic) and every
PPO mini-batch step (gather, loss, gradients, clipping, both Adam steps: one graph, `algos/fused_step.py`; three
with ppo.minibatch_over=agents) run as
torch.compile graphs with static shapes; where the env splits its step, the policy forward, the step's buffer
writes and the env's step core are one graph per collection step (`collect_step.py`). Every graph's calling code
is C++ (`cpp_wrapper`). Hyper-MAPPO's fused attention kernel and the LayerNorm(act) kernel are torch ops, one
opaque call inside those graphs; a 64-wide ReLU block's product and its LayerNorm run as one kernel in each
direction (`linear_act_norm.py`), other large row-major products in oneDNN rather than MKL (`onednn_gemm.py`),
weight gradients over many rows in a C kernel (`weight_grad.py`), and a forward / backward pair of graphs
recomputes comparison masks instead of saving them as bool (`bool_masks.py`). The maths
is the eager code's: sampling keeps the global RNG stream (Inductor's `fallback_random`), so a compiled run and
an eager run with one seed differ only by float rounding. Compiling costs minutes on the first update from an
empty cache (2-core AMD EPYC: ~3 min) and tens of seconds when the graphs are in the cache (`TORCHINDUCTOR_CACHE_DIR`,
default ~/.cache/hypermappo/inductor; compiled_shapes.py records which learners' graphs are), so `auto` turns it on
only for runs long enough to pay that back, from 1M env steps warm and 10M cold, and where every compiled function
has no graph break; the run header says which and why.

The CPU tuning (C++ calling code, the decomposed tanh, the graph passes and their C kernels) is Inductor's CPU
backend's and was tested with torch `TESTED_TORCH` only: it is installed for a learner on the CPU under such a
torch, and otherwise steps aside, said on the run header's `compile:` line (a CUDA learner compiles with Inductor's
own defaults). Inductor's settings are process-wide, so `configure(device)` records every device it was asked for
and the passes themselves leave any graph with a tensor on another device alone (pipeline.py). Of the passes, the
three that swap a product for a C kernel or oneDNN are taken per product shape where a timed probe on this machine
finds them faster (probe.py); the pure graph rewrites (column_sum.py, bias_epilogue.py, bool_masks.py) always
run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from hypermappo.compile import compiled_shapes, cuda_graphs
from hypermappo.errors import UserError

# auto: on from this many env steps where this cache already holds the learner's graphs (compiled_shapes.py), and
# from COLD_MIN_ENV_STEPS where it does not. benchmarks/results/compile_cost_amd.md (2-core AMD EPYC): MAPPO at the
# paper's settings (E = 1024) took 174 s to compile from an empty cache and 21 s from a warm one, then saved 0.71 s
# per update of 25,600 env steps (paid back after 6.3M env steps cold, 0.8M warm); IPPO at JaxMARL's (E = 16) after
# 0.8M cold
AUTO_MIN_ENV_STEPS = 1_000_000
COLD_MIN_ENV_STEPS = 10_000_000
# the torch versions the CPU tuning (graph passes, kernels, Inductor CPU settings) was tested with: [low, high)
TESTED_TORCH = ((2, 13), (2, 14))
PROBED = ("linear_act_norm", "weight_grad", "onednn_gemm")  # passes taken per shape where a probe finds them faster
_DEVICES: set[str] = set()  # the device types configure() was asked for in this process


def cxx_compiler() -> str | None:
    """The C++ compiler Inductor's CPU backend would call (None: there is none)."""
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


def blocker(cfg, device) -> str | None:
    """Why a learner with this (group) config cannot take the compiled path; None = it can."""
    if cfg.algo == "maddpg":
        return "MADDPG's update is not compiled"
    if cfg.actor == "rnn" or (cfg.actor == "hyper" and "history" in cfg.hyper.context):
        return "a recurrent actor (its GRU steps break the graph)"
    if cfg.actor == "hyper" and cfg.hyper.output == "accumulate":
        return "hyper.output=accumulate (a recurrent weight state trained on chunks)"
    if cfg.critic.recurrent == "on":
        return "a recurrent critic (its GRU steps break the graph)"
    if cfg.coplayer.enabled and cfg.coplayer.model != "bayes":
        # the Bayesian belief updates between the policy's steps, eager, and trains on its own (algos/coplayer_bayes.py):
        # the policy step and the PPO update compile as MAPPO's (collect_step.py keeps collection in separate calls)
        return f"the co-player model ({cfg.coplayer.model}: its loss is part of the policy's update)"
    if device.type == "cpu" and cxx_compiler() is None:
        return "no C++ compiler found (Inductor's CPU backend needs one; set CXX)"
    return None


def decide(cfg, device) -> tuple[bool, str]:
    """(compile?, the run-header line saying which and why) for a learner with this (group) config."""
    mode = cfg.ppo.compile
    if mode == "off":
        return False, "compile: off (ppo.compile=off)"
    reason = blocker(cfg, device)
    if reason:
        if mode == "on":
            raise UserError(f"ppo.compile: 'on' cannot be honoured: {reason}; use ppo.compile=auto or off")
        return False, f"compile: off (auto: {reason})"
    if mode == "auto" and cfg.total_env_steps < AUTO_MIN_ENV_STEPS:
        return False, (f"compile: off (auto: {cfg.total_env_steps:,} env steps < {AUTO_MIN_ENV_STEPS:,}, too short to "
                       f"pay back compiling; ppo.compile=on forces it)")
    earlier = compiled_shapes.recorded(cfg, device) if mode == "auto" else None
    if mode == "auto" and earlier is None and cfg.total_env_steps < COLD_MIN_ENV_STEPS:
        return False, (f"compile: off (auto: this cache holds no graphs of this learner yet, and compiling them takes "
                       f"minutes, paid back from ~{COLD_MIN_ENV_STEPS:,} env steps > {cfg.total_env_steps:,}; "
                       f"ppo.compile=on compiles them once, after which runs of this shape compile from "
                       f"{AUTO_MIN_ENV_STEPS:,})")
    unroll = unroll_setting()  # checked before the run starts, not at its first update
    configure(device)
    graphs_note = cuda_graphs.configure_for(device)
    why = "ppo.compile=on" if mode == "on" else f"auto: {cfg.total_env_steps:,} env steps"
    if mode == "auto":
        why += (f", graphs of this shape compiled in this cache before ({earlier['compile_s']:.0f} s)" if earlier
                else " (no graphs of this shape in this cache: compiling takes minutes)")
    if unroll is not None:
        why += f"; up to {unroll} mini-batch steps per graph (HYPERMAPPO_STEPS_PER_GRAPH)"
    return True, (f"compile: on ({why}; policy step + PPO update as graphs, compiled during the first update, cache "
                  f"{os.environ['TORCHINDUCTOR_CACHE_DIR']}); {cpu_tuning_note(device)}"
                  + (f"; {graphs_note}" if device.type == "cuda" else ""))


def unroll_setting() -> int | None:
    """HYPERMAPPO_STEPS_PER_GRAPH: the most PPO mini-batch steps one compiled graph runs (algos/mappo.py
    STEPS_PER_GRAPH when unset, None here); a value that is not an integer from 1 to 16 is a one-line error."""
    flag = os.environ.get("HYPERMAPPO_STEPS_PER_GRAPH")
    if flag is None:
        return None
    if not (flag.isdigit() and 1 <= int(flag) <= 16):
        raise UserError(f"HYPERMAPPO_STEPS_PER_GRAPH={flag!r}: expected an integer from 1 to 16 (mini-batch steps per "
                        "compiled graph)")
    return int(flag)


def torch_range() -> str:
    (lo_major, lo_minor), (hi_major, hi_minor) = TESTED_TORCH
    return f"torch>={lo_major}.{lo_minor},<{hi_major}.{hi_minor}"


def torch_version() -> tuple[int, int]:
    import torch

    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def cpu_tuning_blocker(device) -> str | None:
    """Why the CPU tuning steps aside for a learner on `device` under this torch; None = it applies."""
    import torch

    if device.type != "cpu":
        return f"device {device.type}; they are written for Inductor's CPU backend"
    lo, hi = TESTED_TORCH
    if not lo <= torch_version() < hi:
        return f"torch {torch.__version__} is outside the range they were tested with, {torch_range()}"
    return None


def cpu_tuning_note(device) -> str:
    """The `compile:` line's account of the CPU tuning: which passes run and why, or why none do."""
    reason = cpu_tuning_blocker(device)
    if reason:
        return f"CPU graph passes and kernels: stepping aside ({reason})"
    import torch

    from hypermappo.compile import probe

    ran, probed, forced, off = [], [], [], []
    for name, module in _passes():
        if not module.enabled():
            off.append(name)
        elif name not in PROBED:
            ran.append(name)
        else:
            (forced if probe.setting(f"HYPERMAPPO_{name.upper()}") == "1" else probed).append(name)
    parts = [f"CPU graph passes: {', '.join(ran) or 'none'}"]
    if probed:
        parts.append(f"{', '.join(probed)} per product shape where a timed probe on this CPU ({probe.cpu_model()}, "
                     f"{torch.get_num_threads()} threads) finds them faster (probes cached in {probe.cache_path()})")
    if forced:
        parts.append(f"{', '.join(forced)} at every shape their rules admit (switch set to 1)")
    if off:
        parts.append(f"off: {', '.join(off)}")
    return "; ".join(parts)


def cpu_kernels_report() -> str | None:
    """After compiling: what the probed passes took (probe.report), or None where none is probing."""
    from hypermappo.compile import probe

    names = [n for n, m in _passes()
             if n in PROBED and m.enabled() and probe.setting(f"HYPERMAPPO_{n.upper()}") == "auto"]
    return probe.report(names) if names else None


def _passes() -> list:
    from hypermappo.compile import bias_epilogue, bool_masks, column_sum, linear_act_norm, onednn_gemm, weight_grad

    return [("linear_act_norm", linear_act_norm), ("onednn_gemm", onednn_gemm), ("weight_grad", weight_grad),
            ("column_sum", column_sum), ("bias_epilogue", bias_epilogue), ("bool_masks", bool_masks)]


def switch(name: str) -> bool:
    """An environment switch of the compiled path: on unless `name`=0 (set for side-by-side timing); else 0 or 1."""
    flag = os.environ.get(name, "1")
    if flag not in ("0", "1"):
        raise UserError(f"{name}={flag!r}: expected 0 or 1")
    return flag == "1"


def pass_key(source: str, *settings) -> bytes:
    """A graph pass's FX-graph-cache key: its module's source and settings (a change to either recompiles)."""
    return hashlib.sha256(Path(source).read_bytes() + repr(settings).encode()).digest()


def configure(device=None) -> None:
    """Inductor settings the compiled path relies on, for a learner on `device` (default: the CPU). Process-wide and
    idempotent: the CPU tuning is installed once any learner on the CPU asked for it under a tested torch
    (`cpu_tuning_blocker`), the C++ calling code only while no learner on another device did."""
    # the cache directory (DEFAULT_CACHE unless the user set one) is set on importing the package: __init__.py
    import torch
    import torch._dynamo.config as dynamo
    import torch._inductor.config as inductor

    from hypermappo.compile import bias_epilogue, bool_masks, column_sum, linear_act_norm, onednn_gemm, weight_grad
    from hypermappo.compile.pipeline import GraphPasses

    device = torch.device("cpu") if device is None else torch.device(device)
    _DEVICES.add(device.type)
    cpu = "cpu" in _DEVICES and cpu_tuning_blocker(torch.device("cpu")) is None

    # every Experiment in a process (tests, in-process sweeps) recompiles the same functions for its own modules;
    # past the limit Dynamo would silently run them eager, so the limit is raised and hitting it is an error
    dynamo.recompile_limit = max(dynamo.recompile_limit, 64)
    dynamo.fail_on_recompile_limit_hit = True

    inductor.fallback_random = True  # random ops draw from the global generator, as eager does: same samples
    inductor.fx_graph_cache = True  # compiled graphs reused across runs of the same shapes
    # shapes are static and guarded by Dynamo: the generated code's per-call size / stride asserts are pure overhead
    # (a few microseconds per tensor; at 16 envs collection calls the graphs thousands of times per update)
    inductor.size_asserts = False
    # each graph's calling code (buffer allocation, kernel and extern calls) in C++ rather than Python: at small
    # batches a call is mostly that code (~50 us for the collection step's graph); measured side by side, 1.07x on
    # collection and 1.12x on the update at JaxMARL's IPPO settings, 1.06x on the update at E = 1024 (CPU only:
    # process-wide, so off once a learner on another device compiles in this process)
    inductor.cpp_wrapper = cpu and _DEVICES == {"cpu"}
    # tanh as 2 / (1 + exp(-2x)) - 1 in the generated C++: Inductor's vectorised tanh ran ~4 ns per element here
    # (tanh networks' forward and recomputed backward spent more time in it than in their matmuls); same values to
    # float rounding
    inductor.cpp.use_decompose_tanh = cpu
    # the CPU graph passes as one CustomGraphPass each hook (pipeline.py; torch 2.11 takes no list there): first the
    # 64-wide ReLU blocks' products fused with their LayerNorm (see linear_act_norm.py), which leaves the oneDNN pass
    # only the products it did not take; large fp32 products through oneDNN rather than MKL (see onednn_gemm.py),
    # weight gradients over many rows through a C kernel (see weight_grad.py), those three where a probe finds them
    # faster (probe.py); then column sums of tensors in memory anyway (bias gradients) in ATen (see column_sum.py);
    # last, the biases of the remaining products added in the kernels of their element-wise uses (see
    # bias_epilogue.py)
    post_grad = [m.PASS for m in (linear_act_norm, onednn_gemm, weight_grad, column_sum, bias_epilogue)
                 if m.enabled()] if cpu else []
    inductor.post_grad_custom_post_pass = GraphPasses(post_grad) if post_grad else None
    # a forward / backward pair of graphs saves no bool mask for the backward (see bool_masks.py)
    inductor.joint_custom_post_pass = GraphPasses([bool_masks.PASS]) if cpu and bool_masks.enabled() else None


def compile_fn(fn, **inductor_options):
    """`fn` as a graph with static shapes; `inductor_options` override configure()'s settings for this graph only
    (benchmarks: e.g. cpp_wrapper=False for a side-by-side timing)."""
    import torch

    options = {**cuda_graphs.inductor_options(), **inductor_options}
    return torch.compile(fn, dynamic=False, options=options or None)
