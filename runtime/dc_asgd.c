/* dc_asgd.c: `delay_correction dc-asgd` (docs/dsl.md "Delay correction"): DC-ASGD's
 * correction (Zheng et al. 2017) of one micro-batch's gradient, computed at weights its stage
 * has stepped away from since the forward, toward the weights it is applied to. */
#include "prt.h"

/* sum += g + coef g g (W - W_prev) over n weights. With g = G / c, G the micro-batch's
 * mean-loss gradient and c = K D the factor every backward divides by, DC-ASGD's
 * G + lambda G G d (W - W_prev), divided by c, is this with coef = lambda d c. */
void pr_dc_asgd_add(float *sum, const float *g, const float *w, const float *w_prev, int64_t n, float coef)
{
    for (int64_t i = 0; i < n; i++)
        sum[i] += g[i] + coef * g[i] * g[i] * (w[i] - w_prev[i]);
}
