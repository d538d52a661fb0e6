/* Property tests of the schedules: for every schedule over p in 1..16 and K in 1..64, the table verifies, its expansion equals the generator's output, each stage's
 * list keeps the structural rules, and the measured drift equals the bound. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "pacic.h"

#include "pipeline_config.h"

/* A config with a small model: only the pipeline's numbers matter to the schedules. */
static Config make_config(int kind, int stages, int window, long steps, long eval_every, long ckpt_every)
{
    Config cfg = pipeline_config(kind, stages, window, steps, 64);
    cfg.eval_every = eval_every;
    cfg.ckpt_every = ckpt_every;
    return cfg;
}

/* A zero-bubble table runs each backward as B (BWD_B) and W (BWD_W). */
static bool splits(const paci_table *t)
{
    return t->schedule == PACI_SCHED_ZBH1 || t->schedule == PACI_SCHED_ZBH2;
}

/* The order rules every stage's flat list must keep, whatever the schedule. */
static void check_structure(const paci_table *t, const paci_instr *list, long n, int s)
{
    bool first = s == 0, last = s == t->stages - 1;
    int bwd = splits(t) ? PACI_OP_BWD_B : PACI_OP_BWD;
    long backwards = 0, ws = 0, last_w = -1;
    long last_bwd_in_step = -1;
    for (long i = 0; i < n; i++) {
        paci_instr in = list[i];
        if (first)
            assert_true(in.op != PACI_OP_RECV_ACT && in.op != PACI_OP_SEND_GRAD);
        if (last)
            assert_true(in.op != PACI_OP_SEND_ACT && in.op != PACI_OP_RECV_GRAD);
        assert_true(splits(t) ? in.op != PACI_OP_BWD : in.op != PACI_OP_BWD_B && in.op != PACI_OP_BWD_W);
        if (in.op == PACI_OP_BWD_W) { /* W's in micro-batch order; a step after a window's last */
            assert_true(in.mb > last_w);
            last_w = in.mb;
            if (++ws % t->window == 0) {
                assert_true(i + 1 < n);
                assert_int_equal(list[i + 1].op, PACI_OP_STEP);
            }
        }
        if (in.op == PACI_OP_RECV_GRAD) {
            assert_true(i + 1 < n);
            assert_int_equal(list[i + 1].op, bwd);
            assert_int_equal(list[i + 1].mb, in.mb);
        }
        if (in.op == PACI_OP_RECV_ACT) {
            assert_int_equal(list[i + 1].op, PACI_OP_FWD);
            assert_int_equal(list[i + 1].mb, in.mb);
        }
        if (in.op == bwd) {
            /* increasing micro-batch order within a step, and steps follow windows */
            assert_true(in.mb > last_bwd_in_step);
            last_bwd_in_step = in.mb;
            backwards++;
            long j = i + 1 + (first ? 0 : 1);
            if (backwards % t->window == 0 && !splits(t)) {
                assert_true(j < n);
                assert_int_equal(list[j].op, PACI_OP_STEP);
            }
        }
        if (in.op == PACI_OP_STEP)
            assert_int_equal((splits(t) ? ws : backwards) % t->window, 0);
    }
}

/* Drift and slots measured on one stage's own list (they depend on nothing else): the
 * backwards whose weights moved since their forward, the largest move, the peak of live slots. */
static void stage_measure(const paci_table *t, const paci_instr *list, long n, int s, long *drifted,
                          int *max_drift, int *peak)
{
    long version = 0, mbs = 0;
    for (long i = 0; i < n; i++)
        if (list[i].op == PACI_OP_FWD)
            mbs++;
    long *fwd_version = calloc((size_t)mbs + 1, sizeof *fwd_version);
    int live = 0;
    for (long i = 0; i < n; i++) {
        paci_instr in = list[i];
        if (in.op == PACI_OP_FWD)
            fwd_version[in.mb] = version;
        else if (in.op == PACI_OP_STEP)
            version++;
        else if (in.op == PACI_OP_BWD || in.op == PACI_OP_BWD_B) {
            long d = version - fwd_version[in.mb];
            *drifted += d > 0;
            if (d > *max_drift)
                *max_drift = (int)d;
        }
        if (in.op == (s == 0 ? PACI_OP_FWD : PACI_OP_RECV_ACT) && ++live > *peak)
            *peak = live;
        // a zero-bubble slot lives until its W, which follows the gradient's send
        if (in.op == (splits(t) ? PACI_OP_BWD_W : s == 0 ? PACI_OP_BWD : PACI_OP_SEND_GRAD))
            live--;
    }
    free(fwd_version);
}

