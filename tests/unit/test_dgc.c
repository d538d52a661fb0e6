/* test_dgc.c: Deep Gradient Compression's pieces (runtime/dgc.c) on fixed arrays whose
 * answers are worked out by hand in the comments: the density warm-up, the top-k selection
 * and its tie-break, the residual carried to the next step (error feedback), momentum
 * correction with factor masking (LARS), the replica-order sum, the local clipping and the
 * check of a pair list that came from another process, and a skipped step undone; the
 * 4-byte pairs (runtime/paci_dgc.h): their rounding returned to the residual, exactly, the
 * blocks' boundaries, the list's size, and the n floats of a full list. */
#include <float.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
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

/* Pair j of b's list of k < n pairs, decoded here from the format paci_dgc.h states (blocks'
 * running counts, then the bf16 value high and the offset low): its index ... */
static uint32_t sent_index(const pr_dgc_buffers *b, int64_t n, int64_t j)
{
    int64_t blocks = paci_dgc_blocks(n), block = 0;
    while ((int64_t)b->list[block] <= j)
        block++;
    return (uint32_t)(block * 65536 + (b->list[blocks + j] & 0xffffu));
}

/* ... and its value as sent. */
static float sent_value(const pr_dgc_buffers *b, int64_t n, int64_t j)
{
    uint32_t bits = b->list[paci_dgc_blocks(n) + j] & 0xffff0000u;
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
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
    assert_int_equal(sent_index(&b, 4, 0), 1);
    assert_true(sent_value(&b, 4, 0) == -2.0f);
    assert_true(b.residual[0] == 1.0f && b.residual[1] == 0.0f && b.residual[2] == 0.5f);
    assert_int_equal(pr_dgc_compress(&b, g2, 4, 1, 1.0f, 0.0f), 1);
    assert_int_equal(sent_index(&b, 4, 0), 0);
    assert_true(sent_value(&b, 4, 0) == 2.0f);
    assert_true(b.residual[0] == 0.0f && b.residual[1] == 1.0f && b.residual[2] == 0.5f &&
                b.residual[3] == 0.25f);
    pr_dgc_free(&b);
}

/* Momentum correction, mu = 0.9, k = 1: step 1 g = (1, 0, 0.5): u = acc = g, sends (0, 1),
 * masks u and acc at 0: u = acc = (0, 0, 0.5). Step 2 g = (0, 0.3, 0.1): u = 0.9 u + g =
 * (0, 0.3, 0.55), acc = (0, 0.3, 1.05): sends (2, 1.05) (error feedback alone: 0.6) as bf16
 * 1.046875 (1.05 = 1.0000110|011... x 2^0 rounds down), then u = (0, 0.3, 0) and acc =
 * (0, 0.3, 1.05 - 1.046875): the rounding stays to be sent. */
