/* test_runtime.c: transport, learning rate, clipping and the executor over toy stages. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <cmocka.h>

#include "toy_model.h"
#include "wait_for.h"

static char token_path[] = "/tmp/pacirt_test_XXXXXX";

/* ---- transport ------------------------------------------------------------------------ */

typedef struct sender {
    pr_channel *c;
    int sent;
} sender;

static void *send_three(void *arg)
{
    sender *s = arg;
    float msg[2];
    for (int i = 0; i < 3; i++) {
        msg[0] = msg[1] = (float)i;
        pr_channel_send(s->c, 10 + i, msg);
        __atomic_store_n(&s->sent, i + 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

static void test_channel_fifo_and_capacity(void **state)
{
    pr_channel c;
    pr_channel_init(&c, 2, 2);
    sender s = {&c, 0};
    pthread_t th;
    pthread_create(&th, NULL, send_three, &s);
    // Two messages fit at once; the third send waits for a receive, which wakes it.
    assert_true(wait_for_count(&s.sent, 2));
    float got[2];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pr_channel_recv(&c, got), 10 + i);
        assert_true(got[0] == (float)i && got[1] == (float)i);
    }
    pthread_join(th, NULL);
    assert_int_equal(s.sent, 3);
    // The capacity, with no other thread: two sends fit (wrapping around the buffers), a
    // third finds both full and waits until its timeout, as no receive comes.
    float msg[2] = {5, 6};
    pr_channel_send(&c, 20, msg);
    pr_channel_send(&c, 21, msg);
    c.timeout = 0.05;
    assert_int_equal(pr_channel_send_timed(&c, 22, msg), PR_LINK_TIMEOUT);
    assert_int_equal(pr_channel_recv(&c, got), 20);
    assert_int_equal(pr_channel_recv(&c, got), 21);
    assert_true(got[0] == 5 && got[1] == 6);
    assert_int_equal(pr_channel_recv_timed(&c, got, &(int64_t){0}), PR_LINK_TIMEOUT);
    pr_channel_destroy(&c);
}

/* ---- learning rate ---------------------------------------------------------------------- */

static void test_lr_schedule(void **state)
{
    pr_program prog = {.lr = 1.0, .min_lr_ratio = 0.1, .steps = 110, .warmup_steps = 10,
                       .decay = PR_DECAY_COSINE};
    assert_float_equal(pr_lr(&prog, 1), 0.1, 1e-12);
    assert_float_equal(pr_lr(&prog, 5), 0.5, 1e-12);
    assert_float_equal(pr_lr(&prog, 10), 1.0, 1e-12);
    assert_float_equal(pr_lr(&prog, 60), 0.55, 1e-12); // halfway down the cosine
    assert_float_equal(pr_lr(&prog, 110), 0.1, 1e-12);
    prog.decay = PR_DECAY_LINEAR;
    assert_float_equal(pr_lr(&prog, 35), 1.0 - 0.9 * 0.25, 1e-12);
    assert_float_equal(pr_lr(&prog, 110), 0.1, 1e-12);
    prog.decay = PR_DECAY_CONSTANT;
    assert_float_equal(pr_lr(&prog, 110), 1.0, 1e-12);
    prog.warmup_steps = 0;
    prog.decay = PR_DECAY_COSINE;
    assert_float_equal(pr_lr(&prog, 0), 1.0, 1e-12);
    assert_float_equal(pr_clip_scale(2.0, 1.0), 0.5, 1e-7);
    assert_float_equal(pr_clip_scale(0.5, 1.0), 1.0, 0);
    assert_float_equal(pr_clip_scale(5.0, 0.0), 1.0, 0);
}

/* ---- executor --------------------------------------------------------------------------- */

#define STEPS 20
#define SEGMENT 7

static toy_table table;
static double toy_clip = 1e-3;      /* the programs' clip (toy_program's unless a test sets it) */
static double logged_norm[STEPS]; /* the gradient norm each step reported, as --metrics logs it */
static double logged_loss[STEPS]; /* the loss each step reported, as the run's log prints it */

static void record_norm(pr_run *run, int64_t step, double loss, double lr, double grad_norm)
{
    if (step >= 1 && step <= STEPS) {
        logged_norm[step - 1] = grad_norm;
        logged_loss[step - 1] = loss;
    }
}

/* Called after the toy stages are built, before the run starts (NULL: none). */
static void (*after_build)(void);

/* Trains the toy model with a fresh run of D replicas in one process (replicas.c: the
 * others train as threads beside replica 0's); leaves the run for inspection. */
static void toy_train_replicas(pr_run *run, enum toy_kind kind, int p, int K, int D, int steps,
                               int segment)
{
    static pr_program prog;
    char err[PR_ERR_LEN];
    toy_build_stages(p);
    if (after_build)
        after_build();
    toy_build_table(&table, kind, p, K, steps, segment);
    prog = toy_program(&table.t, steps);
    prog.grad_clip = toy_clip;
    prog.replicas = D;
    assert_int_equal(pr_run_init(run, &prog, NULL, err), 0);
    assert_int_equal(pr_replicas_open(run, err), 0);
    run->on_step = record_norm;
    assert_int_equal(pr_tokens_load(&run->train, token_path, TOY_V, TOY_B, TOY_T, err), 0);
    float *flat = pr_alloc((size_t)pr_ckpt_offsets(&prog, (int64_t[PR_CKPT_COUNT]){0}) * 4);
    pr_init_params(&prog, flat);
    pr_scatter(run, 0, flat);
    free(flat);
    pr_replicas_sync(run);
    for (int seg = 0; seg < paci_segments(&table.t); seg++)
        pr_run_segment(run, seg);
    assert_int_equal(run->step, steps);
}

/* One pipeline. */
static void toy_train(pr_run *run, enum toy_kind kind, int p, int K, int steps, int segment)
{
    toy_train_replicas(run, kind, p, K, 1, steps, segment);
}

static float *gather_params(pr_run *run)
{
    int64_t offsets[PR_CKPT_COUNT];
    float *flat = pr_alloc((size_t)pr_ckpt_offsets(run->prog, offsets) * 4);
    pr_gather(run, 0, flat);
    return flat;
}

/* Every replica ends with replica 0's bits (they took the same steps from the same sums), at
 * D = 3 too, whose slices of the reduction are unequal; and D replicas of window K train as
 * one pipeline of window D*K, to rounding (the partial sums are added at the end). */
static void test_replicas_in_process(void **state)
{
    (void)state;
    enum toy_kind kinds[] = {TOY_1F1B, TOY_PACI};
    for (int k = 0; k < 2; k++)
        for (int D = 2; D <= 3; D++) {
            pr_run run, one;
            toy_train_replicas(&run, kinds[k], 2, 2, D, STEPS, SEGMENT);
            float *lead = gather_params(&run);
            int64_t offsets[PR_CKPT_COUNT], n = pr_ckpt_offsets(run.prog, offsets);
            for (int r = 1; r < D; r++) {
                float *other = gather_params(run.replica_runs[r]);
                assert_memory_equal(lead, other, (size_t)n * sizeof(float));
                assert_int_equal(run.replica_runs[r]->step, STEPS);
                free(other);
            }
            pr_run_free(&run);
            if (kinds[k] == TOY_1F1B) { // the same micro-batches as one pipeline of window 2D
                toy_train(&one, TOY_1F1B, 2, 2 * D, STEPS, SEGMENT);
                float *single = gather_params(&one);
                double worst = 0.0;
                for (int64_t i = 0; i < n; i++)
                    worst = fmax(worst, fabs((double)lead[i] - (double)single[i]));
                assert_true(worst < 1e-5);
                // and not like one pipeline of window 2 (the data of replica 0 alone)
                pr_run_free(&one);
                toy_train(&one, TOY_1F1B, 2, 2, STEPS, SEGMENT);
                float *alone = gather_params(&one);
                worst = 0.0;
                for (int64_t i = 0; i < n; i++)
                    worst = fmax(worst, fabs((double)lead[i] - (double)alone[i]));
                assert_true(worst > 1e-3);
                free(alone);
                free(single);
                pr_run_free(&one);
            }
            free(lead);
        }
}

static void test_sync_bit_identical_across_p(void **state)
{
    pr_run run;
    toy_train(&run, TOY_GPIPE, 1, 3, STEPS, SEGMENT);
    int64_t n = pr_ckpt_offsets(run.prog, (int64_t[PR_CKPT_COUNT]){0});
    float *reference = gather_params(&run);
    double first_loss = logged_loss[0], last_loss = logged_loss[STEPS - 1];
    double *losses = malloc(STEPS * sizeof(double));
    memcpy(losses, logged_loss, STEPS * sizeof(double));
    pr_run_free(&run);
    assert_true(last_loss < first_loss);
    enum toy_kind kinds[] = {TOY_GPIPE, TOY_1F1B, TOY_PACI};
    for (int k = 0; k < 3; k++) {
        for (int p = 1; p <= 4; p++) {
            if (kinds[k] == TOY_PACI && p > 1)
                continue; // PACI equals synchronous training only at p = 1
            toy_train(&run, kinds[k], p, 3, STEPS, SEGMENT);
            float *params = gather_params(&run);
            if (memcmp(params, reference, (size_t)n * 4) != 0 ||
                memcmp(losses, logged_loss, STEPS * sizeof(double)) != 0)
                fail_msg("schedule %d at p = %d differs from gpipe at p = 1", kinds[k], p);
            free(params);
            pr_run_free(&run);
        }
    }
    free(reference);
    free(losses);
}

/* The gradient for the stage before goes from inside the backward (pr_bwd_args.dx_ready),
 * before its late work: stage 1's backward, once it has called dx_ready, waits there until
 * stage 0 has begun the backward that needs that gradient. Without the early send that wait
 * could only end at its hang guard (stage 0 receives the message after the backward returns). */
static int stage0_backwards, stage1_early, stage1_met;

static void counting_bwd0(const pr_bwd_args *a)
{
    __atomic_add_fetch(&stage0_backwards, 1, __ATOMIC_SEQ_CST);
    toy_backward(0, a);
}

static void early_bwd1(const pr_bwd_args *a)
{
    toy_backward(1, a); // dx_in is complete at its end
    if (!a->dx_ready)
        return;
    a->dx_ready(a->ready_ctx);
    int n = ++stage1_early;
    if (stage1_met == n - 1) // after one wait ran into its hang guard, no more
        stage1_met += wait_for_count(&stage0_backwards, n);
}

static void hook_early_send(void)
{
    toy_codes[0].backward = counting_bwd0;
    toy_codes[1].backward = early_bwd1;
}

static void test_gradient_sent_before_late_work(void **state)
{
    (void)state;
    enum toy_kind kinds[] = {TOY_1F1B, TOY_PACI, TOY_GPIPE};
    for (int k = 0; k < 3; k++) {
        pr_run run;
        stage0_backwards = stage1_early = stage1_met = 0;
        after_build = hook_early_send;
        toy_train(&run, kinds[k], 2, 2, STEPS, SEGMENT);
        after_build = NULL;
        // every backward of stage 1 sent early, and stage 0 used it while stage 1 was still inside
        assert_int_equal(stage1_early, STEPS * 2);
        assert_int_equal(stage1_met, STEPS * 2);
        assert_int_equal(run.stage[1].backwards, STEPS * 2);
        assert_true(logged_loss[STEPS - 1] < logged_loss[0]);
        pr_run_free(&run);
    }
}

/* The executor's measured drift (updates between a micro-batch's forward and backward) is
 * the verifier's, simulated over the compiler's table: prologue, body x reps, epilogue. */
static void test_paci_drift_matches_table(void **state)
{
    int p = 4, K = 2;
    pr_run run;
    toy_train(&run, TOY_PACI, p, K, STEPS, SEGMENT);
    assert_true(logged_loss[STEPS - 1] < logged_loss[0]);
    const paci_program *full = &table.t.program[0];
    assert_true(full->body_reps >= 2 && full->device[0].n_epilogue > 0); // all three parts run
    for (int s = 0; s < p; s++) {
        long drifting = lround(table.report.drift_share[s] * (double)table.micro_batches);
        assert_int_equal(run.stage[s].drift_max, table.report.max_drift[s]);
        assert_int_equal(run.stage[s].drifting, drifting);
        assert_int_equal(run.stage[s].drift_max, (p - s - 1 + K - 1) / K); // ceil((p-s-1)/K)
        assert_int_equal(run.stage[s].backwards, STEPS * K);
    }
    assert_true(run.stage[0].drifting > 0);
    pr_run_free(&run);
}

/* The norm the executor clips by (and logs) in a synchronous schedule folds every stage's
 * per-tensor sums in stage then tensor order: the same bits at every step for any p, while
 * clipping is on (toy_clip 1e-3 clips every step). With clipping off the last stage logs its
 * own gradients' norm, below the whole model's at p > 1 (docs/dsl.md, clip). */
static void test_clip_norm_independent_of_p(void **state)
{
    enum toy_kind kinds[] = {TOY_GPIPE, TOY_1F1B};
    double single[STEPS];
    for (int k = 0; k < 2; k++)
        for (int p = 1; p <= 4; p++) {
            pr_run run;
            toy_train(&run, kinds[k], p, 2, STEPS, SEGMENT);
            pr_run_free(&run);
            if (k == 0 && p == 1) {
                memcpy(single, logged_norm, sizeof single);
                continue;
            }
            for (int t = 0; t < STEPS; t++)
                if (memcmp(&logged_norm[t], &single[t], sizeof(double)) != 0)
                    fail_msg("schedule %d at p = %d: step %d's norm %.17g, p = 1's %.17g", kinds[k],
                             p, t + 1, logged_norm[t], single[t]);
        }
    assert_true(single[0] > 1e-3 && single[STEPS - 1] > 1e-3); // so clipping acted throughout
    toy_clip = 0.0;
    for (int p = 2; p <= 4; p++) {
        pr_run run;
        toy_train(&run, TOY_1F1B, p, 2, 1, 1);
        pr_run_free(&run);
        assert_true(logged_norm[0] > 0.0 && logged_norm[0] < single[0]); // step 1: no clip yet either way
    }
    toy_clip = 1e-3;
}


/* ---- virtual stages: a device runs several stages ------------------------------------- */

/* A chunked table built by hand (the runtime's side of issue 37, independent of the
 * compiler's interleaved schedules): S = devices x chunks stages placed by `placement`; every
 * step each device runs, in the order of one sequential pass, the instructions of the stages
 * it holds, then their steps. The pass goes micro-batch by micro-batch through the stages and
 * back, or with stage_major every micro-batch through a stage before the next (GPipe's): a
 * stage then sends all K activations before its neighbour takes one, which a hand-over inside
 * one device must buffer. Each stage keeps the window's K micro-batches in K slots. */
static void chunked_table(toy_table *tt, int placement, int devices, int chunks, int K, int total,
                          int segment, int stage_major)
{
    free((void *)tt->owned);
    memset(tt, 0, sizeof *tt);
    paci_table *t = &tt->t;
    int S = devices * chunks;
    *t = (paci_table){.schedule = PACI_SCHED_GPIPE, .stages = S, .devices = devices, .chunks = chunks,
                      .placement = placement, .window = K, .total_steps = total,
                      .segment_steps = segment < total ? segment : total, .channel_capacity = 1};
    for (int d = 0; d < devices; d++)
        for (int c = 0; c < chunks; c++)
            t->stage_device[paci_placed_stage(placement, devices, d, c)] = d;
    for (int s = 0; s < S; s++)
        t->slots[s] = K;
    paci_instr *all = calloc((size_t)devices * (size_t)(S * K * 6 + S), sizeof *all);
    int32_t start[PACI_MAX_STAGES], n = 0;
    for (int d = 0; d < devices; d++) {
        start[d] = n;
#define PUT(o, s, m) do { if (t->stage_device[s] == d) all[n++] = (paci_instr){(o), (uint8_t)(s), (uint16_t)(m), 0, (m)}; } while (0)
        for (int i = 0; i < K * S; i++) {
            int mb = stage_major ? i % K : i / S, s = stage_major ? i / K : i % S;
            {
                if (s > 0)
                    PUT(PACI_OP_RECV_ACT, s, mb);
                PUT(PACI_OP_FWD, s, mb);
                if (s + 1 < S)
                    PUT(PACI_OP_SEND_ACT, s, mb);
            }
        }
        for (int i = 0; i < K * S; i++) {
            int mb = stage_major ? i % K : i / S, s = S - 1 - (stage_major ? i / K : i % S);
            {
                if (s + 1 < S)
                    PUT(PACI_OP_RECV_GRAD, s, mb);
                PUT(PACI_OP_BWD, s, mb);
                if (s > 0)
                    PUT(PACI_OP_SEND_GRAD, s, mb);
            }
        }
#undef PUT
        for (int c = 0; c < chunks; c++)
            all[n++] = (paci_instr){PACI_OP_STEP, (uint8_t)paci_placed_stage(placement, devices, d, c), 0, 0, -1};
    }
    int lengths[2] = {t->segment_steps, total % t->segment_steps};
    for (int k = 0; k < 2 && lengths[k] > 0; k++) {
        paci_program *pg = &t->program[t->n_programs++];
        *pg = (paci_program){.schedule = PACI_SCHED_GPIPE, .steps = lengths[k], .body_reps = lengths[k]};
        for (int d = 0; d < devices; d++)
            pg->device[d] = (paci_stage_program){start[d], 0, start[d], (d + 1 < devices ? start[d + 1] : n) - start[d],
                                                 start[d], 0};
    }
    t->n_instrs = n;
    t->instrs = all;
    tt->owned = all;
}

/* Trains the toy model over the hand-built chunked table; with stop_at > 0 the run stops
 * after that step and goes on from there mid-segment (the cut an early stop and its resume
 * make), which must not change a bit. */
static void chunked_train(pr_run *run, int placement, int devices, int chunks, int K, int stage_major,
                          int64_t stop_at)
{
    static pr_program prog;
    char err[PR_ERR_LEN];
    toy_build_stages(devices * chunks);
    chunked_table(&table, placement, devices, chunks, K, STEPS, SEGMENT, stage_major);
    prog = toy_program(&table.t, STEPS);
    prog.grad_clip = toy_clip;
    if (pr_run_init(run, &prog, NULL, err) != 0)
        fail_msg("%s", err);
    run->on_step = record_norm;
    assert_int_equal(pr_tokens_load(&run->train, token_path, TOY_V, TOY_B, TOY_T, err), 0);
    float *flat = pr_alloc((size_t)pr_ckpt_offsets(&prog, (int64_t[PR_CKPT_COUNT]){0}) * 4);
    pr_init_params(&prog, flat);
    pr_scatter(run, 0, flat);
    free(flat);
    if (stop_at > 0) {
        run->stop_at = stop_at;
        for (int seg = 0; run->step < stop_at; seg++)
            pr_run_segment(run, seg);
        assert_int_equal(run->step, stop_at);
        run->stop_at = PR_NO_STOP;
    }
    for (int seg = paci_segment_of_step(&table.t, run->step); seg < paci_segments(&table.t); seg++)
        pr_run_segment(run, seg);
    assert_int_equal(run->step, STEPS);
}

/* Virtual stages train as one stage does, to the bit (weights, losses and the clipping norm
 * folded over every stage), on both placements, with links between any two devices (loop
 * sends stage 1 on device 1 to stage 2 on device 0) and hand-overs inside one device (v's
 * turn, and one device holding all four stages); and an early stop resumed mid-segment
 * changes nothing. */
static void test_chunks_equal_one_stage(void **state)
{
    (void)state;
    pr_run run;
    toy_train(&run, TOY_GPIPE, 1, 3, STEPS, SEGMENT);
    int64_t n = pr_ckpt_offsets(run.prog, (int64_t[PR_CKPT_COUNT]){0});
    float *reference = gather_params(&run);
    double losses[STEPS], norms[STEPS];
    memcpy(losses, logged_loss, sizeof losses);
    memcpy(norms, logged_norm, sizeof norms);
    pr_run_free(&run);
    struct { int placement, devices, chunks, stage_major; int64_t stop_at; } cases[] = {
        {PACI_PLACEMENT_LOOP, 2, 2, 0, 0}, {PACI_PLACEMENT_V, 2, 2, 0, 0}, {PACI_PLACEMENT_LOOP, 1, 4, 0, 0},
        {PACI_PLACEMENT_V, 4, 1, 0, 0}, {PACI_PLACEMENT_V, 2, 2, 0, 10}, {PACI_PLACEMENT_LOOP, 2, 2, 0, 3},
        {PACI_PLACEMENT_V, 2, 2, 1, 0}, {PACI_PLACEMENT_LOOP, 1, 4, 1, 12},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memset(logged_loss, 0, sizeof logged_loss);
        memset(logged_norm, 0, sizeof logged_norm);
        chunked_train(&run, cases[k].placement, cases[k].devices, cases[k].chunks, 3, cases[k].stage_major,
                      cases[k].stop_at);
        float *params = gather_params(&run);
        if (memcmp(params, reference, (size_t)n * 4) != 0 || memcmp(losses, logged_loss, sizeof losses) != 0 ||
            memcmp(norms, logged_norm, sizeof norms) != 0)
            fail_msg("placement %d, %d devices x %d chunks (stage major %d, stop at %lld) differs from one stage",
                     cases[k].placement, cases[k].devices, cases[k].chunks, cases[k].stage_major,
                     (long long)cases[k].stop_at);
        for (int s = 0; s < 4; s++)
            assert_int_equal(run.stage[s].backwards, STEPS * 3);
        free(params);
        pr_run_free(&run);
    }
    free(reference);
}

/* The compiler's own interleaved tables (pacic's schedule.c, verified) at 2 devices x 2 chunks
 * train the toy as one stage does, to the bit, at windows 2 and 4 (weights, losses, norms). */
static void test_interleaved_table_equals_one_stage(void **state)
{
    (void)state;
    for (int K = 2; K <= 4; K += 2) {
        pr_run run;
        toy_train(&run, TOY_GPIPE, 1, K, STEPS, SEGMENT);
        int64_t n = pr_ckpt_offsets(run.prog, (int64_t[PR_CKPT_COUNT]){0});
        float *reference = gather_params(&run);
        double losses[STEPS], norms[STEPS];
        memcpy(losses, logged_loss, sizeof losses);
        memcpy(norms, logged_norm, sizeof norms);
        pr_run_free(&run);
        toy_chunks = 2;
        toy_train(&run, (enum toy_kind)PACI_SCHED_INTERLEAVED, 4, K, STEPS, SEGMENT);
        toy_chunks = 0;
        assert_int_equal(run.tab->devices, 2);
        float *params = gather_params(&run);
        if (memcmp(params, reference, (size_t)n * 4) != 0 || memcmp(losses, logged_loss, sizeof losses) != 0 ||
            memcmp(norms, logged_norm, sizeof norms) != 0)
            fail_msg("interleaved at 2 devices x 2 chunks, K = %d, differs from one stage", K);
        free(params);
        free(reference);
        pr_run_free(&run);
    }
}

/* The runtime refuses a chunked table whose instruction runs on a device that does not hold
 * its stage, or whose stage_device disagrees with the placement: named, before any thread. */
static void test_chunks_table_checked(void **state)
{
    (void)state;
    static pr_program prog;
    char err[PR_ERR_LEN];
    pr_run run;
    toy_build_stages(4);
    chunked_table(&table, PACI_PLACEMENT_V, 2, 2, 2, STEPS, SEGMENT, 0);
    prog = toy_program(&table.t, STEPS);
    paci_instr *instrs = (paci_instr *)table.t.instrs;
    int32_t at = table.t.program[0].device[1].body; // device 1's first: stage 1's RECV_ACT
    assert_int_equal(instrs[at].stage, 1);
    instrs[at].stage = 3; // stage 3 runs on device 0 under v
    assert_int_equal(pr_run_init(&run, &prog, NULL, err), -1);
    assert_non_null(strstr(err, "in device 1's list names stage 3, which runs on device 0"));
    instrs[at].stage = 1;
    table.t.stage_device[1] = 0;
    assert_int_equal(pr_run_init(&run, &prog, NULL, err), -1);
    assert_non_null(strstr(err, "chunk 0 of device 1 is stage 1 under placement v"));
    table.t.stage_device[1] = 1;
    table.t.placement = PACI_PLACEMENT_LOOP; // loop puts stage 2 on device 0
    assert_int_equal(pr_run_init(&run, &prog, NULL, err), -1);
    assert_non_null(strstr(err, "under placement loop"));
    table.t.placement = PACI_PLACEMENT_V;
    table.t.devices = 4; // 4 x 2 is not 4 stages
    assert_int_equal(pr_run_init(&run, &prog, NULL, err), -1);
    assert_non_null(strstr(err, "stages must be devices x chunks"));
}

static int setup(void **state)
{
    toy_token_file(token_path);
    pr_blas_threads(1, 1);
    return 0;
}

static int teardown(void **state)
{
    unlink(token_path);
    return 0;
}

/* ---- parallel loops (pool.c) -------------------------------------------------------------- */

enum { PROBE_N = 13, PROBE_CORES = 3 };

typedef struct pool_probe {
    pthread_t caller;
    int runs[PROBE_N], worker_of[PROBE_N];
    pthread_t thread_of[PROBE_N];
    float *scratch_of[PROBE_N];
} pool_probe;

static void probe_index(void *ctx, int i, int worker)
{
    pool_probe *p = ctx;
    p->runs[i]++;
    p->worker_of[i] = worker;
    p->thread_of[i] = pthread_self();
    p->scratch_of[i] = pr_thread_floats(16);
}

/* A stage thread's first pr_parallel_for starts its helpers; they end with it. */
static void *pool_caller(void *arg)
{
    pool_probe *p = arg;
    p->caller = pthread_self();
    pr_parallel_for(PROBE_N, probe_index, p);
    return NULL;
}

/* Every index runs once, on worker i % cores: worker 0 is the calling thread, the others
 * are threads of their own, each with scratch of its own. */
static void test_parallel_for_spreads_indices(void **state)
{
    (void)state;
    pool_probe p = {0};
    pr_pool_set_cores(PROBE_CORES);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, pool_caller, &p), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    pr_pool_set_cores(1);
    for (int i = 0; i < PROBE_N; i++) {
        assert_int_equal(p.runs[i], 1);
        assert_int_equal(p.worker_of[i], i % PROBE_CORES);
        assert_int_equal(pthread_equal(p.thread_of[i], p.caller) != 0, i % PROBE_CORES == 0);
        for (int k = 0; k < i; k++) {
            bool same_worker = p.worker_of[k] == p.worker_of[i];
            assert_int_equal(pthread_equal(p.thread_of[k], p.thread_of[i]) != 0, same_worker);
            assert_int_equal(p.scratch_of[k] == p.scratch_of[i], same_worker);
        }
    }
}

