/* gemm.c: matrix products behind pr_gemm (OpenBLAS), and its thread count. */
#include <cblas.h>
#include <unistd.h>

#include "prt.h"

void pr_gemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
             const float *b, int ldb, float beta, float *c, int ldc)
{
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
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
