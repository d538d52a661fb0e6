/* paci_dgc.h: compression dgc's density warm-up and the size of a pair list, defined once:
 * the runtime's selection and exchange (runtime/dgc.c) take k and the words from them, the
 * compiler's warning about a warm-up that outlasts the run (compiler/sema.c) names the density
 * it leaves, and --explain (compiler/inspect.c) prices the lists.
 *
 * The density of step t (from 1) falls exponentially from s0 = 0.25 (1 when density >= 0.25)
 * to `density` over the first N = warmup steps: s0 (density / s0)^((t - 1) / N) for t <= N,
 * `density` after (and without a warm-up).
 */
#ifndef PACI_DGC_H
#define PACI_DGC_H

#include <math.h>
#include <stdint.h>

static inline double paci_dgc_density(double density, int64_t warmup, int64_t t)
{
    double start = density < 0.25 ? 0.25 : 1.0;
    if (warmup <= 0 || t > warmup || t < 1)
        return density;
    return start * pow(density / start, (double)(t - 1) / (double)warmup);
}

/* A pair list (runtime/dgc.c): the stage's n entries cut into blocks of PACI_DGC_BLOCK, so that
 * an index is its block and a 16-bit offset in it. A list of k < n pairs is one 32-bit word per
 * block, the pairs up to its end (a running count), then one 32-bit word per pair: the value
 * rounded to bf16 in the high half, the offset in the low half. A list of all n entries is the
 * n values as fp32, in index order (no offsets needed: the same 4 bytes an entry, exact). */
#define PACI_DGC_BLOCK 65536

static inline int64_t paci_dgc_blocks(int64_t n)
{
    return (n + PACI_DGC_BLOCK - 1) / PACI_DGC_BLOCK;
}

/* The 32-bit words of a list of k pairs in a stage of n entries. */
static inline int64_t paci_dgc_list_words(int64_t n, int64_t k)
{
    return k >= n ? n : paci_dgc_blocks(n) + k;
}

#endif
