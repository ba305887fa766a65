/* The stag hunt's co-player view for egocentric windows with two hunters (envs/staghunt.window_view), one pass
 * per row.
 *
 * A row is [own (2), ids (H), lead (1), hunters (W*W), stags (W*W), hares (W*W), outside (W*W)]: the observer's
 * window. The view re-centres it on the partner (the hunter channel's brightest cell): the prey channels shifted
 * by the partner's offset (cells beyond the observer's window empty), the observer as the partner's "other
 * hunter", the outside-the-grid channel from the partner's absolute position, the partner's id and position in
 * front. Where the row is the observer's own (rel 0) or the partner is out of sight, the row is copied with only
 * its id rolled by 0. The PyTorch composition is some 60 ops of a few microseconds each at B = 1024; here each row
 * is read once and written once.
 */
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

void window_view_f32(const float *obs, const long *rel, float *out, long B, long D, long H, long R, long size,
                     int threads) {
    const long w = 2 * R + 1, ww = w * w, lead = 2 + H + 1;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long b = 0; b < B; b++) {
        const float *o = obs + b * D;
        float *v = out + b * D;
        const float *hunters = o + lead;
        long at = 0; /* the first brightest cell, as torch.argmax */
        for (long c = 1; c < ww; c++)
            if (hunters[c] > hunters[at]) at = c;
        const int keep = rel[b] == 0 || hunters[at] < 0.5f;
        const long dr = keep ? 0 : at / w - R, dc = keep ? 0 : at % w - R;
        /* stags and hares: new[a, c] = old[a + dr, c + dc], empty beyond the observer's window */
        for (long ch = 0; ch < 2; ch++) {
            const float *src = o + lead + ww + ch * ww;
            float *dst = v + lead + ww + ch * ww;
            for (long a = 0; a < w; a++) {
                const long rr = a + dr;
                for (long c = 0; c < w; c++) {
                    const long cc = c + dc;
                    dst[a * w + c] = (rr >= 0 && rr < w && cc >= 0 && cc < w) ? src[rr * w + cc] : 0.0f;
                }
            }
        }
        /* the observer, seen from the partner, at offset (-dr, -dc) */
        float *me = v + lead;
        if (keep) {
            memcpy(me, hunters, ww * sizeof(float));
        } else {
            memset(me, 0, ww * sizeof(float));
            me[(R - dr) * w + (R - dc)] = 1.0f;
        }
        /* outside the grid, from the partner's absolute position */
        const long pr = (long)nearbyintf(o[0] * (float)(size - 1)) + dr;
        const long pc = (long)nearbyintf(o[1] * (float)(size - 1)) + dc;
        float *outside = v + lead + 3 * ww;
        for (long a = 0; a < w; a++) {
            const long ar = pr - R + a;
            const int out_r = ar < 0 || ar >= size;
            for (long c = 0; c < w; c++) {
                const long ac = pc - R + c;
                outside[a * w + c] = (out_r || ac < 0 || ac >= size) ? 1.0f : 0.0f;
            }
        }
        /* the partner's id and position in front; the lead feature as it is */
        long me_id = 0;
        for (long i = 1; i < H; i++)
            if (o[2 + i] > o[2 + me_id]) me_id = i;
        const long id = (me_id + (keep ? 0 : rel[b])) % H;
        for (long i = 0; i < H; i++) v[2 + i] = i == id ? 1.0f : 0.0f;
        if (keep) {
            v[0] = o[0];
            v[1] = o[1];
        } else {
            v[0] = (float)pr / (float)(size - 1);
            v[1] = (float)pc / (float)(size - 1);
        }
        v[2 + H] = o[2 + H];
    }
}
