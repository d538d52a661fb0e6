/* optim.c: the learning-rate schedule and the pieces of gradient clipping. */
#include <math.h>

#include "prt.h"

/* Warmup is linear from peak/warmup at t=1 to the peak at t=warmup; the decay then runs
 * from the peak to min_lr_ratio * peak at t = steps, and stays there after it. */
double pr_lr_over(const pr_program *prog, int64_t steps, int64_t warmup, int64_t t)
{
    double peak = prog->lr, floor_lr = prog->min_lr_ratio * prog->lr;
    if (warmup > 0 && t <= warmup)
        return peak * (double)t / (double)warmup;
    int64_t span = steps - warmup;
    double progress = span > 0 ? (double)(t - warmup) / (double)span : 1.0;
    if (progress > 1.0)
        progress = 1.0;
    switch (prog->decay) {
    case PR_DECAY_COSINE:
        return floor_lr + (peak - floor_lr) * 0.5 * (1.0 + cos(M_PI * progress));
    case PR_DECAY_LINEAR:
        return peak - (peak - floor_lr) * progress;
    default:
        return peak;
    }
}

double pr_lr(const pr_program *prog, int64_t t)
{
    return pr_lr_over(prog, prog->steps, prog->warmup_steps, t);
}

double pr_sumsq(const float *x, int64_t n)
{
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)x[i] * (double)x[i];
    return sum;
}

/* The fold is sequential so that the same tensors in the same order give the same bits. */
double pr_fold_norm(const double *sums, int64_t n)
{
    double total = 0.0;
    for (int64_t i = 0; i < n; i++)
        total += sums[i];
    return sqrt(total);
}

float pr_clip_scale(double norm, double clip)
{
    if (clip > 0.0 && norm > clip)
        return (float)(clip / norm);
    return 1.0f;
}
