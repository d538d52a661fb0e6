/* test_predict.c: `delay_correction predict` over toy stages. Every forward is recorded with
 * the weights it ran on and the stage's state at that moment; its backward records how many
 * optimizer steps the stage took in between (the delay the run realised, counted here, not
 * read from the table). The forward must have run on W - d * lr(t+1) * u with that d and
 * the optimizer's direction u (AdamW, Muon, NAdamW, LAMB, LANS), recomputed here in double. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "toy_model.h"

static char token_path[] = "/tmp/pacirt_predict_XXXXXX";

#define MAX_RECORDS 4096

typedef struct fwd_record {
    int stage;
    int64_t mb, t_fwd, t_bwd;
    float *used, *w, *m, *v; /* copies, n_params floats each */
} fwd_record;

static pr_run *running;
static fwd_record records[MAX_RECORDS];
static int n_records;
static double logged_loss[64];
static int backwards_off_live; /* backwards that ran on other weights than the live ones */

static int64_t slot_mb_of(const pr_stage_rt *st, const float *acts)
{
    return st->slot_mb[(acts - st->slots) / st->code->act_floats];
}

static float *copy_of(const float *src, int64_t n)
{
    float *dst = pr_alloc((size_t)n * sizeof(float));
    memcpy(dst, src, (size_t)n * sizeof(float));
    return dst;
}

/* The stage threads record under the run's statistics lock (one array for all stages). */
static void recording_forward(int s, const pr_fwd_args *a)
{
    const pr_stage_rt *st = &running->stage[s];
    int64_t n = st->code->n_params;
    pthread_mutex_lock(&running->stats_mu);
    if (n_records == MAX_RECORDS)
        fail_msg("more than %d forwards", MAX_RECORDS);
    records[n_records++] = (fwd_record){s, slot_mb_of(st, a->acts), st->t, -1, copy_of(a->params, n),
                                        copy_of(st->params, n), copy_of(st->m, n), copy_of(st->v, n)};
    pthread_mutex_unlock(&running->stats_mu);
    toy_forward(s, a);
}

static void recording_backward(int s, const pr_bwd_args *a)
{
    const pr_stage_rt *st = &running->stage[s];
    int64_t mb = slot_mb_of(st, a->acts);
    pthread_mutex_lock(&running->stats_mu);
    // PACI differentiates at the live weights: the version the gradient is applied to.
    if (memcmp(a->params, st->params, (size_t)st->code->n_params * sizeof(float)) != 0)
        backwards_off_live++;
    for (int i = 0; i < n_records; i++)
        if (records[i].stage == s && records[i].mb == mb && records[i].t_bwd < 0)
            records[i].t_bwd = st->t;
    pthread_mutex_unlock(&running->stats_mu);
    toy_backward(s, a);
}

#define RECORDING(S)                                                                   \
    static void rec_fwd##S(const pr_fwd_args *a) { recording_forward(S, a); }          \
    static void rec_bwd##S(const pr_bwd_args *a) { recording_backward(S, a); }
RECORDING(0)
RECORDING(1)
RECORDING(2)
RECORDING(3)
static void (*const rec_fwds[4])(const pr_fwd_args *) = {rec_fwd0, rec_fwd1, rec_fwd2, rec_fwd3};
static void (*const rec_bwds[4])(const pr_bwd_args *) = {rec_bwd0, rec_bwd1, rec_bwd2, rec_bwd3};

static void clear_records(void)
{
    for (int i = 0; i < n_records; i++) {
        free(records[i].used);
        free(records[i].w);
        free(records[i].m);
        free(records[i].v);
    }
    n_records = 0;
}

static void log_loss(pr_run *run, int64_t step, double loss, double lr, double grad_norm)
{
    if (step >= 1 && step <= 64)
        logged_loss[step - 1] = loss;
}

static toy_table table;
static pr_program prog;

/* The optimizer the next train() steps with: adamw (the toy's own step) or a rule of
 * runtime/optim_rules.c with these constants. */
