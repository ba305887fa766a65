/* Multi-head self-attention over the NA agents of each sample, forward and backward in one pass per sample.
 *
 * Built by agent_attention.py on first use with NA (agents), EE (embedding width) and HH (heads) fixed at compile
 * time, so every loop has a constant trip count and the compiler unrolls and vectorises it. Samples are independent:
 * the result does not depend on the number of threads.
 *
 * Layouts (row-major, contiguous):  qkv [B, NA, 3*EE] = (q | k | v) per agent, as nn.MultiheadAttention's in_proj
 * gives them;  out [B, NA, EE];  p [B, NA, HH, NA] = attention weights of query agent i, head h over key agents j
 * (kept for the backward pass);  alive [B, NA] (bytes, 0 = dead / padded slot: never a key) or NULL = all alive.
 * A sample without any alive key gets weights and output 0. The backward pass needs no mask: a masked key's weight is
 * 0, so it gets no gradient through p.
 */
#include <math.h>
#include <string.h>

#define DD (EE / HH)

#define DEFINE_KERNELS(T, SUFFIX, EXP)                                                                                \
void attention_forward_##SUFFIX(const T *restrict qkv, const unsigned char *restrict alive, T *restrict out,        \
                                T *restrict p, long samples, T scale, int threads) {                                 \
    _Pragma("omp parallel for num_threads(threads) schedule(static)")                                               \
    for (long b = 0; b < samples; b++) {                                                                             \
        const T *x = qkv + b * NA * 3 * EE;                                                                          \
        const unsigned char *live = alive ? alive + b * NA : 0;                                                      \
        T *pb = p + b * NA * HH * NA;                                                                                \
        for (int i = 0; i < NA; i++) {                                                                               \
            const T *q = x + i * 3 * EE;                                                                             \
            T s[NA][HH], top[HH], total[HH], acc[EE];                                                                \
            for (int h = 0; h < HH; h++) top[h] = -INFINITY, total[h] = 0;                                           \
            for (int j = 0; j < NA; j++) {                                                                           \
                const T *k = x + j * 3 * EE + EE;                                                                    \
                for (int h = 0; h < HH; h++) {                                                                       \
                    T dot = 0;                                                                                       \
                    for (int t = 0; t < DD; t++) dot += q[h * DD + t] * k[h * DD + t];                               \
                    s[j][h] = (!live || live[j]) ? dot * scale : -INFINITY;                                          \
                    if (s[j][h] > top[h]) top[h] = s[j][h];                                                          \
                }                                                                                                    \
            }                                                                                                        \
            for (int h = 0; h < HH; h++) if (top[h] == -INFINITY) top[h] = 0; /* no alive key: every weight 0 */     \
            for (int j = 0; j < NA; j++)                                                                             \
                for (int h = 0; h < HH; h++) s[j][h] = EXP(s[j][h] - top[h]), total[h] += s[j][h];                   \
            for (int h = 0; h < HH; h++) total[h] = total[h] > 0 ? 1 / total[h] : 0; /* now 1 / sum */               \
            for (int e = 0; e < EE; e++) acc[e] = 0;                                                                 \
            for (int j = 0; j < NA; j++) {                                                                           \
                const T *v = x + j * 3 * EE + 2 * EE;                                                                \
                for (int h = 0; h < HH; h++) {                                                                       \
                    T w = s[j][h] * total[h];                                                                        \
                    pb[(i * HH + h) * NA + j] = w;                                                                   \
                    for (int t = 0; t < DD; t++) acc[h * DD + t] += w * v[h * DD + t];                               \
                }                                                                                                    \
            }                                                                                                        \
            memcpy(out + (b * NA + i) * EE, acc, sizeof(acc));                                                       \
        }                                                                                                            \
    }                                                                                                                \
}                                                                                                                    \
                                                                                                                     \
/* d out -> d qkv. With w = softmax(s): dv_j += w_ij g_i, ds_ij = w_ij (g_i.v_j - sum_j' w_ij' g_i.v_j'),           \
 * dq_i += scale ds_ij k_j, dk_j += scale ds_ij q_i (per head). */                                                   \
void attention_backward_##SUFFIX(const T *restrict qkv, const T *restrict p, const T *restrict grad_out,            \
                                 T *restrict grad_qkv, long samples, T scale, int threads) {                        \
    _Pragma("omp parallel for num_threads(threads) schedule(static)")                                               \
    for (long b = 0; b < samples; b++) {                                                                             \
        const T *x = qkv + b * NA * 3 * EE, *pb = p + b * NA * HH * NA, *g = grad_out + b * NA * EE;                \
        T dx[NA][3 * EE];                                                                                            \
        memset(dx, 0, sizeof(dx));                                                                                   \
        for (int i = 0; i < NA; i++) {                                                                               \
            const T *gi = g + i * EE, *q = x + i * 3 * EE;                                                           \
            T dp[NA][HH], mean[HH];                                                                                  \
            for (int h = 0; h < HH; h++) mean[h] = 0;                                                                \
            for (int j = 0; j < NA; j++) {                                                                           \
                const T *v = x + j * 3 * EE + 2 * EE;                                                                \
                for (int h = 0; h < HH; h++) {                                                                       \
                    T w = pb[(i * HH + h) * NA + j], dot = 0;                                                        \
                    for (int t = 0; t < DD; t++) {                                                                   \
                        dot += gi[h * DD + t] * v[h * DD + t];                                                       \
                        dx[j][2 * EE + h * DD + t] += w * gi[h * DD + t];                                            \
                    }                                                                                                \
                    dp[j][h] = dot;                                                                                  \
                    mean[h] += w * dot;                                                                              \
                }                                                                                                    \
            }                                                                                                        \
            for (int j = 0; j < NA; j++) {                                                                           \
                const T *k = x + j * 3 * EE + EE;                                                                    \
                for (int h = 0; h < HH; h++) {                                                                       \
                    T ds = pb[(i * HH + h) * NA + j] * (dp[j][h] - mean[h]) * scale;                                 \
                    for (int t = 0; t < DD; t++) {                                                                   \
                        dx[i][h * DD + t] += ds * k[h * DD + t];                                                     \
                        dx[j][EE + h * DD + t] += ds * q[h * DD + t];                                                \
                    }                                                                                                \
                }                                                                                                    \
            }                                                                                                        \
        }                                                                                                            \
        memcpy(grad_qkv + b * NA * 3 * EE, dx, sizeof(dx));                                                          \
    }                                                                                                                \
}

