/* test_dcasgd.c: `delay_correction dc-asgd` over toy stages, against a float64 reference.
 * Every backward's own gradient g is recomputed here alone, with the weights it ran on and
 * the delay d the run realised (the stage's steps between its forward and it, counted here,
 * not read from the table); every step records the weights it starts from, so the test holds
 * each stage's weight history itself. At each step the window's gradient sum must be
 * sum over its backwards of g + lambda d K g g (W_t - W_{t-1}) (d = 0: g), in double, with
 * t the steps before the backward. At lambda 0 the run is plain PACI's, bit for bit. The GPU's
 * kernel is checked against this CPU path by tests/e2e/delay_dcasgd.sh (the fake CUDA stack). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "toy_model.h"

static char token_path[] = "/tmp/pacirt_dcasgd_XXXXXX";

enum { MAX_BACKWARDS = 4096, MAX_STEPS = 16, STAGES = 4 };

typedef struct bwd_record {
    int stage;
    int64_t mb, t_bwd, delay;
    float *g;     /* the backward's gradient alone (already divided by K, as the runtime's) */
    float *w_now; /* the weights it differentiated at */
} bwd_record;

static pr_run *running;
static bwd_record backwards[MAX_BACKWARDS];
static int n_backwards;
static int64_t fwd_step[STAGES][256];  /* the stage's step count at each micro-batch's forward */
static float *history[STAGES][MAX_STEPS + 1]; /* the weights after t steps, from the steps' own view */
static int steps_checked, corrections_seen;
static double worst_error; /* the largest |sum - reference| / tolerance met */
static double logged_loss[64];

static float *copy_of(const float *src, int64_t n)
{
    float *dst = pr_alloc((size_t)n * sizeof(float));
    memcpy(dst, src, (size_t)n * sizeof(float));
    return dst;
}

static int64_t slot_mb_of(const pr_stage_rt *st, const float *acts)
{
    return st->slot_mb[(acts - st->slots) / st->code->act_floats];
}

static void recording_forward(int s, const pr_fwd_args *a)
{
    const pr_stage_rt *st = &running->stage[s];
    int64_t mb = slot_mb_of(st, a->acts);
    if (mb >= 256)
        fail_msg("micro-batch %lld past the test's table", (long long)mb);
    fwd_step[s][mb] = st->t;
    toy_forward(s, a);
}

/* The backward runs as the runtime asked; its gradient is also computed alone, from zero. */
static void recording_backward(int s, const pr_bwd_args *a)
{
    const pr_stage_rt *st = &running->stage[s];
    int64_t n = st->code->n_params, mb = slot_mb_of(st, a->acts);
    float *alone = pr_alloc((size_t)n * sizeof(float)), dx[TOY_BTC];
    memset(alone, 0, (size_t)n * sizeof(float));
    pr_bwd_args own = *a;
    own.grads = alone;
    own.dx_in = a->dx_in ? dx : NULL;
    toy_backward(s, &own);
    pthread_mutex_lock(&running->stats_mu);
    if (n_backwards == MAX_BACKWARDS)
        fail_msg("more than %d backwards", MAX_BACKWARDS);
    backwards[n_backwards++] = (bwd_record){s, mb, st->t, st->t - fwd_step[s][mb], alone, copy_of(a->params, n)};
    pthread_mutex_unlock(&running->stats_mu);
    toy_backward(s, a);
}

static double lambda;

