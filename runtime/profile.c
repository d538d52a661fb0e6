/* profile.c: per-op times of the generated code, for run --profile-out.
 *
 * The stage files number their ops (pr_stage_code.ops) and call the device's timer around
 * each while the runtime profiles; the timer adds every call here, per stage and op. */
#include <pthread.h>
#include <stdlib.h>

#include "prt.h"

pr_op_stats pr_op_stats_of[PACI_MAX_STAGES];

void pr_op_stats_open(int stage, int32_t n_ops)
{
    pr_op_stats *ps = &pr_op_stats_of[stage];
    pr_op_stats_close(stage);
    ps->n_ops = n_ops;
    ps->calls = pr_alloc((size_t)(n_ops > 0 ? n_ops : 1) * sizeof *ps->calls);
    ps->seconds = pr_alloc((size_t)(n_ops > 0 ? n_ops : 1) * sizeof *ps->seconds);
}

void pr_op_stats_close(int stage)
{
    pr_op_stats *ps = &pr_op_stats_of[stage];
    free(ps->calls);
    free(ps->seconds);
    *ps = (pr_op_stats){0};
}

void pr_op_stats_add(int stage, int32_t op, double seconds)
{
    pr_op_stats *ps = &pr_op_stats_of[stage];
    if (op < 0 || op >= ps->n_ops)
        pr_internal("stage %d: timed op %d of %d", stage, op, ps->n_ops);
    ps->calls[op]++;
    ps->seconds[op] += seconds;
}

/* An op inside a parallel loop (pr_parallel_for) runs on several threads at once: each times
 * its own call, and the op's total adds them (thread seconds). */
static _Thread_local double op_started;
static pthread_mutex_t op_stats_lock = PTHREAD_MUTEX_INITIALIZER;

static void cpu_op_begin(int32_t stage, int32_t op)
{
    (void)stage;
    (void)op;
    op_started = pr_now();
}

static void cpu_op_end(int32_t stage, int32_t op)
{
    double seconds = pr_now() - op_started;
    pthread_mutex_lock(&op_stats_lock);
    pr_op_stats_add(stage, op, seconds);
    pthread_mutex_unlock(&op_stats_lock);
}

const pr_op_timer pr_cpu_op_timer = {cpu_op_begin, cpu_op_end};
