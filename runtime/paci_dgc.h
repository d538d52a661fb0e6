/* paci_dgc.h: compression dgc's density warm-up, defined once: the runtime's selection
 * (runtime/dgc.c) takes k from it, and the compiler's warning about a warm-up that outlasts
 * the run (compiler/sema.c) names the density it leaves.
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

#endif