/* Before stage s's step t+1: the window's sum against the reference, then the toy's AdamW. */
static void checking_step(int s, const pr_adamw_args *a)
{
    const pr_stage_code *sc = &toy_codes[s];
    int64_t n = sc->n_params, t = a->t - 1, K = running->K;
    if (t > MAX_STEPS)
        fail_msg("more than %d steps", MAX_STEPS);
    history[s][t] = copy_of(a->params, n);
    double *want = calloc((size_t)n, sizeof *want), *scale = calloc((size_t)n, sizeof *scale);
    pthread_mutex_lock(&running->stats_mu);
    int window = 0;
    for (int r = 0; r < n_backwards; r++) {
        const bwd_record *b = &backwards[r];
        if (b->stage != s || b->t_bwd != t)
            continue;
        window++;
        // PACI differentiates at the live weights: version t of the test's own history.
        if (memcmp(b->w_now, history[s][t], (size_t)n * sizeof(float)) != 0)
            fail_msg("stage %d mb %lld: the backward ran on other weights than version %lld", s,
                     (long long)b->mb, (long long)t);
        for (int64_t i = 0; i < n; i++) {
            double g = b->g[i], term = g;
            if (b->delay > 0) {
                double update = (double)history[s][t][i] - (double)history[s][t - 1][i];
                double correction = lambda * (double)b->delay * (double)K * g * g * update;
                term += correction;
                corrections_seen += fabs(correction) > 1e-4 * fabs(g) && fabs(correction) > 1e-9;
            }
            want[i] += term;
            scale[i] += fabs(term);
        }
    }
    pthread_mutex_unlock(&running->stats_mu);
    assert_int_equal(window, K);
    for (int64_t i = 0; i < n; i++) {
        // float accumulation of K terms against double: a few ulps of the terms' magnitudes
        double tolerance = 1e-6 * scale[i] + 1e-12, error = fabs((double)a->grads[i] - want[i]);
        if (error / tolerance > worst_error)
            worst_error = error / tolerance;
        if (error > tolerance)
            fail_msg("stage %d step %lld weight %lld: the window's gradient sum is %.9g, the reference %.9g",
                     s, (long long)t + 1, (long long)i, a->grads[i], want[i]);
    }
    free(want);
    free(scale);
    steps_checked++;
    toy_adamw(s, a);
}

#define CHECKING(S)                                                                    \
    static void rec_fwd##S(const pr_fwd_args *a) { recording_forward(S, a); }          \
    static void rec_bwd##S(const pr_bwd_args *a) { recording_backward(S, a); }         \
    static void check_step##S(const pr_adamw_args *a) { checking_step(S, a); }
CHECKING(0)
CHECKING(1)
CHECKING(2)
CHECKING(3)
static void (*const rec_fwds[STAGES])(const pr_fwd_args *) = {rec_fwd0, rec_fwd1, rec_fwd2, rec_fwd3};
static void (*const rec_bwds[STAGES])(const pr_bwd_args *) = {rec_bwd0, rec_bwd1, rec_bwd2, rec_bwd3};
static void (*const check_steps[STAGES])(const pr_adamw_args *) = {check_step0, check_step1, check_step2,
                                                                    check_step3};

static void clear_records(void)
{
    for (int r = 0; r < n_backwards; r++) {
        free(backwards[r].g);
        free(backwards[r].w_now);
    }
    n_backwards = 0;
    for (int s = 0; s < STAGES; s++)
        for (int t = 0; t <= MAX_STEPS; t++) {
            free(history[s][t]);
            history[s][t] = NULL;
        }
}

static void log_loss(pr_run *run, int64_t step, double loss, double lr, double grad_norm)
{
    if (step >= 1 && step <= 64)
        logged_loss[step - 1] = loss;
}

static toy_table table;
static pr_program prog;
static int pairwise; /* the next train() accumulates pairwise (each gradient alone, summed as a tree) */

/* Trains the toy under PACI (or `correction` none) at p, K for `steps`, dc_lambda `lam`;
 * checks every step against the reference if asked. Returns the gathered weights. */