static int optimizer = PR_OPT_ADAMW;
static pr_optim_rule rule = {.width = TOY_C, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1,
                             .momentum = 0.95, .nesterov = 1, .ns_steps = 5, .shape_scale = PR_MUON_SCALE_RATIO,
                             .muon_weight_decay = 0.05, .group_lr_ratio = 0.5, .momentum_decay = 4e-3};

/* Muon's matrices as the rule reads them: kind, rows, cols of one matrix (qkv holds three). */
static int muon_matrix_of(int kind, int64_t *rows, int64_t *cols)
{
    *rows = *cols = TOY_C;
    if (kind == PR_CKPT_FCW)
        *rows = 4 * TOY_C;
    if (kind == PR_CKPT_FCPROJW)
        *cols = 4 * TOY_C;
    return kind == PR_CKPT_QKVW || kind == PR_CKPT_ATTPROJW || kind == PR_CKPT_FCW || kind == PR_CKPT_FCPROJW;
}

/* The rule's step on every tensor. The toy's forward never reads the block matrices, so
 * they get a fixed pseudo-gradient here: Muon's momentum on them is then not zero. */
static void rule_step(int s, const pr_adamw_args *a)
{
    const pr_stage_code *sc = &toy_codes[s];
    int64_t rows, cols;
    float *grads = copy_of(a->grads, sc->n_params);
    pr_adamw_args fed = *a;
    fed.grads = grads;
    for (int k = 0; k < sc->n_tensors; k++) {
        const pr_tensor *t = &sc->tensors[k];
        if (muon_matrix_of(t->ckpt_tensor, &rows, &cols))
            for (int64_t i = t->offset; i < t->offset + t->size; i++)
                grads[i] += 1e-3f * sinf(0.7f * (float)i + 0.3f * (float)a->t + (float)s);
        pr_optim_step(&rule, t, &fed);
    }
    free(grads);
}
static void rule_step0(const pr_adamw_args *a) { rule_step(0, a); }
static void rule_step1(const pr_adamw_args *a) { rule_step(1, a); }
static void rule_step2(const pr_adamw_args *a) { rule_step(2, a); }
static void rule_step3(const pr_adamw_args *a) { rule_step(3, a); }
static void (*const rule_steps[4])(const pr_adamw_args *) = {rule_step0, rule_step1, rule_step2, rule_step3};

/* Trains the toy with `correction` compiled into the table; records the forwards if asked.
 * Returns the gathered weights (caller frees); the run is freed. */
