"""Mutations of a compiled learner's goal belief as graphs (algos/coplayer_step.py, GoalBelief's graph functions)."""

STEP = "src/hypermappo/algos/coplayer_step.py"
BAYES = "src/hypermappo/algos/coplayer_bayes.py"
T = "tests/test_compiled.py::test_compiled_run_equals_the_eager_run[mlp-tanh-act-norm-weight-grad-belief]"
HAND = ("tests/test_coplayer_bayes.py::"
        "test_belief_update_equals_a_hand_computed_bayes_update_with_switch_carry_and_partner_reset")


def mutations(M):
    return [
        M("coplayer_graph_step_clips_by_norm_squared", STEP,
          "coef = clip_coefficient(norm, max_norm)", "coef = clip_coefficient(norm * norm, max_norm)",
          (T,), "the compiled Adam step of the goal model clips against the squared gradient norm"),
        M("coplayer_graph_step_skips_bias_correction", "src/hypermappo/algos/fused_step.py",
          "return torch.where(move, step, old), (1 - beta2 ** step).sqrt(), lrs[i] / (1 - beta1 ** step)",
          "return torch.where(move, step, old), torch.ones_like(step), lrs[i] + 0 * step",
          (T,), "the graphs' Adam without its bias corrections (the PPO step's and the goal model's)"),
        M("coplayer_graph_predictions_uncorrected", BAYES,
          "log_pi = raw if W is None else self._corrected(raw, h, W)", "log_pi = raw",
          (T,), "the compiled belief predicts without the partner's online correction"),
        M("coplayer_graph_observe_keeps_old_counts", BAYES,
          "counts = counts + moved * seen.unsqueeze(-1)", "counts = counts + 0 * moved * seen.unsqueeze(-1)",
          (T, HAND),
          "the Bayes update stops counting the partner's moves (the 'other' goal's policy)"),
        M("coplayer_graph_correction_not_an_op", "src/hypermappo/kernels/online_correction.py",
          "    if torch.compiler.is_compiling():\n        return _apply_op(W, h)\n", "",
          ("tests/test_online_correction.py::test_inside_a_graph_the_product_is_the_kernel_as_a_custom_op",),
          "inside a graph the C kernel's ctypes call breaks the graph (or Inductor fuses the composition into "
          "the log-softmax and recomputes it per pass)"),
    ]