static float *train(int p, int K, int steps, int correction, double lam, int checking, double lr)
{
    pr_run run;
    char err[PR_ERR_LEN];
    toy_build_stages(p);
    if (checking)
        for (int s = 0; s < p; s++) {
            toy_codes[s].forward = rec_fwds[s];
            toy_codes[s].backward = rec_bwds[s];
            toy_codes[s].adamw = check_steps[s];
        }
    toy_delay_correction = correction;
    toy_build_table(&table, TOY_PACI, p, K, steps, steps);
    toy_delay_correction = DELAY_NONE;
    prog = toy_program(&table.t, steps);
    prog.lr = lr;
    prog.grad_clip = 1.0;
    prog.dc_asgd = correction == DELAY_DC_ASGD;
    prog.dc_lambda = lam;
    prog.accumulate_pairwise = pairwise;
    lambda = lam;
    if (pr_run_init(&run, &prog, NULL, err) != 0)
        fail_msg("%s", err);
    running = &run;
    run.on_step = log_loss;
    assert_int_equal(pr_tokens_load(&run.train, token_path, TOY_V, TOY_B, TOY_T, err), 0);
    int64_t offsets[PR_CKPT_COUNT];
    int64_t n = pr_ckpt_offsets(&prog, offsets);
    float *flat = pr_alloc((size_t)n * 4);
    pr_init_params(&prog, flat);
    pr_scatter(&run, 0, flat);
    for (int seg = 0; seg < paci_segments(&table.t); seg++)
        pr_run_segment(&run, seg);
    assert_int_equal(run.step, steps);
    pr_gather(&run, 0, flat);
    pr_run_free(&run);
    running = NULL;
    return flat;
}

/* The formula alone: pr_dc_asgd_add against double on values of every sign and scale. */
static void test_formula_against_double(void **state)
{
    enum { N = 4096 };
    float *sum = pr_alloc(N * sizeof(float)), *g = pr_alloc(N * sizeof(float)), *w = pr_alloc(N * sizeof(float)),
          *prev = pr_alloc(N * sizeof(float));
    double *want = pr_alloc(N * sizeof(double));
    pr_rng rng = {7};
    const float coef = 37.5f;
    for (int i = 0; i < N; i++) {
        double u[4];
        for (int k = 0; k < 4; k++)
            u[k] = (double)(pr_rng_next(&rng) >> 11) / 9007199254740992.0 - 0.5;
        g[i] = (float)(u[0] * pow(10.0, (double)(i % 5) - 3));
        w[i] = (float)u[1];
        prev[i] = (float)(u[1] - 1e-2 * u[2]);
        sum[i] = (float)u[3];
        want[i] = (double)sum[i] + (double)g[i] +
                  (double)coef * (double)g[i] * (double)g[i] * ((double)w[i] - (double)prev[i]);
    }
    pr_dc_asgd_add(sum, g, w, prev, N, coef);
    int corrected = 0;
    for (int i = 0; i < N; i++) {
        double tolerance = 4e-7 * (fabs(want[i]) + fabs(g[i]) + 1e-30);
        if (fabs(sum[i] - want[i]) > tolerance)
            fail_msg("element %d: %.9g, double %.9g (g %.9g, W %.9g, W_prev %.9g)", i, sum[i], want[i], g[i], w[i],
                     prev[i]);
        corrected += fabs((double)coef * g[i] * g[i] * ((double)w[i] - prev[i])) > 1e-3 * fabs(want[i]);
    }
    assert_true(corrected > N / 10); // the correction term is not lost in the rounding
    free(sum), free(g), free(w), free(prev), free(want);
}

/* In a run: each window's sum is its backwards' corrected gradients, at K >= p-1 (every
 * delay 1: W_t - W_{t-1} is exactly W_now - W_fwd) and at K < p-1 (delays up to 2). */
static void check_run(int p, int K, int steps, int want_max_d)
{
    clear_records();
    steps_checked = corrections_seen = 0;
    worst_error = 0;
    free(train(p, K, steps, DELAY_DC_ASGD, 20.0, 1, 1e-2));
    assert_int_equal(steps_checked, p * steps);
    assert_int_equal(n_backwards, p * K * steps);
    int max_d = 0;
    for (int r = 0; r < n_backwards; r++)
        max_d = backwards[r].delay > max_d ? (int)backwards[r].delay : max_d;
    assert_int_equal(max_d, want_max_d);
    // the correction is far above the check's tolerance, so a wrong one cannot pass
    if (corrections_seen < 100)
        fail_msg("only %d weights' corrections were above 1e-4 of their gradient", corrections_seen);
    print_message("p %d K %d: %d steps checked, %d corrections above 1e-4 of g, worst error %.3g of the "
                  "tolerance\n", p, K, steps_checked, corrections_seen, worst_error);
    clear_records();
}