DEFINE_KERNELS(double, f64, exp)

#if EE == 16 && 16 % HH == 0 && !defined(SCALAR_F32)  /* SCALAR_F32: the loops above (benchmarks, tests) */
/* float32 with a 16-wide embedding (the observation context's default width): one sample's query, key and value of
 * an agent are each one 16-lane vector, heads are groups of DD adjacent lanes. A head's dot product is summed within
 * its lanes (every lane of the head ends up holding it), so the scores, the softmax and the weighted sums run on all
 * heads at once, and the exponentials are a vector polynomial instead of NA * NA * HH calls of expf. The scalar
 * loops above (double, other widths) spent ~100 ns per sample on scalar products and expf. Same maths to float
 * rounding (another summation order in the dot products; exp to ~1 ulp). */
#define HEAD_LANES DD
#include "vec16.h"

void attention_forward_f32(const float *restrict qkv, const unsigned char *restrict alive, float *restrict out,
                           float *restrict p, long samples, float scale, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long b = 0; b < samples; b++) {
        const float *x = qkv + b * NA * 3 * EE;
        const unsigned char *live = alive ? alive + b * NA : 0;
        float *pb = p + b * NA * HH * NA;
        v16 k[NA], v[NA];
        for (int j = 0; j < NA; j++) k[j] = vld(x + j * 3 * EE + EE), v[j] = vld(x + j * 3 * EE + 2 * EE);
        for (int i = 0; i < NA; i++) {
            v16 w[NA];
            const v16 acc = attend_one(vld(x + i * 3 * EE), k, v, live, scale, w);
#if HH * NA <= 16  /* query i's weights [HH, NA] gathered into one vector, stored at once */
            v16 block = {0};
#endif
            for (int j = 0; j < NA; j++) {
#if HH * NA <= 16
                block = vsel(lane % NA == j, __builtin_shuffle(w[j], lane / NA * DD), block);
#else
                for (int h = 0; h < HH; h++) pb[(i * HH + h) * NA + j] = w[j][h * DD];
#endif
            }
#if HH * NA <= 16
            float stored[16];
            vst(stored, block);
            memcpy(pb + i * HH * NA, stored, sizeof(float) * HH * NA);
#endif
            vst(out + (b * NA + i) * EE, acc);
        }
    }
}

void attention_backward_f32(const float *restrict qkv, const float *restrict p, const float *restrict grad_out,
                            float *restrict grad_qkv, long samples, float scale, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long b = 0; b < samples; b++) {
        const float *x = qkv + b * NA * 3 * EE, *pb = p + b * NA * HH * NA, *g = grad_out + b * NA * EE;
        v16 q[NA], k[NA], v[NA], dq[NA], dk[NA], dv[NA];
        for (int j = 0; j < NA; j++) {
            q[j] = vld(x + j * 3 * EE), k[j] = vld(x + j * 3 * EE + EE), v[j] = vld(x + j * 3 * EE + 2 * EE);
            dq[j] = dk[j] = dv[j] = (v16){0};
        }
        for (int i = 0; i < NA; i++) {
            const v16 gi = vld(g + i * EE);
            v16 w[NA];
#if HH * NA <= 16  /* query i's weights [HH, NA] in one vector, each key's spread over its heads' lanes */
            float block[16] = {0};
            memcpy(block, pb + i * HH * NA, sizeof(float) * HH * NA);
            const v16 weights = vld(block);
#endif
            for (int j = 0; j < NA; j++) {
#if HH * NA <= 16
                w[j] = __builtin_shuffle(weights, lane / DD * NA + j);
#else
                for (int l = 0; l < 16; l++) w[j][l] = pb[(i * HH + l / DD) * NA + j];
#endif
            }
            attend_one_back(i, gi, w, q, k, v, scale, dq, dk, dv);
        }
        float *d = grad_qkv + b * NA * 3 * EE;
        for (int j = 0; j < NA; j++) vst(d + j * 3 * EE, dq[j]), vst(d + j * 3 * EE + EE, dk[j]),
                                     vst(d + j * 3 * EE + 2 * EE, dv[j]);
    }
}
#else
DEFINE_KERNELS(float, f32, expf)
#endif
