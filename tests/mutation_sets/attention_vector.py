"""The attention kernel's float32 vector path at width 16 (kernels/agent_attention.c and the per-query helpers it
shares with obs_context.c in kernels/vec16.h: heads as groups of lanes, a vector exp, the weights gathered and
stored per query)."""

C = "src/hypermappo/kernels/agent_attention.c"
H = "src/hypermappo/kernels/vec16.h"  # the vector helpers, shared with obs_context.c
VECTOR = "tests/test_hyper.py::test_fused_attention_float32_vector_path"
OBS_CONTEXT = "tests/test_obs_context.py::test_kernel_float32_is_close_and_deterministic_per_thread_count"


def mutations(M):
    return [
        M("attention_vector_head_sum_short", H,
          "for (int step = 1; step < HEAD_LANES; step *= 2)",
          "for (int step = 2; step < HEAD_LANES; step *= 2)",
          (VECTOR, OBS_CONTEXT),
          "a head's dot product summed over half its lanes"),
        M("attention_vector_mask_dropped", H,
          "w[j] = (!live || live[j]) ? head_sum(q * k[j]) * scale : minus_inf;",
          "w[j] = head_sum(q * k[j]) * scale;",
          (VECTOR, OBS_CONTEXT),
          "dead keys attended to in the vector path"),
        M("attention_vector_no_alive_guard_dropped", H,
          "    top = vsel(top == minus_inf, zero, top);  /* no alive key: every weight 0 */\n",
          "",
          (VECTOR, OBS_CONTEXT),
          "a sample without an alive key gives NaN instead of 0"),
        M("attention_vector_exp_reduction_sign", H,
          "v16 r = x - n * 0.693359375f;",
          "v16 r = x + n * 0.693359375f;",
          (VECTOR, OBS_CONTEXT),
          "exp's range reduction with the wrong sign"),
        M("attention_vector_exp_minus_inf_not_zero", H,
          "return vsel(none, zero, poly * (v16)two_n);",
          "return poly * (v16)two_n;",
          (VECTOR, OBS_CONTEXT),
          "exp(-inf) taken as exp(-87) (masked keys get a tiny weight and the no-alive sample a uniform one)"),
        M("attention_vector_weights_stored_wrong_slot", C,
          "block = vsel(lane % NA == j, __builtin_shuffle(w[j], lane / NA * DD), block);",
          "block = vsel(lane % NA == j, __builtin_shuffle(w[j], lane % NA * DD), block);",
          (VECTOR,),
          "the saved weights of query i stored under the wrong head (the backward reads them)"),
        M("attention_vector_weights_gathered_wrong", C,
          "w[j] = __builtin_shuffle(weights, lane / DD * NA + j);",
          "w[j] = __builtin_shuffle(weights, lane / DD + j * HH);",
          (VECTOR,),
          "the backward reads query i's weights in [key, head] order instead of [head, key]"),
        M("attention_vector_dk_from_k", H,
          "        dk[j] += ds * q[i];\n",
          "        dk[j] += ds * k[i];\n",
          (VECTOR, OBS_CONTEXT),
          "the key gradient takes the key instead of the query"),
        M("attention_vector_value_gradient_dropped", H,
          "        dv[j] += w[j] * gi;\n",
          "",
          (VECTOR, OBS_CONTEXT),
          "no gradient to the values"),
        M("attention_vector_lane_gather_wrong_head", C,
          "for (int l = 0; l < 16; l++) w[j][l] = pb[(i * HH + l / DD) * NA + j];",
          "for (int l = 0; l < 16; l++) w[j][l] = pb[(i * HH + l % HH) * NA + j];",
          (VECTOR,),
          "heads x agents > 16: the backward's lane-by-lane gather reads another head's weight"),
        M("attention_vector_lane_store_wrong_lane", C,
          "for (int h = 0; h < HH; h++) pb[(i * HH + h) * NA + j] = w[j][h * DD];",
          "for (int h = 0; h < HH; h++) pb[(i * HH + h) * NA + j] = w[j][h];",
          (VECTOR,),
          "heads x agents > 16: the forward stores a lane of another head as a head's weight"),
    ]
