/* cuda/dgc.c: `compression dgc` (runtime/dgc.c, docs/dsl.md) on the GPU, one stage of one
 * replica per process: the same accumulation, selection and sum as the CPU's, as kernels of
 * the stage's unit (compiler/emit_cuda.c, PR_CUDA_DGC_KERNELS) queued on the compute stream.
 * The exchange between them is the transport's (nccl_transport.c, an allgather).
 *
 * Selection: the k entries of acc largest in magnitude, ties to the lower index, in index
 * order (pr_dgc_select's pairs). A magnitude's bits order as the magnitude does, so the k-th
 * largest key T is found by a radix select, 8 bits a pass from the top: a histogram of the
 * next 8 bits of the keys that match T's bits so far (integer atomics), and one thread that
 * walks it from the top bin to the one holding the k-th. Four passes give T and the number of
 * keys equal to T to take. The entries are then cut into chunks of PR_CUDA_DGC_CHUNK: a
 * thread per chunk counts its keys above T and equal to T, one thread scans the counts in
 * index order (each chunk's first pair, the ties before it, and each block's running count:
 * a block of the list is 256 chunks), and a thread per chunk writes its pairs in index order,
 * taking the first ties (the bf16 value and the offset in its block, one word: paci_dgc.h),
 * leaves the rounding error in acc and zeroes u. A list of all n entries is acc itself, copied.
 *
 * Every count is an integer and every float is copied, or added in one fixed order with
 * rounded operations (__fadd_rn, __fmul_rn: never fused), so the pairs, the residuals and the
 * sum do not depend on how the GPU schedules its threads; given the same gradients they are
 * the CPU's bits.
 *
 * Device memory per stage: the residual (and the velocity, LARS), their copies as the step
 * found them (put back if on_nan skips the step: pr_cuda_dgc_undo), and the lists of all D
 * replicas, D slots of blocks + k_max 32-bit words (paci_dgc_list_words at a step's k), k_max
 * the count of step 1, the largest the warm-up gives; the selection's state and chunk counts.
 */
#include <string.h>

#include "../prt.h"
#include "cuda_layer.h"

/* The kernels' handles, in PR_CUDA_DGC_KERNELS's order. */
typedef struct dgc_functions {
#define DGC_FIELD(field, name) CUfunction field;
    PR_CUDA_DGC_KERNELS(DGC_FIELD)
#undef DGC_FIELD
} dgc_functions;

static struct {
    int open, D;
    int64_t n, k_max, chunks, blocks;
    dgc_functions f;
} stages[PACI_MAX_STAGES];

_Static_assert(PACI_DGC_BLOCK % PR_CUDA_DGC_CHUNK == 0, "a block of a pair list is whole chunks");

enum { THREADS = 256 }; /* a block of the element-wise kernels */

int pr_cuda_dgc_open(const pr_program *prog, int stage, pr_dgc_buffers *b, int D, char *err)
{
    int64_t n = prog->stage[stage].n_params;
    dgc_functions f;
#define DGC_FIND(field, name)                                                                  \
    if (!(f.field = pr_cuda_function(stage, name, err)))                                       \
        return -1;
    PR_CUDA_DGC_KERNELS(DGC_FIND)
#undef DGC_FIND
    int64_t k_max = pr_dgc_count(prog, 1, n), chunks = (n + PR_CUDA_DGC_CHUNK - 1) / PR_CUDA_DGC_CHUNK;
    memset(b, 0, sizeof *b);
    b->residual = pr_cuda_dev_alloc(stage, (size_t)n * sizeof(float));
    b->residual_before = pr_cuda_dev_alloc(stage, (size_t)n * sizeof(float));
    if (pr_dgc_momentum_correction(prog)) {
        b->velocity = pr_cuda_dev_alloc(stage, (size_t)n * sizeof(float));
        b->velocity_before = pr_cuda_dev_alloc(stage, (size_t)n * sizeof(float));
    }
    b->scratch = pr_cuda_dev_alloc(stage, (size_t)(PR_DGC_STATE_WORDS + PR_DGC_BINS + 2 * chunks) * sizeof(uint32_t));
    int64_t blocks = paci_dgc_blocks(n);
    b->index = pr_cuda_dev_alloc(stage, (size_t)D * (size_t)(blocks + k_max) * sizeof(uint32_t));
    stages[stage].open = 1;
    stages[stage].D = D;
    stages[stage].n = n;
    stages[stage].k_max = k_max;
    stages[stage].chunks = chunks;
    stages[stage].blocks = blocks;
    stages[stage].f = f;
    return 0;
}

void pr_cuda_dgc_close(int stage, pr_dgc_buffers *b)
{
    if (!stages[stage].open)
        return;
    pr_cuda_dev_release(stage, b->residual);
    pr_cuda_dev_release(stage, b->residual_before);
    if (b->velocity) {
        pr_cuda_dev_release(stage, b->velocity);
        pr_cuda_dev_release(stage, b->velocity_before);
    }
    pr_cuda_dev_release(stage, b->scratch);
    pr_cuda_dev_release(stage, b->index);
    memset(b, 0, sizeof *b);
    memset(&stages[stage], 0, sizeof stages[stage]);
}