/* Builds, verifies and cross-checks one configuration. */
static void check_config(int kind, int p, int K, long steps, long eval_every)
{
    Config cfg = make_config(kind, p, K, steps, eval_every, 0);
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    paci_table *t = schedule_build(&cfg, &plan);
    VerifyReport rep;
    bool ok = verify_schedule(t, &plan, &rep);
    if (!ok)
        fail_msg("%s p=%d K=%d steps=%ld: %s", paci_schedule_name(kind), p, K, steps, rep.error);
    assert_int_equal(t->channel_capacity, 1);
    long drifted[PACI_MAX_STAGES] = {0}, mbs_total = 0;
    int max_drift[PACI_MAX_STAGES] = {0}, peak[PACI_MAX_STAGES] = {0};
    for (int prog = 0; prog < t->n_programs; prog++) {
        long uses = 0; /* the whole run's drift share counts each program as often as it runs */
        for (int32_t seg = 0; seg < paci_segments(t); seg++)
            uses += paci_segment_program(t, seg) == &t->program[prog];
        SegmentLists sl;
        schedule_generate(kind, p, K, t->program[prog].steps, t->slots, &sl);
        mbs_total += (long)t->program[prog].steps * K * uses;
        for (int s = 0; s < p; s++) {
            if (prog == 0) {
                assert_int_equal(t->slots[s], schedule_slots(kind, p, s, K, t->program[prog].steps));
                assert_int_equal(t->stash[s], sl.stash[s]);
            }
            paci_instr *list;
            long n = schedule_expand(t, prog, s, &list);
            assert_int_equal(n, sl.count[s]);
            assert_memory_equal(list, sl.instrs[s], (size_t)n * sizeof *list);
            check_structure(t, list, n, s);
            long prog_drifted = 0;
            stage_measure(t, list, n, s, &prog_drifted, &max_drift[s], &peak[s]);
            drifted[s] += prog_drifted * uses;
            free(list);
        }
        segment_lists_free(&sl);
    }
    for (int s = 0; s < p; s++) {
        /* the verifier's (possibly shortened) simulation reports the full segment's figures */
        assert_int_equal(rep.max_drift[s], max_drift[s]);
        assert_int_equal(rep.peak_slots[s], peak[s]);
        assert_true(rep.drift_share[s] == (double)drifted[s] / (double)mbs_total);
    }
    long mbs = (long)t->segment_steps * K;
    for (int s = 0; s < p; s++) {
        assert_int_equal(rep.peak_slots[s], plan.stage[s].slots);
        int bound = drift_bound(t, s);
        /* The bound is reached once a segment holds enough micro-batches to keep the
         * stage's p-s in flight across a window boundary. */
        if (kind == PACI_SCHED_PACI && mbs >= (long)(p - s) + K)
            assert_int_equal(rep.max_drift[s], bound);
        assert_true(rep.max_drift[s] <= (kind == PACI_SCHED_PIPEDREAM ? (p - s - 1 + K - 1) / K : bound));
        if (kind == PACI_SCHED_PACI)
            assert_int_equal(rep.effective_drift[s], rep.max_drift[s]);
        else
            assert_int_equal(rep.effective_drift[s], 0);
        if (paci_schedule_is_sync(kind))
            assert_true(rep.drift_share[s] == 0.0);
        if (s == p - 1)
            assert_int_equal(rep.max_drift[s], 0);
    }
    /* The body is what makes the table compact: long segments must use it. */
    /* Fill and drain last about ceil((p-1)/K) steps each (PipeDream's stash pattern
     * settles one such span later). */
    long transient = 2 * ((p - 1 + K - 1) / K) + 3;
    if (t->program[0].body_reps < t->segment_steps - transient)
        fail_msg("%s p=%d K=%d: %d body repetitions in %d steps", paci_schedule_name(kind), p, K,
                 t->program[0].body_reps, t->segment_steps);
    schedule_free(t);
}

static void test_all_schedules(void **state)
{
    (void)state;
    /* Segments long enough for fill, a steady state and drain at every p. */
    for (int kind = 0; kind < ONE_STAGE_SCHEDULES; kind++)
        for (int p = 1; p <= 16; p++)
            for (int K = 1; K <= 64; K++)
                check_config(kind, p, K, 2 * ((p - 1 + K - 1) / K) + 6, 0);
}

/* Short segments (3 steps) at the deepest pipeline, every K, the asynchronous schedules. */
static void test_every_window_at_16_stages(void **state)
{
    (void)state;
    for (int K = 1; K <= 64; K++) {
        check_config(PACI_SCHED_PACI, 16, K, 3, 0);
        check_config(PACI_SCHED_PIPEDREAM, 16, K, 3, 0);
    }
}

/* Drains: segments of gcd(eval, checkpoint) steps, a shorter last one in a second program. */
static void test_segments(void **state)
{
    (void)state;
    Config cfg = make_config(PACI_SCHED_PACI, 4, 3, 100, 30, 45);
    assert_int_equal(schedule_segment_steps(&cfg), 15);
    cfg.eval_every = 0;
    cfg.ckpt_every = 0;
    assert_int_equal(schedule_segment_steps(&cfg), 100);
    cfg.eval_every = 500;
    assert_int_equal(schedule_segment_steps(&cfg), 100);
    for (int kind = 0; kind < ONE_STAGE_SCHEDULES; kind++) {
        check_config(kind, 4, 3, 23, 5);
        check_config(kind, 5, 2, 10, 3);
        check_config(kind, 8, 8, 9, 2);
    }
    Config c2 = make_config(PACI_SCHED_PACI, 4, 3, 23, 5, 0);
    Plan plan;
    assert_true(plan_build(&c2, &plan));
    paci_table *t = schedule_build(&c2, &plan);
    assert_int_equal(t->n_programs, 2);
    assert_int_equal(t->program[0].steps, 5);
    assert_int_equal(t->program[1].steps, 3);
    assert_int_equal(paci_segments(t), 5);
    schedule_free(t);
}

/* A warm start: segments cut at its end too, a program for each (schedule, length), the
 * table's slots the most of both schedules', and a verifier that refuses a drifting warm part. */