/* ---- matrix products on the stage's cores (gemm.c) ---------------------------------------- */

/* Products cut on 2 cores in the tests below: by rows (m >= n), and by columns, whose last
 * block takes the 76 columns past the aligned cut. */
static const int gemm_shapes[][3] = {{1024, 256, 80}, {192, 1100, 96}};

/* A product is cut only into aligned blocks of enough work each; else it runs whole. */
static void test_gemm_blocks(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof gemm_shapes / sizeof *gemm_shapes; i++) {
        assert_int_equal(pr_gemm_blocks(gemm_shapes[i][0], gemm_shapes[i][1], gemm_shapes[i][2], 2), 2);
        assert_int_equal(pr_gemm_blocks(gemm_shapes[i][0], gemm_shapes[i][1], gemm_shapes[i][2], 1), 1);
    }
    assert_int_equal(pr_gemm_blocks(1024, 384, 384, 4), 4);
    assert_int_equal(pr_gemm_blocks(1024, 384, 384, 16), 16);      /* 64 rows x 384 x 384 each */
    assert_int_equal(pr_gemm_blocks(1024, 384, 384, 32), 16);      /* blocks under 64 rows: fewer */
    assert_int_equal(pr_gemm_blocks(1024, 256, 32, 2), 1);         /* 2^23 multiply-adds in all */
    assert_int_equal(pr_gemm_blocks(64, 64, 64, 2), 1);
    assert_int_equal(pr_gemm_blocks(100, 90000, 1000, 2), 2);      /* by columns */
    assert_int_equal(pr_gemm_blocks(0, 0, 0, 2), 1);
}

