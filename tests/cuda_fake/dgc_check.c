/* dgc_check.c: compression dgc's GPU side (runtime/cuda/dgc.c and the kernels pacic writes into
 * stages.cu, run under tests/cuda_emu/simt.h) against the CPU's (runtime/dgc.c), bit for bit,
 * on crafted vectors where training rarely goes: half the magnitudes drawn from a handful of
 * values, so that most thresholds have ties (taken from the lower index), zeros among them, an n
 * that is not a multiple of a chunk, k from 1 to n, three steps of residual (and, for LARS,
 * velocity) carried over, a local clipping scale, and the sum of three replicas' lists (order
 * matters with three: float addition is commutative but not associative); n past two blocks of
 * 65536 (the lists' running counts per block, written by the scan, and the scatter's search
 * for a pair's block). Test tooling for
 * tests/e2e/cuda_fake_dgc.sh, never part of pacic or run.
 *
 * Linked with runtime/cuda/dgc.c, the emulated kernels of a compressing program (their launch
 * table, simt_table.h) and libpacirt.a; the few device calls dgc.c makes are host memory and
 * immediate launches here. Exit 0: all agree; 1: a difference, named.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/cuda/cuda_layer.h"
#include "simt_table.h"

CUfunction pr_cuda_function(int stage, const char *name, char *err)
{
    for (int i = 0; i < simt_n_kernels; i++)
        if (strcmp(simt_kernels[i].name, name) == 0)
            return (CUfunction)(uintptr_t)&simt_kernels[i];
    pr_fail(err, "stage %d: no kernel %s", stage, name);
    return NULL;
}

void pr_cuda_launch_function(int stage, CUfunction f, int64_t threads, int block, void **args)
{
    (void)stage;
    if (threads > 0)
        ((const simt_kernel *)(uintptr_t)f)->launch((unsigned)((threads + block - 1) / block), (unsigned)block, args);
}

void *pr_cuda_dev_alloc(int stage, size_t bytes)
{
    (void)stage;
    return pr_alloc(bytes ? bytes : 1);
}

void pr_cuda_dev_release(int stage, void *p)
{
    (void)stage;
    free(p);
}

void pr_cuda_dev_zero(int stage, void *dst, size_t bytes)
{
    (void)stage;
    memset(dst, 0, bytes);
}

void pr_cuda_dev_queue_copy(int stage, void *dst, const void *src, size_t bytes)
{
    (void)stage;
    memcpy(dst, src, bytes);
}

static int failures;
static uint64_t rng = 0x2545f4914f6cdd1dULL;

static uint32_t next(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* Half the time a value from a small set, 0 or +-{0.25, 0.5, 1, 3} x 2^-e, so magnitudes
 * repeat; else one with a full mantissa in (-2, 2), so sums round and their order shows. */
static float crafted(void)
{
    static const float base[] = {0.0f, 0.25f, 0.5f, 1.0f, 3.0f};
    float x = next() & 1 ? base[next() % 5] / (float)(1u << (next() % 3)) : (float)(next() % 2000000) * 1e-6f + 1e-7f;
    return next() & 1 ? -x : x;
}

static int same_bits(const void *a, const void *b, size_t bytes)
{
    return memcmp(a, b, bytes) == 0;
}

/* Three steps of D replicas at n entries, k pairs each step: residuals, velocities, pairs and
 * the sum, the GPU's against the CPU's. */
static void check(int64_t n, int64_t k, int lars, float scale, int D)
{
    pr_stage_code code = {.n_params = n};
    pr_program prog = {.stage = &code, .dgc_density = 1.0, .optimizer = lars ? PR_OPT_LARS : PR_OPT_ADAMW};
    float mu = lars ? 0.9f : 0.0f;
    pr_dgc_buffers cpu[4], gpu[4];
    const pr_dgc_buffers *from[4];
    float *grad = pr_alloc((size_t)n * sizeof(float)), *sum_cpu = pr_alloc((size_t)n * sizeof(float)),
          *sum_gpu = pr_alloc((size_t)n * sizeof(float));
    char err[PR_ERR_LEN];
    for (int r = 0; r < D; r++) {
        pr_dgc_alloc(&cpu[r], n, lars);
        from[r] = &cpu[r];
        if (pr_cuda_dgc_open(&prog, 0, &gpu[r], D, err) != 0) {
            fprintf(stderr, "dgc_check: %s\n", err);
            exit(1);
        }
    }
    // one stage's state serves the D replicas in turn: every replica's slots are the same size
    uint32_t *slots = gpu[0].index;
    size_t words = (size_t)paci_dgc_list_words(n, k);
    for (int step = 1; step <= 3; step++) {
        for (int r = 0; r < D; r++) {
            for (int64_t i = 0; i < n; i++)
                grad[i] = crafted();
            pr_dgc_compress(&cpu[r], grad, n, k, scale, mu);
            pr_cuda_dgc_compress(0, &gpu[r], grad, k, scale, mu, r);
            if (gpu[r].index != slots) // each replica's list into slot r of one buffer, as gathered
                memcpy(slots + (size_t)r * words, gpu[r].index + (size_t)r * words, words * sizeof(uint32_t));
            const uint32_t *list = slots + (size_t)r * words;
            const char *what = !same_bits(cpu[r].residual, gpu[r].residual, (size_t)n * 4) ? "residual"
                               : lars && !same_bits(cpu[r].velocity, gpu[r].velocity, (size_t)n * 4) ? "velocity"
                               : cpu[r].k != k ? "count"
                               : !same_bits(cpu[r].list, list, words * 4) ? "list" : NULL;
            if (what) {
                fprintf(stderr, "dgc_check: n %lld, k %lld, %s, scale %g, step %d, replica %d: the GPU's %s "
                        "differ from the CPU's\n", (long long)n, (long long)k, lars ? "lars" : "adamw",
                        (double)scale, step, r, what);
                failures++;
                goto done;
            }
        }
        pr_dgc_sum(sum_cpu, n, from, D);
        pr_cuda_dgc_sum(0, sum_gpu, slots, k);
        if (!same_bits(sum_cpu, sum_gpu, (size_t)n * 4)) {
            fprintf(stderr, "dgc_check: n %lld, k %lld, D %d, step %d: the GPU's sum differs from the CPU's\n",
                    (long long)n, (long long)k, D, step);
            failures++;
            goto done;
        }
    }
done:
    for (int r = D - 1; r >= 0; r--) {
        pr_dgc_free(&cpu[r]);
        pr_cuda_dgc_close(0, &gpu[r]);
    }
    free(grad);
    free(sum_cpu);
    free(sum_gpu);
}

int main(void)
{
    const int64_t sizes[] = {1, 300, 1000, 4099, 2 * 65536 + 300};
    int cases = 0;
    for (int s = 0; s < 5; s++) {
        int64_t n = sizes[s];
        const int64_t ks[] = {1, 2, 7, n / 3, n - 1, n};
        for (int j = 0; j < 6; j++) {
            if (ks[j] < 1 || ks[j] > n)
                continue;
            check(n, ks[j], 0, 1.0f, 3);
            check(n, ks[j], 1, 0.7f, 2);
            cases += 2;
        }
    }
    if (failures)
        return 1;
    printf("dgc_check: %d cases (n 1..131372, k 1..n, ties at most thresholds, 3 steps): the GPU's "
           "residuals, velocities, lists and 3-replica sums are the CPU's bits\n", cases);
    return 0;
}