static void test_warm_start(void **state)
{
    (void)state;
    for (int warm = 0; warm < ONE_STAGE_SCHEDULES; warm++) {
        if (!paci_schedule_is_sync(warm))
            continue;
        Config cfg = make_config(PACI_SCHED_PACI, 4, 3, 23, 5, 0);
        cfg.warm_schedule = warm;
        cfg.warm_steps = 7;
        Plan plan;
        assert_true(plan_build(&cfg, &plan));
        paci_table *t = schedule_build(&cfg, &plan);
        VerifyReport rep;
        if (!verify_schedule(t, &plan, &rep))
            fail_msg("warm_start %s 7: %s", paci_schedule_name(warm), rep.error);
        /* [0,5) [5,7) warm; [7,10) [10,15) [15,20) [20,23) paci */
        static const long first[] = {0, 5, 7, 10, 15, 20};
        assert_int_equal(paci_segments(t), 6);
        for (int32_t seg = 0; seg < 6; seg++) {
            assert_int_equal(paci_segment_first_step(t, seg), first[seg]);
            assert_int_equal(paci_segment_of_step(t, first[seg]), seg);
            assert_int_equal(paci_segment_schedule(t, seg), seg < 2 ? warm : PACI_SCHED_PACI);
            const paci_program *pg = paci_segment_program(t, seg);
            assert_non_null(pg);
            assert_int_equal(pg->schedule, paci_segment_schedule(t, seg));
            assert_int_equal(pg->steps, paci_segment_end(t, seg) - first[seg]);
        }
        assert_int_equal(paci_segment_of_step(t, 6), 1);
        assert_int_equal(paci_segment_of_step(t, 22), 5);
        assert_int_equal(t->n_programs, 4); /* warm 5 and 2, paci 3 (twice) and 5 */
        for (int s = 0; s < 4; s++)
            assert_int_equal(t->slots[s], plan.stage[s].slots);
        for (int s = 0; s < 3; s++) // PACI's drift, counted over its segments only
            assert_true(rep.drift_share[s] > 0 && rep.drift_share[s] < 1);
        /* a warm start that drifts: the 5-step programs swap labels, so PACI's runs [0, 5) */
        for (int p = 0; p < t->n_programs; p++)
            if (t->program[p].steps == 5)
                t->program[p].schedule = t->program[p].schedule == warm ? PACI_SCHED_PACI : warm;
        assert_false(verify_schedule(t, &plan, &rep));
        bool splits = warm == PACI_SCHED_ZBH1 || warm == PACI_SCHED_ZBH2; // then its B's give it away first
        if (!strstr(rep.error, splits ? "a paci program runs bwd_b" : "the warm start's"))
            fail_msg("warm_start %s: %s", paci_schedule_name(warm), rep.error);
        schedule_free(t);
    }
}

/* The reference for where segments begin: the old walk, step by step. A step begins one at 0,
 * at every multiple of the segment length (a drain: evaluation, checkpoint) and at the warm
 * start's end. first[] gets each segment's first step; returns the count. */
static int32_t walk_segment_starts(long total, long segment, long warm, long *first)
{
    int32_t n = 0;
    for (long j = 0; j < total; j++)
        if (j % segment == 0 || j == warm)
            first[n++] = j;
    return n;
}

/* The reference for the programs: the old per-segment loop of schedule_build, a (schedule,
 * length) for each distinct one in the order segments first run them; uses[] how often. */
static int walk_programs(const paci_table *t, int *kind, long *len, long *uses)
{
    int n = 0;
    for (int32_t seg = 0; seg < paci_segments(t); seg++) {
        int k = paci_segment_schedule(t, seg), i = 0;
        long steps = paci_segment_end(t, seg) - paci_segment_first_step(t, seg);
        while (i < n && !(kind[i] == k && len[i] == steps))
            i++;
        if (i == n) {
            assert_true(n < PACI_MAX_PROGRAMS);
            kind[n] = k, len[n] = steps, uses[n++] = 0;
        }
        uses[i]++;
    }
    return n;
}

/* One (steps, eval, checkpoint, warm start, schedule, p, K): the closed forms (segment bounds,
 * runs of alike segments, the programs schedule_build makes from them) against the walks. */
