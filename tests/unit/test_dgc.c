/* test_dgc.c: Deep Gradient Compression's pieces (runtime/dgc.c) on fixed arrays whose
 * answers are worked out by hand in the comments: the density warm-up, the top-k selection
 * and its tie-break, the residual carried to the next step (error feedback), momentum
 * correction with factor masking (LARS), the replica-order sum, the local clipping and the
 * check of a pair list that came from another process, and a skipped step undone. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "prt.h"

static pr_program program(double density, int64_t warmup, double clip)
{
    pr_program p = {0};
    p.dgc_density = density;
    p.dgc_warmup_steps = warmup;
    p.dgc_clip = clip;
    return p;
}

/* density 0.001 over 4 steps: 0.25 (0.004)^((t-1)/4) for t = 1..4, then 0.001. */
static void test_warmup(void **state)
{
    (void)state;
    pr_program p = program(0.001, 4, 0);
    assert_true(fabs(pr_dgc_density(&p, 1) - 0.25) < 1e-15);
    assert_true(fabs(pr_dgc_density(&p, 2) - 0.25 * pow(0.004, 0.25)) < 1e-15);
    assert_true(fabs(pr_dgc_density(&p, 4) - 0.25 * pow(0.004, 0.75)) < 1e-15);
    assert_true(pr_dgc_density(&p, 5) == 0.001);
    assert_int_equal(pr_dgc_count(&p, 1, 1000), 250);
    assert_int_equal(pr_dgc_count(&p, 2, 1000), 63); // ceil(62.87)
    assert_int_equal(pr_dgc_count(&p, 5, 1000), 1);
    assert_int_equal(pr_dgc_count(&p, 5, 100), 1);   // at least one pair
    pr_program high = program(0.5, 2, 0);             // >= 0.25 starts from 1
    assert_true(pr_dgc_density(&high, 1) == 1.0);
    assert_int_equal(pr_dgc_count(&high, 1, 10), 10);
    assert_int_equal(pr_dgc_count(&high, 3, 10), 5);
    pr_program none = program(0.01, 0, 0);
    assert_int_equal(pr_dgc_count(&none, 1, 1000), 10);
}

/* |x| = 0.5 3 2 2 0 3 1: the top 3 are both 3s and, of the two 2s, the lower index. */
static void test_select_ties(void **state)
{
    (void)state;
    float x[7] = {0.5f, -3.0f, 2.0f, -2.0f, 0.0f, 3.0f, 1.0f};
    uint32_t scratch[7], index[7];
    assert_int_equal(pr_dgc_select(x, 7, 3, scratch, index), 3);
    assert_int_equal(index[0], 1);
    assert_int_equal(index[1], 2);
    assert_int_equal(index[2], 5);
    assert_int_equal(pr_dgc_select(x, 7, 1, scratch, index), 1);
    assert_int_equal(index[0], 1);
    float zeros[5] = {0};
    assert_int_equal(pr_dgc_select(zeros, 5, 2, scratch, index), 2);
    assert_int_equal(index[0], 0);
    assert_int_equal(index[1], 1);
}

/* Error feedback, k = 1: step 1 g = (1, -2, 0.5, 0) sends (1, -2) and keeps (1, 0, 0.5, 0);
 * step 2 g = (1, 1, 0, 0.25) makes (2, 1, 0.5, 0.25) and sends (0, 2), not g's own 1. */