static void test_momentum_correction(void **state)
{
    (void)state;
    pr_dgc_buffers b;
    pr_dgc_alloc(&b, 3, 1);
    float g1[3] = {1, 0, 0.5f}, g2[3] = {0, 0.3f, 0.1f};
    pr_dgc_compress(&b, g1, 3, 1, 1.0f, 0.9f);
    assert_int_equal(sent_index(&b, 3, 0), 0);
    assert_true(sent_value(&b, 3, 0) == 1.0f);
    assert_true(b.velocity[0] == 0.0f && b.velocity[2] == 0.5f && b.residual[0] == 0.0f);
    pr_dgc_compress(&b, g2, 3, 1, 1.0f, 0.9f);
    assert_int_equal(sent_index(&b, 3, 0), 2);
    assert_true(sent_value(&b, 3, 0) == 1.046875f);
    volatile float u2 = 0.9f * 0.5f + 0.1f, acc2 = 0.5f + u2; // as pr_dgc_compress rounds
    assert_true(b.velocity[2] == 0.0f && b.residual[2] == acc2 - 1.046875f && b.residual[2] > 0.003f);
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
        assert_int_equal(sent_index(&b, 3, 0), 0);
        assert_true(isnan(sent_value(&b, 3, 0)));
        assert_true(b.residual[0] == 0.0f); // a non-finite value leaves nothing behind
        pr_dgc_undo(&b, 3);
        assert_memory_equal(b.residual, kept, sizeof kept);
        if (velocity)
            assert_memory_equal(b.velocity, kept_u, sizeof kept_u);
        assert_true(b.residual[2] == 0.5f);
        pr_dgc_compress(&b, g3, 3, 1, 1.0f, mu);
        assert_int_equal(sent_index(&b, 3, 0), 2);
        assert_float_equal(sent_value(&b, 3, 0), velocity ? 1.046875 : 0.6015625, 0); // bf16 of 1.05, 0.6
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

/* Two replicas' lists into n = 4 (one block: its count, then value << 16 | offset): replica 0
 * sends (1, 2) (3, -1), replica 1 (1, 0.5) (2, 4); and two full lists (k = n: the floats). */
static void test_sum(void **state)
{
    (void)state;
    pr_dgc_buffers a = {0}, c = {0};
    uint32_t la[3] = {2, 0x40000000u | 1, 0xbf800000u | 3}, lc[3] = {2, 0x3f000000u | 1, 0x40800000u | 2};
    a.list = la, a.k = 2;
    c.list = lc, c.k = 2;
    const pr_dgc_buffers *from[2] = {&a, &c};
    float out[4] = {9, 9, 9, 9};
    pr_dgc_sum(out, 4, from, 2);
    assert_true(out[0] == 0.0f && out[1] == 2.5f && out[2] == 4.0f && out[3] == -1.0f);
    float fa[4] = {1.1f, -2, 0, 3}, fc[4] = {0.1f, 2, 0, 1e-30f};
    a.list = (uint32_t *)fa, a.k = 4;
    c.list = (uint32_t *)fc, c.k = 4;
    pr_dgc_sum(out, 4, from, 2);
    assert_true(out[0] == 1.1f + 0.1f && out[1] == 0.0f && out[2] == 0.0f && out[3] == 3.0f + 1e-30f);
}

/* A list from another process (n = 3 x 65536 + 5: four blocks, the last of 5 entries): the
 * one pr_dgc_compress wrote passes; each fault is named (pr_dgc_sum would write out of the
 * stage or twice to one entry): a running count that falls or passes k, counts that stop
 * short of k, an offset past the last block's 5 entries, one not ascending. */
static void test_check_list(void **state)
{
    (void)state;
    int64_t n = 3 * 65536 + 5;
    uint32_t good[10] = {2, 4, 5, 6, 0, 65535, 0, 65535, 0, 4}, bad[10];
    char why[160];
    assert_int_equal(pr_dgc_check_list(good, n, 6, why, sizeof why), 0);
    memcpy(bad, good, sizeof bad), bad[1] = 1;
    assert_int_equal(pr_dgc_check_list(bad, n, 6, why, sizeof why), -1);
    assert_string_equal(why, "block 1's running count 1, not in 2..6");
    memcpy(bad, good, sizeof bad), bad[3] = 7;
    assert_int_equal(pr_dgc_check_list(bad, n, 6, why, sizeof why), -1);
    assert_string_equal(why, "block 3's running count 7, not in 5..6");
    memcpy(bad, good, sizeof bad), bad[3] = 5;
    assert_int_equal(pr_dgc_check_list(bad, n, 6, why, sizeof why), -1);
    assert_string_equal(why, "block counts that end at 5 of its 6 pairs");
    memcpy(bad, good, sizeof bad), bad[9] = 5;
    assert_int_equal(pr_dgc_check_list(bad, n, 6, why, sizeof why), -1);
    assert_string_equal(why, "pair 5 at offset 5 of block 3, not ascending below its 5 entries");
    memcpy(bad, good, sizeof bad), bad[5] = 0;
    assert_int_equal(pr_dgc_check_list(bad, n, 6, why, sizeof why), -1);
    assert_string_equal(why, "pair 1 at offset 0 of block 0, not ascending below its 65536 entries");
    assert_int_equal(pr_dgc_check_list(good, 4, 4, why, sizeof why), 0); // k = n: any n floats
}

/* The blocks' boundaries: n = 3 x 65536 + 5, entries at both sides of each boundary and the
 * last, each block's count running up to k, the offsets 16 bits, 4 words of counts and 6 of
 * pairs; two replicas' lists summed put each value back at its index and nowhere else. */
static void test_block_boundaries(void **state)
{
    (void)state;
    int64_t n = 3 * 65536 + 5, at[6] = {0, 65535, 65536, 131071, 131072, 196612};
    pr_dgc_buffers b;
    pr_dgc_alloc(&b, n, 0);
    float *g = calloc((size_t)n, sizeof(float)), *out = malloc((size_t)n * sizeof(float));
    for (int j = 0; j < 6; j++)
        g[at[j]] = (float)(j + 1) * (j % 2 ? -1.0f : 1.0f);
    assert_int_equal(pr_dgc_compress(&b, g, n, 6, 1.0f, 0.0f), 6);
    assert_int_equal(paci_dgc_list_words(n, 6), 4 + 6);
    uint32_t want[10] = {2, 4, 5, 6, 0x3f800000u | 0, 0xc0000000u | 65535, 0x40400000u | 0,
                         0xc0800000u | 65535, 0x40a00000u | 0, 0xc0c00000u | 4};
    assert_memory_equal(b.list, want, sizeof want);
    const pr_dgc_buffers *from[2] = {&b, &b};
    pr_dgc_sum(out, n, from, 2);
    for (int64_t i = 0, j = 0; i < n; i++)
        if (j < 6 && i == at[j])
            assert_true(out[i] == 2.0f * g[at[j++]]);
        else
            assert_true(out[i] == 0.0f);
    pr_dgc_free(&b);
    free(g);
    free(out);
}

/* The list's size: a word (4 bytes) a pair and a word a block of 65536, or n words at k = n. */
static void test_list_words(void **state)
{
    (void)state;
    assert_int_equal(paci_dgc_list_words(38976, 39), 1 + 39);
    assert_int_equal(paci_dgc_list_words(65536, 65535), 1 + 65535);
    assert_int_equal(paci_dgc_list_words(65537, 10), 2 + 10);
    assert_int_equal(paci_dgc_list_words(124000000, 124000), 1893 + 124000);
    assert_int_equal(paci_dgc_list_words(1000, 1000), 1000);
    assert_int_equal(paci_dgc_list_words(1, 1), 1);
}

/* bf16 rounding of a sent value: to nearest even; a finite value past bf16's largest
 * (FLT_MAX) saturates there rather than becoming inf; inf and NaN stay what they are. */
static void test_round(void **state)
{
    (void)state;
    assert_int_equal(pr_dgc_round(1.0f), 0x3f80);
    assert_int_equal(pr_dgc_round(1.05f), 0x3f86);         // 1.046875
    assert_int_equal(pr_dgc_round(1.0f + 0x1p-8f), 0x3f80); // the tie, to even
    assert_int_equal(pr_dgc_round(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    assert_int_equal(pr_dgc_round(FLT_MAX), 0x7f7f);
    assert_int_equal(pr_dgc_round(-FLT_MAX), 0xff7f);
    assert_int_equal(pr_dgc_round(INFINITY), 0x7f80);
    assert_int_equal(pr_dgc_round(-INFINITY), 0xff80);
    assert_true(isnan(pr_from_bf16(pr_dgc_round(NAN))));
}

/* The rounding returned to the residual: 4 steps of error feedback on n = 2 x 65536 + 1000
 * entries, k = 3000, gradients of every magnitude from subnormal to 2^40 (and FLT_MAX once,
 * which saturates): for every entry, the value sent (decoded from the list) plus the residual
 * left is the residual before plus the gradient (acc = fl(r + g), the accumulation's one
 * rounding) exactly, in exact (double) arithmetic; an entry not sent keeps acc. So nothing the
 * replica accumulated is lost: what was not sent is still there. */
static void test_rounding_returned(void **state)
{
    (void)state;
    int64_t n = 2 * 65536 + 1000, k = 3000;
    pr_dgc_buffers b;
    pr_dgc_alloc(&b, n, 0);
    float *g = malloc((size_t)n * sizeof(float)), *acc = malloc((size_t)n * sizeof(float)),
          *sent = malloc((size_t)n * sizeof(float));
    uint64_t rng = 0x9e3779b97f4a7c15ULL;
    int64_t inexact = 0;
    for (int step = 1; step <= 4; step++) {
        for (int64_t i = 0; i < n; i++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            float m = (float)(rng >> 40) * 0x1p-24f; // 24 random bits in [0, 1)
            g[i] = ldexpf((rng >> 20) & 1 ? -m : m, (int)((rng >> 21) % 190) - 150);
        }
        if (step == 1)
            g[70000] = FLT_MAX;
        for (int64_t i = 0; i < n; i++)
            acc[i] = b.residual[i] + g[i];
        assert_int_equal(pr_dgc_compress(&b, g, n, k, 1.0f, 0.0f), k);
        memset(sent, 0, (size_t)n * sizeof(float));
        for (int64_t j = 0; j < k; j++) {
            uint32_t i = sent_index(&b, n, j);
            assert_true(j == 0 || i > sent_index(&b, n, j - 1));
            sent[i] = sent_value(&b, n, j);
            inexact += sent[i] != acc[i];
        }
        if (step == 1)
            assert_true(sent[70000] == 0x1.fep127f && b.residual[70000] == FLT_MAX - 0x1.fep127f);
        for (int64_t i = 0; i < n; i++)
            assert_true((double)sent[i] + (double)b.residual[i] == (double)acc[i]);
    }
    assert_true(inexact > 1000); // the rounding did happen, and went back
    pr_dgc_free(&b);
    free(g);
    free(acc);
    free(sent);
}

/* A full list (k = n, density 1): the n floats as accumulated, exactly, and a zero residual. */
static void test_full_list(void **state)
{
    (void)state;
    pr_dgc_buffers b;
    pr_dgc_alloc(&b, 3, 0);
    float g[3] = {1.05f, -0x1p-140f, 3e38f};
    assert_int_equal(pr_dgc_compress(&b, g, 3, 3, 1.0f, 0.0f), 3);
    assert_memory_equal(b.list, g, sizeof g);
    assert_true(b.residual[0] == 0.0f && b.residual[1] == 0.0f && b.residual[2] == 0.0f);
    pr_dgc_free(&b);
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
        cmocka_unit_test(test_check_list),       cmocka_unit_test(test_momentum_rule),
        cmocka_unit_test(test_undo_skipped_step), cmocka_unit_test(test_block_boundaries),
        cmocka_unit_test(test_list_words),        cmocka_unit_test(test_round),
        cmocka_unit_test(test_rounding_returned), cmocka_unit_test(test_full_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
