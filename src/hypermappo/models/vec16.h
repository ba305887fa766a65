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

#endif
