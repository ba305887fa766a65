/* The goal belief's per-partner online correction (algos/coplayer_bayes.GoalBelief), two passes over W.
 *
 * W is row-major [B, A, H]: one [A, H] matrix per (env, learner agent, co-player). Per env step the belief reads
 * it once to shift the co-player's predicted logits (out[b] = W[b] h[b]) and, after the move, adds one outer
 * product (W[b] += lr err[b] (x) h[b] / (|h[b]|^2 + 1), normalised online logistic regression). At E = 1024 W is ~5 MB, more than this CPU's caches, and the PyTorch
 * composition walks it four times a step (the broadcast product, its sum, and the in-place update's read and
 * write of a temporary-free addcmul); here each pass reads each row once, while it is in cache.
 * A row whose error is all zero (a co-player not seen this step) is left untouched.
 */
#ifdef _OPENMP
#include <omp.h>
#endif

void correction_apply_f32(const float *W, const float *h, float *out, long B, long A, long H, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long b = 0; b < B; b++) {
        const float *hb = h + b * H;
        for (long a = 0; a < A; a++) {
            const float *w = W + (b * A + a) * H;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (long j = 0; j < H; j++) s += w[j] * hb[j];
            out[b * A + a] = s;
        }
    }
}

void correction_update_f32(float *W, const float *err, const float *h, float lr, long B, long A, long H,
                           int threads) {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long b = 0; b < B; b++) {
        const float *hb = h + b * H;
        float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
        for (long j = 0; j < H; j++) sq += hb[j] * hb[j];
        const float scale = lr / (sq + 1.0f); /* the normalised step: lr h / (|h|^2 + 1) */
        for (long a = 0; a < A; a++) {
            const float e = err[b * A + a] * scale;
            if (e == 0.0f) continue;
            float *w = W + (b * A + a) * H;
#pragma omp simd
            for (long j = 0; j < H; j++) w[j] += e * hb[j];
        }
    }
}