static void check_segments_against_walk(int kind, int p, int K, long steps, long eval, long ckpt, int warm_kind,
                                        long warm)
{
    Config cfg = make_config(kind, p, K, steps, eval, ckpt);
    cfg.warm_schedule = warm_kind;
    cfg.warm_steps = warm;
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    paci_table *t = schedule_build(&cfg, &plan);
    long first[64];
    int32_t n = walk_segment_starts(steps, t->segment_steps, t->warm_steps, first);
    char what[160];
    snprintf(what, sizeof what, "%s p=%d K=%d steps=%ld eval=%ld ckpt=%ld warm %s %ld", paci_schedule_name(kind), p, K,
             steps, eval, ckpt, paci_schedule_name(warm_kind), warm);
    if (paci_segments(t) != n)
        fail_msg("%s: %d segments, the walk %d", what, paci_segments(t), n);
    for (int32_t seg = 0; seg < n; seg++) {
        long end = seg + 1 < n ? first[seg + 1] : steps;
        if (paci_segment_first_step(t, seg) != first[seg] || paci_segment_end(t, seg) != end)
            fail_msg("%s: segment %d is [%lld, %lld), the walk [%ld, %ld)", what, seg,
                     (long long)paci_segment_first_step(t, seg), (long long)paci_segment_end(t, seg), first[seg], end);
        for (long j = first[seg]; j < end; j++)
            assert_int_equal(paci_segment_of_step(t, j), seg);
        assert_int_equal(paci_segment_schedule(t, seg), first[seg] < t->warm_steps ? warm_kind : kind);
    }
    int want_kind[PACI_MAX_PROGRAMS];
    long want_len[PACI_MAX_PROGRAMS], want_uses[PACI_MAX_PROGRAMS], uses[PACI_MAX_PROGRAMS] = {0};
    int n_want = walk_programs(t, want_kind, want_len, want_uses);
    if (t->n_programs != n_want)
        fail_msg("%s: %d programs, the walk %d", what, t->n_programs, n_want);
    for (int i = 0; i < n_want; i++)
        if (t->program[i].schedule != want_kind[i] || t->program[i].steps != want_len[i])
            fail_msg("%s: program %d runs %d steps of %s, the walk's %ld of %s", what, i, t->program[i].steps,
                     paci_schedule_name(t->program[i].schedule), want_len[i], paci_schedule_name(want_kind[i]));
    paci_segment_run runs[PACI_MAX_SEGMENT_RUNS];
    int32_t n_runs = paci_segment_runs(t, runs), next = 0;
    for (int32_t r = 0; r < n_runs; r++) { /* in order, back to back, each segment alike its run's first */
        assert_int_equal(runs[r].first, next);
        assert_true(runs[r].count >= 1);
        const paci_program *pg = paci_segment_program(t, runs[r].first);
        for (int32_t seg = runs[r].first; seg < runs[r].first + runs[r].count; seg++)
            if (paci_segment_program(t, seg) != pg)
                fail_msg("%s: segment %d runs another program than its run's first, %d", what, seg, runs[r].first);
        uses[pg - t->program] += runs[r].count;
        next += runs[r].count;
    }
    assert_int_equal(next, n);
    assert_memory_equal(uses, want_uses, sizeof uses[0] * (size_t)n_want);
    schedule_free(t);
}

/* Segments in closed form: the same bounds, runs and programs as the per-segment walks over
 * runs of 1 to 31 steps, drains every 1 to 10 and warm starts cutting anywhere. */
static void test_segments_closed_form(void **state)
{
    (void)state;
    static const long steps[] = {1, 2, 3, 5, 7, 8, 12, 13, 24, 31};
    static const long every[][2] = {{0, 0}, {0, 1}, {0, 2}, {0, 3}, {3, 0}, {0, 5}, {4, 6}, {0, 7}, {10, 0}, {0, 40}};
    static const long warm[] = {0, 1, 2, 3, 4, 6, 9, 12, 30};
    static const int pk[][2] = {{1, 1}, {2, 3}, {4, 2}};
    for (int kind = 0; kind < ONE_STAGE_SCHEDULES; kind++)
        for (size_t a = 0; a < sizeof steps / sizeof *steps; a++)
            for (size_t b = 0; b < sizeof every / sizeof *every; b++)
                for (size_t c = 0; c < sizeof warm / sizeof *warm; c++) {
                    int warm_kind = (a + b + c) % 2 ? PACI_SCHED_ONEF1B : PACI_SCHED_GPIPE;
                    const int *q = pk[(a + c) % 3];
                    check_segments_against_walk(kind, q[0], q[1], steps[a], every[b][0], every[b][1], warm_kind,
                                                warm[c]);
                }
}

/* A run of 2^31 - 1 steps with a checkpoint every step, or a warm start cutting a long segment:
 * a handful of runs cover all segments, and the table holds one program per kind of segment. */
static void test_segments_of_a_long_run(void **state)
{
    (void)state;
    Config cfg = make_config(PACI_SCHED_PACI, 4, 2, 2147483647L, 0, 1);
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    paci_table *t = schedule_build(&cfg, &plan);
    paci_segment_run runs[PACI_MAX_SEGMENT_RUNS];
    assert_int_equal(paci_segments(t), 2147483647);
    assert_int_equal(paci_segment_runs(t, runs), 2);
    assert_int_equal(runs[1].first + runs[1].count, 2147483647);
    assert_int_equal(t->n_programs, 1);
    VerifyReport rep;
    assert_true(verify_schedule(t, &plan, &rep));
    schedule_free(t);
    cfg = make_config(PACI_SCHED_PACI, 4, 2, 2147483647L, 0, 1000000);
    cfg.warm_schedule = PACI_SCHED_ONEF1B;
    cfg.warm_steps = 2500001; /* [0, 2e6) warm in 2, [2e6, 2500001) warm, [2500001, 3e6) paci, ... */
    assert_true(plan_build(&cfg, &plan));
    t = schedule_build(&cfg, &plan);
    int32_t n_runs = paci_segment_runs(t, runs), n = paci_segments(t);
    assert_int_equal(n, 2149);
    assert_int_equal(n_runs, 5);
    static const int32_t first[] = {0, 2, 3, 4, 2148};
    for (int32_t r = 0; r < n_runs; r++)
        assert_int_equal(runs[r].first, first[r]);
    assert_int_equal(t->n_programs, 5); /* warm 1e6 and 500001, paci 499999, 1e6 and the last 483647 */
    assert_int_equal(t->program[4].steps, 483647);
    assert_true(verify_schedule(t, &plan, &rep));
    schedule_free(t);
}

