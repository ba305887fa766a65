"""The compiled graphs' weight-gradient C kernel (weight_grad.c) and the pass that sends products to it
(weight_grad.py)."""

C = "src/hypermappo/kernels/weight_grad.c"
PY = "src/hypermappo/compile/weight_grad.py"
T = "tests/test_weight_grad.py"
MATHS = f"{T}::test_kernel_is_the_product_to_float_rounding_and_repeatable"
PASS = f"{T}::test_weight_gradients_over_many_rows_go_to_the_kernel_and_the_values_stay"
COMPILED = "tests/test_compiled.py::test_compiled_run_equals_the_eager_run[mlp-tanh-act-norm-weight-grad-belief]"
BATCHED = f"{T}::test_batched_products_one_per_group"


def mutations(M):
    return [
        M("weight_grad_last_rows_dropped", C,
          "long k0 = K * t / nt, k1 = K * (t + 1) / nt;",
          "long k0 = K * t / nt, k1 = K * (t + 1) / nt - (t == nt - 1);",
          (MATHS, COMPILED),
          "the last thread's run of rows one short (an off-by-one in the row split)"),
        M("weight_grad_swap_not_transposed_back", C,
          "cg[swap ? j * n + i : i * n + j] = s;",
          "cg[swap ? i * cols + j : i * n + j] = s;",
          (MATHS, COMPILED),
          "the transposed problem's result written back without transposing it"),
        M("weight_grad_padded_copy_wrong_stride", C,
          "memcpy(padded + k * np, bs + k * ldb, sizeof(float) * (size_t)n);",
          "memcpy(padded + k * np, bs + k * np, sizeof(float) * (size_t)n);",
          (MATHS, COMPILED),
          "a tile of b whose width is not whole vectors read with the padded stride"),
        M("weight_grad_tail_block_wrong_rows", C,
          "for (long i = 0; i < mr; i++) acc[i][j] += ar[i] * bv;",
          "for (long i = 0; i < mr; i++) acc[i][j] += ar[0] * bv;",
          (MATHS, COMPILED),
          "the edge blocks multiply every output row by the first row's value"),
        M("weight_grad_first_thread_only", C,
          "for (int t = 0; t < threads; t++) s += partial[(long)t * rows * np + i * np + j];",
          "for (int t = 0; t < 1; t++) s += partial[(long)t * rows * np + i * np + j];",
          (MATHS, COMPILED),
          "the other threads' partial sums dropped"),
        M("weight_grad_partial_not_cleared", C,
          "    memset(partial, 0, sizeof(float) * (size_t)threads * (size_t)(m * np));\n",
          "",
          (MATHS,),
          "the scratch's previous contents added into the sums"),
        M("weight_grad_group_stride_dropped", C,
          "const float *ag = a + g * sga, *bg = b + g * sgb;",
          "const float *ag = a + g * sga, *bg = b;",
          (BATCHED, f"{T}::test_per_agent_weight_gradients_go_to_the_kernel_and_the_values_stay"),
          "every group's product takes the first group's b (per-agent weight gradients all from agent 0's rows)"),
        M("weight_grad_row_stride_as_width", C,
          "            const float *as = a + kb * lda;",
          "            const float *as = a + kb * m;",
          (BATCHED, f"{T}::test_per_agent_weight_gradients_go_to_the_kernel_and_the_values_stay"),
          "strided rows (the agent-major view) read as if contiguous"),
        M("weight_grad_pass_takes_row_major_a", PY,
          "if va.stride(-2) != 1 or vb.stride(-1) != 1:",
          "if vb.stride(-1) != 1:",
          (f"{T}::test_only_a_transposed_first_operand_is_rewritten",),
          "the pass also rewrites a product whose first operand is not a transpose (the input gradient), reading "
          "its memory as the wrong matrix"),
        M("weight_grad_pass_threshold_off_by_one", PY,
          "if rows < MIN_ROWS or m > MAX_WIDTH or n > MAX_WIDTH or max(m, n) < MIN_WIDTH:",
          "if rows <= MIN_ROWS or m > MAX_WIDTH or n > MAX_WIDTH or max(m, n) < MIN_WIDTH:",
          (PASS,),
          "MIN_ROWS rows themselves left to MKL"),
        M("weight_grad_pass_width_unchecked", PY,
          "if rows < MIN_ROWS or m > MAX_WIDTH or n > MAX_WIDTH or max(m, n) < MIN_WIDTH:",
          "if rows < MIN_ROWS or max(m, n) < MIN_WIDTH:",
          (PASS,),
          "a product wider than the kernel's tile buffer sent to it"),
        M("weight_grad_pass_narrow_taken", PY,
          "if rows < MIN_ROWS or m > MAX_WIDTH or n > MAX_WIDTH or max(m, n) < MIN_WIDTH:",
          "if rows < MIN_ROWS or m > MAX_WIDTH or n > MAX_WIDTH:",
          (PASS,),
          "products whose wider side is one vector (where MKL was faster) sent to the kernel"),
        M("weight_grad_not_configured", "src/hypermappo/compile/decision.py",
          "[m.PASS for m in (linear_act_norm, onednn_gemm, weight_grad, column_sum, bias_epilogue)",
          "[m.PASS for m in (linear_act_norm, onednn_gemm, column_sum, bias_epilogue)",
          (f"{T}::test_switch_and_status", COMPILED),
          "the pass left out of Inductor's configuration (the kernel never runs)"),
    ]