typedef struct gemm_case {
    int trans_a, trans_b, m, n, k, kind; /* kind 0: beta 0; 1: beta 1 onto C; 2: a bias */
    const float *a, *b, *bias, *c0;
    float *c;
} gemm_case;

static void gemm_run(gemm_case *g)
{
    memcpy(g->c, g->c0, (size_t)g->m * (size_t)g->n * sizeof(float));
    int lda = g->trans_a ? g->m : g->k, ldb = g->trans_b ? g->k : g->n;
    if (g->kind == 2)
        pr_gemm_bias(g->trans_a, g->trans_b, g->m, g->n, g->k, 0.5f, g->a, lda, g->b, ldb, 0.0f, g->c, g->n, g->bias);
    else
        pr_gemm(g->trans_a, g->trans_b, g->m, g->n, g->k, 0.5f, g->a, lda, g->b, ldb, (float)g->kind, g->c, g->n);
}

/* A stage thread: its first product starts its pool's helpers, which end with it. */
static void *gemm_caller(void *arg)
{
    gemm_run(arg);
    return NULL;
}

/* A product cut into blocks on 2 cores, by rows and by columns, in every transposition, with
 * beta 0, beta 1 and a bias, equals a double-precision reference to float rounding; and with
 * the kernels that sum a block as they sum the whole product (checked: SSE3's, AVX-512's),
 * the same bits as the product whole on one core. */
