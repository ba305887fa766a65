"""The hidden blocks' LayerNorm(act(z)) C kernel (kernels/act_norm.c), its ops and autograd formula (act_norm.py) and
where AgentMLP takes it (agent_layers.py)."""

C = "src/hypermappo/kernels/act_norm.c"
PY = "src/hypermappo/kernels/act_norm.py"
LAYERS = "src/hypermappo/models/agent_layers.py"
HYPER = "src/hypermappo/models/hyper.py"
T = "tests/test_act_norm.py"
MATHS = f"{T}::test_kernel_matches_the_composition_and_its_gradients"
F32 = f"{T}::test_float32_kernel_is_repeatable_and_close_to_aten"
COMPILED = "tests/test_compiled.py::test_compiled_run_equals_the_eager_run[mlp-tanh-act-norm-weight-grad-belief]"


def mutations(M):
    return [
        M("act_norm_backward_sign", C,
          "const REAL v = rs * (ghr[j] * w[j] - a - (gzr[j] - m) * rs * c);",
          "const REAL v = rs * (ghr[j] * w[j] - a + (gzr[j] - m) * rs * c);",
          (MATHS, COMPILED),
          "the projection on u_hat added instead of subtracted in the ReLU input gradient"),
        M("act_norm_relu_mask_dropped", C,
          "gzr[j] = zr[j] > 0 ? v : (REAL)0;",
          "gzr[j] = v;",
          (MATHS, COMPILED),
          "the gradient flows through ReLU where it was off"),
        M("act_norm_tanh_slope", C,
          "* ((REAL)1 - gzr[j] * gzr[j]);",
          "* ((REAL)1 - gzr[j]);",
          (MATHS,),
          "tanh's derivative as 1 - u instead of 1 - u^2"),
        M("act_norm_eps_dropped", C,
          "const REAL rs = (REAL)(1.0 / sqrt((double)v / width + eps));",
          "const REAL rs = (REAL)(1.0 / sqrt((double)v / width));",
          (MATHS,),
          "LayerNorm's eps left out of the forward"),
        M("act_norm_bias_grad_dropped", C,
          "                    blk_b[j] += ghr[j];\n",
          "",
          (MATHS, COMPILED),
          "the bias gradient never accumulated"),
        M("act_norm_first_thread_only", C,
          "        for (int t = 0; t < threads; t++) {",
          "        for (int t = 0; t < 1; t++) {",
          (F32,),
          "the column sums of the other threads' rows dropped"),
        M("act_norm_saved_act_lost", PY,
          "        ctx.act = act\n",
          "        ctx.act = 0\n",
          (MATHS,),
          "the backward always takes ReLU's derivative"),
        M("kernel_op_autograd_fallthrough", "src/hypermappo/kernels/c_kernel.py",
          '_OPS.impl(name, _refuse_autograd(op), "Autograd", with_keyset=True)',
          '_OPS.impl(name, torch.library.fallthrough_kernel, "Autograd")',
          (f"{T}::test_the_op_refuses_to_be_differentiated_directly",
           "tests/test_compiled.py::test_fused_attention_custom_op_is_registered_correctly"),
          "the C kernels' forward ops differentiable as a silent fallthrough (zero gradients where a compiler "
          "inlines the autograd.Function's forward)"),
        M("act_norm_threshold_off_by_one", PY,
          "and z.numel() >= MIN_ROWS * z.shape[-1])",
          "and z.numel() > MIN_ROWS * z.shape[-1])",
          (f"{T}::test_mlp_takes_the_kernel_from_min_rows_and_computes_the_same",),
          "MIN_ROWS rows themselves left to the composition"),
        M("act_norm_block_bias_is_weight", LAYERS,
          "act_norm.act_norm(z, norm.weight[0], norm.bias[0], self.activation, norm.eps)",
          "act_norm.act_norm(z, norm.weight[0], norm.weight[0], self.activation, norm.eps)",
          (f"{T}::test_mlp_takes_the_kernel_from_min_rows_and_computes_the_same",),
          "the LayerNorm's weight passed as its bias too"),
        M("hyper_block_without_activation", HYPER,
          "        return trunk.block(i, z)\n",
          "        return trunk.norms[i](z)\n",
          ("tests/test_hyper.py", "tests/test_hyper_critic.py"),
          "the agent-major hidden blocks of Hyper-MAPPO (shared LayerNorm) skip the activation"),
    ]