static void test_residual(void **state)
{
    (void)state;
    pr_dgc_buffers b;
    pr_dgc_alloc(&b, 4, 0);
    float g1[4] = {1, -2, 0.5f, 0}, g2[4] = {1, 1, 0, 0.25f};
    assert_int_equal(pr_dgc_compress(&b, g1, 4, 1, 1.0f, 0.0f), 1);
    assert_int_equal(b.index[0], 1);
    assert_true(b.value[0] == -2.0f);
    assert_true(b.residual[0] == 1.0f && b.residual[1] == 0.0f && b.residual[2] == 0.5f);
    assert_int_equal(pr_dgc_compress(&b, g2, 4, 1, 1.0f, 0.0f), 1);
    assert_int_equal(b.index[0], 0);
    assert_true(b.value[0] == 2.0f);
    assert_true(b.residual[0] == 0.0f && b.residual[1] == 1.0f && b.residual[2] == 0.5f &&
                b.residual[3] == 0.25f);
    pr_dgc_free(&b);
}

/* Momentum correction, mu = 0.9, k = 1: step 1 g = (1, 0, 0.5): u = acc = g, sends (0, 1),
 * masks u and acc at 0: u = acc = (0, 0, 0.5). Step 2 g = (0, 0.3, 0.1): u = 0.9 u + g =
 * (0, 0.3, 0.55), acc = (0, 0.3, 1.05): sends (2, 1.05) (error feedback alone: 0.6), then
 * u = (0, 0.3, 0), acc = (0, 0.3, 0). */
static void test_momentum_correction(void **state)
{
    (void)state;
    pr_dgc_buffers b;
    pr_dgc_alloc(&b, 3, 1);
    float g1[3] = {1, 0, 0.5f}, g2[3] = {0, 0.3f, 0.1f};
    pr_dgc_compress(&b, g1, 3, 1, 1.0f, 0.9f);
    assert_int_equal(b.index[0], 0);
    assert_true(b.value[0] == 1.0f);
    assert_true(b.velocity[0] == 0.0f && b.velocity[2] == 0.5f && b.residual[0] == 0.0f);
    pr_dgc_compress(&b, g2, 3, 1, 1.0f, 0.9f);
    assert_int_equal(b.index[0], 2);
    assert_float_equal(b.value[0], 1.05, 1e-6);
    assert_true(b.velocity[2] == 0.0f && b.residual[2] == 0.0f);
    assert_float_equal(b.velocity[1], 0.3, 1e-7);
    assert_float_equal(b.residual[1], 0.3, 1e-7);
    pr_dgc_free(&b);
}

/* A skipped step undone (on_nan skip), mu = 0.9, k = 1: step 1 as in test_momentum_correction
 * leaves u = acc = (0, 0, 0.5); step 2's gradient (NaN, 0.3, 0.1) sends the NaN (the largest
 * magnitude) and masks it, the sum is not finite and the step is skipped: undone, u and acc
 * are (0, 0, 0.5) again, bit for bit, so the 0.5 a sent pair carried stays to be sent, and
 * no NaN stays behind. Step 3 with g = (0, 0.3, 0.1) then sends (2, 1.05) as step 2 would
 * have without the NaN. Under error feedback alike: acc back to (0, 0, 0.5). */
static void test_undo_skipped_step(void **state)
{
    (void)state;
    for (int velocity = 0; velocity <= 1; velocity++) {
        pr_dgc_buffers b;
        pr_dgc_alloc(&b, 3, velocity);
        float mu = velocity ? 0.9f : 0.0f, g1[3] = {1, 0, 0.5f}, bad[3] = {NAN, 0.3f, 0.1f}, g3[3] = {0, 0.3f, 0.1f};
        pr_dgc_compress(&b, g1, 3, 1, 1.0f, mu);
        float kept[3], kept_u[3] = {0};
        memcpy(kept, b.residual, sizeof kept);
        if (velocity)
            memcpy(kept_u, b.velocity, sizeof kept_u);
        pr_dgc_compress(&b, bad, 3, 1, 1.0f, mu);
        assert_int_equal(b.index[0], 0);
        assert_true(isnan(b.value[0]));
        pr_dgc_undo(&b, 3);
        assert_memory_equal(b.residual, kept, sizeof kept);
        if (velocity)
            assert_memory_equal(b.velocity, kept_u, sizeof kept_u);
        assert_true(b.residual[2] == 0.5f);
        pr_dgc_compress(&b, g3, 3, 1, 1.0f, mu);
        assert_int_equal(b.index[0], 2);
        assert_float_equal(b.value[0], velocity ? 1.05 : 0.6, 1e-6);
        pr_dgc_free(&b);
    }
}

