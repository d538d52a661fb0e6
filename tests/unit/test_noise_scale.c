/* test_noise_scale.c: the gradient noise scale's estimator (runtime/noise_scale.c) against
 * float64 gradients planted with a known mean G and a known diagonal covariance Sigma: per
 * example g = G + N(0, Sigma), |G|^2 = 1, tr(Sigma) = 80, so B_simple = 80 sequences. The
 * small and big batches' mean gradients are formed from the examples exactly as the runtime
 * pairs them (pr_noise_batches): at D = 1 a window's first micro-batch against the window, at
 * D > 1 a replica's first micro-batch against every replica's window. Over many draws the
 * estimates' means land on the planted |G|^2 and tr(Sigma), the ratio of their moving averages
 * on B_simple, and the stages' averages add up to the whole model's. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "prt.h"

#define DIM 64
#define PLANTED_G2 1.0     /* DIM components of 1/8 */
#define PLANTED_TRACE 80.0 /* variances 0.5, 1, 1.5, 2 in turn: mean 1.25 */

static uint64_t rng_state;

static double uniform(void) /* splitmix64, in (0, 1) */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) / 9007199254740992.0;
}

static double gaussian(void) /* Box-Muller */
{
    return sqrt(-2.0 * log(uniform())) * cos(2.0 * M_PI * uniform());
}

/* One example's gradient, added into sum. */
static void add_example(double *sum)
{
    for (int i = 0; i < DIM; i++)
        sum[i] += 0.125 + sqrt(0.5 * (double)(1 + i % 4)) * gaussian();
}

/* Squared norm of sum / count over dimensions [from, to). */
static double mean_sq(const double *sum, double count, int from, int to)
{
    double total = 0.0;
    for (int i = from; i < to; i++)
        total += (sum[i] / count) * (sum[i] / count);
    return total;
}

/* One step of a run of micro-batches of `micro` examples, `window` a step, `replicas`
 * pipelines: the squared norms of replica 0's first micro-batch's mean and of the step's mean,
 * over dimensions [from, to) (a stage's parameters) for each of the `parts` splits. */
static void draw_step(int micro, int window, int replicas, const int *split, int parts, double *small_sq,
                      double *big_sq)
{
    double first[DIM] = {0}, all[DIM] = {0};
    for (int r = 0; r < replicas; r++)
        for (int k = 0; k < window; k++)
            for (int b = 0; b < micro; b++) {
                double g[DIM] = {0};
                add_example(g);
                for (int i = 0; i < DIM; i++) {
                    all[i] += g[i];
                    if (r == 0 && k == 0)
                        first[i] += g[i];
                }
            }
    for (int p = 0; p < parts; p++) {
        small_sq[p] = mean_sq(first, micro, split[p], split[p + 1]);
        big_sq[p] = mean_sq(all, (double)(micro * window * replicas), split[p], split[p + 1]);
    }
}

/* The estimates' means over `draws` steps (whole model), each within `sigmas` standard errors
 * of the planted value, and the standard errors themselves within 5% of it, so the check means
 * something. */
static void check_unbiased(int micro, int window, int replicas, int draws, double sigmas)
{
    double b_small, b_big;
    assert_int_equal(pr_noise_batches(micro, window, replicas, &b_small, &b_big), 1);
    assert_true(b_small == micro && b_big == (double)(micro * window * replicas));
    int whole[2] = {0, DIM};
    double sum_g2 = 0, sum_g2_sq = 0, sum_tr = 0, sum_tr_sq = 0;
    rng_state = 42;
    for (int n = 0; n < draws; n++) {
        double small_sq, big_sq, g2, trace;
        draw_step(micro, window, replicas, whole, 1, &small_sq, &big_sq);
        pr_noise_estimates(small_sq, b_small, big_sq, b_big, &g2, &trace);
        sum_g2 += g2, sum_g2_sq += g2 * g2, sum_tr += trace, sum_tr_sq += trace * trace;
    }
    double mean_g2 = sum_g2 / draws, mean_tr = sum_tr / draws;
    double se_g2 = sqrt((sum_g2_sq / draws - mean_g2 * mean_g2) / draws);
    double se_tr = sqrt((sum_tr_sq / draws - mean_tr * mean_tr) / draws);
    print_message("micro %d, window %d, replicas %d (B %g against %g), %d draws: |G|^2 %.4f +- %.4f "
                  "(planted %g), tr(Sigma) %.3f +- %.3f (planted %g)\n", micro, window, replicas, b_small,
                  b_big, draws, mean_g2, se_g2, PLANTED_G2, mean_tr, se_tr, PLANTED_TRACE);
    assert_true(se_g2 < 0.05 * PLANTED_G2 && se_tr < 0.05 * PLANTED_TRACE);
    assert_true(fabs(mean_g2 - PLANTED_G2) < sigmas * se_g2);
    assert_true(fabs(mean_tr - PLANTED_TRACE) < sigmas * se_tr);
}

