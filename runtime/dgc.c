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
 *   value) pairs in index order, 4 bytes a pair (paci_dgc.h: a 16-bit offset in a block of
 *   65536 entries and the value rounded to bf16, after one 32-bit running count per block),
 *   and keeps in acc what was not sent: the value's rounding error, v - bf16(v), exact in
 *   float; u is zeroed there (momentum factor masking). All n entries (k = n: density 1, or
 *   the first steps of a warm-up from 1) go as the n fp32 values themselves, exactly.
 * Every replica then sums all D replicas' decoded lists in replica order 0..D-1 into its
 * gradients (the dense sum's order, so density 1 gives the dense run's bits under error
 * feedback), and the optimizer steps on that sum: LARS with momentum 0, since the sum already
 * holds the replicas' velocities; the adaptive rules as in a dense run, their moments fed by
 * the sum. Decoding is exact (a bf16 is the top half of a float), so every transport that
 * carries the same words gives the same bits.
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
#include <stdio.h>
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

uint16_t pr_dgc_round(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    pr_bf16 h = pr_to_bf16(v);
    if ((u & 0x7f800000u) != 0x7f800000u && (h & 0x7fffu) == 0x7f80u) // finite, rounded to inf
        h = (pr_bf16)(((u >> 16) & 0x8000u) | 0x7f7fu);
    return h;
}

/* Whether a float is finite, from its bits (the GPU's kernels test the same bits). */
static int finite_bits(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return (u & 0x7f800000u) != 0x7f800000u;
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
    if (b->k >= n) { // every entry: the values as they are, nothing left behind
        memcpy(b->list, acc, (size_t)n * sizeof(float));
        memset(acc, 0, (size_t)n * sizeof(float));
        if (u)
            memset(u, 0, (size_t)n * sizeof(float));
        return b->k;
    }
    int64_t blocks = paci_dgc_blocks(n), block = 0;
    uint32_t *ends = b->list, *pairs = b->list + blocks;
    for (int64_t j = 0; j < b->k; j++) {
        uint32_t i = b->index[j];
        while ((int64_t)i >= (block + 1) * PACI_DGC_BLOCK)
            ends[block++] = (uint32_t)j;
        uint16_t h = pr_dgc_round(acc[i]);
        pairs[j] = (uint32_t)h << 16 | (i % PACI_DGC_BLOCK);
        // what was not sent stays: v - bf16(v) is exact (at most 16 significant bits)
        acc[i] = finite_bits(acc[i]) ? acc[i] - pr_from_bf16(h) : 0.0f;
        if (u)
            u[i] = 0.0f;
    }
    while (block < blocks)
        ends[block++] = (uint32_t)b->k;
    return b->k;
}

/* One replica's list (k pairs of a stage of n) decoded into out: written when first, else added. */
static void add_list(float *out, int64_t n, int64_t k, const uint32_t *list, int first)
{
    if (k >= n) {
        for (int64_t i = 0; i < n; i++) {
            float v;
            memcpy(&v, &list[i], sizeof v);
            out[i] = first ? v : out[i] + v;
        }
        return;
    }
    int64_t blocks = paci_dgc_blocks(n), j = 0;
    const uint32_t *pairs = list + blocks;
    for (int64_t block = 0; block < blocks; block++)
        for (; j < (int64_t)list[block]; j++) {
            int64_t i = block * PACI_DGC_BLOCK + (pairs[j] & 0xffffu);
            float v = pr_from_bf16((pr_bf16)(pairs[j] >> 16));
            out[i] = first ? v : out[i] + v;
        }
}

void pr_dgc_sum(float *out, int64_t n, const pr_dgc_buffers *const *from, int D)
{
    memset(out, 0, (size_t)n * sizeof(float));
    for (int q = 0; q < D; q++) // replica 0's values as they are, as the dense sum starts
        add_list(out, n, from[q]->k, from[q]->list, q == 0);
}

int pr_dgc_check_list(const uint32_t *list, int64_t n, int64_t k, char *why, size_t len)
{
    if (k >= n) // n floats, taken as they are
        return 0;
    int64_t blocks = paci_dgc_blocks(n), j = 0;
    const uint32_t *pairs = list + blocks;
    for (int64_t block = 0; block < blocks; block++) {
        int64_t size = block == blocks - 1 ? n - block * PACI_DGC_BLOCK : PACI_DGC_BLOCK;
        if ((int64_t)list[block] < j || (int64_t)list[block] > k) {
            snprintf(why, len, "block %lld's running count %u, not in %lld..%lld", (long long)block, list[block],
                     (long long)j, (long long)k);
            return -1;
        }
        for (int64_t first = j; j < (int64_t)list[block]; j++) {
            uint32_t offset = pairs[j] & 0xffffu;
            if (offset >= size || (j > first && offset <= (pairs[j - 1] & 0xffffu))) {
                snprintf(why, len, "pair %lld at offset %u of block %lld, not ascending below its %lld entries",
                         (long long)j, offset, (long long)block, (long long)size);
                return -1;
            }
        }
    }
    if (j != k) {
        snprintf(why, len, "block counts that end at %lld of its %lld pairs", (long long)j, (long long)k);
        return -1;
    }
    return 0;
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
    b->list = pr_alloc((size_t)(paci_dgc_blocks(n) + n) * sizeof(uint32_t));
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
    free(b->list);
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
