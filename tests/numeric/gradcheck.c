/* gradcheck: checks the generated stage code of a tiny GPT-2 against finite differences.
 *
 * Linked with the generated stage_*.c and program.c; runs the stages in order itself (no
 * runtime, no schedule), with pr_gemm and pr_gemm_bias on cblas and the parallel loops run in
 * order on this thread.
 *
 *   gradcheck              every parameter tensor of every stage and the input gradient
 *                          (dx_in) of every stage but the first, on sampled coordinates
 *   gradcheck --dump FILE  also writes weights, tokens, loss, gradients and the weights after
 *                          two AdamW steps for tests/numeric/torch_ref.py (one stage only)
 *
 * Central differences of fourth order, (8 (f(h) - f(-h)) - (f(2h) - f(-2h))) / 12h, h = 2^-6:
 * the loss is the mean of the float per-token losses summed in double. A coordinate passes when
 * |numeric - analytic| <= ATOL + RTOL * max(|numeric|, |analytic|).
 */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pacirt.h"

enum { SAMPLES_PER_TENSOR = 8 };
/* A power of two: x +- STEP and x +- 2 STEP are exact in float for |x| < 2^16. Not smaller:
 * the float forward's rounding over STEP is the error that dominates (at 2^-7 it passed ATOL
 * on one CPU's OpenBLAS kernels), while the fourth-order truncation stays far below it. */
static const double STEP = 0.015625;
static const double ATOL = 2e-5;
static const double RTOL = 2e-3;

void pr_gemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
             const float *b, int ldb, float beta, float *c, int ldc)
{
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* The product, then the bias added row by row. */
void pr_gemm_bias(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                  const float *b, int ldb, float beta, float *c, int ldc, const float *bias)
{
    pr_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++)
            c[(size_t)i * (size_t)ldc + (size_t)j] += bias[j];
}

/* The runtime spreads the indices over the stage's cores, each whole on one thread: the same bits. */
void pr_parallel_for(int n, pr_parallel_fn fn, void *ctx)
{
    for (int i = 0; i < n; i++)
        fn(ctx, i, 0);
}

int pr_parallel_cores(void) { return 1; }

/* Worker 0 uses the stage's own workspaces: only a helper asks for scratch. */
float *pr_thread_floats(size_t floats)
{
    (void)floats;
    fprintf(stderr, "gradcheck: pr_thread_floats called without helper threads\n");
    exit(1);
}

typedef struct StageState {
    float *params, *grads, *m, *v, *acts, *scratch, *dx_in;
} StageState;

static const pr_program *prog = &pr_generated_program;
static StageState state[PACI_MAX_STAGES];
static int32_t *tokens, *targets;
static float *losses;
static int BT, C;

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

