/* matmul_rate: the measured bf16 matrix-product rate of GPU 0 through cuBLASLt (bf16 inputs
 * and output, fp32 accumulation), the denominator of tests/gpu/check.sh's "share of the
 * measured matmul rate", on random operands. Prints "bf16_matmul_tflops X". Exit 1 on any
 * CUDA error. An idle GPU clocks low and ramps up under load, so the products run for at least
 * half a second before the timed REPS (~200: about 0.3 s on an H100 or H200 at 8192).
 *
 *   matmul_rate [N [REPS]]   N x N x N products, default 8192; REPS timed, default 200
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                          \
    do {                                                                                     \
        if ((call) != 0) {                                                                   \
            fprintf(stderr, "matmul_rate: %s failed at line %d\n", #call, __LINE__);         \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 8192, reps = argc > 2 ? atoi(argv[2]) : 200;
    if (n < 16 || reps < 1) {
        fprintf(stderr, "matmul_rate: N must be at least 16 and REPS at least 1\n");
        return 1;
    }
    size_t bytes = (size_t)n * n * 2, workspace_bytes = 32u << 20;
    void *a, *b, *c, *workspace;
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMalloc(&c, bytes));
    CHECK(cudaMalloc(&workspace, workspace_bytes));
    // Random operands: tensor cores draw less power on zeros and run faster than on real data.
    unsigned short *host = malloc(bytes);
    if (!host)
        return 1;
    unsigned state = 12345u;
    for (size_t i = 0; i < (size_t)n * n; i++) {
        state = state * 1664525u + 1013904223u;
        // bf16 with a sign, exponent 2^-1..2^0 and a random mantissa: values in (-1, -0.5] U [0.5, 1)
        host[i] = (unsigned short)(((state >> 16) & 0x8000u) | 0x3f00u | ((state >> 8) & 0x7fu));
    }
    CHECK(cudaMemcpy(a, host, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, host, bytes, cudaMemcpyHostToDevice));
    free(host);
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t layout;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    CHECK(cublasLtCreate(&lt));
    CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CHECK(cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, n, n, n));
    CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &workspace_bytes, sizeof workspace_bytes));
    CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, layout, layout, layout, layout, pref, 1, &result, &found));
    if (found < 1) {
        fprintf(stderr, "matmul_rate: no cuBLASLt algorithm for bf16 %d^3\n", n);
        return 1;
    }
    float alpha = 1.0f, beta = 0.0f;
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    // Warm-up: batches of 10 products until 0.5 s of them have run (the clocks ramp meanwhile).
    float ms = 0, warm_ms = 0;
    while (warm_ms < 500.0f) {
        CHECK(cudaEventRecord(start, 0));
        for (int i = 0; i < 10; i++)
            CHECK(cublasLtMatmul(lt, desc, &alpha, a, layout, b, layout, &beta, c, layout, c, layout,
                                 &result.algo, workspace, workspace_bytes, 0));
        CHECK(cudaEventRecord(stop, 0));
        CHECK(cudaEventSynchronize(stop));
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        warm_ms += ms;
    }
    CHECK(cudaEventRecord(start, 0));
    for (int i = 0; i < reps; i++)
        CHECK(cublasLtMatmul(lt, desc, &alpha, a, layout, b, layout, &beta, c, layout, c, layout,
                             &result.algo, workspace, workspace_bytes, 0));
    CHECK(cudaEventRecord(stop, 0));
    CHECK(cudaEventSynchronize(stop));
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    fprintf(stderr, "matmul_rate: %.0f ms of warm-up, then %d products of %d^3 in %.1f ms\n", warm_ms,
            reps, n, ms);
    printf("bf16_matmul_tflops %.1f\n", 2.0 * n * (double)n * n * reps / (ms * 1e-3) / 1e12);
    return 0;
}
