"""ppo.compile's oneDNN products (onednn_gemm.py)."""

T = "tests/test_onednn_gemm.py"
GEMM = "src/hypermappo/compile/onednn_gemm.py"
COMPILED = "src/hypermappo/compile/decision.py"


def mutations(M):
    return [
        M("onednn_rewrites_weight_gradients", GEMM,
          "if va.shape[0] < MIN_ROWS or va.stride(-1) != 1:",
          "if va.shape[0] < MIN_ROWS:",
          (f"{T}::test_large_row_major_products_go_to_onednn_and_the_values_stay",),
          "the transposed weight-gradient products go to oneDNN too, where they ran slower (and copy the operand)"),
        M("onednn_ignores_min_rows", GEMM,
          "if va.shape[0] < MIN_ROWS or va.stride(-1) != 1:",
          "if va.stride(-1) != 1:",
          (f"{T}::test_large_row_major_products_go_to_onednn_and_the_values_stay",),
          "small products (per-step policy, JaxMARL's mini-batches) pay the extra call and run slower"),
        M("onednn_drops_bias", GEMM,
          '    return torch.ops.mkldnn._linear_pointwise(a.contiguous(), b.t().contiguous(), bias, "none", [], "")',
          '    return torch.ops.mkldnn._linear_pointwise(a.contiguous(), b.t().contiguous(), None, "none", [], "")',
          (f"{T}::test_large_row_major_products_go_to_onednn_and_the_values_stay",
           f"{T}::test_onednn_linear_op_is_registered_correctly"),
          "the rewritten addmm forgets its bias"),
        M("onednn_weight_not_transposed", GEMM,
          '    return torch.ops.mkldnn._linear_pointwise(a.contiguous(), b.t().contiguous(), bias, "none", [], "")',
          '    return torch.ops.mkldnn._linear_pointwise(a.contiguous(), b.contiguous(), bias, "none", [], "")',
          (f"{T}::test_large_row_major_products_go_to_onednn_and_the_values_stay",
           f"{T}::test_onednn_linear_op_is_registered_correctly"),
          "oneDNN takes the weight as [N, K]: passing mm's [K, N] operand multiplies by the wrong matrix"),
        M("onednn_pass_not_installed", COMPILED,
          "[m.PASS for m in (linear_act_norm, onednn_gemm, weight_grad, column_sum, bias_epilogue)",
          "[m.PASS for m in (linear_act_norm, weight_grad, column_sum, bias_epilogue)",
          (f"{T}::test_large_row_major_products_go_to_onednn_and_the_values_stay",),
          "the pass is written but never given to Inductor: every product stays on MKL"),
    ]
