/* gemm.c: matrix products behind pr_gemm (OpenBLAS) on the stage's cores. */
#include <cblas.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prt.h"

/* A stage's products run on its own cores: pr_gemm cuts a large product into blocks of C's
 * rows (or columns, when it has more of them), one per core of the stage's pool, each an
 * OpenBLAS call on one thread. OpenBLAS's own worker threads spin for a while after each
 * product, and on a machine with a core per thread they took the cores from the pool's loops
 * between products (bench/blas_pool.sh). PACIRT_GEMM_THREADS=openblas restores them, for that
 * bench's baseline. */
static bool blas_own_threads;

/* Cuts fall on multiples of this many rows or columns, and every block has at least
 * GEMM_BLOCK_WORK multiply-adds: below that OpenBLAS takes other code paths (its small-matrix
 * and direct kernels) than for the whole product, which round differently. */
enum { GEMM_BLOCK_ALIGN = 64 };
#define GEMM_BLOCK_WORK (1L << 23)

static void blas_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                       const float *b, int ldb, float beta, float *c, int ldc)
{
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

typedef struct gemm_blocks {
    int trans_a, trans_b, m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const float *a, *b;
    float *c;
    const float *bias; /* NULL, or n values C's rows start from (beta 1) */
    bool by_rows;
    int block, blocks; /* rows (or columns) a block, and how many; the last takes the rest */
} gemm_blocks;

/* C's rows [row0, row1) and columns [col0, col1) set to the bias's columns. */
static void fill_bias(float *c, int ldc, const float *bias, int row0, int row1, int col0, int col1)
{
    for (int i = row0; i < row1; i++)
        memcpy(c + (size_t)i * (size_t)ldc + col0, bias + col0, (size_t)(col1 - col0) * sizeof(float));
}

static void gemm_block(void *ctx, int index, int worker)
{
    (void)worker;
    const gemm_blocks *g = ctx;
    int from = index * g->block, to = index == g->blocks - 1 ? (g->by_rows ? g->m : g->n) : from + g->block;
    if (g->bias)
        fill_bias(g->c, g->ldc, g->bias, g->by_rows ? from : 0, g->by_rows ? to : g->m, g->by_rows ? 0 : from,
                  g->by_rows ? g->n : to);
    if (g->by_rows)
        blas_sgemm(g->trans_a, g->trans_b, to - from, g->n, g->k, g->alpha,
                   g->trans_a ? g->a + from : g->a + (size_t)from * (size_t)g->lda, g->lda, g->b, g->ldb, g->beta,
                   g->c + (size_t)from * (size_t)g->ldc, g->ldc);
    else
        blas_sgemm(g->trans_a, g->trans_b, g->m, to - from, g->k, g->alpha, g->a, g->lda,
                   g->trans_b ? g->b + (size_t)from * (size_t)g->ldb : g->b + from, g->ldb, g->beta, g->c + from,
                   g->ldc);
}

/* A product is cut along the larger of C's rows and columns, in blocks of `extent / blocks`
 * rounded down to the alignment (the last block takes the rest). */
static int aligned_block(int extent, int blocks) { return extent / blocks / GEMM_BLOCK_ALIGN * GEMM_BLOCK_ALIGN; }

int pr_gemm_blocks(int m, int n, int k, int cores)
{
    int extent = m >= n ? m : n;
    long across = (long)(m >= n ? n : m) * k;
    int blocks = cores;
    while (blocks > 1 &&
           (aligned_block(extent, blocks) * across < GEMM_BLOCK_WORK || extent / blocks < GEMM_BLOCK_ALIGN))
        blocks--;
    return blocks;
}

static void gemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc, const float *bias)
{
    int blocks = blas_own_threads ? 1 : pr_gemm_blocks(m, n, k, pr_parallel_cores());
    bool by_rows = m >= n;
    gemm_blocks g = {trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, bias ? 1.0f : beta, a, b, c, bias, by_rows,
                     aligned_block(by_rows ? m : n, blocks), blocks};
    if (blocks == 1)
        gemm_block(&g, 0, 0);
    else
        pr_parallel_for(blocks, gemm_block, &g);
}

void pr_gemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
             const float *b, int ldb, float beta, float *c, int ldc)
{
    gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, NULL);
}

/* The bias goes into C first and the product adds to it (beta 1): no second pass over C. */
void pr_gemm_bias(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                  const float *b, int ldb, float beta, float *c, int ldc, const float *bias)
{
    if (beta != 0.0f)
        pr_internal("pr_gemm_bias takes beta 0, not %g", (double)beta);
    gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias);
}

/* Each stage thread's two widening buffers, freed when the thread ends. */
typedef struct widen_buffers {
    float *data[2];
    size_t floats[2];
} widen_buffers;

