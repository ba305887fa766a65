"""The goal belief's online-correction C kernel (kernels/online_correction.c)."""

C = "src/hypermappo/kernels/online_correction.c"
T = "tests/test_online_correction.py::"


def mutations(M):
    return [
        M("online_correction_not_normalised", C,
          "const float scale = lr / (sq + 1.0f);", "const float scale = lr;",
          (T + "test_update_is_one_normalised_outer_product_step",),
          "the kernel's step scales with the features' size"),
        M("online_correction_apply_drops_the_tail", C,
          "for (long j = 0; j < H; j++) s += w[j] * hb[j];", "for (long j = 0; j < H - 1; j++) s += w[j] * hb[j];",
          (T + "test_apply_is_the_matrix_vector_product",),
          "the last feature left out of the correction"),
    ]
