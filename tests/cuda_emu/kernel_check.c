/* kernel_check.c: the GPU-only kernels of the generated CUDA (stages.cu under simt.h) against
 * the CPU path's kernels of the same stage file, one kernel at a time, on random inputs.
 * Test tooling for tests/e2e/cuda_kernels.sh, never part of pacic or run.
 *
 * Built with -DSTAGE_FILE='"gen/stage_0.c"' (a one-stage model's file: it holds the CPU
 * kernels softmax_xent_forward/backward, bias_backward and layernorm_backward as static
 * functions, and the shape constants) and linked with the emulated kernels (the trampoline
 * table of tests/cuda_emu/trampolines.sh). Checks, with the tolerances it prints:
 *   - classifier_fused, fp32 logits: losses and p - onehot(target) against
 *     softmax_xent_forward then softmax_xent_backward with dloss 1, to fp32 rounding (1e-5;
 *     2e-5 for the dlogits, which inherit the rounding of a log-sum-exp near 100); bf16
 *     logits: against the CPU kernels on the same logits widened, the losses to fp32 rounding
 *     and the dlogits to half a bf16 step; logits up to 100, so a missing max subtraction
 *     overflows expf;
 *   - bias_backward_tiles against bias_backward for widths C, 3C and 4C, and its bf16 copy of
 *     dout bit for bit against pr_to_bf16;
 *   - layernorm_backward_blocks against layernorm_backward (dinp, dweight, dbias, dinp's bf16
 *     copy) with BT not a multiple of the 64 rows a block takes;
 *   - keep_gradient (a zero-bubble B's keep of d fc under bf16): its copy and its bf16 copy bit
 *     for bit against x and pr_to_bf16 (ties to even, a NaN kept a NaN), over a count that is
 *     not a multiple of the block, with nothing written past it.
 * Exit 0: all pass; 1: a check failed (each failure names the kernel, tensor and index).
 */
#include STAGE_FILE

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "simt_table.h"

static int failures;
static unsigned long long rng_state = 0x9e3779b97f4a7c15ULL;

/* Uniform in [lo, hi). */
static float uniform(float lo, float hi)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (float)((rng_state >> 40) / 16777216.0);
}

static void *alloc(size_t bytes)
{
    void *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "kernel_check: out of memory\n");
        exit(1);
    }
    return p;
}

static float *random_floats(long n, float lo, float hi)
{
    float *x = alloc((size_t)n * sizeof *x);
    for (long i = 0; i < n; i++)
        x[i] = uniform(lo, hi);
    return x;
}

static float *copy_floats(const float *x, long n)
{
    float *y = alloc((size_t)n * sizeof *y);
    memcpy(y, x, (size_t)n * sizeof *y);
    return y;
}

/* Runs the emulated kernel `name` over `blocks` blocks of `threads`. */
static void launch(const char *name, unsigned blocks, unsigned threads, void **args)
{
    for (int i = 0; i < simt_n_kernels; i++)
        if (strcmp(simt_kernels[i].name, name) == 0) {
            simt_kernels[i].launch(blocks, threads, args);
            return;
        }
    fprintf(stderr, "kernel_check: no kernel %s in the unit\n", name);
    exit(1);
}

/* got against want over n values: |got - want| <= tol * max(1, |want|); the worst is printed. */
static void compare(const char *what, const float *got, const float *want, long n, double tol)
{
    double worst = 0.0;
    long at = -1;
    for (long i = 0; i < n; i++) {
        double scale = fabs(want[i]) > 1.0 ? fabs(want[i]) : 1.0;
        double err = fabs((double)got[i] - (double)want[i]) / scale;
        if (!(err <= worst)) { // NaN counts as the worst
            worst = err;
            at = i;
        }
    }
    bool ok = worst <= tol;
    printf("%s %s: %ld values, max scaled difference %.3g (tolerance %.3g)", ok ? "ok" : "FAIL", what, n, worst, tol);
    if (!ok && at >= 0)
        printf(" at %ld: %.9g, CPU %.9g", at, (double)got[at], (double)want[at]);
    printf("\n");
    failures += !ok;
}