/* Accumulates scale * grads into the residual (through the velocity with momentum mu), then
 * writes its k largest as a list into slot `replica` of b->index and leaves what was not sent
 * in the residual; returns the slots (paci_dgc_list_words(n, k) words a slot). Queued; the
 * host does not wait. */
uint32_t *pr_cuda_dgc_compress(int stage, pr_dgc_buffers *b, const float *grads, int64_t k, float scale,
                               float mu, int replica)
{
    if (!stages[stage].open || k < 1 || k > stages[stage].k_max)
        pr_internal("stage %d: dgc selects %lld of at most %lld", stage, (long long)k,
                    (long long)stages[stage].k_max);
    const dgc_functions *f = &stages[stage].f;
    long n = (long)stages[stage].n, chunks = (long)stages[stage].chunks, blocks = (long)stages[stage].blocks;
    float *acc = b->residual, *u = b->velocity;
    pr_cuda_dev_queue_copy(stage, b->residual_before, acc, (size_t)n * sizeof(float));
    if (u)
        pr_cuda_dev_queue_copy(stage, b->velocity_before, u, (size_t)n * sizeof(float));
    void *acc_args[] = {&grads, &acc, &u, &n, &scale, &mu};
    pr_cuda_launch_function(stage, f->accumulate, n, THREADS, acc_args);
    uint32_t *list = b->index + (size_t)replica * (size_t)paci_dgc_list_words(n, k);
    b->k = k;
    if (k == n) { // every entry: acc's floats as they are, nothing left behind (pr_dgc_compress)
        pr_cuda_dev_queue_copy(stage, list, acc, (size_t)n * sizeof(float));
        pr_cuda_dev_zero(stage, acc, (size_t)n * sizeof(float));
        if (u)
            pr_cuda_dev_zero(stage, u, (size_t)n * sizeof(float));
        return b->index;
    }
    // the state: no bits of the threshold yet, k wanted; the histogram zero (pick clears it)
    uint32_t start[PR_DGC_STATE_WORDS] = {[PR_DGC_WANTED] = (uint32_t)k};
    uint32_t *state = b->scratch, *above = state + PR_DGC_STATE_WORDS + PR_DGC_BINS, *equal = above + chunks;
    pr_cuda_dev_zero(stage, state, (PR_DGC_STATE_WORDS + PR_DGC_BINS) * sizeof(uint32_t));
    pr_cuda_dev_queue_copy(stage, state, start, sizeof start);
    for (int shift = 24; shift >= 0; shift -= 8) {
        void *hist_args[] = {&acc, &n, &state, &shift};
        pr_cuda_launch_function(stage, f->histogram, n, THREADS, hist_args);
        void *pick_args[] = {&state, &shift};
        pr_cuda_launch_function(stage, f->pick, 1, 1, pick_args);
    }
    void *count_args[] = {&acc, &n, &state, &above, &equal};
    pr_cuda_launch_function(stage, f->count, chunks, THREADS, count_args);
    void *scan_args[] = {&above, &equal, &chunks, &state, &list, &blocks};
    pr_cuda_launch_function(stage, f->scan, 1, 1, scan_args);
    uint32_t *pairs = list + blocks;
    void *compact_args[] = {&acc, &u, &n, &state, &above, &equal, &pairs};
    pr_cuda_launch_function(stage, f->compact, chunks, THREADS, compact_args);
    return b->index;
}

/* pr_dgc_undo on the device: the residual and velocity as the skipped step found them. Queued. */
void pr_cuda_dgc_undo(int stage, pr_dgc_buffers *b)
{
    size_t bytes = (size_t)stages[stage].n * sizeof(float);
    pr_cuda_dev_queue_copy(stage, b->residual, b->residual_before, bytes);
    if (b->velocity)
        pr_cuda_dev_queue_copy(stage, b->velocity, b->velocity_before, bytes);
}

/* grads = the D slots' lists decoded and summed in replica order: zero, slot 0's values as
 * they are, then each later slot's added (pr_dgc_sum's order), one launch per slot on the
 * compute stream. */
void pr_cuda_dgc_sum(int stage, float *grads, const uint32_t *slots, int64_t k)
{
    const dgc_functions *f = &stages[stage].f;
    int64_t n = stages[stage].n, words = paci_dgc_list_words(n, k);
    long count = (long)k, blocks = k == n ? 0 : (long)stages[stage].blocks; // 0: the n floats
    pr_cuda_dev_zero(stage, grads, (size_t)n * sizeof(float));
    for (int q = 0; q < stages[stage].D; q++) {
        const uint32_t *list = slots + (size_t)q * (size_t)words;
        int first = q == 0;
        void *args[] = {&grads, &list, &count, &blocks, &first};
        pr_cuda_launch_function(stage, f->scatter, k, THREADS, args);
    }
}
