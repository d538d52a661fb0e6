/* sgemm_rate.c: the machine's measured single-precision matrix-multiply rate (OpenBLAS),
 * the ceiling bench/cpu.sh reports the trainer's FLOP/s against.
 * usage: sgemm_rate THREADS   -> prints "sgemm_gflops X" */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    const int n = 1536, reps = 8;
    openblas_set_num_threads(threads);
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n),
          *c = malloc(sizeof(float) * n * n);
    if (!a || !b || !c)
        return 1;
    for (long i = 0; i < (long)n * n; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        t = now() - t;
        if (t < best)
            best = t;
    }
    printf("sgemm_gflops %.1f\n", 2.0 * n * n * (double)n / best / 1e9);
    free(a);
    free(b);
    free(c);
    return 0;
}
