/* Hyper-MAPPO's observation-context hypernetwork, all of it per sample in one pass: the NA agents' observations of a
 * sample -> each agent's code z (forward), and the parameter gradients given dz (backward).
 *
 * Why one kernel: in the update each of these steps is a product or an elementwise pass over 76,800 rows only 16-48
 * wide, and each reads and writes main memory; here a sample's activations (~2 KB) stay in L1 and the weights
 * (~2,200 floats) too. The backward pass recomputes its sample's forward instead of saving activations.
 *
 * The maths (obs_context.py tests it against the PyTorch modules: nn.LayerNorm, nn.Linear, nn.MultiheadAttention),
 * per agent i of a sample:
 *   xh_i = LN(obs_i)                                 (no affine, eps EPS)
 *   e_i  = relu(We xh_i + be)                        [EE]
 *   q_i | k_i | v_i = Win e_i + bin                  [3 EE]
 *   a_i  = HH-head attention of q_i over the alive agents' k, v (no alive agent: a_i = 0)
 *   c_i  = LN([e_i, Wout a_i + bout])                [2 EE], no affine
 *   z_i  = relu(W_LL ... relu(W_1 c_i + b_1) ... + b_LL)  [ZZ]
 * Sizes are compile-time constants (NA, DO, EE, HH, ZZ, LL), so every loop has a constant trip count. The rows (agent
 * slots) of BS samples go through each layer together: one weight vector loaded serves all of them, and their
 * accumulators are independent chains of fused multiply-adds (one row at a time waits on each add's latency).
 *
 * Parameters come packed in one array, each weight input-major ([in][out]: the forward's inner loops run over
 * outputs): We [DO][EE], be [EE], Win [EE][3EE], bin [3EE], Wout [EE][EE], bout [EE], W_1 [2EE][ZZ], b_1 [ZZ], then
 * per further layer W_l [ZZ][ZZ], b_l [ZZ]. The backward writes the gradient in the same layout (and transposes the
 * weights once per call, so its input gradients also run over contiguous vectors).
 * Layouts: obs [B, NA, DO], alive [B, NA] bytes (0 = dead / padded: never a key) or NULL, z and dz [B, NA, ZZ].
 * Gradients: per-sample terms summed in T over blocks of FLUSH samples, the blocks in double per thread, the threads
 * in thread order: one thread count gives the same bits every run.
 *
 * The file includes itself once per real type (float, double) for the body below `#else`.
 */
#ifndef OBS_CONTEXT_BODY
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define DH (EE / HH)
#define CC (2 * EE)
#define EPS 1e-5
#define FLUSH 16 /* blocks */
#define BS 4 /* samples per block (2 and 8 ran slower) */
#define RR (BS * NA)

#define O_WE 0
#define O_BE (O_WE + DO * EE)
#define O_WIN (O_BE + EE)
#define O_BIN (O_WIN + EE * 3 * EE)
#define O_WOUT (O_BIN + 3 * EE)
#define O_BOUT (O_WOUT + EE * EE)
#define O_W1 (O_BOUT + EE)
#define O_B1 (O_W1 + CC * ZZ)
#define O_WL(l) (O_B1 + ZZ + ((l) - 1) * (ZZ * ZZ + ZZ)) /* MLP layer l >= 1 (0-based) */
#define O_BL(l) (O_WL(l) + ZZ * ZZ)
#define PP (O_B1 + ZZ + (LL - 1) * (ZZ * ZZ + ZZ))

long obs_context_params(void) { return PP; }

/* the columns a layer's accumulators cover at a time: 16 (a 64-byte vector of floats) where the width allows */
#define CW(OUT) ((OUT) % 16 ? (OUT) : 16)

/* y [R][OUT] (row stride YS) = x [R][IN] (row stride XS) w [IN][OUT] + BIAS(o), column block by column block, the
 * block's accumulators in registers */