static float *train(enum toy_kind kind, int p, int K, int steps, int correction, int recording, double lr)
{
    pr_run run;
    char err[PR_ERR_LEN];
    toy_build_stages(p);
    if (recording)
        for (int s = 0; s < p; s++) {
            toy_codes[s].forward = rec_fwds[s];
            toy_codes[s].backward = rec_bwds[s];
        }
    if (optimizer != PR_OPT_ADAMW) {
        rule.kind = optimizer;
        for (int s = 0; s < p; s++) {
            toy_codes[s].adamw = rule_steps[s];
            toy_codes[s].optim_rule = &rule;
        }
    }
    toy_delay_correction = correction;
    toy_build_table(&table, kind, p, K, steps, steps);
    toy_delay_correction = DELAY_NONE;
    prog = toy_program(&table.t, steps);
    prog.lr = lr;
    prog.grad_clip = 1.0;
    prog.optimizer = optimizer;
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

/* Newton-Schulz in double on x (r x c, r <= c), as the published Muon runs it: x / ||x||_F,
 * then x <- a x + (b A + c A^2) x with A = x x^T. */
static void newton_schulz_ref(double *x, int r, int c, int steps)
{
    double norm = 0, a[4 * TOY_C * TOY_C], aa[4 * TOY_C * TOY_C], y[4 * TOY_C * TOY_C];
    for (int i = 0; i < r * c; i++)
        norm += x[i] * x[i];
    for (int i = 0; i < r * c; i++)
        x[i] /= sqrt(norm) + 1e-7;
    for (int k = 0; k < steps; k++) {
        for (int i = 0; i < r; i++)
            for (int j = 0; j < r; j++) {
                a[i * r + j] = 0;
                for (int l = 0; l < c; l++)
                    a[i * r + j] += x[i * c + l] * x[j * c + l];
            }
        for (int i = 0; i < r; i++)
            for (int j = 0; j < r; j++) {
                aa[i * r + j] = 0;
                for (int l = 0; l < r; l++)
                    aa[i * r + j] += a[i * r + l] * a[l * r + j];
            }
        for (int i = 0; i < r; i++)
            for (int j = 0; j < c; j++) {
                y[i * c + j] = 3.4445 * x[i * c + j];
                for (int l = 0; l < r; l++)
                    y[i * c + j] += (-4.7750 * a[i * r + l] + 2.0315 * aa[i * r + l]) * x[l * c + j];
            }
        memcpy(x, y, (size_t)(r * c) * sizeof *x);
    }
}

/* u and the step length d lr of one element in double, from the recorded state (t >= 1 steps):
 * AdamW m_hat / (sqrt(v_hat) + eps) + wd W; NAdamW the Nesterov mix of step t with m as the
 * gradient; Muon scale * NS(momentum) + wd W on its matrices (dir: that matrix's
 * orthogonalised momentum, computed by the caller), its AdamW group elsewhere. */
static double reference_u(const fwd_record *rec, const pr_tensor *tn, int64_t i, double t, const double *muon_dir,
                          double *lr_factor)
{
    double w = rec->w[i], m = rec->m[i], v = rec->v[i];
    *lr_factor = 1.0;
    if (optimizer == PR_OPT_ADAMW)
        return (m / (1 - pow(prog.beta1, t))) / (sqrt(v / (1 - pow(prog.beta2, t))) + prog.eps) +
               (tn->decay ? prog.weight_decay * w : 0);
    double wd = tn->decay ? rule.weight_decay : 0;
    if (optimizer == PR_OPT_NADAMW) {
        double product = 1, mu_t = 0, mu_next;
        for (int k = 1; k <= (int)t; k++)
            product *= mu_t = rule.beta1 * (1 - 0.5 * pow(0.96, k * rule.momentum_decay));
        mu_next = rule.beta1 * (1 - 0.5 * pow(0.96, (t + 1) * rule.momentum_decay));
        double mix = (1 - mu_t) / (1 - product) + mu_next / (1 - product * mu_next);
        return mix * m / (sqrt(v / (1 - pow(rule.beta2, t))) + rule.eps) + wd * w;
    }
    if (optimizer == PR_OPT_LAMB || optimizer == PR_OPT_LANS) { // lans: c = r with m^ for h
        double ratio = 1, w_sq = 0, d_sq = 0; // over the tensor: one layer's slice in the toy
        for (int64_t j = tn->offset; j < tn->offset + tn->size; j++) {
            double dj = (rec->m[j] / (1 - pow(rule.beta1, t))) / (sqrt(rec->v[j] / (1 - pow(rule.beta2, t))) + rule.eps) +
                        wd * rec->w[j];
            w_sq += (double)rec->w[j] * rec->w[j];
            d_sq += dj * dj;
        }
        if (tn->decay && w_sq > 0 && d_sq > 0)
            ratio = sqrt(w_sq) / sqrt(d_sq);
        return ratio * ((m / (1 - pow(rule.beta1, t))) / (sqrt(v / (1 - pow(rule.beta2, t))) + rule.eps) + wd * w);
    }
    if (muon_dir)
        return *muon_dir + rule.muon_weight_decay * w;
    *lr_factor = rule.group_lr_ratio;
    return (m / (1 - pow(rule.beta1, t))) / (sqrt(v / (1 - pow(rule.beta2, t))) + rule.eps) + wd * w;
}

/* scale * NS(momentum) for every element of a Muon matrix tensor of the record, in double. */
static void muon_directions(const fwd_record *rec, const pr_tensor *tn, double *dir)
{
    int64_t rows, cols;
    muon_matrix_of(tn->ckpt_tensor, &rows, &cols);
    int flip = rows > cols;
    int r = (int)(flip ? cols : rows), c = (int)(flip ? rows : cols);
    double scale = sqrt(rows > cols ? (double)rows / (double)cols : 1.0);
    for (int64_t at = 0; at < tn->size; at += rows * cols) {
        double x[4 * TOY_C * TOY_C];
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++)
                x[flip ? j * rows + i : i * cols + j] = rec->m[tn->offset + at + i * cols + j];
        newton_schulz_ref(x, r, c, rule.ns_steps);
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++)
                dir[at + i * cols + j] = scale * x[flip ? j * rows + i : i * cols + j];
    }
}

