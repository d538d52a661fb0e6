/* test_lans.c: LANS's step (runtime/optim_rules.c, pr_optim_step) against Algorithm 2 of
 * Zheng et al. 2020 recomputed here in double, on planted gradients over 4 steps: a stage's
 * qkv weights of two layers (two blocks whose gradients differ in scale by 1000, so a norm
 * taken over the tensor instead of each layer shows), a LayerNorm bias (no decay, no trust
 * ratio, normalised all the same), and a block whose gradient is zero at one step. The clip
 * factor (grad_scale) changes nothing: the normalisation divides it out. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "prt.h"

enum { C = 4, QKV = 3 * C * C, LAYERS = 2, N_QKV = LAYERS * QKV, N_BIAS = C, STEPS = 4 };
static const double BETA1 = 0.9, BETA2 = 0.99, EPS = 1e-6, WD = 0.1, LR = 1e-2;

static const pr_optim_rule rule = {.kind = PR_OPT_LANS, .width = C, .beta1 = BETA1, .beta2 = BETA2,
                                   .eps = EPS, .weight_decay = WD};

/* The planted gradient of element i of a block at step t: layer 1's 1000x layer 0's; zero
 * everywhere at step 3 when `gap`. */
static double planted(int64_t i, int t, double scale, int gap)
{
    return gap && t == 3 ? 0.0 : scale * sin(0.7 * (double)i + 1.3 * t) * (1.0 + 0.1 * (double)(i % 5));
}

/* One block of n floats in double: Algorithm 2 with phi the identity. */
static void reference_step(double *w, const double *g, double *m, double *v, int64_t n, int decay, int t)
{
    double g_sq = 0, w_sq = 0, r_sq = 0, c_sq = 0, h[QKV], r[QKV], c[QKV];
    for (int64_t i = 0; i < n; i++)
        g_sq += g[i] * g[i];
    double wd = decay ? WD : 0.0;
    for (int64_t i = 0; i < n; i++) {
        h[i] = g_sq > 0 ? g[i] / sqrt(g_sq) : 0.0;
        m[i] = BETA1 * m[i] + (1 - BETA1) * h[i];
        v[i] = BETA2 * v[i] + (1 - BETA2) * h[i] * h[i];
        double denom = sqrt(v[i] / (1 - pow(BETA2, t))) + EPS;
        r[i] = m[i] / (1 - pow(BETA1, t)) / denom + wd * w[i];
        c[i] = h[i] / denom + wd * w[i];
        w_sq += w[i] * w[i];
        r_sq += r[i] * r[i];
        c_sq += c[i] * c[i];
    }
    double ratio_r = decay && w_sq > 0 && r_sq > 0 ? sqrt(w_sq / r_sq) : 1.0;
    double ratio_c = decay && w_sq > 0 && c_sq > 0 ? sqrt(w_sq / c_sq) : 1.0;
    for (int64_t i = 0; i < n; i++)
        w[i] -= LR * BETA1 * ratio_r * r[i] + LR * (1 - BETA1) * ratio_c * c[i];
}

/* Runs STEPS steps of pr_optim_step on one tensor with grad_scale `clip`; w, m and v return. */
static void run_steps(const pr_tensor *t, int gap, float clip, const double *w0, float *w, float *m, float *v)
{
    float g[N_QKV];
    for (int64_t i = 0; i < t->size; i++)
        w[i] = (float)w0[i];
    memset(m, 0, (size_t)t->size * sizeof *m);
    memset(v, 0, (size_t)t->size * sizeof *v);
    for (int step = 1; step <= STEPS; step++) {
        int64_t block = t->size > N_BIAS ? QKV : t->size;
        for (int64_t i = 0; i < t->size; i++)
            g[i] = (float)planted(i % block, step, i < block ? 1e-3 : 1.0, gap && i >= block);
        pr_adamw_args args = {.params = w, .grads = g, .m = m, .v = v, .lr = (float)LR, .grad_scale = clip, .t = step};
        pr_optim_step(&rule, t, &args);
    }
}

/* The larger error, NaN when either is (fmax would drop a NaN). */
static double worse(double a, double b)
{
    return isnan(a) || isnan(b) ? NAN : fmax(a, b);
}

/* The float32 step against the double reference: weights' change to 3e-5 of the largest, m and
 * v to 3e-5 of theirs (measured: 5e-6 at most). */
static void check_tensor(const pr_tensor *t, int gap)
{
    int64_t n = t->size, block = n > N_BIAS ? QKV : n;
    double w0[N_QKV], w[N_QKV], m[N_QKV] = {0}, v[N_QKV] = {0}, g[QKV];
    for (int64_t i = 0; i < n; i++)
        w[i] = w0[i] = 0.02 * cos(0.3 * (double)i) + (t->decay ? 0.0 : 1.0);
    for (int step = 1; step <= STEPS; step++)
        for (int64_t at = 0; at < n; at += block) {
            for (int64_t i = 0; i < block; i++)
                g[i] = (double)(float)planted(i, step, at == 0 ? 1e-3 : 1.0, gap && at > 0);
            reference_step(w + at, g, m + at, v + at, block, t->decay, step);
        }
    float fw[N_QKV], fm[N_QKV], fv[N_QKV], cw[N_QKV], cm[N_QKV], cv[N_QKV];
    run_steps(t, gap, 1.0f, w0, fw, fm, fv);
    double largest = 0, err = 0, m_err = 0, v_err = 0, m_max = 0, v_max = 0;
    for (int64_t i = 0; i < n; i++) {
        largest = fmax(largest, fabs(w[i] - w0[i]));
        m_max = fmax(m_max, fabs(m[i]));
        v_max = fmax(v_max, fabs(v[i]));
        err = worse(err, fabs(((double)fw[i] - w0[i]) - (w[i] - w0[i])));
        m_err = worse(m_err, fabs(fm[i] - m[i]));
        v_err = worse(v_err, fabs(fv[i] - v[i]));
    }
    print_message("%s: weight change error %.2e of its largest %.3g, m %.2e, v %.2e\n", t->name, err / largest,
                  largest, m_err / m_max, v_err / v_max);
    assert_true(largest > 0 && err <= 3e-5 * largest);
    assert_true(m_err <= 3e-5 * m_max && v_err <= 3e-5 * v_max);
    run_steps(t, gap, 0.25f, w0, cw, cm, cv); // clipped by 4x: the same bits
    assert_memory_equal(cw, fw, (size_t)n * sizeof *cw);
    assert_memory_equal(cm, fm, (size_t)n * sizeof *cm);
}

static void test_blocks_are_layers(void **state)
{
    (void)state;
    pr_tensor qkv = {.name = "h0-1.qkvw", .ckpt_tensor = PR_CKPT_QKVW, .size = N_QKV, .decay = 1};
    check_tensor(&qkv, 0);
}

static void test_zero_gradient_block(void **state)
{
    (void)state;
    pr_tensor qkv = {.name = "h0-1.qkvw (layer 1's gradient 0 at step 3)", .ckpt_tensor = PR_CKPT_QKVW,
                     .size = N_QKV, .decay = 1};
    check_tensor(&qkv, 1);
}

static void test_undecayed_bias(void **state)
{
    (void)state;
    pr_tensor bias = {.name = "h0.ln1b", .ckpt_tensor = PR_CKPT_LN1B, .size = N_BIAS, .decay = 0};
    check_tensor(&bias, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocks_are_layers),
        cmocka_unit_test(test_zero_gradient_block),
        cmocka_unit_test(test_undecayed_bias),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