#define ROWS_PRODUCT(x, XS, w, BIAS, y, YS, R, IN, OUT)                                                                \
    do {                                                                                                             \
        for (int c_ = 0; c_ < (OUT); c_ += CW(OUT)) {                                                                \
            T acc_[R][CW(OUT)];                                                                                      \
            for (int r_ = 0; r_ < (R); r_++)                                                                         \
                for (int o_ = 0; o_ < CW(OUT); o_++) acc_[r_][o_] = BIAS(c_ + o_);                                   \
            for (int k_ = 0; k_ < (IN); k_++) {                                                                      \
                const T *wk_ = (w) + k_ * (OUT) + c_;                                                                \
                _Pragma("GCC unroll 16")                                                                             \
                for (int r_ = 0; r_ < (R); r_++) {                                                                   \
                    T xr_ = (x)[r_ * (XS) + k_];                                                                     \
                    for (int o_ = 0; o_ < CW(OUT); o_++) acc_[r_][o_] += xr_ * wk_[o_];                              \
                }                                                                                                    \
            }                                                                                                        \
            for (int r_ = 0; r_ < (R); r_++)                                                                         \
                for (int o_ = 0; o_ < CW(OUT); o_++) (y)[r_ * (YS) + c_ + o_] = acc_[r_][o_];                        \
        }                                                                                                            \
    } while (0)
#define NO_BIAS(o) 0
#define WITH_BIAS(o) b_[o]
#define AFFINE_ROWS(x, XS, w, b, y, YS, R, IN, OUT)                                                                   \
    do {                                                                                                             \
        const T *b_ = (b);                                                                                           \
        ROWS_PRODUCT(x, XS, w, WITH_BIAS, y, YS, R, IN, OUT);                                                        \
    } while (0)

/* the weight gradients of y = x w + b over R rows with output gradients d [R][OUT] (row stride DS): g [IN][OUT] +=
 * x^T d, gb += the column sums of d */
#define GRAD_ROWS(x, XS, d, DS, g, gb, R, IN, OUT)                                                                    \
    do {                                                                                                             \
        for (int r_ = 0; r_ < (R); r_++)                                                                             \
            for (int o_ = 0; o_ < (OUT); o_++) (gb)[o_] += (d)[r_ * (DS) + o_];                                      \
        for (int k_ = 0; k_ < (IN); k_++) {                                                                          \
            T acc_[OUT];                                                                                             \
            for (int o_ = 0; o_ < (OUT); o_++) acc_[o_] = (g)[k_ * (OUT) + o_];                                      \
            _Pragma("GCC unroll 16")                                                                                 \
            for (int r_ = 0; r_ < (R); r_++) {                                                                       \
                T xr_ = (x)[r_ * (XS) + k_];                                                                         \
                for (int o_ = 0; o_ < (OUT); o_++) acc_[o_] += xr_ * (d)[r_ * (DS) + o_];                            \
            }                                                                                                        \
            for (int o_ = 0; o_ < (OUT); o_++) (g)[k_ * (OUT) + o_] = acc_[o_];                                      \
        }                                                                                                            \
    } while (0)

/* float32 at width 16 (the default): the attention runs on 16-lane vectors, heads as groups of lanes, its exponentials
 * a vector polynomial (vec16.h, shared with agent_attention.c); double and other widths take the scalar loops */
#define VECTOR_ATTENTION_WIDTH (EE == 16 && 16 % HH == 0)
#if VECTOR_ATTENTION_WIDTH
#define HEAD_LANES DH
#include "vec16.h"
#endif

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, SFX)

#define OBS_CONTEXT_BODY
#define T float
#define VECTOR_ATTENTION VECTOR_ATTENTION_WIDTH
#define SFX f32
#define SQRT sqrtf
#define EXP expf
#include __FILE__
#undef T
#undef SFX
#undef SQRT
#undef EXP
#undef VECTOR_ATTENTION
#define VECTOR_ATTENTION 0
#define T double
#define SFX f64
#define SQRT sqrt
#define EXP exp
#include __FILE__

#else /* the body, once per real type T */

