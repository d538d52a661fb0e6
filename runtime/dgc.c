/* dgc.c: Deep Gradient Compression of the replicas' exchange (Lin, Han, Mao, Wang, Dally,
 * ICLR 2018), `parallel { compression dgc { ... } }` (docs/dsl.md).
 *
 * At each step of a stage, each replica r of it, before the exchange:
 *   g     = its window's gradient (already scaled by 1/(D K)), times the local clipping
 *           factor min(1, (C / sqrt(D)) / ||g||) when `clip C` is set (the paper's rule: the
 *           threshold of the summed gradient scaled by D^-1/2);
 *   momentum correction (LARS, the one momentum-SGD rule):  u = mu u + g,  acc = acc + u;
 *   error feedback (AdamW, LAMB, Muon, NAdamW, LANS):        acc = acc + g;
 *   sends the k entries of acc largest in magnitude, ties to the lower index, as (index,
 *   value) pairs in index order, and zeroes them in acc (and u: momentum factor masking).
 * Every replica then sums all D replicas' pairs in replica order 0..D-1 into its gradients
 * (the dense sum's order, so density 1 gives the dense run's bits under error feedback), and
 * the optimizer steps on that sum: LARS with momentum 0, since the sum already holds the
 * replicas' velocities; the adaptive rules as in a dense run, their moments fed by the sum.
 *
 * k = max(1, ceil(density(t) n)) for a stage of n parameters at its step t (from 1), where
 * density(t) falls exponentially from s0 = 0.25 (1 when density >= 0.25) to `density` over
 * the first N = warmup_steps steps (paci_dgc.h, which the compiler shares). Depends on t only,
 * so a resumed run takes the same k.
 *
 * A step that on_nan skips (all replicas skip it: they judge the same sum) is undone: the
 * residual and velocity go back to what the step found (pr_dgc_undo), so its pairs are sent
 * later and its own non-finite gradient is dropped, as a dense skipped step drops it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "paci_dgc.h"
#include "prt.h"

double pr_dgc_density(const pr_program *prog, int64_t t)
{
    return paci_dgc_density(prog->dgc_density, prog->dgc_warmup_steps, t);
}

int64_t pr_dgc_count(const pr_program *prog, int64_t t, int64_t n)
{
    double want = ceil(pr_dgc_density(prog, t) * (double)n);
    if (want >= (double)n)
        return n;
    return want < 1.0 ? 1 : (int64_t)want;
}

int pr_dgc_momentum_correction(const pr_program *prog)
{
    return prog->optimizer == PR_OPT_LARS;
}

/* |x| as an unsigned integer: the bits of a float without its sign order as the magnitudes
 * do (a NaN above infinity, so it is sent and the step's non-finite check sees it). */
static uint32_t magnitude(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u & 0x7fffffffu;
}

static void swap_keys(uint32_t *a, int64_t i, int64_t j)
{
    uint32_t t = a[i];
    a[i] = a[j];
    a[j] = t;
}

/* The k-th largest of a[0..n) (1 <= k <= n), reordering a: quickselect with a three-way
 * partition, so runs of equal keys (zeros) cost one pass. The value found does not depend
 * on the pivots, only the time. */
static uint32_t kth_largest(uint32_t *a, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n, want = k - 1;
    for (;;) {
        if (hi - lo == 1)
            return a[lo];
        uint32_t x = a[lo], y = a[lo + (hi - lo) / 2], z = a[hi - 1];
        uint32_t pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        int64_t gt = lo, i = lo, lt = hi; // [lo, gt) > pivot, [gt, lt) == pivot, [lt, hi) < pivot
        while (i < lt) {
            if (a[i] > pivot)
                swap_keys(a, gt++, i++);
            else if (a[i] < pivot)
                swap_keys(a, i, --lt);
            else
                i++;
        }
        if (want < gt)
            hi = gt;
        else if (want < lt)
            return pivot;
        else
            lo = lt;
    }
}

