/* A hidden block's matrix product fused with its LayerNorm(ReLU(.)), forward and backward, for 64-wide blocks over
 * many rows (see linear_act_norm.py).
 *
 * forward:  z = x [R, K] @ w [K, 64] (+ bias); h = LayerNorm(ReLU(z)) with the affine (gamma, beta); also the rows'
 *           mean and 1/std (what act_norm.c's backward reads) and z itself (the backward's saved input).
 * backward: gh = g [R, K] @ w [K, 64] (the gradient arriving from the next layer's product); then act_norm.c's
 *           backward of that gh: dz, the affine's gradients and dz's column sums (the block's bias gradient), all
 *           column sums per thread in double, added in thread order: the same threads give the same bits.
 *
 * Each thread takes runs of MR rows; a run's 64-wide product rows are MR x 4 AVX-512 accumulators, and the run's
 * LayerNorm (forward) or LayerNorm backward (backward) is applied while they are still in registers, so neither z
 * nor gh takes an extra trip through memory. Rows may be strided (ldx / ldg elements apart); columns contiguous.
 * Built with -march=native; a CPU without AVX-512F gets a scalar build of the same loops (linear_act_norm.py only
 * rewrites graphs where the build succeeded).
 */
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define C 64
#define MR 7

#ifdef __AVX512F__
#include <immintrin.h>
typedef __m512 vec;
#define VW 16
static inline vec vload(const float *p) { return _mm512_loadu_ps(p); }
static inline void vstore(float *p, vec v) { _mm512_storeu_ps(p, v); }
/* an output row straight to memory (no read-for-ownership): p 64-byte aligned */
static inline void vstream(float *p, vec v) { _mm512_stream_ps(p, v); }
static inline void stream_fence(void) { _mm_sfence(); }
static inline vec vset1(float a) { return _mm512_set1_ps(a); }
static inline vec vfma(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
static inline vec vadd(vec a, vec b) { return _mm512_add_ps(a, b); }
static inline vec vsub(vec a, vec b) { return _mm512_sub_ps(a, b); }
static inline vec vmul(vec a, vec b) { return _mm512_mul_ps(a, b); }
static inline vec vrelu(vec a) { return _mm512_max_ps(a, _mm512_setzero_ps()); }
static inline vec vzero(void) { return _mm512_setzero_ps(); }
static inline float vsum(vec a) { return _mm512_reduce_add_ps(a); }
/* where z > 0 keep a, else 0 */
static inline vec vwhere_pos(vec z, vec a) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GT_OQ), a);
}
#else
typedef float vec __attribute__((vector_size(64)));
#define VW 16
static inline vec vload(const float *p) { vec v; memcpy(&v, p, sizeof v); return v; }
static inline void vstore(float *p, vec v) { memcpy(p, &v, sizeof v); }
static inline void vstream(float *p, vec v) { memcpy(p, &v, sizeof v); }
static inline void stream_fence(void) {}
static inline vec vset1(float a) { return (vec){0} + a; }
static inline vec vfma(vec a, vec b, vec c) { return a * b + c; }
static inline vec vadd(vec a, vec b) { return a + b; }
static inline vec vsub(vec a, vec b) { return a - b; }
static inline vec vmul(vec a, vec b) { return a * b; }
static inline vec vzero(void) { return (vec){0}; }
static inline vec vrelu(vec a) { vec r; for (int i = 0; i < VW; i++) r[i] = a[i] > 0 ? a[i] : 0.f; return r; }
static inline float vsum(vec a) { float s = 0; for (int i = 0; i < VW; i++) s += a[i]; return s; }
static inline vec vwhere_pos(vec z, vec a) { vec r; for (int i = 0; i < VW; i++) r[i] = z[i] > 0 ? a[i] : 0.f; return r; }
#endif

#define NV (C / VW)

