/* causal_gemm.c: the matmul attention's causal products of the generated C (causal_gemm_nt,
 * _nn, _tn, in causal_gemm.h, which bench/causal_gemm.sh cuts from `pacic --emit c`) against
 * the full OpenBLAS products they replace, at bench/gpt6.paci's shapes: best of 7 rounds of 100
 * calls, process CPU time, OpenBLAS at 1 and 2 threads, in one process. */
#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RESTRICT restrict
enum { B = 4, T = 256, C = 384, NH = 6, HS = 64 };

#include "causal_gemm.h"

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float uniform(void) { return (float)rand() / (float)RAND_MAX - 0.5f; }

/* Product `form` (0: nt, 1: nn, 2: tn) by OpenBLAS (blas) or by the generated C into c. */
static void product(int form, bool blas, const float *qkv, const float *p, const float *dy, float *c)
{
    enum { LQ = 3 * C };
    const float scale = 0.125f; /* 1 / sqrt(HS) */
    if (form == 0 && blas)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, HS, scale, qkv, LQ, qkv + C, LQ, 0.0f, c, T);
    else if (form == 0)
        causal_gemm_nt(scale, qkv, LQ, qkv + C, LQ, c, T);
    else if (form == 1 && blas)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, HS, T, 1.0f, p, T, qkv + 2 * C, LQ, 0.0f, c, C);
    else if (form == 1)
        causal_gemm_nn(1.0f, p, T, qkv + 2 * C, LQ, c, C);
    else if (blas)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, HS, T, 1.0f, p, T, dy, C, 0.0f, c, C);
    else
        causal_gemm_tn(1.0f, p, T, dy, C, c, C);
}

int main(void)
{
    enum { CALLS = 100, ROUNDS = 7 };
    static const char *const names[3] = {"nt (scores, d probabilities)", "nn (atty, d q)", "tn (d v, d k)"};
    float *qkv = malloc(sizeof(float) * T * 3 * C), *p = malloc(sizeof(float) * T * T);
    size_t out = sizeof(float) * T * (T > C ? T : C); /* T x T, or T rows of C (ldc) */
    float *dy = malloc(sizeof(float) * T * C), *c_blas = malloc(out), *c_ours = malloc(out);
    srand(1);
    for (int i = 0; i < T * 3 * C; i++)
        qkv[i] = uniform();
    for (int i = 0; i < T * C; i++)
        dy[i] = uniform();
    for (int i = 0; i < T; i++) /* probabilities: zero above the diagonal */
        for (int j = 0; j < T; j++)
            p[i * T + j] = j <= i ? uniform() + 0.5f : 0.0f;
    for (int threads = 1; threads <= 2; threads++) {
        openblas_set_num_threads(threads);
        for (int form = 0; form < 3; form++) {
            double best[2] = {1e9, 1e9};
            for (int round = 0; round < ROUNDS; round++)
                for (int ours = 0; ours < 2; ours++) {
                    double t0 = cpu_seconds();
                    for (int n = 0; n < CALLS; n++)
                        product(form, !ours, qkv, p, dy, ours ? c_ours : c_blas);
                    best[ours] = fmin(best[ours], cpu_seconds() - t0);
                }
            double diff = 0; /* on the entries that are read: up to the diagonal of a T x T result */
            for (int i = 0; i < T; i++)
                for (int j = 0; j < (form == 0 ? i + 1 : HS); j++) {
                    long at = (long)i * (form == 0 ? T : C) + j;
                    diff = fmax(diff, fabs(c_blas[at] - c_ours[at]));
                }
            printf("%-29s OpenBLAS at %d thread%s %6.1f us CPU, causal_gemm %6.1f us: %.2fx less (max |difference| %.1g)\n",
                   names[form], threads, threads > 1 ? "s" : " ", 1e6 * best[0] / CALLS, 1e6 * best[1] / CALLS,
                   best[0] / best[1], diff);
        }
    }
    return 0;
}