int64_t pr_dgc_select(const float *x, int64_t n, int64_t k, uint32_t *scratch, uint32_t *index)
{
    if (k >= n) {
        for (int64_t i = 0; i < n; i++)
            index[i] = (uint32_t)i;
        return n;
    }
    for (int64_t i = 0; i < n; i++)
        scratch[i] = magnitude(x[i]);
    uint32_t threshold = kth_largest(scratch, n, k);
    int64_t above = 0;
    for (int64_t i = 0; i < n; i++)
        above += magnitude(x[i]) > threshold;
    int64_t ties = k - above, out = 0; // of the entries equal to the threshold, the first ones
    for (int64_t i = 0; i < n && out < k; i++) {
        uint32_t m = magnitude(x[i]);
        if (m > threshold || (m == threshold && ties-- > 0))
            index[out++] = (uint32_t)i;
    }
    return out;
}

float pr_dgc_clip_scale(const pr_program *prog, int D, const float *grad, int64_t n)
{
    if (prog->dgc_clip <= 0.0)
        return 1.0f;
    return pr_clip_scale(sqrt(pr_sumsq(grad, n)), prog->dgc_clip / sqrt((double)D));
}

int64_t pr_dgc_compress(pr_dgc_buffers *b, const float *grad, int64_t n, int64_t k, float scale, float mu)
{
    float *acc = b->residual, *u = b->velocity;
    memcpy(b->residual_before, acc, (size_t)n * sizeof(float));
    if (u)
        memcpy(b->velocity_before, u, (size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        float g = scale == 1.0f ? grad[i] : grad[i] * scale;
        if (u) {
            u[i] = mu * u[i] + g;
            acc[i] = acc[i] + u[i];
        } else {
            acc[i] = acc[i] + g;
        }
    }
    b->k = pr_dgc_select(acc, n, k, b->scratch, b->index);
    for (int64_t j = 0; j < b->k; j++) {
        uint32_t i = b->index[j];
        b->value[j] = acc[i];
        acc[i] = 0.0f;
        if (u)
            u[i] = 0.0f;
    }
    return b->k;
}

void pr_dgc_sum(float *out, int64_t n, const pr_dgc_buffers *const *from, int D)
{
    memset(out, 0, (size_t)n * sizeof(float));
    for (int64_t j = 0; j < from[0]->k; j++) // replica 0's values as they are, as the dense sum starts
        out[from[0]->index[j]] = from[0]->value[j];
    for (int q = 1; q < D; q++)
        for (int64_t j = 0; j < from[q]->k; j++)
            out[from[q]->index[j]] = out[from[q]->index[j]] + from[q]->value[j];
}

int64_t pr_dgc_check_index(const uint32_t *index, int64_t k, int64_t n)
{
    for (int64_t j = 0; j < k; j++)
        if ((int64_t)index[j] >= n || (j > 0 && index[j] <= index[j - 1]))
            return j;
    return -1;
}

void pr_dgc_undo(pr_dgc_buffers *b, int64_t n)
{
    memcpy(b->residual, b->residual_before, (size_t)n * sizeof(float));
    if (b->velocity)
        memcpy(b->velocity, b->velocity_before, (size_t)n * sizeof(float));
}

void pr_dgc_alloc(pr_dgc_buffers *b, int64_t n, int velocity)
{
    b->residual = pr_alloc((size_t)n * sizeof(float));
    b->velocity = velocity ? pr_alloc((size_t)n * sizeof(float)) : NULL;
    b->scratch = pr_alloc((size_t)n * sizeof(uint32_t));
    b->index = pr_alloc((size_t)n * sizeof(uint32_t));
    b->value = pr_alloc((size_t)n * sizeof(float));
    b->residual_before = pr_alloc((size_t)n * sizeof(float));
    b->velocity_before = velocity ? pr_alloc((size_t)n * sizeof(float)) : NULL;
    b->k = 0;
}

void pr_dgc_free(pr_dgc_buffers *b)
{
    free(b->residual);
    free(b->velocity);
    free(b->scratch);
    free(b->index);
    free(b->value);
    free(b->residual_before);
    free(b->velocity_before);
    memset(b, 0, sizeof *b);
}

void pr_dgc_step(const pr_program *prog, const pr_stage_code *sc, const pr_adamw_args *args)
{
    pr_optim_rule rule = *sc->optim_rule;
    rule.momentum = 0.0;
    for (int i = 0; i < sc->n_tensors; i++)
        pr_optim_step(&rule, &sc->tensors[i], args);
    (void)prog;
}