/* Each forward ran on W - d lr(t+1) u, d = the steps its stage took before the backward. */
static void check_forwards_saw_prediction(int p, int K, int steps, int want_max_d)
{
    clear_records();
    backwards_off_live = 0;
    free(train(TOY_PACI, p, K, steps, DELAY_PREDICT, 1, 1e-2));
    assert_int_equal(backwards_off_live, 0);
    assert_int_equal(n_records, (long)p * K * steps);
    int predicted = 0, max_d = 0, muon_moved = 0;
    for (int r = 0; r < n_records; r++) {
        const fwd_record *rec = &records[r];
        const pr_stage_code *sc = &toy_codes[rec->stage];
        assert_true(rec->t_bwd >= rec->t_fwd);
        int64_t d = rec->t_bwd - rec->t_fwd;
        max_d = d > max_d ? (int)d : max_d;
        if (d == 0 || rec->t_fwd == 0) { // no delay, or no moments yet: the live weights, exactly
            if (memcmp(rec->used, rec->w, (size_t)sc->n_params * sizeof(float)) != 0)
                fail_msg("stage %d mb %lld (d = %lld, t = %lld): the forward did not run on the live weights",
                         rec->stage, (long long)rec->mb, (long long)d, (long long)rec->t_fwd);
            continue;
        }
        predicted++;
        double t = (double)rec->t_fwd;
        double ahead = (double)d * pr_lr(&prog, rec->t_fwd + 1);
        int moved = 0;
        for (int k = 0; k < sc->n_tensors; k++) {
            const pr_tensor *tn = &sc->tensors[k];
            int64_t rows, cols;
            double dir[4 * 4 * TOY_C * TOY_C];
            int muon = optimizer == PR_OPT_MUON && muon_matrix_of(tn->ckpt_tensor, &rows, &cols);
            if (muon)
                muon_directions(rec, tn, dir);
            for (int64_t i = tn->offset; i < tn->offset + tn->size; i++) {
                double w = rec->w[i], lr_factor;
                double u = reference_u(rec, tn, i, t, muon ? &dir[i - tn->offset] : NULL, &lr_factor);
                double want = w - lr_factor * ahead * u;
                // Newton-Schulz amplifies rounding (up to a^5 ~ 500x at small singular values): float
                // leaves double by ~1e-5 of the orthogonalised matrix's entries, which are O(1).
                double tolerance = 1e-6 * (fabs(w) + fabs(lr_factor * ahead * u)) + 1e-9 + (muon ? 2e-4 * ahead : 0);
                if (fabs(rec->used[i] - want) > tolerance)
                    fail_msg("stage %d mb %lld (d = %lld, t = %lld) %s[%lld]: forward used %.9g, W - d lr u = %.9g "
                             "(W %.9g, lr(t+1) %.6g)", rec->stage, (long long)rec->mb, (long long)d,
                             (long long)rec->t_fwd, tn->name, (long long)(i - tn->offset), rec->used[i], want,
                             w, pr_lr(&prog, rec->t_fwd + 1));
                moved += rec->used[i] != rec->w[i];
                muon_moved += muon && fabs(dir[i - tn->offset]) > 1e-3;
            }
        }
        assert_true(moved > 0);
    }
    assert_true(predicted > 0);
    assert_true(optimizer != PR_OPT_MUON || muon_moved > 0); // the matrices' momentum was not zero
    assert_int_equal(max_d, want_max_d);
    clear_records();
}

static void test_forward_sees_extrapolated_weights(void **state)
{
    check_forwards_saw_prediction(4, 2, 6, 2); // K < p-1: stage 0 meets 2 steps
    check_forwards_saw_prediction(3, 3, 5, 1); // K >= p-1: the one-step delay
}