/* Memory traffic. At 76,800 rows each [R, 64] operand is 19.7 MB, far past the L2, and the products are short (K
 * FMAs a row), so the loops wait on memory unless told better:
 * - output rows (z, h forward; dz backward) are written with streaming stores when 64-byte aligned (torch's CPU
 *   allocations are): a plain store first reads every line it writes;
 * - each run asks for the input rows of the run AHEAD runs on (x forward; g and z backward), so they are on their
 *   way while this run computes.
 * In the compiled MAPPO update at E = 1024 on a 2-core Xeon, both directions' time per update 379 -> 256 ms
 * (`python benchmarks/kernels/kernel_builds.py linear_act_norm --baseline 75ad023`, builds alternating in one process). */
#define AHEAD 4

/* rows [r, r + n) of a [rows, width] matrix with rows ld apart, towards the cache */
static inline void prefetch_rows(const float *p, long ld, long width, long r, long n, long rows) {
    if (r + n > rows) n = rows - r;
    for (long i = 0; i < n; i++)
        for (long c = 0; c < width; c += 16) __builtin_prefetch(p + (r + i) * ld + c, 0, 2);
}

static inline int aligned64(const void *p) { return ((unsigned long)p & 63) == 0; }
static inline void put(int stream, float *p, vec v) {
    if (stream)
        vstream(p, v);
    else
        vstore(p, v);
}

/* acc[i][j] (i < mr) = init + a[i, :] @ w[:, 16j:16j+16]; init = bias or 0 */
static inline void product_rows(const float *a, long lda, const float *w, const float *bias, long K, long mr,
                                vec acc[MR][NV]) {
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NV; j++) acc[i][j] = bias ? vload(bias + VW * j) : vzero();
    if (mr == MR) {
        for (long k = 0; k < K; k++) {
            const float *wr = w + k * C;
            vec w0 = vload(wr), w1 = vload(wr + 16), w2 = vload(wr + 32), w3 = vload(wr + 48);
            for (int i = 0; i < MR; i++) {
                vec av = vset1(a[i * lda + k]);
                acc[i][0] = vfma(av, w0, acc[i][0]);
                acc[i][1] = vfma(av, w1, acc[i][1]);
                acc[i][2] = vfma(av, w2, acc[i][2]);
                acc[i][3] = vfma(av, w3, acc[i][3]);
            }
        }
    } else {  /* the last, shorter run of rows */
        for (long k = 0; k < K; k++) {
            const float *wr = w + k * C;
            for (long i = 0; i < mr; i++) {
                vec av = vset1(a[i * lda + k]);
                for (int j = 0; j < NV; j++) acc[i][j] = vfma(av, vload(wr + VW * j), acc[i][j]);
            }
        }
    }
}

void linear_act_norm_forward(const float *x, long ldx, const float *w, const float *bias, const float *gamma,
                             const float *beta, float *z, float *h, float *mean, float *rstd, long rows, long K,
                             double eps, int threads) {
    const long runs = (rows + MR - 1) / MR;
    const int stream = aligned64(z) && aligned64(h);
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static)
        for (long run = 0; run < runs; run++) {
            const long r0 = run * MR, mr = rows - r0 < MR ? rows - r0 : MR;
            vec acc[MR][NV];
            prefetch_rows(x, ldx, K, r0 + AHEAD * MR, MR, rows);
            product_rows(x + r0 * ldx, ldx, w, bias, K, mr, acc);
            for (long i = 0; i < mr; i++) {
                const long r = r0 + i;
                vec u[NV], s = vzero(), v = vzero();
                for (int j = 0; j < NV; j++) {
                    put(stream, z + r * C + VW * j, acc[i][j]);
                    u[j] = vrelu(acc[i][j]);
                    s = vadd(s, u[j]);
                }
                const float m = vsum(s) / C;
                const vec mv = vset1(m);
                for (int j = 0; j < NV; j++) {
                    vec d = vsub(u[j], mv);
                    v = vfma(d, d, v);
                }
                const float rs = (float)(1.0 / sqrt((double)vsum(v) / C + eps));
                const vec rsv = vset1(rs);
                for (int j = 0; j < NV; j++)
                    put(stream, h + r * C + VW * j,
                        vfma(vmul(vsub(u[j], mv), rsv), vload(gamma + VW * j), vload(beta + VW * j)));
                mean[r] = m;
                rstd[r] = rs;
            }
        }
        stream_fence();
    }
}

