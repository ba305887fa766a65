"""The 64-wide ReLU blocks' products fused with their LayerNorm (linear_act_norm.c / .py) and where the compiled
graphs take them."""

C = "src/hypermappo/linear_act_norm.c"
PY = "src/hypermappo/linear_act_norm.py"
T = "tests/test_linear_act_norm.py"
FWD = f"{T}::test_forward_is_the_product_then_the_act_norm_kernel"
BWD = f"{T}::test_backward_is_the_product_then_the_act_norm_backward_kernel"
IN_GRAPH = "tests/test_compiled.py::test_compiled_run_equals_the_eager_run[mlp-linear-act-norm]"


def mutations(M):
    return [
        M("lan_bias_dropped", C,
          "acc[i][j] = bias ? vload(bias + VW * j) : vzero();",
          "acc[i][j] = vzero();",
          (FWD,), "the layer's bias left out of the fused product"),
        M("lan_relu_dropped_forward", C,
          "u[j] = vrelu(acc[i][j]);",
          "u[j] = acc[i][j];",
          (FWD,), "the LayerNorm of z instead of ReLU(z)"),
        M("lan_saved_z_is_the_activation", C,
          "vstore(z + r * C + VW * j, acc[i][j]);",
          "vstore(z + r * C + VW * j, vrelu(acc[i][j]));",
          (FWD,), "ReLU(z) saved for the backward where z is expected"),
        M("lan_last_short_run_row_dropped", C,
          "            for (long i = 0; i < mr; i++) {\n                vec av",
          "            for (long i = 0; i < mr - 1; i++) {\n                vec av",
          (FWD,), "the last row of a shorter run of rows left out of the product"),
        M("lan_relu_mask_dropped_backward", C,
          "vwhere_pos(zr[j], vmul(rsv,",
          "(vmul(rsv,",
          (BWD,), "gradient let through where ReLU was off"),
        M("lan_projection_sign", C,
          "vsub(vsub(gh_hat[j], a), vmul(uh[j], c))",
          "vadd(vsub(gh_hat[j], a), vmul(uh[j], c))",
          (BWD,), "the LayerNorm backward's projection on the normalised output added instead of removed"),
        M("lan_beta_grad_scaled_by_gamma", C,
          "sum_b[j] = vadd(sum_b[j], gh[i][j]);",
          "sum_b[j] = vadd(sum_b[j], gh_hat[j]);",
          (BWD,), "the shift's gradient summed from the scaled output gradient"),
        M("lan_one_thread_partial_summed", C,
          "        for (int t = 0; t < threads; t++) {\n            sw +=",
          "        for (int t = 0; t < 1; t++) {\n            sw +=",
          (f"{BWD}[64-1000-False-2]",), "the affine gradients from the first thread's rows only"),
        M("lan_pass_fuses_tanh_blocks", PY,
          "if act != RELU or not _block(z):",
          "if not _block(z):",
          (f"{T}::test_pass_leaves_blocks_the_kernel_does_not_cover",), "a Tanh block run through the ReLU kernel"),
        M("lan_pass_drops_a_shared_product", PY,
          "if any(len(n.users) != 1 for n in chain):",
          "if False:",
          (f"{T}::test_pass_keeps_a_product_that_has_other_users",),
          "the input-gradient product fused away while something else still reads it"),
        M("lan_pass_never_fuses", PY,
          "            if node.target is act_norm.act_norm_op:",
          "            if False:",
          (f"{T}::test_pass_fuses_both_directions_and_computes_the_same",), "the forward rewrite wired to nothing"),
        M("lan_pass_not_installed", "src/hypermappo/compiled.py",
          "for m in (linear_act_norm, onednn_gemm, weight_grad)",
          "for m in (onednn_gemm, weight_grad)",
          (IN_GRAPH,), "the pass built and tested but never given to Inductor"),
    ]