static void test_gemm_cut_on_cores(void **state)
{
    (void)state;
    const char *kernels = pr_blas_kernels();
    bool same_bits = strcmp(kernels, "Prescott") == 0 || strcmp(kernels, "SkylakeX") == 0 ||
                     strcmp(kernels, "Cooperlake") == 0;
    pr_rng rng = {7};
    for (size_t s = 0; s < sizeof gemm_shapes / sizeof *gemm_shapes; s++) {
        int m = gemm_shapes[s][0], n = gemm_shapes[s][1], k = gemm_shapes[s][2];
        float *a = malloc(sizeof(float) * (size_t)m * (size_t)k), *b = malloc(sizeof(float) * (size_t)n * (size_t)k);
        float *bias = malloc(sizeof(float) * (size_t)n), *c0 = malloc(sizeof(float) * (size_t)m * (size_t)n);
        float *cut = malloc(sizeof(float) * (size_t)m * (size_t)n), *whole = malloc(sizeof(float) * (size_t)m * (size_t)n);
        assert_non_null(a);
        assert_non_null(b);
        assert_non_null(bias);
        assert_non_null(c0);
        assert_non_null(cut);
        assert_non_null(whole);
        for (long i = 0; i < (long)m * k; i++)
            a[i] = (float)pr_rng_normal(&rng);
        for (long i = 0; i < (long)n * k; i++)
            b[i] = (float)pr_rng_normal(&rng);
        for (long i = 0; i < n; i++)
            bias[i] = (float)pr_rng_normal(&rng);
        for (long i = 0; i < (long)m * n; i++)
            c0[i] = (float)pr_rng_normal(&rng);
        for (int t = 0; t < 4; t++)
            for (int kind = 0; kind < 3; kind++) {
                gemm_case g = {t >> 1, t & 1, m, n, k, kind, a, b, bias, c0, cut};
                pr_blas_threads(2, 1);
                pthread_t thread;
                assert_int_equal(pthread_create(&thread, NULL, gemm_caller, &g), 0);
                assert_int_equal(pthread_join(thread, NULL), 0);
                pr_blas_threads(1, 1);
                g.c = whole;
                gemm_run(&g);
                int lda = g.trans_a ? m : k, ldb = g.trans_b ? k : n;
                for (int i = 0; i < m; i += 7)
                    for (int j = 0; j < n; j += 5) {
                        double want = kind == 1 ? c0[(long)i * n + j] : kind == 2 ? bias[j] : 0.0, scale = 1.0;
                        for (int l = 0; l < k; l++) {
                            double x = g.trans_a ? a[(long)l * lda + i] : a[(long)i * lda + l];
                            double y = g.trans_b ? b[(long)j * ldb + l] : b[(long)l * ldb + j];
                            want += 0.5 * x * y;
                            scale += fabs(0.5 * x * y);
                        }
                        if (fabs(cut[(long)i * n + j] - want) > 1e-5 * scale)
                            fail_msg("%dx%dx%d, trans %d %d, kind %d: C[%d][%d] is %.9g, not %.9g", m, n, k, g.trans_a,
                                     g.trans_b, kind, i, j, (double)cut[(long)i * n + j], want);
                    }
                if (same_bits && memcmp(cut, whole, sizeof(float) * (size_t)m * (size_t)n) != 0)
                    fail_msg("%dx%dx%d, trans %d %d, kind %d: cut on 2 cores, other bits than whole with %s kernels", m,
                             n, k, g.trans_a, g.trans_b, kind, kernels);
            }
        free(a);
        free(b);
        free(bias);
        free(c0);
        free(cut);
        free(whole);
    }
}

