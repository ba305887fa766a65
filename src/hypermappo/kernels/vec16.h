/* 16-lane float vectors (64 bytes: one AVX-512 register, or two / four narrower ones) for the attention over agents
 * of agent_attention.c and obs_context.c: heads are groups of HEAD_LANES adjacent lanes, which the includer defines.
 * A change here rebuilds both (c_kernel.build digests the local headers a kernel includes). */
#ifndef HYPERMAPPO_VEC16_H
#define HYPERMAPPO_VEC16_H
#include <math.h>
#include <string.h>

typedef float v16 __attribute__((vector_size(64)));
typedef int i16 __attribute__((vector_size(64)));

static inline v16 vld(const float *p) { v16 v; memcpy(&v, p, sizeof v); return v; }
static inline void vst(float *p, v16 v) { memcpy(p, &v, sizeof v); }
static inline v16 vsel(i16 mask, v16 a, v16 b) { return (v16)(((i16)a & mask) | ((i16)b & ~mask)); }
static const i16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};  /* each lane's index */

/* each lane: the sum over its head's HEAD_LANES lanes (a butterfly; float addition commutes, so all lanes agree) */
static inline v16 head_sum(v16 x) {
    for (int step = 1; step < HEAD_LANES; step *= 2) x += __builtin_shuffle(x, lane ^ step);
    return x;
}

/* exp(x) for x <= 0, -inf -> 0 (Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, a degree-7 polynomial in r, 2^n built
 * in the exponent bits; below -87 the result would be denormal and is taken at -87, ~1.6e-38) */
static inline v16 vexp_nonpos(v16 x) {
    const i16 none = x == -INFINITY;
    const v16 zero = {0};
    x = vsel(x < -87.0f, zero - 87.0f, x);
    v16 n = x * 1.44269504088896341f + 12582912.0f;  /* + 1.5 * 2^23: rounds to an integer */
    n -= 12582912.0f;
    v16 r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    v16 poly = r * 1.9875691500e-4f + 1.3981999507e-3f;
    poly = poly * r + 8.3334519073e-3f;
    poly = poly * r + 4.1665795894e-2f;
    poly = poly * r + 1.6666665459e-1f;
    poly = poly * r + 5.0000001201e-1f;
    poly = poly * (r * r) + r + 1.0f;
    const i16 two_n = (__builtin_convertvector(n, i16) + 127) << 23;
    return vsel(none, zero, poly * (v16)two_n);
}

#ifdef NA
/* one query's attention over the NA agents' keys k and values v (live: alive bytes, or NULL = all alive): the
 * weights, each head's spread over its lanes, into w, and the weighted sum of the values returned; without an alive
 * key every weight and the output are 0 */
static inline v16 attend_one(v16 q, const v16 *k, const v16 *v, const unsigned char *live, float scale, v16 *w) {
    const v16 minus_inf = (v16){0} - INFINITY, zero = {0};
    v16 top = minus_inf, total = zero, acc = zero;
    for (int j = 0; j < NA; j++) {
        w[j] = (!live || live[j]) ? head_sum(q * k[j]) * scale : minus_inf;
        top = vsel(w[j] > top, w[j], top);
    }
    top = vsel(top == minus_inf, zero, top);  /* no alive key: every weight 0 */
    for (int j = 0; j < NA; j++) w[j] = vexp_nonpos(w[j] - top), total += w[j];
    const v16 inv = vsel(total > 0, 1.0f / total, zero);
    for (int j = 0; j < NA; j++) {
        w[j] *= inv;
        acc += w[j] * v[j];
    }
    return acc;
}

/* its backward for query agent i, given the output's gradient gi and the weights w: with dot_j = gi.v_j per head,
 * dv_j += w_j gi, ds_j = w_j (dot_j - sum_j' w_j' dot_j') scale, dq_i += ds_j k_j, dk_j += ds_j q_i */
static inline void attend_one_back(int i, v16 gi, const v16 *w, const v16 *q, const v16 *k, const v16 *v,
                                   float scale, v16 *dq, v16 *dk, v16 *dv) {
    v16 dot[NA], mean = {0};
    for (int j = 0; j < NA; j++) {
        dot[j] = head_sum(gi * v[j]);
        mean += w[j] * dot[j];
        dv[j] += w[j] * gi;
    }
    for (int j = 0; j < NA; j++) {
        const v16 ds = w[j] * (dot[j] - mean) * scale;
        dq[i] += ds * k[j];
        dk[j] += ds * q[i];
    }
}
#endif

#endif