static pthread_key_t widen_key;
static pthread_once_t widen_once = PTHREAD_ONCE_INIT;

static void widen_free(void *p)
{
    widen_buffers *w = p;
    free(w->data[0]);
    free(w->data[1]);
    free(w);
}

static void widen_key_make(void)
{
    if (pthread_key_create(&widen_key, widen_free) != 0)
        pr_internal("pthread_key_create failed");
}

const float *pr_widen_bf16(int slot, const void *x, int rows, int cols, int ld)
{
    pthread_once(&widen_once, widen_key_make);
    widen_buffers *w = pthread_getspecific(widen_key);
    if (!w) {
        w = pr_alloc(sizeof *w);
        pthread_setspecific(widen_key, w);
    }
    size_t floats = (size_t)rows * (size_t)ld;
    if (w->floats[slot] < floats) {
        free(w->data[slot]);
        w->data[slot] = pr_alloc(floats * sizeof(float));
        w->floats[slot] = floats;
    }
    const pr_bf16 *h = x;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            w->data[slot][(size_t)i * (size_t)ld + (size_t)j] = pr_from_bf16(h[(size_t)i * (size_t)ld + (size_t)j]);
    return w->data[slot];
}

/* Stage threads share the cores: each gets max(1, cores / stages) for its products and its
 * parallel loops (pool.c). */
int pr_blas_threads(int cores, int stages)
{
    if (cores <= 0)
        cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int per_stage = stages > 0 ? cores / stages : cores;
    if (per_stage < 1)
        per_stage = 1;
    const char *own = getenv("PACIRT_GEMM_THREADS");
    blas_own_threads = own && strcmp(own, "openblas") == 0;
    openblas_set_num_threads(blas_own_threads ? per_stage : 1);
    pr_pool_set_cores(per_stage);
    return per_stage;
}

/* The kernels to run OpenBLAS with instead of the ones it chose (LIBRARY_CORE), or NULL to keep
 * them: when the user named none (USER_CORETYPE, OPENBLAS_CORETYPE's value) and the library
 * fell back to kernels of SSE3 to AVX on a CPU whose instruction sets allow CPU_CORE. */
const char *pr_blas_better_kernels(const char *user_coretype, const char *library_core, const char *cpu_core)
{
    static const char *const fallbacks[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Sandybridge"};
    if (user_coretype || !library_core || !cpu_core)
        return NULL;
    for (size_t i = 0; i < sizeof fallbacks / sizeof *fallbacks; i++)
        if (strcmp(library_core, fallbacks[i]) == 0)
            return cpu_core;
    return NULL;
}

/* The OpenBLAS kernels this CPU can run, by its instruction sets; NULL if no better than SSE3. */
static const char *blas_kernels_for_cpu(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
#endif
    return NULL;
}

#define BLAS_FALLBACK_VAR "PACIRT_BLAS_FALLBACK"

/* OpenBLAS picks its kernels when it loads, before main, from the CPU's model number; a model
 * newer than the library (0.3.21 and Emerald Rapids, family 6 model 207) gets a generic
 * fallback whose sgemm is up to 5x slower. Then the program runs itself again, before it has
 * started anything, with OPENBLAS_CORETYPE naming the kernels the CPU's instruction sets allow. */
void pr_blas_choose_kernels(char **argv)
{
    if (getenv(BLAS_FALLBACK_VAR))
        return; /* this is the run again */
    const char *better = pr_blas_better_kernels(getenv("OPENBLAS_CORETYPE"), openblas_get_corename(),
                                                blas_kernels_for_cpu());
    if (!better)
        return;
    if (setenv("OPENBLAS_CORETYPE", better, 1) == 0 && setenv(BLAS_FALLBACK_VAR, openblas_get_corename(), 1) == 0)
        execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"); /* no /proc: run on with the library's choice */
    unsetenv(BLAS_FALLBACK_VAR);
}

/* The name of the kernels OpenBLAS runs ("SkylakeX"). */
const char *pr_blas_kernels(void) { return openblas_get_corename(); }

/* After pr_blas_choose_kernels ran the program again: says so once, on stderr. */
void pr_blas_kernels_note(int quiet)
{
    const char *fallback = getenv(BLAS_FALLBACK_VAR);
    if (!fallback)
        return;
    if (!quiet)
        fprintf(stderr, "run: note: OpenBLAS does not know this CPU and chose its %s kernels; running with "
                "OPENBLAS_CORETYPE=%s, which this CPU's instruction sets allow (set OPENBLAS_CORETYPE to "
                "choose yourself)\n", fallback, openblas_get_corename());
    unsetenv(BLAS_FALLBACK_VAR);
}