/* a block's activations, row r = agent slot r % NA of the block's sample r / NA */
typedef struct {
    T xh[RR][DO], e[RR][EE], qkv[RR][3 * EE], a[RR][EE], c[RR][CC], rc[RR], h[LL][RR][ZZ];
#if VECTOR_ATTENTION
    float w[RR][NA][EE]; /* attention weights of query row r over key j, each head's spread over its lanes */
#else
    T p[RR][HH][NA]; /* attention weights of query row r, head h over key j */
#endif
    int any_alive[BS];
} FN(state);

/* LayerNorm without affine of x [N] into y; r = 1 / sqrt(var + eps) */
#define NORM(x, y, N, r)                                                                                              \
    do {                                                                                                             \
        T mean_ = 0, var_ = 0;                                                                                       \
        _Pragma("omp simd reduction(+ : mean_)")                                                                     \
        for (int k_ = 0; k_ < (N); k_++) mean_ += (x)[k_];                                                           \
        mean_ /= (N);                                                                                                \
        _Pragma("omp simd reduction(+ : var_)")                                                                      \
        for (int k_ = 0; k_ < (N); k_++) var_ += ((x)[k_] - mean_) * ((x)[k_] - mean_);                              \
        (r) = 1 / SQRT(var_ / (N) + (T)EPS);                                                                         \
        for (int k_ = 0; k_ < (N); k_++) (y)[k_] = ((x)[k_] - mean_) * (r);                                          \
    } while (0)

#define RELU(x, N) for (int k_ = 0; k_ < (N); k_++) (x)[k_] = (x)[k_] > 0 ? (x)[k_] : 0

/* attention of one sample: rows q0 .. q0 + NA - 1 of s */
#if VECTOR_ATTENTION
static inline void FN(attend)(FN(state) *restrict s, int q0, const unsigned char *restrict live) {
    const float scale = 1 / sqrtf((float)DH);
    v16 k[NA], v[NA];
    for (int j = 0; j < NA; j++) k[j] = vld(s->qkv[q0 + j] + EE), v[j] = vld(s->qkv[q0 + j] + 2 * EE);
    for (int i = q0; i < q0 + NA; i++) {
        v16 w[NA];
        vst(s->a[i], attend_one(vld(s->qkv[i]), k, v, live, scale, w));
        for (int j = 0; j < NA; j++) vst(s->w[i][j], w[j]);
    }
}

/* the attention's backward for one sample: da [rows][EE] -> dqkv [rows][3 EE] (see the scalar form) */
static inline void FN(attend_back)(const FN(state) *restrict s, int q0, const float (*restrict da)[EE],
                                   float (*restrict dqkv)[3 * EE]) {
    const float scale = 1 / sqrtf((float)DH);
    v16 q[NA], k[NA], v[NA], dq[NA], dk[NA], dv[NA];
    for (int j = 0; j < NA; j++) {
        q[j] = vld(s->qkv[q0 + j]), k[j] = vld(s->qkv[q0 + j] + EE), v[j] = vld(s->qkv[q0 + j] + 2 * EE);
        dq[j] = dk[j] = dv[j] = (v16){0};
    }
    for (int i = 0; i < NA; i++) {
        v16 w[NA];
        for (int j = 0; j < NA; j++) w[j] = vld(s->w[q0 + i][j]);
        attend_one_back(i, vld(da[q0 + i]), w, q, k, v, scale, dq, dk, dv);
    }
    for (int j = 0; j < NA; j++)
        vst(dqkv[q0 + j], dq[j]), vst(dqkv[q0 + j] + EE, dk[j]), vst(dqkv[q0 + j] + 2 * EE, dv[j]);
}
#else
static inline void FN(attend)(FN(state) *restrict s, int q0, const unsigned char *restrict live) {
    const T scale = 1 / SQRT((T)DH);
    for (int i = q0; i < q0 + NA; i++) {
        T top[HH], total[HH];
        for (int h = 0; h < HH; h++) top[h] = -INFINITY, total[h] = 0;
        for (int j = 0; j < NA; j++)
            for (int h = 0; h < HH; h++) {
                T dot = 0;
                for (int t = 0; t < DH; t++) dot += s->qkv[i][h * DH + t] * s->qkv[q0 + j][EE + h * DH + t];
                s->p[i][h][j] = (!live || live[j]) ? dot * scale : -INFINITY;
                if (s->p[i][h][j] > top[h]) top[h] = s->p[i][h][j];
            }
        for (int h = 0; h < HH; h++) if (top[h] == -INFINITY) top[h] = 0; /* no alive key: every weight 0 */
        for (int j = 0; j < NA; j++)
            for (int h = 0; h < HH; h++) s->p[i][h][j] = EXP(s->p[i][h][j] - top[h]), total[h] += s->p[i][h][j];
        for (int h = 0; h < HH; h++) total[h] = total[h] > 0 ? 1 / total[h] : 0;
        T a[EE] = {0};
        for (int j = 0; j < NA; j++)
            for (int h = 0; h < HH; h++) {
                s->p[i][h][j] *= total[h];
                for (int t = 0; t < DH; t++) a[h * DH + t] += s->p[i][h][j] * s->qkv[q0 + j][2 * EE + h * DH + t];
            }
        memcpy(s->a[i], a, sizeof a);
    }
}