static void test_window_sums_are_corrected(void **state)
{
    check_run(4, 2, 6, 2);
    check_run(3, 3, 5, 1);
    pairwise = 1; // the corrected gradient goes into the tree's buffer instead of the sum
    check_run(4, 2, 6, 2);
    pairwise = 0;
}

/* dc_lambda 0 is plain PACI to the bit (the table marks the delays, nothing else changes);
 * dc_lambda > 0 trains (the loss falls) and differs. */
static void test_lambda_zero_is_plain_paci(void **state)
{
    enum { STEPS = 30 };
    int64_t n = 0;
    float *plain = train(4, 2, STEPS, DELAY_NONE, 0.0, 0, 3e-2);
    float *zero = train(4, 2, STEPS, DELAY_DC_ASGD, 0.0, 0, 3e-2);
    n = pr_ckpt_offsets(&prog, (int64_t[PR_CKPT_COUNT]){0});
    assert_memory_equal(plain, zero, (size_t)n * sizeof(float));
    float *corrected = train(4, 2, STEPS, DELAY_DC_ASGD, 20.0, 0, 3e-2);
    assert_true(memcmp(plain, corrected, (size_t)n * sizeof(float)) != 0);
    double first = (logged_loss[0] + logged_loss[1]) / 2, last = (logged_loss[STEPS - 2] + logged_loss[STEPS - 1]) / 2;
    if (!(last < 0.9 * first))
        fail_msg("dc_lambda 20: loss %.4f at the start, %.4f at the end", first, last);
    free(plain);
    free(zero);
    free(corrected);
}

/* A device without the correction's call refuses dc-asgd before allocating anything. */
static int fake_gpu_probe(char *why)
{
    (void)why;
    return 1;
}

static void test_refused_without_the_call(void **state)
{
    pr_run run;
    char err[PR_ERR_LEN] = "";
    pr_device gpu = pr_device_cpu;
    gpu.name = "fake";
    gpu.host_memory = 0;
    gpu.probe = fake_gpu_probe;
    gpu.dc_asgd_add = NULL;
    toy_build_stages(4);
    toy_delay_correction = DELAY_DC_ASGD;
    toy_build_table(&table, TOY_PACI, 4, 2, 4, 4);
    toy_delay_correction = DELAY_NONE;
    prog = toy_program(&table.t, 4);
    prog.dc_asgd = 1;
    prog.dc_lambda = 1.0;
    prog.cuda_device = &gpu;
    prog.cuda = (const struct pr_cuda_stage *)&gpu; // any non-NULL: the GPU path "exists"
    pr_options opt = {.device = "cuda", .quiet = 1};
    assert_int_equal(pr_run_init(&run, &prog, &opt, err), -1);
    if (!strstr(err, "delay_correction dc-asgd is not supported on the fake device; run with --device cpu"))
        fail_msg("%s", err);
}

static int setup(void **state)
{
    toy_token_file(token_path);
    pr_blas_threads(1, 1);
    return 0;
}

/* Each test starts accumulating sequentially, also after one that failed midway. */
static int sequential(void **state)
{
    pairwise = 0;
    return 0;
}

static int teardown(void **state)
{
    unlink(token_path);
    clear_records();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_formula_against_double, sequential),
        cmocka_unit_test_setup(test_window_sums_are_corrected, sequential),
        cmocka_unit_test_setup(test_lambda_zero_is_plain_paci, sequential),
        cmocka_unit_test_setup(test_refused_without_the_call, sequential),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
