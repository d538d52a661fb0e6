/* test_bf16.c: pr_to_bf16 and pr_from_bf16 (runtime/pacirt.h), the conversions of the bf16
 * copies the GPU's products read; the generated CUDA carries the same bit operations. Each
 * result is checked against the nearest bf16 worked out in double. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "pacirt.h"

static float float_of(uint32_t bits)
{
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

static uint32_t bits_of(float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return bits;
}

/* The bf16 nearest to finite x, ties to the even one; past the largest bf16 by half a step
 * or more, infinity (IEEE round to nearest even, with the step above the largest as if the
 * exponent went on). */
static pr_bf16 nearest_bf16(float x)
{
    uint32_t bits = bits_of(x);
    pr_bf16 below = (pr_bf16)(bits >> 16); /* toward zero */
    double low = fabs((double)float_of((uint32_t)below << 16));
    int exponent = (int)((bits >> 23) & 0xff);
    double step = ldexp(1.0, (exponent ? exponent : 1) - 127 - 7); /* bf16 keeps 7 mantissa bits */
    double magnitude = fabs((double)x), up = magnitude - low, down = (low + step) - magnitude;
    if (up < down || (up == down && (below & 1u) == 0))
        return below;
    return (pr_bf16)(below + 1); /* the next magnitude: carries into the exponent, or to infinity */
}

static uint32_t next_random(uint64_t *state)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(*state >> 32);
}

static void test_to_bf16_rounds_to_nearest_even(void **unused)
{
    (void)unused;
    uint64_t state = 42;
    for (int i = 0; i < 2000000; i++) {
        uint32_t bits = next_random(&state);
        // every fourth sample an exact tie: the low half is 0x8000
        if (i % 4 == 0)
            bits = (bits & 0xffff0000u) | 0x8000u;
        float x = float_of(bits);
        if (isnan(x) || isinf(x))
            continue;
        pr_bf16 got = pr_to_bf16(x), want = nearest_bf16(x);
        if (got != want)
            fail_msg("pr_to_bf16(%a) (bits %08x) = %04x, nearest even is %04x", (double)x, bits, got, want);
    }
}

static void test_to_bf16_edges(void **unused)
{
    (void)unused;
    assert_int_equal(pr_to_bf16(0.0f), 0x0000);
    assert_int_equal(pr_to_bf16(-0.0f), 0x8000);
    assert_int_equal(pr_to_bf16(1.0f), 0x3f80);
    assert_int_equal(pr_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(pr_to_bf16(-INFINITY), 0xff80);
    // the largest float is past the largest bf16 by more than half a step
    assert_int_equal(pr_to_bf16(float_of(0x7f7fffffu)), 0x7f80);
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: to the even one, 1
    assert_int_equal(pr_to_bf16(float_of(0x3f808000u)), 0x3f80);
    assert_int_equal(pr_to_bf16(float_of(0x3f818000u)), 0x3f82);
    // NaN stays NaN, even when its payload is in the low half only (rounding would make it inf)
    uint32_t nans[] = {0x7f800001u, 0x7fc00000u, 0xff800001u, 0x7fffffffu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++)
        assert_true(isnan(pr_from_bf16(pr_to_bf16(float_of(nans[i])))));
}

static void test_from_bf16_is_exact(void **unused)
{
    (void)unused;
    for (uint32_t h = 0; h <= 0xffffu; h++) {
        float x = pr_from_bf16((pr_bf16)h);
        assert_int_equal(bits_of(x), h << 16);
        if (!isnan(x))
            assert_int_equal(pr_to_bf16(x), h);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_to_bf16_rounds_to_nearest_even),
        cmocka_unit_test(test_to_bf16_edges),
        cmocka_unit_test(test_from_bf16_is_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
