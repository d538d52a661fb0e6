/* gemm.c: matrix products behind pr_gemm (OpenBLAS), and its thread count. */
#include <cblas.h>
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