/* the attention's backward for one sample: dv_j += p_ij da_i, ds_ij = p_ij (da_i.v_j - sum_j' p_ij' da_i.v_j'),
 * dq_i += scale ds_ij k_j, dk_j += scale ds_ij q_i (per head); da [rows][EE] -> dqkv [rows][3 EE] */
static inline void FN(attend_back)(const FN(state) *restrict s, int q0, const T (*restrict da)[EE],
                                   T (*restrict dqkv)[3 * EE]) {
    const T scale = 1 / SQRT((T)DH);
    for (int i = q0; i < q0 + NA; i++)
        for (int h = 0; h < HH; h++) {
            T dp[NA], sum = 0;
            for (int j = 0; j < NA; j++) {
                T dot = 0;
                for (int t = 0; t < DH; t++) {
                    dot += da[i][h * DH + t] * s->qkv[q0 + j][2 * EE + h * DH + t];
                    dqkv[q0 + j][2 * EE + h * DH + t] += s->p[i][h][j] * da[i][h * DH + t];
                }
                dp[j] = dot, sum += s->p[i][h][j] * dot;
            }
            for (int j = 0; j < NA; j++) {
                T ds = s->p[i][h][j] * (dp[j] - sum) * scale;
                for (int t = 0; t < DH; t++) {
                    dqkv[i][h * DH + t] += ds * s->qkv[q0 + j][EE + h * DH + t];
                    dqkv[q0 + j][EE + h * DH + t] += ds * s->qkv[i][h * DH + t];
                }
            }
        }
}
#endif

/* obs: the block's RR rows [RR][DO]; live: its BS samples' alive bytes [BS][NA] or NULL */
static inline void FN(forward_block)(const T *restrict obs, const unsigned char *restrict live, const T *restrict P,
                                     FN(state) *restrict s) {
    T ctx[RR][CC], unused;
    for (int r = 0; r < RR; r++) NORM(obs + r * DO, s->xh[r], DO, unused);
    AFFINE_ROWS((T *)s->xh, DO, P + O_WE, P + O_BE, (T *)s->e, EE, RR, DO, EE);
    RELU((T *)s->e, RR * EE);
    AFFINE_ROWS((T *)s->e, EE, P + O_WIN, P + O_BIN, (T *)s->qkv, 3 * EE, RR, EE, 3 * EE);
    for (int b = 0; b < BS; b++) {
        const unsigned char *l = live ? live + b * NA : 0;
        s->any_alive[b] = 0;
        for (int i = 0; i < NA; i++) s->any_alive[b] |= !l || l[i];
        FN(attend)(s, b * NA, l);
    }
    for (int r = 0; r < RR; r++) memcpy(ctx[r], s->e[r], sizeof(T) * EE);
    AFFINE_ROWS((T *)s->a, EE, P + O_WOUT, P + O_BOUT, (T *)ctx + EE, CC, RR, EE, EE);
    for (int r = 0; r < RR; r++) NORM(ctx[r], s->c[r], CC, s->rc[r]);
    AFFINE_ROWS((T *)s->c, CC, P + O_W1, P + O_B1, (T *)s->h[0], ZZ, RR, CC, ZZ);
    RELU((T *)s->h[0], RR * ZZ);
    for (int l = 1; l < LL; l++) {
        AFFINE_ROWS((T *)s->h[l - 1], ZZ, P + O_WL(l), P + O_BL(l), (T *)s->h[l], ZZ, RR, ZZ, ZZ);
        RELU((T *)s->h[l], RR * ZZ);
    }
}