/* Which optimizers correct momentum before the exchange: LARS only (its velocity is then
 * each replica's own and the optimizer steps with momentum 0); the adaptive rules feed back
 * the gradient's error. Nothing else pins this: with it off, LARS would apply momentum 0.9
 * after the exchange and still differ from momentum 0. */
static void test_momentum_rule(void **state)
{
    (void)state;
    pr_program p = program(0.01, 0, 0);
    p.optimizer = PR_OPT_LARS;
    assert_true(pr_dgc_momentum_correction(&p));
    p.optimizer = PR_OPT_ADAMW;
    assert_false(pr_dgc_momentum_correction(&p));
    p.optimizer = PR_OPT_LAMB;
    assert_false(pr_dgc_momentum_correction(&p));
}

/* Two replicas' pairs into n = 4: replica 0 sends (1, 2) (3, -1), replica 1 (1, 0.5) (2, 4). */
static void test_sum(void **state)
{
    (void)state;
    pr_dgc_buffers a = {0}, c = {0};
    uint32_t ia[2] = {1, 3}, ic[2] = {1, 2};
    float va[2] = {2, -1}, vc[2] = {0.5f, 4};
    a.index = ia, a.value = va, a.k = 2;
    c.index = ic, c.value = vc, c.k = 2;
    const pr_dgc_buffers *from[2] = {&a, &c};
    float out[4] = {9, 9, 9, 9};
    pr_dgc_sum(out, 4, from, 2);
    assert_true(out[0] == 0.0f && out[1] == 2.5f && out[2] == 4.0f && out[3] == -1.0f);
}

/* A list from another process: ascending indices below n pass; an index past the stage, a
 * repeated one or one out of order is found at its position (pr_dgc_sum would write there). */
static void test_check_index(void **state)
{
    (void)state;
    uint32_t good[3] = {0, 2, 3}, past[3] = {0, 2, 4}, repeated[3] = {1, 1, 3}, back[3] = {2, 1, 3};
    uint32_t huge[1] = {0xffffffffu};
    assert_int_equal(pr_dgc_check_index(good, 3, 4), -1);
    assert_int_equal(pr_dgc_check_index(good, 0, 4), -1);
    assert_int_equal(pr_dgc_check_index(past, 3, 4), 2);
    assert_int_equal(pr_dgc_check_index(repeated, 3, 4), 1);
    assert_int_equal(pr_dgc_check_index(back, 3, 4), 1);
    assert_int_equal(pr_dgc_check_index(huge, 1, 4), 0);
}

/* clip 1 over D = 4 replicas clips each at 0.5: ||(3, 4)|| = 5 scales by 0.1. */
static void test_local_clip(void **state)
{
    (void)state;
    pr_program p = program(0.01, 0, 1.0);
    float g[2] = {3, 4}, small[2] = {0.3f, 0.1f};
    assert_float_equal(pr_dgc_clip_scale(&p, 4, g, 2), 0.1, 1e-7);
    assert_true(pr_dgc_clip_scale(&p, 4, small, 2) == 1.0f);
    pr_program off = program(0.01, 0, 0);
    assert_true(pr_dgc_clip_scale(&off, 4, g, 2) == 1.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_warmup),           cmocka_unit_test(test_select_ties),
        cmocka_unit_test(test_residual),         cmocka_unit_test(test_momentum_correction),
        cmocka_unit_test(test_sum),              cmocka_unit_test(test_local_clip),
        cmocka_unit_test(test_check_index),      cmocka_unit_test(test_momentum_rule),
        cmocka_unit_test(test_undo_skipped_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