/* Slot counts: p-s for the 1F1B family (capped), K for GPipe; PipeDream's stash. */
static void test_slots_and_stash(void **state)
{
    (void)state;
    assert_int_equal(schedule_slots(PACI_SCHED_GPIPE, 8, 0, 8, 100), 8);
    assert_int_equal(schedule_slots(PACI_SCHED_ONEF1B, 8, 0, 4, 100), 4);
    assert_int_equal(schedule_slots(PACI_SCHED_ONEF1B, 8, 5, 4, 100), 3);
    assert_int_equal(schedule_slots(PACI_SCHED_PACI, 8, 0, 4, 100), 8);
    assert_int_equal(schedule_slots(PACI_SCHED_PACI, 8, 0, 2, 2), 4);
    assert_int_equal(schedule_stash(PACI_SCHED_PIPEDREAM, 8, 0, 4, 100), 2);
    assert_int_equal(schedule_stash(PACI_SCHED_PIPEDREAM, 8, 0, 2, 100), 4);
    assert_int_equal(schedule_stash(PACI_SCHED_PIPEDREAM, 16, 0, 2, 3), 2);
    assert_int_equal(schedule_stash(PACI_SCHED_PIPEDREAM, 8, 7, 4, 100), 0);
    assert_int_equal(schedule_stash(PACI_SCHED_PACI, 8, 0, 4, 100), 0);
    /* the generator agrees with the formula */
    SegmentLists sl;
    schedule_generate(PACI_SCHED_PIPEDREAM, 9, 3, 10, NULL, &sl);
    for (int s = 0; s < 9; s++)
        assert_int_equal(sl.stash[s], schedule_stash(PACI_SCHED_PIPEDREAM, 9, s, 3, 10));
    segment_lists_free(&sl);
}

/* A broken table must fail verification: swap two backwards of the last stage. */
static void test_verify_catches_errors(void **state)
{
    (void)state;
    Config cfg = make_config(PACI_SCHED_ONEF1B, 3, 4, 1, 0, 0);
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    paci_table *t = schedule_build(&cfg, &plan);
    VerifyReport rep;
    assert_true(verify_schedule(t, &plan, &rep));
    paci_instr *instrs = (paci_instr *)t->instrs;
    const paci_stage_program *sp = &t->program[0].device[1];
    assert_int_equal(t->program[0].body_reps, 0);
    /* stage 1: make its first backward wait for a gradient that never comes first */
    long first_bwd = -1, second_bwd = -1;
    for (long i = 0; i < sp->n_prologue; i++)
        if (instrs[sp->prologue + i].op == PACI_OP_RECV_GRAD) {
            if (first_bwd < 0)
                first_bwd = sp->prologue + i;
            else if (second_bwd < 0)
                second_bwd = sp->prologue + i;
        }
    assert_true(second_bwd > 0);
    int64_t mb = instrs[first_bwd].mb;
    instrs[first_bwd].mb = instrs[second_bwd].mb;
    instrs[second_bwd].mb = mb;
    assert_false(verify_schedule(t, &plan, &rep));
    assert_non_null(strstr(rep.error, "stage 1"));
    schedule_free(t);

    /* a deadlock: the last stage waits for a forward stage 0 never sends */
    cfg = make_config(PACI_SCHED_PACI, 2, 2, 1, 0, 0);
    assert_true(plan_build(&cfg, &plan));
    t = schedule_build(&cfg, &plan);
    instrs = (paci_instr *)t->instrs;
    sp = &t->program[0].device[0];
    for (long i = 0; i < sp->n_prologue; i++)
        if (instrs[sp->prologue + i].op == PACI_OP_SEND_ACT)
            instrs[sp->prologue + i].op = PACI_OP_RECV_GRAD;
    assert_false(verify_schedule(t, &plan, &rep));
    schedule_free(t);
}

/* The index in the table of stage s's first instruction of program 0 with op `op` and micro-batch
 * mb (the prologue and the body's first repetition), or -1. */
static long find_instr(const paci_table *t, int s, int op, int64_t mb)
{
    const paci_stage_program *sp = &t->program[0].device[s];
    int32_t starts[2] = {sp->prologue, sp->body}, counts[2] = {sp->n_prologue, sp->n_body};
    for (int part = 0; part < 2; part++)
        for (int32_t i = starts[part]; i < starts[part] + counts[part]; i++)
            if (t->instrs[i].op == op && t->instrs[i].mb == mb)
                return i;
    return -1;
}

/* A zero-bubble table with a W lost, a W before its B, or a W after the forward that takes its
 * slot again: each refused, with the broken rule named. */