/* xorshift64*: a fixed sequence so that a failure reproduces. */
static double uniform(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (double)((rng * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static void *alloc_floats(int64_t n)
{
    float *p = calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!p) {
        fprintf(stderr, "gradcheck: out of memory\n");
        exit(1);
    }
    return p;
}

/* Weights larger than GPT-2's 0.02 so that every path carries a visible gradient. */
static void init_stage(int s)
{
    const pr_stage_code *code = &prog->stage[s];
    StageState *st = &state[s];
    st->params = alloc_floats(code->n_params);
    st->grads = alloc_floats(code->n_params);
    st->m = alloc_floats(code->n_params);
    st->v = alloc_floats(code->n_params);
    st->acts = alloc_floats(code->act_floats);
    st->scratch = alloc_floats(code->scratch_floats);
    st->dx_in = alloc_floats((int64_t)BT * C);
    for (int i = 0; i < code->n_tensors; i++) {
        const pr_tensor *t = &code->tensors[i];
        double base = t->init == PR_INIT_ONES ? 1.0 : 0.0;
        double scale = t->init == PR_INIT_ONES || t->init == PR_INIT_ZEROS ? 0.1 : 0.3;
        for (int64_t j = 0; j < t->size; j++)
            st->params[t->offset + j] = (float)(base + scale * (2 * uniform() - 1));
    }
}

/* Runs the forward of stages first..last, handing each output to the next input. */
static double loss_from(int first)
{
    for (int s = first; s < prog->stages; s++) {
        const pr_stage_code *code = &prog->stage[s];
        if (s > first)
            memcpy(state[s].acts + code->in_offset, state[s - 1].acts + prog->stage[s - 1].out_offset,
                   sizeof(float) * (size_t)BT * (size_t)C);
        pr_fwd_args args = {state[s].params, state[s].acts, tokens, targets, losses, NULL};
        code->forward(&args);
    }
    double sum = 0;
    for (int i = 0; i < BT; i++)
        sum += losses[i];
    return sum / BT;
}

static void backward_all(void)
{
    for (int s = prog->stages - 1; s >= 0; s--) {
        pr_bwd_args args = {
            .params = state[s].params, .grads = state[s].grads, .acts = state[s].acts,
            .scratch = state[s].scratch, .tokens = tokens, .targets = targets,
            .dx_out = s == prog->stages - 1 ? NULL : state[s + 1].dx_in,
            .dx_in = s == 0 ? NULL : state[s].dx_in, .loss_scale = 1.0f,
        };
        prog->stage[s].backward(&args);
    }
}

/* The loss run from stage `first` with x[i] moved by delta. */
static double loss_moved(int first, float *x, int64_t i, double delta)
{
    float saved = x[i];
    x[i] = (float)(saved + delta);
    double loss = loss_from(first);
    x[i] = saved;
    return loss;
}

/* Compares analytic[i] with the fourth-order central difference of the loss run from stage
 * `first` when x[i] moves; returns 1 on a mismatch and updates the worst error. */
static int check_coordinate(const char *what, int first, float *x, const float *analytic, int64_t i,
                            double *worst)
{
    double near = loss_moved(first, x, i, STEP) - loss_moved(first, x, i, -STEP);
    double far = loss_moved(first, x, i, 2 * STEP) - loss_moved(first, x, i, -2 * STEP);
    double numeric = (8 * near - far) / (12 * STEP);
    double err = fabs(numeric - analytic[i]);
    double bound = ATOL + RTOL * fmax(fabs(numeric), fabs(analytic[i]));
    if (err / bound > *worst)
        *worst = err / bound;
    if (err > bound) {
        fprintf(stderr, "FAIL %s[%ld]: analytic %.6g numeric %.6g\n", what, (long)i, analytic[i], numeric);
        return 1;
    }
    return 0;
}

/* The coordinates to check: the largest gradient and random ones. */
static int check_vector(const char *what, int first, float *x, const float *analytic, int64_t n, double *worst)
{
    int64_t largest = 0;
    for (int64_t i = 1; i < n; i++)
        if (fabsf(analytic[i]) > fabsf(analytic[largest]))
            largest = i;
    int failures = check_coordinate(what, first, x, analytic, largest, worst);
    for (int k = 1; k < SAMPLES_PER_TENSOR; k++)
        failures += check_coordinate(what, first, x, analytic, (int64_t)(uniform() * (double)n), worst);
    return failures;
}

static void write_or_die(FILE *f, const void *p, size_t size, size_t n)
{
    if (fwrite(p, size, n, f) != n) {
        fprintf(stderr, "gradcheck: write failed\n");
        exit(1);
    }
}

/* The file torch_ref.py reads: see its header for the layout. */
static void dump(const char *path, double loss)
{
    const pr_stage_code *code = &prog->stage[0];
    StageState *st = &state[0];
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    int32_t header[9] = {0x70616369, 1, prog->layers, prog->width, prog->heads, prog->context,
                         prog->vocab, prog->micro, prog->tied};
    write_or_die(f, header, sizeof header[0], 9);
    int32_t n_tensors = code->n_tensors;
    write_or_die(f, &n_tensors, sizeof n_tensors, 1);
    double hyper[6] = {prog->lr, prog->beta1, prog->beta2, prog->eps, prog->weight_decay, loss};
    write_or_die(f, hyper, sizeof hyper[0], 6);
    write_or_die(f, tokens, sizeof *tokens, (size_t)BT);
    write_or_die(f, targets, sizeof *targets, (size_t)BT);

    float *before = alloc_floats(code->n_params);
    memcpy(before, st->params, sizeof(float) * (size_t)code->n_params);
    for (int64_t t = 1; t <= 2; t++) {
        pr_adamw_args args = {st->params, st->grads, st->m, st->v, (float)prog->lr, 1.0f, t, NULL};
        code->adamw(&args);
    }
    for (int i = 0; i < code->n_tensors; i++) {
        const pr_tensor *t = &code->tensors[i];
        char name[32] = {0};
        snprintf(name, sizeof name, "%s", t->name);
        int64_t size = t->size;
        int32_t decay = t->decay;
        write_or_die(f, name, 1, sizeof name);
        write_or_die(f, &size, sizeof size, 1);
        write_or_die(f, &decay, sizeof decay, 1);
        write_or_die(f, before + t->offset, sizeof(float), (size_t)size);
        write_or_die(f, st->grads + t->offset, sizeof(float), (size_t)size);
        write_or_die(f, st->params + t->offset, sizeof(float), (size_t)size);
    }
    free(before);
    if (fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    const char *dump_path = argc == 3 && strcmp(argv[1], "--dump") == 0 ? argv[2] : NULL;
    if (argc != 1 && !dump_path) {
        fprintf(stderr, "usage: %s [--dump FILE]\n", argv[0]);
        return 2;
    }
    BT = prog->micro * prog->context;
    C = prog->width;
    tokens = malloc(sizeof *tokens * (size_t)BT);
    targets = malloc(sizeof *targets * (size_t)BT);
    losses = alloc_floats(BT);
    for (int i = 0; i < BT; i++) {
        tokens[i] = (int32_t)(uniform() * prog->vocab);
        targets[i] = (int32_t)(uniform() * prog->vocab);
    }
    for (int s = 0; s < prog->stages; s++)
        init_stage(s);

    double loss = loss_from(0);
    backward_all();
    printf("%d stage(s), loss %.6f\n", prog->stages, loss);

    int failures = 0, checked = 0;
    double worst = 0;
    for (int s = 0; s < prog->stages; s++) {
        const pr_stage_code *code = &prog->stage[s];
        for (int i = 0; i < code->n_tensors; i++) {
            const pr_tensor *t = &code->tensors[i];
            char what[64];
            snprintf(what, sizeof what, "stage %d %s", s, t->name);
            failures += check_vector(what, 0, state[s].params + t->offset, state[s].grads + t->offset,
                                     t->size, &worst);
            checked++;
        }
        if (s > 0) {
            char what[64];
            snprintf(what, sizeof what, "stage %d dx_in", s);
            failures += check_vector(what, s, state[s].acts + code->in_offset, state[s].dx_in,
                                     (int64_t)BT * C, &worst);
            checked++;
        }
    }
    printf("%d vectors x %d coordinates, worst error %.3f of the tolerance (atol %g + rtol %g), "
           "%d failures\n", checked, SAMPLES_PER_TENSOR, worst, ATOL, RTOL, failures);
    if (dump_path)
        dump(dump_path, loss);
    return failures ? 1 : 0;
}
