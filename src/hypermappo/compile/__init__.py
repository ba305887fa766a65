"""The compiled path (`ppo.compile`): which runs get it and how Inductor is set up (decision.py), the one-graph
collection step (collect_step.py) and the Inductor graph passes for the CPU (pipeline.py registers them; probe.py
times the kernels they would take; rewrite_pass.py, onednn_gemm.py, weight_grad.py, linear_act_norm.py,
column_sum.py, bias_epilogue.py, bool_masks.py)."""

from hypermappo.compile.cache_dir import DEFAULT_CACHE
from hypermappo.compile.decision import (
    AUTO_MIN_ENV_STEPS,
    COLD_MIN_ENV_STEPS,
    TESTED_TORCH,
    blocker,
    compile_fn,
    configure,
    cpu_kernels_report,
    cpu_tuning_blocker,
    cxx_compiler,
    decide,
    pass_key,
    switch,
    torch_range,
)

__all__ = ["AUTO_MIN_ENV_STEPS", "COLD_MIN_ENV_STEPS", "DEFAULT_CACHE", "TESTED_TORCH", "blocker", "compile_fn", "configure",
           "cpu_kernels_report", "cpu_tuning_blocker", "cxx_compiler", "decide", "pass_key", "switch", "torch_range"]