static void check_classifier(void)
{
    long n = (long)BT * VP;
    float *logits = random_floats(n, -50.0f, 100.0f);
    int targets[BT];
    for (int r = 0; r < BT; r++)
        targets[r] = (int)uniform(0.0f, (float)V) % V;
    // fp32 logits
    float *cpu = copy_floats(logits, n), *gpu = copy_floats(logits, n);
    float cpu_losses[BT], gpu_losses[BT];
    softmax_xent_forward(cpu, cpu_losses, targets);
    softmax_xent_backward(cpu, targets, 1.0f, NULL);
    pr_bf16 *no_h = NULL;
    float *losses = gpu_losses;
    int *t = targets;
    void *args[] = {&gpu, &no_h, &losses, &t};
    launch("classifier_fused", (BT * 32 + 255) / 256, 256, args);
    compare("classifier_fused fp32 losses", gpu_losses, cpu_losses, BT, 1e-5);
    float *cpu_rows = alloc((size_t)BT * V * sizeof(float)), *gpu_rows = alloc((size_t)BT * V * sizeof(float));
    for (int r = 0; r < BT; r++) {
        memcpy(cpu_rows + (long)r * V, cpu + (long)r * VP, V * sizeof(float));
        memcpy(gpu_rows + (long)r * V, gpu + (long)r * VP, V * sizeof(float));
    }
    // exp(x - lse) carries lse's rounding, |lse| 2^-24 with |lse| near 100 here, and expf's own
    compare("classifier_fused fp32 dlogits", gpu_rows, cpu_rows, (long)BT * V, 2e-5);
    // bf16 logits in place: the CPU kernels on the same values widened
    pr_bf16 *logits_h = alloc((size_t)n * sizeof *logits_h);
    for (long i = 0; i < n; i++) {
        logits_h[i] = pr_to_bf16(logits[i]);
        cpu[i] = pr_from_bf16(logits_h[i]);
    }
    softmax_xent_forward(cpu, cpu_losses, targets);
    softmax_xent_backward(cpu, targets, 1.0f, NULL);
    float *unused = NULL;
    void *args_h[] = {&unused, &logits_h, &losses, &t};
    launch("classifier_fused", (BT * 32 + 255) / 256, 256, args_h);
    compare("classifier_fused bf16 losses", gpu_losses, cpu_losses, BT, 1e-5);
    for (int r = 0; r < BT; r++)
        for (int v = 0; v < V; v++) {
            cpu_rows[(long)r * V + v] = cpu[(long)r * VP + v];
            gpu_rows[(long)r * V + v] = pr_from_bf16(logits_h[(long)r * VP + v]);
        }
    // |dlogit| <= 1: half a bf16 step is 2^-9, plus fp32 rounding
    compare("classifier_fused bf16 dlogits", gpu_rows, cpu_rows, (long)BT * V, 1.0 / 512 + 1e-6);
    free(logits), free(cpu), free(gpu), free(logits_h), free(cpu_rows), free(gpu_rows);
}

static void check_bias(int OC)
{
    long n = (long)BT * OC;
    float *dout = random_floats(n, -1.0f, 1.0f), *start = random_floats(OC, -1.0f, 1.0f);
    float *cpu = copy_floats(start, OC), *gpu = copy_floats(start, OC);
    bias_backward(cpu, dout, OC);
    pr_bf16 *dout_h = alloc((size_t)n * sizeof *dout_h);
    const float *in = dout;
    int oc = OC;
    void *args[] = {&gpu, &in, &oc, &dout_h};
    launch("bias_backward_tiles", (unsigned)((OC + 7) / 8), 256, args);
    char what[64];
    snprintf(what, sizeof what, "bias_backward_tiles dbias (width %d)", OC);
    compare(what, gpu, cpu, OC, 1e-5);
    long wrong = 0;
    for (long i = 0; i < n; i++)
        wrong += dout_h[i] != pr_to_bf16(dout[i]);
    printf("%s bias_backward_tiles bf16 copy of dout (width %d): %ld of %ld differ from pr_to_bf16\n",
           wrong ? "FAIL" : "ok", OC, wrong, n);
    failures += wrong != 0;
    free(dout), free(start), free(cpu), free(gpu), free(dout_h);
}

