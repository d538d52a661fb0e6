/* calibrate.c: this machine's CPU rates, the numbers pacic's CPU cost model prices with
 * (`pacic calibrate-cpu`, docs/dsl.md "hardware cpu"). pacic writes a small main that calls
 * pr_calibrate_main with its element-wise kernels compiled as generated code is; this file
 * times the rest as `run` does it on a stage thread:
 *  - matrix products: pr_gemm (OpenBLAS sgemm) on one thread, square sizes 16 to 512;
 *  - memory: one thread copying 32 MiB (bytes read plus bytes written, per second);
 *  - messages: two threads passing a message back and forth over the in-process link
 *    (pr_channel), small and large, for a latency and a bandwidth.
 * The products, kernels and copies are timed by the thread's own CPU clock, over repetitions
 * that last about a fifth of a second each: the rates of a core this thread has to itself,
 * whatever else the machine runs at the moment (a calibration is kept and reused; the load of
 * the minute it was made is not the machine's). The messages are timed by the wall clock, as
 * a wait is.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prt.h"

enum { CAL_VERSION = 1 };

/* Seconds each measurement lasts at least. */
#define CAL_BUDGET 0.2

static double gemm_rate(int n)
{
    float *a = pr_alloc((size_t)n * n * sizeof(float)), *b = pr_alloc((size_t)n * n * sizeof(float)),
          *c = pr_alloc((size_t)n * n * sizeof(float));
    for (long i = 0; i < (long)n * n; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
    }
    pr_gemm(0, 1, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n); /* warm: code and caches */
    long reps = 0;
    double start = pr_thread_cpu(), elapsed;
    do {
        pr_gemm(0, 1, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        reps++;
    } while ((elapsed = pr_thread_cpu() - start) < CAL_BUDGET);
    free(a);
    free(b);
    free(c);
    return 2.0 * n * n * (double)n * (double)reps / elapsed;
}

static double copy_rate(void)
{
    size_t bytes = (size_t)32 << 20;
    char *from = pr_alloc(bytes), *to = pr_alloc(bytes);
    memset(from, 1, bytes);
    memcpy(to, from, bytes);
    long reps = 0;
    double start = pr_thread_cpu(), elapsed;
    do {
        memcpy(to, from, bytes);
        from[reps % bytes] = (char)reps; /* no copy is the same as the last */
        reps++;
    } while ((elapsed = pr_thread_cpu() - start) < CAL_BUDGET);
    free(from);
    free(to);
    return 2.0 * (double)bytes * (double)reps / elapsed;
}

typedef struct PingPong {
    pr_channel there, back;
    int64_t floats;
    long rounds;
} PingPong;

static void *pong(void *arg)
{
    PingPong *p = arg;
    float *buf = pr_alloc((size_t)p->floats * sizeof(float));
    for (long i = 0; i < p->rounds; i++) {
        int64_t mb = pr_channel_recv(&p->there, buf);
        pr_channel_send(&p->back, mb, buf);
    }
    free(buf);
    return NULL;
}

/* Seconds one message of `floats` takes from one thread to another, over `rounds` round trips. */
static double message_seconds(int64_t floats, long rounds)
{
    PingPong p = {.floats = floats, .rounds = rounds};
    pr_channel_init(&p.there, 1, floats);
    pr_channel_init(&p.back, 1, floats);
    float *buf = pr_alloc((size_t)floats * sizeof(float));
    pthread_t t;
    if (pthread_create(&t, NULL, pong, &p) != 0)
        pr_internal("cannot start a thread");
    double start = pr_now();
    for (long i = 0; i < rounds; i++) {
        pr_channel_send(&p.there, i, buf);
        pr_channel_recv(&p.back, buf);
    }
    double elapsed = pr_now() - start;
    pthread_join(t, NULL);
    free(buf);
    pr_channel_destroy(&p.there);
    pr_channel_destroy(&p.back);
    return elapsed / (2.0 * (double)rounds);
}

/* The rounds that take about CAL_BUDGET for messages of `floats`. */
static long rounds_for(int64_t floats)
{
    double once = message_seconds(floats, 20);
    long rounds = once > 0 ? (long)(CAL_BUDGET / (2 * once)) : 1000;
    return rounds < 20 ? 20 : rounds > 200000 ? 200000 : rounds;
}

/* The model name of /proc/cpuinfo, or "unknown"; quotes become apostrophes. */
static void cpu_name(char *out, size_t size)
{
    snprintf(out, size, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            const char *v = strchr(line, ':') + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            snprintf(out, size, "%s", v);
            out[strcspn(out, "\n")] = '\0';
            for (char *c = out; *c; c++)
                if (*c == '"')
                    *c = '\'';
            break;
        }
    fclose(f);
}

int pr_calibrate_main(int argc, char **argv, double (*vector)(void))
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE (pacic calibrate-cpu writes and runs this program)\n", argv[0]);
        return 1;
    }
    pr_blas_choose_kernels(argv); /* the kernels run would choose */
    pr_blas_kernels_note(1);
    pr_blas_threads(1, 1);
    static const int sizes[] = {16, 32, 64, 128, 256, 512};
    double gemm[sizeof sizes / sizeof *sizes];
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        gemm[i] = gemm_rate(sizes[i]);
    vector(); /* warm */
    double counted = 0, start = pr_thread_cpu(), elapsed;
    do
        counted += vector();
    while ((elapsed = pr_thread_cpu() - start) < CAL_BUDGET);
    double vector_flops = counted / elapsed;
    double memory_bandwidth = copy_rate();
    int64_t small = 256, large = (int64_t)1 << 18; /* 1 KiB and 1 MiB */
    double t_small = message_seconds(small, rounds_for(small));
    double t_large = message_seconds(large, rounds_for(large));
    double bandwidth = t_large > t_small ? 4.0 * (double)(large - small) / (t_large - t_small) : memory_bandwidth;
    double latency = t_small - 4.0 * (double)small / bandwidth;
    if (latency < 0)
        latency = 0;

    char name[256];
    cpu_name(name, sizeof name);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    char when[32] = "";
    time_t now = time(NULL);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M", localtime(&now));
    FILE *f = fopen(argv[1], "w");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    fprintf(f, "# this machine's CPU, as pacic calibrate-cpu measured it on %s (one thread, timed by its\n"
               "# CPU clock: a core to itself; messages by the wall clock): what `hardware cpu` prices with\n",
            when);
    fprintf(f, "version %d\n", CAL_VERSION);
    fprintf(f, "cpu \"%s\"\n", name);
    fprintf(f, "blas \"%s\"\n", pr_blas_kernels());
    fprintf(f, "cores %ld              # online\n", sysconf(_SC_NPROCESSORS_ONLN));
    fprintf(f, "memory %.4g          # bytes of RAM\n", (double)pages * (double)page);
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        fprintf(f, "gemm %d %.4g          # sgemm FLOP/s of one thread, m = n = k = %d\n", sizes[i], gemm[i], sizes[i]);
    fprintf(f, "vector_flops %.4g    # one thread's FLOP/s in the element-wise kernels, as the cost model counts them\n",
            vector_flops);
    fprintf(f, "memory_bandwidth %.4g  # one thread's bytes/s copying (read + written)\n", memory_bandwidth);
    fprintf(f, "latency %.4g         # seconds a message between stage threads takes besides its bytes\n", latency);
    fprintf(f, "bandwidth %.4g       # bytes/s of such a message\n", bandwidth);
    if (fclose(f) != 0) {
        perror(argv[1]);
        return 1;
    }
    return 0;
}