/* The same with Muon (Nesterov, then plain momentum), NAdamW's, LAMB's and LANS's directions. */
static void test_forward_sees_muon_nadamw_lamb_prediction(void **state)
{
    optimizer = PR_OPT_LAMB;
    check_forwards_saw_prediction(4, 2, 6, 2);
    check_forwards_saw_prediction(3, 3, 5, 1);
    optimizer = PR_OPT_LANS;
    check_forwards_saw_prediction(4, 2, 6, 2);
    optimizer = PR_OPT_MUON;
    check_forwards_saw_prediction(4, 2, 6, 2);
    rule.nesterov = 0;
    check_forwards_saw_prediction(3, 3, 5, 1);
    rule.nesterov = 1;
    optimizer = PR_OPT_NADAMW;
    check_forwards_saw_prediction(4, 2, 6, 2);
    check_forwards_saw_prediction(3, 3, 5, 1);
    optimizer = PR_OPT_ADAMW;
}

/* Synchronous schedules meet no delay: predict compiles to the same table and the same run. */
static void test_sync_bit_identical(void **state)
{
    const enum toy_kind kinds[] = {TOY_GPIPE, TOY_1F1B};
    for (int k = 0; k < 2; k++) {
        float *plain = train(kinds[k], 3, 2, 6, DELAY_NONE, 0, 1e-2);
        float *corrected = train(kinds[k], 3, 2, 6, DELAY_PREDICT, 0, 1e-2);
        int64_t n = pr_ckpt_offsets(&prog, (int64_t[PR_CKPT_COUNT]){0});
        assert_memory_equal(plain, corrected, (size_t)n * sizeof(float));
        free(plain);
        free(corrected);
    }
}

/* PACI with prediction trains (the loss falls) and differs from PACI without it. */
static void test_paci_predict_trains(void **state)
{
    enum { STEPS = 30 };
    float *plain = train(TOY_PACI, 4, 2, STEPS, DELAY_NONE, 0, 3e-2);
    float *corrected = train(TOY_PACI, 4, 2, STEPS, DELAY_PREDICT, 0, 3e-2);
    int64_t n = pr_ckpt_offsets(&prog, (int64_t[PR_CKPT_COUNT]){0});
    assert_true(memcmp(plain, corrected, (size_t)n * sizeof(float)) != 0);
    double first = (logged_loss[0] + logged_loss[1]) / 2, last = (logged_loss[STEPS - 2] + logged_loss[STEPS - 1]) / 2;
    if (!(last < 0.9 * first))
        fail_msg("loss %.4f at the start, %.4f at the end", first, last);
    free(plain);
    free(corrected);
}

/* Predict under lars is refused before anything is allocated (its step length needs the next
 * gradient's norm). The GPU's prediction is checked against this file's CPU one by
 * tests/e2e/cuda_emu_optim.sh. */
static void test_refusals(void **state)
{
    pr_run run;
    char err[PR_ERR_LEN] = "";
    toy_build_stages(4);
    toy_delay_correction = DELAY_PREDICT;
    toy_build_table(&table, TOY_PACI, 4, 2, 4, 4);
    toy_delay_correction = DELAY_NONE;
    prog = toy_program(&table.t, 4);
    prog.optimizer = PR_OPT_LARS;
    assert_int_equal(pr_run_init(&run, &prog, NULL, err), -1);
    if (!strstr(err, "needs optimizer adamw, muon, lamb, nadamw or lans, not lars"))
        fail_msg("lars: %s", err);
}

static int setup(void **state)
{
    toy_token_file(token_path);
    pr_blas_threads(1, 1);
    return 0;
}

/* Each test starts under AdamW and Nesterov Muon, also after one that failed midway. */
static int reset_optimizer(void **state)
{
    optimizer = PR_OPT_ADAMW;
    rule.nesterov = 1;
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
        cmocka_unit_test_setup(test_forward_sees_extrapolated_weights, reset_optimizer),
        cmocka_unit_test_setup(test_forward_sees_muon_nadamw_lamb_prediction, reset_optimizer),
        cmocka_unit_test_setup(test_sync_bit_identical, reset_optimizer),
        cmocka_unit_test_setup(test_paci_predict_trains, reset_optimizer),
        cmocka_unit_test_setup(test_refusals, reset_optimizer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
