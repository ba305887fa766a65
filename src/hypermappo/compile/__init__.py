"""The compiled path (`ppo.compile`): which runs get it and how Inductor is set up (decision.py), the one-graph
collection step (collect_step.py) and the Inductor graph passes (rewrite_pass.py, onednn_gemm.py, weight_grad.py,
linear_act_norm.py, bias_epilogue.py, bool_masks.py)."""

from hypermappo.compile.decision import (
    AUTO_MIN_ENV_STEPS,
    DEFAULT_CACHE,
    blocker,
    compile_fn,
    configure,
    cxx_compiler,
    decide,
    pass_key,
    switch,
)

__all__ = ["AUTO_MIN_ENV_STEPS", "DEFAULT_CACHE", "blocker", "compile_fn", "configure", "cxx_compiler", "decide",
           "pass_key", "switch"]