/* partial: scratch of 3 * threads * C doubles */
void linear_act_norm_backward(const float *g, long ldg, const float *w, const float *z, const float *gamma,
                              const float *mean, const float *rstd, float *gz, float *ggamma, float *gbeta,
                              float *gbias, double *partial, long rows, long K, int threads) {
    const long runs = (rows + MR - 1) / MR;
    memset(partial, 0, sizeof(double) * 3 * (size_t)threads * C);
    const int stream = aligned64(gz);
#pragma omp parallel num_threads(threads)
    {
        int t = 0;
#ifdef _OPENMP
        t = omp_get_thread_num();
#endif
        double *acc_w = partial + (size_t)t * 3 * C, *acc_b = acc_w + C, *acc_z = acc_w + 2 * C;
        vec gv[NV];
        for (int j = 0; j < NV; j++) gv[j] = vload(gamma + VW * j);
#pragma omp for schedule(static)
        for (long run = 0; run < runs; run++) {
            const long r0 = run * MR, mr = rows - r0 < MR ? rows - r0 : MR;
            vec gh[MR][NV];
            prefetch_rows(g, ldg, K, r0 + AHEAD * MR, MR, rows);
            prefetch_rows(z, C, C, r0 + AHEAD * MR, MR, rows);
            product_rows(g + r0 * ldg, ldg, w, 0, K, mr, gh);
            vec sum_w[NV], sum_b[NV], sum_z[NV];  /* this run's column sums, added to the thread's double sums below */
            for (int j = 0; j < NV; j++) sum_w[j] = sum_b[j] = sum_z[j] = vzero();
            for (long i = 0; i < mr; i++) {
                const long r = r0 + i;
                const vec mv = vset1(mean[r]), rsv = vset1(rstd[r]);
                vec zr[NV], uh[NV], gh_hat[NV], c1 = vzero(), c2 = vzero();
                for (int j = 0; j < NV; j++) {
                    zr[j] = vload(z + r * C + VW * j);
                    uh[j] = vmul(vsub(vrelu(zr[j]), mv), rsv);
                    gh_hat[j] = vmul(gh[i][j], gv[j]);
                    c1 = vadd(c1, gh_hat[j]);
                    c2 = vfma(gh_hat[j], uh[j], c2);
                    sum_w[j] = vfma(gh[i][j], uh[j], sum_w[j]);
                    sum_b[j] = vadd(sum_b[j], gh[i][j]);
                }
                const vec a = vset1(vsum(c1) / C), c = vset1(vsum(c2) / C);
                for (int j = 0; j < NV; j++) {
                    const vec dz = vwhere_pos(zr[j], vmul(rsv, vsub(vsub(gh_hat[j], a), vmul(uh[j], c))));
                    put(stream, gz + r * C + VW * j, dz);
                    sum_z[j] = vadd(sum_z[j], dz);
                }
            }
            for (int j = 0; j < NV; j++) {
                float sw[VW], sb[VW], sz[VW];
                vstore(sw, sum_w[j]);
                vstore(sb, sum_b[j]);
                vstore(sz, sum_z[j]);
                for (int l = 0; l < VW; l++) {
                    acc_w[VW * j + l] += sw[l];
                    acc_b[VW * j + l] += sb[l];
                    acc_z[VW * j + l] += sz[l];
                }
            }
        }
        stream_fence();
    }
    for (long j = 0; j < C; j++) {
        double sw = 0, sb = 0, sz = 0;
        for (int t = 0; t < threads; t++) {
            sw += partial[(size_t)t * 3 * C + j];
            sb += partial[(size_t)t * 3 * C + C + j];
            sz += partial[(size_t)t * 3 * C + 2 * C + j];
        }
        ggamma[j] = (float)sw;
        gbeta[j] = (float)sb;
        gbias[j] = (float)sz;
    }
}
