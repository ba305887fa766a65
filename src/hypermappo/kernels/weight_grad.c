/* c [m, n] = a [K, m]^T b [K, n] for a long reduction (K rows, tens of thousands) into a small matrix (m, n <= 64):
 * the weight gradient of a linear layer over a large batch, or G of them (one per agent of a layer with per-agent
 * weights). Rows may be strided (lda, ldb: elements between rows; columns are contiguous). See weight_grad.py.
 *
 * Each thread takes a contiguous run of rows and accumulates its own m x n partial in float; the partials are added
 * in thread order, so a thread count gives the same bits every time. The rows go through in tiles of KT: per tile, a
 * register block of MR rows of c x NB vectors of W columns takes one product per row of the tile. The columns are
 * the wider of (m, n) in whole vectors (`wgrad` transposes the problem when that is m); a tile of b whose width is
 * not a whole number of vectors is copied, zero-padded, into a buffer first.
 *
 * The block is sized to the vector registers: with AVX-512 (32 registers of 16 floats) 6 rows x 4 vectors of 16;
 * without (AVX2: 16 registers of 8 floats) 6 rows x 2 vectors of 8, 12 accumulators. The AVX-512 block built for
 * AVX2 needed 48 registers and spilled: the kernel ran 0.06-0.26x MKL's speed on an AMD EPYC without AVX-512
 * (weight_grad.py's probe keeps MKL where the kernel loses).
 */
#include <string.h>
#include <omp.h>

#define KT 256
#define MR 6
#define MAX_WIDTH 64
#ifdef __AVX512F__
#define W 16
#define NB 4
#else
#define W 8
#define NB 2
#endif
typedef float vec __attribute__((vector_size(4 * W), aligned(4)));

/* unaligned loads and stores through the type's 4-byte alignment (a memcpy into a vector went through a stack
 * slot in two 16-byte halves on the AVX2 build, a store-forwarding stall per load) */
static inline vec load(const float *p) { return *(const vec *)p; }
static inline void store(float *p, vec v) { *(vec *)p = v; }

/* The next tile's rows of a and b, a cache line at a time, one line per step of the current tile's loops, so the
 * tile is in the cache when its turn comes: a tile is read once per block of output rows, and without this the
 * first of those reads waited on memory (the compiled MAPPO update at E = 1024 on a 2-core Xeon: the kernel's time
 * per update 210 -> 143 ms, `python benchmarks/kernels/kernel_builds.py weight_grad --baseline 75ad023`). */
typedef struct {
    const char *a, *b;      /* the next tile's first rows */
    long lda, ldb;          /* bytes between rows */
    long la, lb, rows;      /* lines per row of a, of b; rows of the next tile */
    long row, part;         /* the next line to fetch: row, and line within (a's lines, then b's) */
} prefetcher;

static inline void prefetch_step(prefetcher *p) {
    if (p->row >= p->rows) return;
    const char *line = p->part < p->la ? p->a + p->row * p->lda + 64 * p->part
                                       : p->b + p->row * p->ldb + 64 * (p->part - p->la);
    __builtin_prefetch(line, 0, 2);
    if (++p->part == p->la + p->lb) {
        p->part = 0;
        p->row++;
    }
}

/* acc = the tile's (kt rows) a [.., mr]^T b [.., NB * W] for one block of c: MR x NB vectors, unrolled for the
 * compiler so that the block stays in registers (mr < MR: the rows past mr take zeros) */
static inline __attribute__((always_inline)) void block(vec acc[MR][NB], const float *as, long lda, const float *bs,
                                                        long bstride, long kt, long mr, prefetcher *pf) {
    vec r[MR][NB] = {{{0}}};
    for (long k = 0; k < kt; k++) {
        const float *br = bs + k * bstride, *ar = as + k * lda;
        vec bv[NB];
#pragma GCC unroll 4
        for (int j = 0; j < NB; j++) bv[j] = load(br + W * j);
        prefetch_step(pf);
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            float av = mr == MR || i < mr ? ar[i] : 0.f;
#pragma GCC unroll 4
            for (int j = 0; j < NB; j++) r[i][j] += av * bv[j];
        }
    }
    memcpy(acc, r, sizeof r);
}

