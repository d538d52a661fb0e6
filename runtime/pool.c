/* pool.c: the threads a stage thread shares its loops with (pr_parallel_for).
 *
 * A stage thread owns the cores pr_blas_threads gives it; OpenBLAS uses them inside a matrix
 * product, and the generated code's loops between products (the matmul attention's (sequence,
 * head) pairs, the row ranges of kernels whose rows are independent) use them through a pool:
 * the calling thread (worker 0) and cores - 1 helpers (workers 1, 2, ...) it starts on its
 * first call. Worker w runs indices w, w + workers, ... (the iterations cost alike), each
 * whole on one thread, so the result is the same bits whatever the threads, as long as an
 * index writes only its own outputs and its worker's scratch (pr_thread_floats). Helpers end
 * when their stage thread does. */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "prt.h"

static int cores_per_stage = 1; /* pr_pool_set_cores: pr_blas_threads' count */

typedef struct pool pool;

typedef struct helper_arg {
    pool *pool;
    int worker;
} helper_arg;

struct pool {
    int helpers;
    helper_arg *args;
    pthread_t *threads;
    pthread_mutex_t lock;
    pthread_cond_t go, done;
    unsigned long job;   /* incremented for every loop */
    int busy;            /* helpers still in the current loop */
    bool quit;
    pr_parallel_fn fn;
    void *ctx;
    int n;
};

static pthread_key_t pool_key;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

void pr_pool_set_cores(int cores) { cores_per_stage = cores > 0 ? cores : 1; }

/* Set while a thread runs a loop's indices: a loop inside one (a kernel within the attention's
 * (sequence, head) loop) runs on that thread alone. */
static _Thread_local bool in_loop;

static void run_indices(pool *p, int worker)
{
    in_loop = true;
    for (int i = worker; i < p->n; i += p->helpers + 1)
        p->fn(p->ctx, i, worker);
    in_loop = false;
}

static void *helper(void *arg)
{
    pool *p = ((helper_arg *)arg)->pool;
    int worker = ((helper_arg *)arg)->worker;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (p->job == seen && !p->quit)
            pthread_cond_wait(&p->go, &p->lock);
        if (p->quit)
            break;
        seen = p->job;
        pthread_mutex_unlock(&p->lock);
        run_indices(p, worker);
        pthread_mutex_lock(&p->lock);
        if (--p->busy == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static void pool_free(void *arg)
{
    pool *p = arg;
    pthread_mutex_lock(&p->lock);
    p->quit = true;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->helpers; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p->args);
    free(p);
}

static void pool_key_make(void)
{
    if (pthread_key_create(&pool_key, pool_free) != 0)
        pr_internal("pthread_key_create failed");
}

/* The calling thread's pool, started on its first call (no helper on one core). */
static pool *pool_of_thread(void)
{
    pthread_once(&pool_once, pool_key_make);
    pool *p = pthread_getspecific(pool_key);
    if (p)
        return p;
    p = pr_alloc(sizeof *p);
    *p = (pool){.helpers = cores_per_stage - 1};
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = pr_alloc((size_t)(p->helpers > 0 ? p->helpers : 1) * sizeof *p->threads);
    p->args = pr_alloc((size_t)(p->helpers > 0 ? p->helpers : 1) * sizeof *p->args);
    for (int i = 0; i < p->helpers; i++) {
        p->args[i] = (helper_arg){p, i + 1};
        if (pthread_create(&p->threads[i], NULL, helper, &p->args[i]) != 0) {
            p->helpers = i; /* run with those that started */
            break;
        }
    }
    pthread_setspecific(pool_key, p);
    return p;
}

int pr_parallel_cores(void)
{
    return in_loop ? 1 : cores_per_stage;
}

void pr_parallel_for(int n, pr_parallel_fn fn, void *ctx)
{
    if (in_loop || cores_per_stage == 1) {
        for (int i = 0; i < n; i++)
            fn(ctx, i, 0);
        return;
    }
    pool *p = pool_of_thread();
    if (p->helpers == 0 || n <= 1) {
        for (int i = 0; i < n; i++)
            fn(ctx, i, 0);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->busy = p->helpers;
    p->job++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->lock);
    run_indices(p, 0);
    pthread_mutex_lock(&p->lock);
    while (p->busy > 0)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

/* Each thread's scratch, freed when the thread ends. */
typedef struct scratch {
    float *data;
    size_t floats;
} scratch;

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *arg)
{
    scratch *s = arg;
    free(s->data);
    free(s);
}

static void scratch_key_make(void)
{
    if (pthread_key_create(&scratch_key, scratch_free) != 0)
        pr_internal("pthread_key_create failed");
}

float *pr_thread_floats(size_t floats)
{
    pthread_once(&scratch_once, scratch_key_make);
    scratch *s = pthread_getspecific(scratch_key);
    if (!s) {
        s = pr_alloc(sizeof *s);
        *s = (scratch){0};
        pthread_setspecific(scratch_key, s);
    }
    if (s->floats < floats) {
        free(s->data);
        s->data = pr_alloc(floats * sizeof(float));
        s->floats = floats;
    }
    return s->data;
}