static void test_verify_zero_bubble_errors(void **state)
{
    (void)state;
    static const char *const expected[] = {"W of mb 6 twice", "before its B", "reuses slot"};
    for (int mutant = 0; mutant < 3; mutant++) {
        Config cfg = make_config(PACI_SCHED_ZBH1, 4, 8, 6, 0, 0);
        Plan plan;
        assert_true(plan_build(&cfg, &plan));
        paci_table *t = schedule_build(&cfg, &plan);
        VerifyReport rep;
        assert_true(verify_schedule(t, &plan, &rep));
        paci_instr *instrs = (paci_instr *)t->instrs;
        int s = mutant < 2 ? 3 : 0; /* the last stage defers its W's; the first has no receives */
        long w0 = find_instr(t, s, PACI_OP_BWD_W, 0), b0 = find_instr(t, s, PACI_OP_BWD_B, 0);
        long f_next = find_instr(t, s, PACI_OP_FWD, t->slots[s]); /* the next forward into mb 0's slot */
        assert_true(w0 >= 0 && b0 >= 0 && f_next >= 0);
        if (mutant == 0) { /* the window's last W dropped: it runs the one before a second time */
            long w_last = find_instr(t, s, PACI_OP_BWD_W, t->window - 1);
            assert_true(w_last >= 0);
            instrs[w_last].mb = t->window - 2;
            instrs[w_last].slot = (uint16_t)((t->window - 2) % t->slots[s]);
        } else if (mutant == 1) { /* W of mb 0 where its B was, and the B where the W was */
            paci_instr b = instrs[b0];
            instrs[b0] = instrs[w0];
            instrs[w0] = b;
        } else { /* mb 0's W after the forward that takes its slot next: swap their places */
            if (f_next < w0)
                fail_msg("zb-h1's W of mb 0 comes after the forward of mb %d already", t->slots[s]);
            paci_instr w = instrs[w0];
            instrs[w0] = instrs[f_next];
            instrs[f_next] = w;
        }
        assert_false(verify_schedule(t, &plan, &rep));
        if (!strstr(rep.error, expected[mutant]))
            fail_msg("mutant %d: '%s' does not say '%s'", mutant, rep.error, expected[mutant]);
        schedule_free(t);
    }
}

/* Swaps the table's instructions at a and b (an instruction keeps its slot). */
static void swap_instrs(paci_table *t, long a, long b)
{
    paci_instr *instrs = (paci_instr *)t->instrs;
    assert_true(a >= 0 && b >= 0);
    paci_instr x = instrs[a];
    instrs[a] = instrs[b];
    instrs[b] = x;
}

/* Builds kind at p = 4, K = 8 (zb-h2's own order), 6 steps; verifies the shipped table. */
static paci_table *shipped_table(int kind, Plan *plan)
{
    Config cfg = make_config(kind, 4, 8, 6, 0, 0);
    assert_true(plan_build(&cfg, plan));
    paci_table *t = schedule_build(&cfg, plan);
    VerifyReport rep;
    if (!verify_schedule(t, plan, &rep))
        fail_msg("shipped %s: %s", paci_schedule_name(kind), rep.error);
    return t;
}

static void expect_refused(paci_table *t, const Plan *plan, const char *what, const char *said)
{
    VerifyReport rep;
    if (verify_schedule(t, plan, &rep))
        fail_msg("%s %s: accepted", paci_schedule_name(t->schedule), what);
    if (!strstr(rep.error, said) || !strstr(rep.error, "micro-batch order (mbs 0..7 in turn)"))
        fail_msg("%s %s: '%s' does not say '%s' and the window's order", paci_schedule_name(t->schedule), what,
                 rep.error, said);
}

/* A window's gradients add up in micro-batch order (one stage's float sum): zb-h1 and zb-h2 with
 * the last stage's trailing W's reversed or two of them swapped, zb-h2 with two W's of stage 1
 * swapped mid-window, and gpipe with the backwards of mb 0 and 1 swapped down the pipeline, each
 * refused naming the stage, the micro-batches and the order due. Each passes every other check
 * (with this one off the verifier accepts all five); planted in the generator, reversed orders
 * trained to other bits than one stage (docs/design.md). */
static void test_verify_window_order(void **state)
{
    (void)state;
    static const int split_kinds[] = {PACI_SCHED_ZBH1, PACI_SCHED_ZBH2};
    for (int k = 0; k < 2; k++) {
        int kind = split_kinds[k];
        Plan plan;
        paci_table *t = shipped_table(kind, &plan);
        /* the last stage's W's after window 0's last B, reversed */
        int s = 3;
        paci_instr *list;
        long n = schedule_expand(t, 0, s, &list), step = 0, first = 0;
        while (step < n && list[step].op != PACI_OP_STEP)
            step++;
        for (first = step; first > 0 && list[first - 1].op == PACI_OP_BWD_W; first--)
            ;
        int64_t lo = list[first].mb, hi = list[step - 1].mb;
        assert_true(n > step && hi == 7 && lo < hi - 1); /* at least three trailing W's */
        free(list);
        for (int64_t mb = lo; mb < lo + (hi - lo + 1) / 2; mb++)
            swap_instrs(t, find_instr(t, s, PACI_OP_BWD_W, mb), find_instr(t, s, PACI_OP_BWD_W, lo + hi - mb));
        char said[96];
        snprintf(said, sizeof said, "stage 3 runs the W of mb 7 where mb %lld is due", (long long)lo);
        expect_refused(t, &plan, "trailing W's reversed", said);
        schedule_free(t);

        /* two of them swapped: W5 and W6 */
        t = shipped_table(kind, &plan);
        swap_instrs(t, find_instr(t, s, PACI_OP_BWD_W, 5), find_instr(t, s, PACI_OP_BWD_W, 6));
        expect_refused(t, &plan, "W5 and W6 swapped", "stage 3 runs the W of mb 6 where mb 5 is due");
        schedule_free(t);
        if (kind != PACI_SCHED_ZBH2) // zb-h1's stage 1 holds no spare slot: its slot check refuses this
            continue;
        /* stage 1: W1 and W2, each between two B's, swapped */
        t = shipped_table(kind, &plan);
        assert_true(find_instr(t, 1, PACI_OP_BWD_W, 2) < find_instr(t, 1, PACI_OP_BWD_B, 7));
        swap_instrs(t, find_instr(t, 1, PACI_OP_BWD_W, 1), find_instr(t, 1, PACI_OP_BWD_W, 2));
        expect_refused(t, &plan, "W1 and W2 swapped", "stage 1 runs the W of mb 2 where mb 1 is due");
        schedule_free(t);
    }
    /* gpipe with the backwards of mb 0 and 1 swapped on every stage, their messages alike */
    Plan plan;
    paci_table *t = shipped_table(PACI_SCHED_GPIPE, &plan);
    for (int s = 0; s < t->stages; s++) {
        swap_instrs(t, find_instr(t, s, PACI_OP_BWD, 0), find_instr(t, s, PACI_OP_BWD, 1));
        if (s < t->stages - 1)
            swap_instrs(t, find_instr(t, s, PACI_OP_RECV_GRAD, 0), find_instr(t, s, PACI_OP_RECV_GRAD, 1));
        if (s > 0)
            swap_instrs(t, find_instr(t, s, PACI_OP_SEND_GRAD, 0), find_instr(t, s, PACI_OP_SEND_GRAD, 1));
    }
    expect_refused(t, &plan, "backwards 0 and 1 swapped", "stage 3 runs the backward of mb 1 where mb 0 is due");
    schedule_free(t);
}