/* A generic fallback on a CPU that allows better is replaced; a user's choice, the library's
 * own choice of real kernels, or a CPU no better than SSE3 is kept. */
/* ---- OpenBLAS's kernels ------------------------------------------------------------------ */

static void test_blas_better_kernels(void **state)
{
    (void)state;
    assert_string_equal(pr_blas_better_kernels(NULL, "Prescott", "SkylakeX"), "SkylakeX");
    assert_string_equal(pr_blas_better_kernels(NULL, "Sandybridge", "Haswell"), "Haswell");
    assert_null(pr_blas_better_kernels("Prescott", "Prescott", "SkylakeX"));
    assert_null(pr_blas_better_kernels("", "Prescott", "SkylakeX"));
    assert_null(pr_blas_better_kernels(NULL, "Haswell", "SkylakeX"));
    assert_null(pr_blas_better_kernels(NULL, "SkylakeX", "SkylakeX"));
    assert_null(pr_blas_better_kernels(NULL, "Zen", "Haswell"));
    assert_null(pr_blas_better_kernels(NULL, "Prescott", NULL));
    assert_null(pr_blas_better_kernels(NULL, NULL, "Haswell"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_channel_fifo_and_capacity),
        cmocka_unit_test(test_lr_schedule),
        cmocka_unit_test(test_sync_bit_identical_across_p),
        cmocka_unit_test(test_replicas_in_process),
        cmocka_unit_test(test_paci_drift_matches_table),
        cmocka_unit_test(test_gradient_sent_before_late_work),
        cmocka_unit_test(test_clip_norm_independent_of_p),
        cmocka_unit_test(test_chunks_equal_one_stage),
        cmocka_unit_test(test_chunks_table_checked),
        cmocka_unit_test(test_interleaved_table_equals_one_stage),
        cmocka_unit_test(test_blas_better_kernels),
        cmocka_unit_test(test_parallel_for_spreads_indices),
        cmocka_unit_test(test_gemm_blocks),
        cmocka_unit_test(test_gemm_cut_on_cores),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
