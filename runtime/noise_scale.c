/* noise_scale.c: the gradient noise scale B_simple = tr(Sigma) / |G|^2 (McCandlish et al.
 * 2018, "An Empirical Model of Large-Batch Training", appendix A), estimated online from the
 * squared norms of two mean gradients of the same step at batch sizes b_small < b_big:
 *   E|G_b|^2 = |G|^2 + tr(Sigma) / b, so
 *   |G|^2    ~ (b_big |G_big|^2 - b_small |G_small|^2) / (b_big - b_small)
 *   tr(Sigma) ~ (|G_small|^2 - |G_big|^2) / (1/b_small - 1/b_big),
 * both unbiased. One step's estimates are noisy and their ratio is biased, so each is smoothed
 * by its own moving average and the noise scale is the ratio of the two averages. Both
 * estimates are linear in the squared norms, and a global squared norm is the sum of the
 * stages', so the stages' averages add up to the average of the global estimates. */
#include <math.h>

#include "prt.h"

int pr_noise_batches(int64_t micro, int64_t window, int64_t replicas, double *b_small, double *b_big)
{
    *b_small = (double)micro;
    *b_big = (double)micro * (double)window * (double)replicas;
    return window * replicas > 1;
}

void pr_noise_estimates(double small_sq, double b_small, double big_sq, double b_big, double *g2, double *trace)
{
    *g2 = (b_big * big_sq - b_small * small_sq) / (b_big - b_small);
    *trace = (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big);
}

void pr_noise_ema_add(pr_noise_ema *e, double g2, double trace, double decay)
{
    e->g2 = decay * e->g2 + (1.0 - decay) * g2;
    e->trace = decay * e->trace + (1.0 - decay) * trace;
    e->weight = decay * e->weight + (1.0 - decay); // 1 - decay^n: the averages' bias correction
    e->n++;
}

void pr_noise_ema_sum(pr_noise_ema *total, const pr_noise_ema *part)
{
    if (part->n == 0)
        return;
    total->g2 += part->g2 / part->weight;
    total->trace += part->trace / part->weight;
    total->weight = 1.0; // the sum holds corrected averages
    total->n = part->n > total->n ? part->n : total->n;
}

double pr_noise_scale(const pr_noise_ema *e)
{
    if (e->n == 0 || !(e->g2 > 0.0))
        return NAN;
    return e->trace / e->g2;
}
