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

DEFINE_KERNELS(float, f32, expf)
DEFINE_KERNELS(double, f64, exp)