/* recompute full: every schedule still verifies; the rerun forward makes every backward's
 * effective drift 0 while the raw drift stays; stages with several slots keep their inputs
 * and one workspace (less memory), a stage with one slot keeps it whole. */
static void test_recompute_plan_and_drift(void **state)
{
    (void)state;
    for (int kind = 0; kind < ONE_STAGE_SCHEDULES; kind++) {
        Config cfg = make_config(kind, 4, 2, 12, 0, 0), plain_cfg = cfg;
        cfg.recompute = RECOMPUTE_FULL;
        Plan plan, plain;
        assert_true(plan_build(&cfg, &plan));
        assert_true(plan_build(&plain_cfg, &plain));
        paci_table *t = schedule_build(&cfg, &plan), *tp = schedule_build(&plain_cfg, &plain);
        VerifyReport rep, rep_plain;
        if (!verify_schedule(t, &plan, &rep))
            fail_msg("%s with recompute: %s", paci_schedule_name(kind), rep.error);
        assert_true(verify_schedule(tp, &plain, &rep_plain));
        for (int s = 0; s < 4; s++) {
            // (the automatic split may differ: the planner prices the rerun forwards)
            const StagePlan *sp = &plan.stage[s];
            assert_int_equal(rep.effective_drift[s], 0);
            assert_int_equal(rep.max_drift[s], rep_plain.max_drift[s]);
            assert_int_equal(sp->recompute, sp->slots > 1);
            if (sp->recompute) {
                assert_true(sp->mem_acts < sp->slots * sp->act_bytes);
                assert_int_equal(sp->mem_acts, sp->slots * sp->keep_bytes + sp->act_bytes);
            } else {
                assert_int_equal(sp->mem_acts, sp->slots * sp->act_bytes);
            }
        }
        if (kind == PACI_SCHED_PACI)
            assert_true(rep_plain.effective_drift[0] > 0);
        schedule_free(t);
        schedule_free(tp);
    }
}

/* recompute full sends from the one workspace: a table whose send of a forward's output
 * comes after the stage's next forward is refused with it, and accepted without it. */
static void test_verify_recompute_send_order(void **state)
{
    (void)state;
    for (int recompute = 0; recompute < 2; recompute++) {
        Config cfg = make_config(PACI_SCHED_ONEF1B, 3, 4, 1, 0, 0);
        cfg.recompute = recompute ? RECOMPUTE_FULL : RECOMPUTE_NONE;
        Plan plan;
        assert_true(plan_build(&cfg, &plan));
        paci_table *t = schedule_build(&cfg, &plan);
        paci_instr *instrs = (paci_instr *)t->instrs;
        const paci_stage_program *sp = &t->program[0].device[0];
        assert_int_equal(t->program[0].body_reps, 0);
        /* stage 0 starts F0 sa0 F1: make it F0 F1 sa0 */
        long at = sp->prologue;
        assert_int_equal(instrs[at].op, PACI_OP_FWD);
        assert_int_equal(instrs[at + 1].op, PACI_OP_SEND_ACT);
        assert_int_equal(instrs[at + 2].op, PACI_OP_FWD);
        paci_instr send = instrs[at + 1];
        instrs[at + 1] = instrs[at + 2];
        instrs[at + 2] = send;
        VerifyReport rep;
        bool ok = verify_schedule(t, &plan, &rep);
        if (recompute) {
            assert_false(ok);
            assert_non_null(strstr(rep.error, "stage 0 sends the activation of mb 0 after its workspace was reused"));
        } else if (!ok) {
            fail_msg("without recompute the reordered table should verify: %s", rep.error);
        }
        schedule_free(t);
    }
}

/* The largest example's shape, 10,000 steps in one segment, builds and verifies quickly. */
static void test_long_run_is_compact(void **state)
{
    (void)state;
    Config cfg = make_config(PACI_SCHED_PACI, 8, 8, 10000, 0, 0);
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    paci_table *t = schedule_build(&cfg, &plan);
    assert_true(t->n_instrs < 8 * 8 * 6 * 30);
    VerifyReport rep;
    assert_true(verify_schedule(t, &plan, &rep));
    schedule_free(t);
}

/* Segments longer than the generated steps (extended by body repetitions) equal the full
 * generator's output, with and without a shorter last segment. */