/* the block starting at sample b0 of `samples`: a last, partial block is zero-padded (its padded rows get dz = 0,
 * so they add nothing to the gradients, and their codes are dropped) */
static inline int FN(load_block)(const T *restrict obs, const unsigned char *restrict alive, const T *restrict dz,
                                 long b0, long samples, T *restrict obs_pad, unsigned char *restrict alive_pad,
                                 T *restrict dz_pad, const T **obs_block, const unsigned char **alive_block,
                                 const T **dz_block) {
    int n = samples - b0 < BS ? (int)(samples - b0) : BS;
    *obs_block = obs + b0 * NA * DO, *alive_block = alive ? alive + b0 * NA : 0, *dz_block = dz ? dz + b0 * NA * ZZ : 0;
    if (n == BS) return n;
    memset(obs_pad, 0, sizeof(T) * RR * DO), memcpy(obs_pad, *obs_block, sizeof(T) * n * NA * DO), *obs_block = obs_pad;
    if (alive) memset(alive_pad, 0, RR), memcpy(alive_pad, *alive_block, n * NA), *alive_block = alive_pad;
    if (dz) memset(dz_pad, 0, sizeof(T) * RR * ZZ), memcpy(dz_pad, *dz_block, sizeof(T) * n * NA * ZZ), *dz_block = dz_pad;
    return n;
}

void FN(obs_context_forward)(const T *restrict obs, const unsigned char *restrict alive, const T *restrict P,
                             T *restrict z, long samples, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long b0 = 0; b0 < samples; b0 += BS) {
        FN(state) s;
        T obs_pad[RR * DO];
        unsigned char alive_pad[RR];
        const T *ob, *dzb;
        const unsigned char *ab;
        int n = FN(load_block)(obs, alive, 0, b0, samples, obs_pad, alive_pad, 0, &ob, &ab, &dzb);
        FN(forward_block)(ob, ab, P, &s);
        memcpy(z + b0 * NA * ZZ, s.h[LL - 1], sizeof(T) * n * NA * ZZ);
    }
}

