/* gemm.c: matrix products behind pr_gemm (OpenBLAS), and its thread count. */
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prt.h"

void pr_gemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
             const float *b, int ldb, float beta, float *c, int ldc)
{
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* The bias goes into C first and the product adds to it (beta 1): no second pass over C. */
void pr_gemm_bias(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                  const float *b, int ldb, float beta, float *c, int ldc, const float *bias)
{
    if (beta != 0.0f)
        pr_internal("pr_gemm_bias takes beta 0, not %g", (double)beta);
    for (int i = 0; i < m; i++)
        memcpy(c + (size_t)i * (size_t)ldc, bias, (size_t)n * sizeof(float));
    pr_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 1.0f, c, ldc);
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

/* Stage threads share the cores: each gets max(1, cores / stages) BLAS threads, and as many
 * for its parallel loops (pool.c). */
int pr_blas_threads(int cores, int stages)
{
    if (cores <= 0)
        cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int per_stage = stages > 0 ? cores / stages : cores;
    if (per_stage < 1)
        per_stage = 1;
    openblas_set_num_threads(per_stage);
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
