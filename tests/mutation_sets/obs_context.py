"""The observation-context hypernetwork as one C kernel (kernels/obs_context.c / .py), its vector attention (vec16.h)
and where the hypernetwork takes it."""

C = "src/hypermappo/kernels/obs_context.c"
PY = "src/hypermappo/kernels/obs_context.py"
HYPER = "src/hypermappo/models/hyper.py"
T = "tests/test_obs_context.py"
EQUAL = f"{T}::test_kernel_gives_the_modules_code_and_gradients"
F32 = f"{T}::test_kernel_float32_is_close_and_deterministic_per_thread_count"
WHERE = f"{T}::test_hypernetwork_takes_the_kernel_where_it_applies"


def mutations(M):
    return [
        M("oc_encoder_relu_dropped", C,
          "RELU((T *)s->e, RR * EE);",
          "(void)0;",
          (EQUAL,), "the observation encoder without its ReLU"),
        M("oc_last_layer_relu_mask_dropped_backward", C,
          "d[r][o] = s->h[LL - 1][r][o] > 0 ? dz[r * ZZ + o] : 0;",
          "d[r][o] = dz[r * ZZ + o];",
          (EQUAL,), "the code's gradient passed through the last ReLU where it was 0"),
        M("oc_layer_norm_backward_mean_dropped", C,
          "dc[r][k] = s->rc[r] * (dc[r][k] - mean - s->c[r][k] * dot);",
          "dc[r][k] = s->rc[r] * (dc[r][k] - s->c[r][k] * dot);",
          (EQUAL,), "the LayerNorm's backward without the mean term"),
        M("oc_scalar_attention_ignores_dead_keys", C,
          "s->p[i][h][j] = (!live || live[j]) ? dot * scale : -INFINITY;",
          "s->p[i][h][j] = dot * scale;",
          (EQUAL,), "dead agents attended to (scalar path: float64, other widths)"),
        M("oc_scalar_key_gradient_from_the_wrong_query", C,
          "dqkv[q0 + j][EE + h * DH + t] += ds * s->qkv[i][h * DH + t];",
          "dqkv[q0 + j][EE + h * DH + t] += ds * s->qkv[q0 + j][h * DH + t];",
          (EQUAL,), "a key's gradient from its own agent's query instead of the attending one's"),
        M("oc_last_gradient_block_not_flushed", C,
          "        for (int k = 0; k < PP; k++) acc[k] += block[k];\n    }",
          "    }",
          (EQUAL,), "the samples after a thread's last full flush left out of the gradient"),
        M("oc_padded_rows_keep_stale_gradients", C,
          "if (dz) memset(dz_pad, 0, sizeof(T) * RR * ZZ), memcpy(",
          "if (dz) memcpy(",
          (EQUAL,), "a partial last block's padded rows back-propagate uninitialised gradients"),
        M("oc_one_thread_gradient_summed", C,
          "for (int t = 0; t < used; t++) total += partial[(size_t)t * PP + k];",
          "for (int t = 0; t < 1; t++) total += partial[(size_t)t * PP + k];",
          (F32,), "only the first thread's gradient sums kept"),
        M("oc_weights_packed_untransposed", PY,
          "return torch.cat([p.t().reshape(-1) if p.dim() == 2 else p for p in parts])",
          "return torch.cat([p.reshape(-1) if p.dim() == 2 else p for p in parts])",
          (EQUAL,), "nn.Linear's [out, in] weights handed to a kernel that reads [in, out]"),
        M("oc_taken_for_mean_pooling", HYPER,
          'if c.parts != ["obs"] or c.belief_dim or c.aggregation != "attention" or not len(self.mlp):',
          'if c.parts != ["obs"] or c.belief_dim or not len(self.mlp):',
          (WHERE,), "the attention kernel standing in for a mean-pooled context"),
        M("oc_scratch_guard_dropped", PY,
          "    if scratch_bytes(*key) > _MAX_SCRATCH_BYTES:",
          "    if False:",
          (WHERE,), "sizes whose per-thread scratch overflows a thread's stack sent to the kernel (a crash)"),
        M("oc_header_not_in_the_build_key", "src/hypermappo/kernels/c_kernel.py",
          "            text += (source.parent / header.decode()).read_bytes()",
          "            pass",
          (f"{T}::test_a_changed_local_header_rebuilds_the_kernel",), "a changed vec16.h loads the stale build"),
    ]
