/* gemm.c: matrix products behind pr_gemm (OpenBLAS), and its thread count. */
#include <cblas.h>
#include <pthread.h>
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

/* Stage threads share the cores: each gets max(1, cores / stages) BLAS threads. */
int pr_blas_threads(int cores, int stages)
{
    if (cores <= 0)
        cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int per_stage = stages > 0 ? cores / stages : cores;
    if (per_stage < 1)
        per_stage = 1;
    openblas_set_num_threads(per_stage);
    return per_stage;
}