static void test_capped_generation(void **state)
{
    (void)state;
    static const int windows[] = {1, 2, 3, 8, 17};
    for (int kind = 0; kind < ONE_STAGE_SCHEDULES; kind++)
        for (int p = 1; p <= 16; p += (p < 4 ? 1 : 3))
            for (size_t k = 0; k < sizeof windows / sizeof *windows; k++) {
                check_config(kind, p, windows[k], 4L * (p + 2) + 37, 0);
                check_config(kind, p, windows[k], 2 * (4L * (p + 2) + 5) + 3, 4L * (p + 2) + 5);
            }
    check_config(PACI_SCHED_PACI, 3, 2, 2000, 0);
    check_config(PACI_SCHED_PIPEDREAM, 5, 3, 2000, 0);
}

/* One segment of 1,000,000 steps: a table no larger than 100 steps', which verifies and
 * whose expansion starts and ends as the full generator's output does. */
static void test_million_steps(void **state)
{
    (void)state;
    Config cfg = make_config(PACI_SCHED_PACI, 2, 1, 100, 0, 0);
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    paci_table *small = schedule_build(&cfg, &plan);
    cfg.steps = 1000000;
    assert_true(plan_build(&cfg, &plan));
    paci_table *t = schedule_build(&cfg, &plan);
    assert_int_equal(t->n_programs, 1);
    assert_int_equal(t->program[0].steps, 1000000);
    assert_true(t->n_instrs <= small->n_instrs);
    VerifyReport rep;
    assert_true(verify_schedule(t, &plan, &rep));
    SegmentLists sl;
    schedule_generate(PACI_SCHED_PACI, 2, 1, 1000000, NULL, &sl);
    for (int s = 0; s < 2; s++) {
        paci_instr *list;
        long n = schedule_expand(t, 0, s, &list);
        assert_int_equal(n, sl.count[s]);
        long ends = 200; /* the prologue, the first and last bodies and the epilogue */
        assert_memory_equal(list, sl.instrs[s], (size_t)ends * sizeof *list);
        assert_memory_equal(list + n - ends, sl.instrs[s] + n - ends, (size_t)ends * sizeof *list);
        free(list);
    }
    segment_lists_free(&sl);
    schedule_free(small);
    schedule_free(t);
}

/* Micro-batch numbers past 2^31: window 1000 over 3,000,000 steps numbers 3e9 micro-batches in
 * one segment. The epilogue ends at the last one, and the body's last repetition lands where
 * paci_body_instr says, in 64 bits (both wrapped to -1294967296 + ... in 32). */
static void test_micro_batch_numbers_past_int32(void **state)
{
    (void)state;
    Config cfg = make_config(PACI_SCHED_PACI, 2, 1000, 3000000, 0, 0);
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    paci_table *t = schedule_build(&cfg, &plan);
    VerifyReport rep;
    assert_true(verify_schedule(t, &plan, &rep));
    assert_int_equal(paci_segments(t), 1);
    const paci_program *pg = &t->program[0];
    const int64_t last_mb = 3000000LL * 1000 - 1;
    for (int s = 0; s < 2; s++) {
        const paci_stage_program *sp = &pg->device[s];
        const paci_instr *epi = t->instrs + sp->epilogue;
        assert_true(sp->n_epilogue >= 2);
        assert_int_equal(epi[sp->n_epilogue - 1].op, PACI_OP_STEP);
        const paci_instr *last = &epi[sp->n_epilogue - 2];
        assert_int_equal(last->op, s == 0 ? PACI_OP_BWD : PACI_OP_SEND_GRAD);
        assert_true(last->mb == last_mb);
        for (int i = 0; i < sp->n_epilogue; i++)
            assert_true(epi[i].op == PACI_OP_STEP || epi[i].mb > INT32_MAX);
        paci_instr first = t->instrs[sp->body];
        paci_instr moved = paci_body_instr(t, first, pg->body_reps - 1);
        assert_true(moved.mb == first.mb + (int64_t)(pg->body_reps - 1) * 1000);
        assert_true(moved.mb > INT32_MAX);
    }
    schedule_free(t);

    /* the most steps: the segment count (total + segment - 1) / segment stays 1 */
    cfg = make_config(PACI_SCHED_PACI, 2, 2, INT32_MAX, 0, 0);
    assert_true(plan_build(&cfg, &plan));
    t = schedule_build(&cfg, &plan);
    assert_int_equal(paci_segments(t), 1);
    assert_true(verify_schedule(t, &plan, &rep));
    schedule_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_schedules),
        cmocka_unit_test(test_every_window_at_16_stages),
        cmocka_unit_test(test_segments),
        cmocka_unit_test(test_segments_closed_form),
        cmocka_unit_test(test_segments_of_a_long_run),
        cmocka_unit_test(test_slots_and_stash),
        cmocka_unit_test(test_verify_catches_errors),
        cmocka_unit_test(test_verify_zero_bubble_errors),
        cmocka_unit_test(test_verify_window_order),
        cmocka_unit_test(test_recompute_plan_and_drift),
        cmocka_unit_test(test_verify_recompute_send_order),
        cmocka_unit_test(test_long_run_is_compact),
        cmocka_unit_test(test_capped_generation),
        cmocka_unit_test(test_million_steps),
        cmocka_unit_test(test_warm_start),
        cmocka_unit_test(test_micro_batch_numbers_past_int32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