/* partial [threads, m, np]: each thread's sums, np = n rounded up to whole vectors */
static void partial_sums(const float *a, const float *b, long K, long m, long n, long lda, long ldb, int threads,
                         float *partial) {
    long nv = (n + W - 1) / W, np = nv * W;
    memset(partial, 0, sizeof(float) * (size_t)threads * (size_t)(m * np));
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        long k0 = K * t / nt, k1 = K * (t + 1) / nt;
        float *c = partial + (long)t * m * np;
        float padded[KT * MAX_WIDTH];
        for (long kb = k0; kb < k1; kb += KT) {
            long kt = k1 - kb < KT ? k1 - kb : KT;
            const float *bs = b + kb * ldb;
            long bstride = ldb;
            if (n != np) {
                for (long k = 0; k < kt; k++) {
                    memcpy(padded + k * np, bs + k * ldb, sizeof(float) * (size_t)n);
                    memset(padded + k * np + n, 0, sizeof(float) * (size_t)(np - n));
                }
                bs = padded;
                bstride = np;
            }
            const float *as = a + kb * lda;
            long next = kb + kt, next_rows = k1 - next < KT ? k1 - next : KT;
            prefetcher pf = {(const char *)(a + next * lda), (const char *)(b + next * ldb), lda * 4, ldb * 4,
                             (m * 4 + 63) / 64, (n * 4 + 63) / 64, next_rows > 0 ? next_rows : 0, 0, 0};
            for (long i0 = 0; i0 < m; i0 += MR) {
                long mr = m - i0 < MR ? m - i0 : MR;
                for (long j0 = 0; j0 < nv; j0 += NB) {
                    long jv = nv - j0 < NB ? nv - j0 : NB;
                    vec acc[MR][NB] = {{{0}}};
                    if (jv == NB && mr == MR) {
                        block(acc, as + i0, lda, bs + j0 * W, bstride, kt, MR, &pf);
                    } else if (jv == NB) {  /* the last rows: the same block, zeros past m */
                        block(acc, as + i0, lda, bs + j0 * W, bstride, kt, mr, &pf);
                    } else {
                        for (long k = 0; k < kt; k++) {
                            const float *br = bs + k * bstride + j0 * W, *ar = as + k * lda + i0;
                            prefetch_step(&pf);
                            for (long j = 0; j < jv; j++) {
                                vec bv = load(br + W * j);
                                for (long i = 0; i < mr; i++) acc[i][j] += ar[i] * bv;
                            }
                        }
                    }
                    for (long i = 0; i < mr; i++)
                        for (long j = 0; j < jv; j++) {
                            float *p = c + (i0 + i) * np + (j0 + j) * W;
                            store(p, load(p) + acc[i][j]);
                        }
                }
            }
        }
    }
}

/* useful vector lanes x width: the side to vectorise over */
static double lanes(long d) { return (double)d * (double)d / (double)((d + W - 1) / W * W); }

/* c [G, m, n] (contiguous) = a[g]^T b[g] for each g; a[g] = a + g * sga, b[g] = b + g * sgb.
 * partial: scratch of threads * MAX_WIDTH * MAX_WIDTH floats */
void weight_grad(const float *a, const float *b, float *c, long G, long K, long m, long n, long sga, long lda,
                 long sgb, long ldb, int threads, float *partial) {
    int swap = lanes(m) > lanes(n);  /* then c^T = b^T a, written back transposed */
    long rows = swap ? n : m, cols = swap ? m : n, np = (cols + W - 1) / W * W;
    for (long g = 0; g < G; g++) {
        const float *ag = a + g * sga, *bg = b + g * sgb;
        float *cg = c + g * m * n;
        if (swap)
            partial_sums(bg, ag, K, rows, cols, ldb, lda, threads, partial);
        else
            partial_sums(ag, bg, K, rows, cols, lda, ldb, threads, partial);
        for (long i = 0; i < rows; i++)
            for (long j = 0; j < cols; j++) {
                float s = 0;
                for (int t = 0; t < threads; t++) s += partial[(long)t * rows * np + i * np + j];
                cg[swap ? j * n + i : i * n + j] = s;
            }
    }
}