static void check_layernorm(void)
{
    long n = (long)BT * C;
    float *dout = random_floats(n, -1.0f, 1.0f), *inp = random_floats(n, -2.0f, 2.0f);
    float *weight = random_floats(C, 0.5f, 1.5f), *dinp0 = random_floats(n, -1.0f, 1.0f);
    float *dw0 = random_floats(C, -1.0f, 1.0f), *db0 = random_floats(C, -1.0f, 1.0f);
    float mean[BT], rstd[BT];
    for (int r = 0; r < BT; r++) {
        double m = 0.0, var = 0.0;
        for (int c = 0; c < C; c++)
            m += inp[(long)r * C + c];
        m /= C;
        for (int c = 0; c < C; c++)
            var += (inp[(long)r * C + c] - m) * (inp[(long)r * C + c] - m);
        mean[r] = (float)m;
        rstd[r] = (float)(1.0 / sqrt(var / C + 1e-5));
    }
    float *cpu_dinp = copy_floats(dinp0, n), *cpu_dw = copy_floats(dw0, C), *cpu_db = copy_floats(db0, C);
    layernorm_backward(cpu_dinp, cpu_dw, cpu_db, dout, inp, weight, mean, rstd, NULL);
    float *dinp = copy_floats(dinp0, n), *dw = copy_floats(dw0, C), *db = copy_floats(db0, C);
    pr_bf16 *dinp_h = alloc((size_t)n * sizeof *dinp_h);
    const float *d = dout, *x = inp, *w = weight, *mp = mean, *rp = rstd;
    void *args[] = {&dinp, &dw, &db, &d, &x, &w, &mp, &rp, &dinp_h};
    launch("layernorm_backward_blocks", (BT + 63) / 64, 256, args);
    compare("layernorm_backward_blocks dinp", dinp, cpu_dinp, n, 1e-5);
    compare("layernorm_backward_blocks dweight", dw, cpu_dw, C, 1e-5);
    compare("layernorm_backward_blocks dbias", db, cpu_db, C, 1e-5);
    long wrong = 0;
    for (long i = 0; i < n; i++)
        wrong += dinp_h[i] != pr_to_bf16(dinp[i]);
    printf("%s layernorm_backward_blocks bf16 copy of dinp: %ld of %ld differ from pr_to_bf16\n", wrong ? "FAIL" : "ok",
           wrong, n);
    failures += wrong != 0;
    free(dout), free(inp), free(weight), free(dinp0), free(dw0), free(db0), free(cpu_dinp), free(cpu_dw);
    free(cpu_db), free(dinp), free(dw), free(db), free(dinp_h);
}

static void check_keep_gradient(void)
{
    enum { N = 4 * C * BT + 37, BLOCK = 256 };
    float *x = random_floats(N, -1.0f, 1.0f), *out = random_floats(N + 1, 5.0f, 6.0f);
    union { unsigned u; float f; } tie = {0x3f808000u}, odd_tie = {0x3f818000u}, nan = {0x7fc00001u};
    x[0] = tie.f, x[1] = odd_tie.f, x[2] = nan.f; // 1 + 2^-8 rounds down to even, 1 + 3 * 2^-8 up
    pr_bf16 *out_h = alloc((N + 1) * sizeof *out_h);
    out_h[N] = 0x1234;
    float guard = out[N];
    long n = N;
    void *args[] = {&out, &x, &n, &out_h};
    launch("keep_gradient", (N + BLOCK - 1) / BLOCK, BLOCK, args);
    long wrong = 0;
    for (long i = 0; i < N; i++)
        wrong += memcmp(&out[i], &x[i], sizeof *x) != 0 || out_h[i] != pr_to_bf16(x[i]);
    wrong += out_h[0] != 0x3f80 || out_h[1] != 0x3f82 || out_h[N] != 0x1234 || memcmp(&out[N], &guard, sizeof guard) != 0;
    printf("%s keep_gradient copy and bf16 copy: %ld of %ld differ\n", wrong ? "FAIL" : "ok", wrong, (long)N);
    failures += wrong != 0;
    free(x), free(out), free(out_h);
}

int main(void)
{
    printf("shapes: BT %d (blocks of 64 rows: %d), C %d, V %d, VP %ld\n", BT, (BT + 63) / 64, C, V, (long)VP);
    check_classifier();
    check_bias(C);
    check_bias(3 * C);
    check_bias(4 * C);
    check_layernorm();
    check_keep_gradient();
    printf("%s\n", failures ? "kernel_check: FAILED" : "kernel_check: every GPU kernel matches the CPU path");
    return failures != 0;
}
