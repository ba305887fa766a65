"""The compiled update's mini-batches: contiguous slices of one gather per epoch (storage/rollout.py), an epoch's
equal-sized steps unrolled in one graph (MAPPO._update_fused, FusedMinibatchStep.steps), and the biases of the
products left to addmm added in their element-wise uses' kernels (bias_epilogue.py)."""

UNROLLED = "tests/test_compiled.py::test_unrolled_steps_stop_at_the_first_nonfinite_one_as_the_eager_loop_does"
GATE = f"{UNROLLED}[uncompiled-3-6-4]"  # graphs of 3 steps: the gate's chaining shows from the 3rd
UNEVEN = "tests/test_compiled.py::test_compiled_run_equals_the_eager_run[mlp]"
NO_NORM = "tests/test_compiled.py::test_compiled_run_equals_the_eager_run[mlp-tanh-no-norm]"
PER_GRAPH = "tests/test_compiled.py::test_steps_per_graph_is_one_unless_the_environment_says_more"
DECISION = "src/hypermappo/compile/decision.py"
MAPPO = "src/hypermappo/algos/mappo.py"
FUSED = "src/hypermappo/algos/fused_step.py"
ROLLOUT = "src/hypermappo/storage/rollout.py"
BIAS = "src/hypermappo/compile/bias_epilogue.py"


def mutations(M):
    return [
        M("unrolled_step_after_a_nonfinite_one_moves", FUSED,
          "            move = finite if clean is None else finite & clean",
          "            move = finite",
          (UNROLLED,),
          "a step after a non-finite one in the same graph still applies Adam (the eager loop raised before it)"),
        M("unrolled_gate_not_chained", FUSED,
          "            clean = step_finite if clean is None else clean & step_finite",
          "            clean = step_finite",
          (GATE,),
          "only the previous step gates the next: the 4th step moves after a non-finite 2nd"),
        M("unrolled_names_the_wrong_minibatch", MAPPO,
          "enumerate(done, start=first)",
          "enumerate(done)",
          (UNROLLED,),
          "a non-finite step of an unrolled graph named by its place in the graph, not in the epoch"),
        M("unrolled_groups_of_uneven_minibatches", MAPPO,
          "    if len(rows) > 1 or len(micro_batch.row_blocks(rows.pop(), num_agents, micro_size)) > 1:",
          "    if len(micro_batch.row_blocks(rows.pop(), num_agents, micro_size)) > 1:",
          (PER_GRAPH, UNEVEN),
          "mini-batches of different sizes unrolled in one graph, against the guard-skipping key of the first"),
        M("steps_per_graph_setting_ignored", MAPPO,
          "    most = unroll_setting() or STEPS_PER_GRAPH",
          "    most = STEPS_PER_GRAPH",
          (PER_GRAPH,),
          "HYPERMAPPO_STEPS_PER_GRAPH has no effect: a long run cannot unroll its mini-batch steps"),
        M("steps_per_graph_setting_unbounded", DECISION,
          "    if not (flag.isdigit() and 1 <= int(flag) <= 16):",
          "    if not flag.isdigit():",
          (PER_GRAPH,),
          "HYPERMAPPO_STEPS_PER_GRAPH=0 or 17 accepted without a word (0 silently means the default)"),
        M("shuffle_slices_not_the_drawn_rows", ROLLOUT,
          "    parts = {k: v.index_select(0, perm).split(sizes) for k, v in fields.items()}",
          "    parts = {k: v.index_select(0, perm.sort().values).split(sizes) for k, v in fields.items()}",
          (GATE,),
          "mini-batches of rows in storage order, not the drawn permutation"),
        M("shuffle_sizes_ignored", ROLLOUT,
          "    sizes = [len(idx) for idx in indices]",
          "    sizes = [len(indices[0])] * len(indices)",
          (UNEVEN,),
          "uneven mini-batches cut at the first one's size: rows lost or a short extra batch"),
        M("bias_epilogue_drops_the_bias", BIAS,
          "        return graph.call_function(aten.add.Tensor, (product, bias))",
          "        return product",
          (NO_NORM,),
          "the rewritten product without its bias"),
        M("bias_epilogue_never_applies", BIAS,
          "    if not node.users or not all(is_pointwise_use(use) for use in node.users):",
          "    if True:",
          (NO_NORM,),
          "the pass rewrites nothing (the counted rewrites catch it; values alone would not)"),
        M("bias_epilogue_not_configured", "src/hypermappo/compile/decision.py",
          "[m.PASS for m in (linear_act_norm, onednn_gemm, weight_grad, column_sum, bias_epilogue)",
          "[m.PASS for m in (linear_act_norm, onednn_gemm, weight_grad, column_sum)",
          (NO_NORM,),
          "the pass written and tested but never given to Inductor"),
    ]
