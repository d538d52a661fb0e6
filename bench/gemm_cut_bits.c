/* gemm_cut_bits.c: whether pr_gemm's products cut into blocks on the stage's cores give the
 * same bits as the product whole on one core, with the OpenBLAS kernels this process loaded
 * (OPENBLAS_CORETYPE chooses them). Random shapes up to 1500 x 1500 x 1000, every
 * transposition, beta 0 or 1; only shapes pr_gemm cuts on CORES cores are counted.
 * usage: gemm_cut_bits CORES SHAPES -> "KERNELS: N of M cut products differ" */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prt.h"

typedef struct product {
    int trans_a, trans_b, m, n, k;
    float beta;
    const float *a, *b;
    float *c;
} product;

static void run_product(product *p)
{
    pr_gemm(p->trans_a, p->trans_b, p->m, p->n, p->k, 1.0f, p->a, p->trans_a ? p->m : p->k, p->b,
            p->trans_b ? p->k : p->n, p->beta, p->c, p->n);
}

/* On a thread of its own, as a stage thread: its pool's helpers end with it. */
static void *stage_thread(void *arg)
{
    run_product(arg);
    return NULL;
}

int main(int argc, char **argv)
{
    int cores = argc > 1 ? atoi(argv[1]) : 2, shapes = argc > 2 ? atoi(argv[2]) : 200;
    pr_rng rng = {11};
    int cut = 0, differ = 0;
    for (int s = 0; s < shapes; s++) {
        int m = 1 + (int)(pr_rng_uniform(&rng) * 1500), n = 1 + (int)(pr_rng_uniform(&rng) * 1500),
            k = 1 + (int)(pr_rng_uniform(&rng) * 1000);
        int trans = (int)(pr_rng_uniform(&rng) * 4);
        float beta = pr_rng_uniform(&rng) < 0.5 ? 0.0f : 1.0f;
        if (pr_gemm_blocks(m, n, k, cores) == 1)
            continue;
        cut++;
        float *a = malloc(sizeof(float) * (size_t)m * (size_t)k), *b = malloc(sizeof(float) * (size_t)n * (size_t)k);
        float *c0 = malloc(sizeof(float) * (size_t)m * (size_t)n), *c1 = malloc(sizeof(float) * (size_t)m * (size_t)n);
        if (!a || !b || !c0 || !c1)
            return 1;
        for (long i = 0; i < (long)m * k; i++)
            a[i] = (float)pr_rng_normal(&rng);
        for (long i = 0; i < (long)n * k; i++)
            b[i] = (float)pr_rng_normal(&rng);
        for (long i = 0; i < (long)m * n; i++)
            c0[i] = c1[i] = (float)pr_rng_normal(&rng);
        product whole = {trans >> 1, trans & 1, m, n, k, beta, a, b, c0}, blocks = whole;
        blocks.c = c1;
        pr_blas_threads(1, 1);
        run_product(&whole);
        pr_blas_threads(cores, 1);
        pthread_t t;
        if (pthread_create(&t, NULL, stage_thread, &blocks) != 0 || pthread_join(t, NULL) != 0)
            return 1;
        if (memcmp(c0, c1, sizeof(float) * (size_t)m * (size_t)n) != 0)
            differ++;
        free(a);
        free(b);
        free(c0);
        free(c1);
    }
    printf("%s kernels, %d cores: %d of %d cut products differ from the whole product's bits\n", pr_blas_kernels(),
           cores, differ, cut);
    return 0;
}
