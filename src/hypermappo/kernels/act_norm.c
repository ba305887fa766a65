/* LayerNorm(act(z)) over the last dim of a row-major [rows, width] tensor, forward and backward, one pass each.
 *
 * The MAPPO reference's hidden block is Linear -> ReLU (or Tanh) -> LayerNorm. Composed from ATen or Inductor
 * kernels its backward walks the [rows, width] activations three times (the column sums of the affine gradients
 * in one pass, the row statistics in another, the input gradient in a third); here each row is read once, the
 * column sums accumulate per block of BLOCK rows in REAL, then per thread in double, and are added in thread order
 * (the same threads give the same result). See act_norm.py.
 *
 * Built per real type: -DREAL=float -DSUFFIX=f32, or double / f64. ACT: 0 = ReLU, 1 = Tanh.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define NAME(f) CAT(f, SUFFIX)

/* u = act(z) for a row; ReLU in a loop the compiler vectorises, Tanh through libm */
static inline void activate(const REAL *z, REAL *u, long width, int act) {
    if (act == 0) {
#pragma omp simd
        for (long j = 0; j < width; j++) u[j] = z[j] > 0 ? z[j] : (REAL)0;
    } else {
        for (long j = 0; j < width; j++) u[j] = (REAL)tanh(z[j]);
    }
}

void NAME(act_norm_forward)(const REAL *z, const REAL *w, const REAL *b, REAL *h, REAL *mean, REAL *rstd,
                            long rows, long width, int act, double eps, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long r = 0; r < rows; r++) {
        REAL *hr = h + r * width; /* act(z) parked in the output row (in cache) until it is normalised */
        activate(z + r * width, hr, width, act);
        REAL s = 0, v = 0;
#pragma omp simd reduction(+ : s)
        for (long j = 0; j < width; j++) s += hr[j];
        const REAL m = s / width;
#pragma omp simd reduction(+ : v)
        for (long j = 0; j < width; j++) v += (hr[j] - m) * (hr[j] - m);
        const REAL rs = (REAL)(1.0 / sqrt((double)v / width + eps));
#pragma omp simd
        for (long j = 0; j < width; j++) hr[j] = (hr[j] - m) * rs * w[j] + b[j];
        mean[r] = m;
        rstd[r] = rs;
    }
}

/* Rows whose column sums a thread adds in REAL before it adds them into its double sums: the per-row update of
 * the sums is then a same-type vector loop (mixed with the double sums in one loop with the row's reductions, gcc
 * left it scalar on an AVX2-only CPU). With -fno-trapping-math (act_norm.py) the backward at 76,800 x 64 on one AMD
 * EPYC thread went from 51 ms to ~8 ms (9.8 ms with the flag alone, the rows' loops as before). */
#define BLOCK 64

/* partial: scratch of 2 * threads * width doubles (per-thread column sums of grad_h * u_hat and of grad_h) */
void NAME(act_norm_backward)(const REAL *gh, const REAL *z, const REAL *w, const REAL *mean, const REAL *rstd,
                             REAL *gz, REAL *gw, REAL *gb, double *partial, long rows, long width, int act,
                             int threads) {
    memset(partial, 0, sizeof(double) * 2 * (size_t)threads * (size_t)width);
#pragma omp parallel num_threads(threads)
    {
        int t = 0, nt = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        nt = omp_get_num_threads();
#endif
        double *acc_w = partial + (size_t)t * 2 * width, *acc_b = acc_w + width;
        REAL *blk_w = malloc(sizeof(REAL) * 2 * (size_t)width), *blk_b = blk_w + width;
        const long r0 = rows * t / nt, r1 = rows * (t + 1) / nt; /* a thread's run of rows, in thread order */
        for (long rb = r0; rb < r1; rb += BLOCK) {
            const long re = rb + BLOCK < r1 ? rb + BLOCK : r1;
            memset(blk_w, 0, sizeof(REAL) * 2 * (size_t)width);
            for (long r = rb; r < re; r++) {
                const REAL *ghr = gh + r * width, *zr = z + r * width;
                REAL *gzr = gz + r * width; /* holds act(z) until the row's gradient is written over it */
                const REAL m = mean[r], rs = rstd[r];
                REAL c1 = 0, c2 = 0;
                activate(zr, gzr, width, act);
#pragma omp simd reduction(+ : c1)
                for (long j = 0; j < width; j++) c1 += ghr[j] * w[j];
#pragma omp simd reduction(+ : c2)
                for (long j = 0; j < width; j++) c2 += ghr[j] * w[j] * ((gzr[j] - m) * rs);
#pragma omp simd
                for (long j = 0; j < width; j++) {
                    blk_w[j] += ghr[j] * ((gzr[j] - m) * rs);
                    blk_b[j] += ghr[j];
                }
                const REAL a = c1 / width, c = c2 / width;
                if (act == 0) {
#pragma omp simd
                    for (long j = 0; j < width; j++) { /* computed, then selected: a loop gcc vectorises */
                        const REAL v = rs * (ghr[j] * w[j] - a - (gzr[j] - m) * rs * c);
                        gzr[j] = zr[j] > 0 ? v : (REAL)0;
                    }
                } else {
#pragma omp simd
                    for (long j = 0; j < width; j++)
                        gzr[j] = rs * (ghr[j] * w[j] - a - (gzr[j] - m) * rs * c) * ((REAL)1 - gzr[j] * gzr[j]);
                }
            }
            for (long j = 0; j < width; j++) {
                acc_w[j] += blk_w[j];
                acc_b[j] += blk_b[j];
            }
        }
        free(blk_w);
    }
    for (long j = 0; j < width; j++) {
        double sw = 0, sb = 0;
        for (int t = 0; t < threads; t++) {
            sw += partial[(size_t)t * 2 * width + j];
            sb += partial[(size_t)t * 2 * width + width + j];
        }
        gw[j] = (REAL)sw;
        gb[j] = (REAL)sb;
    }
}