/* D = 1: a window of 8 micro-batches of 4 sequences; B 4 against 32. */
static void test_window_form(void **state)
{
    (void)state;
    check_unbiased(4, 8, 1, 4000, 4.0);
    double b_small, b_big; // one micro-batch a step and one replica: no second batch size
    assert_int_equal(pr_noise_batches(4, 1, 1, &b_small, &b_big), 0);
}

/* D > 1: 4 replicas of one micro-batch of 4 (a replica's gradient against the reduced mean,
 * B 4 against 16), and 4 replicas of window 2 of micro-batches of 2 (B 2 against 16). */
static void test_replica_form(void **state)
{
    (void)state;
    check_unbiased(4, 1, 4, 4000, 4.0);
    check_unbiased(2, 2, 4, 4000, 4.0);
}

/* The runtime's noise scale is the ratio of the two moving averages (here over ~1000 steps):
 * within 10% of the planted 80 (about 4 standard errors). An average of each step's ratio is
 * not: a step's |G|^2 estimate is often near 0 or below (B 32 is well under B_simple 80). */
static void test_ratio_of_averages(void **state)
{
    (void)state;
    double b_small, b_big;
    pr_noise_batches(4, 8, 1, &b_small, &b_big);
    int whole[2] = {0, DIM};
    pr_noise_ema ema = {0};
    assert_true(isnan(pr_noise_scale(&ema))); // nothing averaged yet
    rng_state = 7;
    for (int n = 0; n < 8000; n++) {
        double small_sq, big_sq, g2, trace;
        draw_step(4, 8, 1, whole, 1, &small_sq, &big_sq);
        pr_noise_estimates(small_sq, b_small, big_sq, b_big, &g2, &trace);
        pr_noise_ema_add(&ema, g2, trace, 0.999);
    }
    double b_simple = pr_noise_scale(&ema);
    print_message("B_simple %.2f (planted %g) after 8000 steps at decay 0.999\n", b_simple,
                  PLANTED_TRACE / PLANTED_G2);
    assert_true(fabs(b_simple - PLANTED_TRACE / PLANTED_G2) < 0.1 * PLANTED_TRACE / PLANTED_G2);
}

/* Three "stages" (dimensions 0-23, 24-40, 41-63), each averaging the estimates from its own
 * squared norms at the runtime's decay, summed: the whole model's averages and noise scale
 * (the estimates are linear in the squared norms, which add over stages). */
static void test_stages_add_up(void **state)
{
    (void)state;
    double b_small, b_big;
    pr_noise_batches(2, 4, 2, &b_small, &b_big);
    int split[4] = {0, 24, 41, DIM}, whole[2] = {0, DIM};
    pr_noise_ema stage[3] = {{0}}, one = {0};
    rng_state = 3;
    for (int n = 0; n < 300; n++) {
        double small_sq[3], big_sq[3], small_all = 0, big_all = 0, g2, trace;
        uint64_t seed = rng_state;
        draw_step(2, 4, 2, split, 3, small_sq, big_sq);
        rng_state = seed; // the same examples, the norms over every dimension
        draw_step(2, 4, 2, whole, 1, &small_all, &big_all);
        for (int s = 0; s < 3; s++) {
            pr_noise_estimates(small_sq[s], b_small, big_sq[s], b_big, &g2, &trace);
            pr_noise_ema_add(&stage[s], g2, trace, PR_NOISE_DECAY);
        }
        pr_noise_estimates(small_all, b_small, big_all, b_big, &g2, &trace);
        pr_noise_ema_add(&one, g2, trace, PR_NOISE_DECAY);
    }
    pr_noise_ema total = {0};
    for (int s = 0; s < 3; s++)
        pr_noise_ema_sum(&total, &stage[s]);
    assert_true(fabs(total.g2 - one.g2 / one.weight) < 1e-9 * fabs(one.g2 / one.weight));
    assert_true(fabs(total.trace - one.trace / one.weight) < 1e-9 * one.trace / one.weight);
    assert_true(fabs(pr_noise_scale(&total) - pr_noise_scale(&one)) < 1e-9 * pr_noise_scale(&one));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_form),
        cmocka_unit_test(test_replica_form),
        cmocka_unit_test(test_ratio_of_averages),
        cmocka_unit_test(test_stages_add_up),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