/* PT: the weights transposed ([out][in], at the same offsets as P's), for the input gradients */
static inline void FN(backward_block)(const FN(state) *restrict s, const T *restrict dz, const T *restrict PT,
                                      T *restrict G) {
    T d[RR][ZZ], dx[RR][ZZ], dc[RR][CC], da[RR][EE], dqkv[RR][3 * EE], de[RR][EE];
    for (int r = 0; r < RR; r++)
        for (int o = 0; o < ZZ; o++) d[r][o] = s->h[LL - 1][r][o] > 0 ? dz[r * ZZ + o] : 0;
    for (int l = LL - 1; l >= 1; l--) {
        GRAD_ROWS((T *)s->h[l - 1], ZZ, (T *)d, ZZ, G + O_WL(l), G + O_BL(l), RR, ZZ, ZZ);
        ROWS_PRODUCT((T *)d, ZZ, PT + O_WL(l), NO_BIAS, (T *)dx, ZZ, RR, ZZ, ZZ);
        for (int r = 0; r < RR; r++)
            for (int o = 0; o < ZZ; o++) d[r][o] = s->h[l - 1][r][o] > 0 ? dx[r][o] : 0;
    }
    GRAD_ROWS((T *)s->c, CC, (T *)d, ZZ, G + O_W1, G + O_B1, RR, CC, ZZ);
    ROWS_PRODUCT((T *)d, ZZ, PT + O_W1, NO_BIAS, (T *)dc, CC, RR, ZZ, CC);
    for (int r = 0; r < RR; r++) { /* LayerNorm backward (no affine) */
        T mean = 0, dot = 0;
#pragma omp simd reduction(+ : mean, dot)
        for (int k = 0; k < CC; k++) mean += dc[r][k], dot += dc[r][k] * s->c[r][k];
        mean /= CC, dot /= CC;
        for (int k = 0; k < CC; k++) dc[r][k] = s->rc[r] * (dc[r][k] - mean - s->c[r][k] * dot);
        memcpy(de[r], dc[r], sizeof(T) * EE);
    }
    GRAD_ROWS((T *)s->a, EE, (T *)dc + EE, CC, G + O_WOUT, G + O_BOUT, RR, EE, EE);
    ROWS_PRODUCT((T *)dc + EE, CC, PT + O_WOUT, NO_BIAS, (T *)da, EE, RR, EE, EE);
    /* attention (without an alive agent the output was the constant 0: no gradient) */
    memset(dqkv, 0, sizeof dqkv);
    for (int b = 0; b < BS; b++)
        if (s->any_alive[b]) FN(attend_back)(s, b * NA, (const T (*)[EE])da, dqkv);
    GRAD_ROWS((T *)s->e, EE, (T *)dqkv, 3 * EE, G + O_WIN, G + O_BIN, RR, EE, 3 * EE);
    ROWS_PRODUCT((T *)dqkv, 3 * EE, PT + O_WIN, NO_BIAS, (T *)da, EE, RR, 3 * EE, EE);
    for (int r = 0; r < RR; r++)
        for (int o = 0; o < EE; o++) da[r][o] = s->e[r][o] > 0 ? da[r][o] + de[r][o] : 0;
    GRAD_ROWS((T *)s->xh, DO, (T *)da, EE, G + O_WE, G + O_BE, RR, DO, EE);
}

static void FN(transpose)(const T *restrict w, T *restrict wt, int in, int out) {
    for (int k = 0; k < in; k++)
        for (int o = 0; o < out; o++) wt[o * in + k] = w[k * out + o];
}

int FN(obs_context_backward)(const T *restrict obs, const unsigned char *restrict alive, const T *restrict P,
                             const T *restrict dz, T *restrict grad, long samples, int threads) {
    double *partial = calloc((size_t)threads * PP, sizeof(double));
    if (!partial) return 1; /* out of memory: the caller raises */
    T PT[PP];
    FN(transpose)(P + O_WE, PT + O_WE, DO, EE);
    FN(transpose)(P + O_WIN, PT + O_WIN, EE, 3 * EE);
    FN(transpose)(P + O_WOUT, PT + O_WOUT, EE, EE);
    FN(transpose)(P + O_W1, PT + O_W1, CC, ZZ);
    for (int l = 1; l < LL; l++) FN(transpose)(P + O_WL(l), PT + O_WL(l), ZZ, ZZ);
    int used = 1;
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num();
#pragma omp single
        used = omp_get_num_threads();
        double *acc = partial + (size_t)t * PP;
        T block[PP];
        int pending = 0;
        memset(block, 0, sizeof block);
#pragma omp for schedule(static)
        for (long b0 = 0; b0 < samples; b0 += BS) {
            FN(state) s;
            T obs_pad[RR * DO], dz_pad[RR * ZZ];
            unsigned char alive_pad[RR];
            const T *ob, *dzb;
            const unsigned char *ab;
            FN(load_block)(obs, alive, dz, b0, samples, obs_pad, alive_pad, dz_pad, &ob, &ab, &dzb);
            FN(forward_block)(ob, ab, P, &s);
            FN(backward_block)(&s, dzb, PT, block);
            if (++pending == FLUSH) {
                for (int k = 0; k < PP; k++) acc[k] += block[k];
                memset(block, 0, sizeof block), pending = 0;
            }
        }
        for (int k = 0; k < PP; k++) acc[k] += block[k];
    }
    for (int k = 0; k < PP; k++) {
        double total = 0;
        for (int t = 0; t < used; t++) total += partial[(size_t)t * PP + k];
        grad[k] = (T)total;
    }
    free(partial);
    return 0;
}

#endif
