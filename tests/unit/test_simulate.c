/* Simulation against the analytic results: with uniform stage costs and free
 * communication, 1F1B-flush idles (p-1)/(m+p-1) of the time and PACI's steady state ~0;
 * and the profile reader's format and errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pacic.h"
#include "pipeline_config.h"

static Config make_config(int kind, int stages, int window, long steps)
{
    Config cfg = pipeline_config(kind, stages, window, steps, 32);
    cfg.link_latency = 1e-6;
    return cfg;
}

/* Forward 1, backward 2, free step and messages on every stage. */
static CostModel uniform_costs(int stages)
{
    CostModel cm = {0};
    for (int s = 0; s < stages; s++) {
        cm.fwd[s] = 1;
        cm.bwd[s] = 2;
    }
    return cm;
}

static SimResult simulate_uniform(int kind, int p, int K, long steps)
{
    Config cfg = make_config(kind, p, K, steps);
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    paci_table *t = schedule_build(&cfg, &plan);
    CostModel cm = uniform_costs(p);
    SimResult res;
    simulate(&cfg, t, &cm, 0, &res);
    schedule_free(t);
    return res;
}

static void test_onef1b_bubble_is_analytic(void **state)
{
    (void)state;
    static const int ps[] = {1, 2, 3, 4, 5, 8, 16};
    static const int ks[] = {1, 2, 4, 7, 8, 16, 32};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
        for (size_t j = 0; j < sizeof ks / sizeof *ks; j++) {
            int p = ps[i], K = ks[j];
            SimResult res = simulate_uniform(PACI_SCHED_ONEF1B, p, K, 8);
            double expected = (double)(p - 1) / (double)(K + p - 1);
            if (fabs(res.bubble - expected) > 1e-12)
                fail_msg("1f1b p=%d K=%d: bubble %.15f, analytic %.15f", p, K, res.bubble, expected);
            /* one step lasts (K + p - 1)(f + b) */
            assert_true(fabs(res.step_time - (K + p - 1) * 3.0) < 1e-9);
            sim_result_free(&res);
        }
}

static void test_paci_steady_bubble_is_zero(void **state)
{
    (void)state;
    static const int ps[] = {1, 2, 4, 8, 16};
    static const int ks[] = {1, 2, 3, 8, 16};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
        for (size_t j = 0; j < sizeof ks / sizeof *ks; j++) {
            int p = ps[i], K = ks[j];
            long steps = 4 * ((p + K - 1) / K) + 8;
            SimResult res = simulate_uniform(PACI_SCHED_PACI, p, K, steps);
            if (res.bubble > 1e-9)
                fail_msg("paci p=%d K=%d: steady bubble %g", p, K, res.bubble);
            assert_true(fabs(res.step_time - K * 3.0) < 1e-9);
            /* fill and drain still cost (p-1)(f+b) over the whole run */
            assert_true(fabs(res.makespan - (steps * K + p - 1) * 3.0) < 1e-9);
            sim_result_free(&res);
        }
}

/* The zero-bubble schedules at F = B = W = 1 (backward 2) and free messages: a step of zb-h1
 * lasts 3K + p - 1 (it idles p - 1 units against 1F1B-flush's 3(p - 1)), and zb-h2's lasts 3K
 * once K >= 2p - 1: the paper's figures, which its handcrafted orders reach. */
static void test_zero_bubble_idle_is_the_papers(void **state)
{
    (void)state;
    static const int ps[] = {2, 3, 4, 8};
    static const int ks[] = {8, 12, 16, 32};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
        for (size_t j = 0; j < sizeof ks / sizeof *ks; j++)
            for (int kind = PACI_SCHED_ZBH1; kind <= PACI_SCHED_ZBH2; kind++) {
                int p = ps[i], K = ks[j];
                if (kind == PACI_SCHED_ZBH2 && K < 2 * p - 1)
                    continue;
                Config cfg = make_config(kind, p, K, 8);
                Plan plan;
                assert_true(plan_build(&cfg, &plan));
                paci_table *t = schedule_build(&cfg, &plan);
                CostModel cm = uniform_costs(p);
                for (int s = 0; s < p; s++)
                    cm.w[s] = 1;
                SimResult res;
                simulate(&cfg, t, &cm, 0, &res);
                double expected = 3.0 * K + (kind == PACI_SCHED_ZBH1 ? p - 1 : 0);
                if (fabs(res.step_time - expected) > 1e-6)
                    fail_msg("%s p=%d K=%d: step %.9f units, the paper's %.0f", paci_schedule_name(kind), p, K,
                             res.step_time, expected);
                sim_result_free(&res);
                schedule_free(t);
            }
}

/* GPipe with uniform costs idles as much as 1F1B-flush. */
static void test_gpipe_bubble(void **state)
{
    (void)state;
    SimResult res = simulate_uniform(PACI_SCHED_GPIPE, 4, 8, 6);
    assert_true(fabs(res.bubble - 3.0 / 11.0) < 1e-12);
    sim_result_free(&res);
}

/* Messages and optimizer steps cost time: the step gets longer, never shorter. */
static void test_costs_from_plan(void **state)
{
    (void)state;
    Config cfg = make_config(PACI_SCHED_ONEF1B, 4, 4, 6);
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    CostModel cm;
    cost_model_from_plan(&cfg, &plan, &cm);
    for (int s = 0; s < 4; s++) {
        assert_true(fabs(cm.fwd[s] - plan.stage[s].fwd_flops / 1e12) < 1e-15);
        assert_true(fabs(cm.bwd[s] - 2 * cm.fwd[s]) < 1e-15);
        assert_true(cm.step[s] > 0);
    }
    assert_true(cm.msg[0] > 1e-6 && cm.msg[3] == 0);
    paci_table *t = schedule_build(&cfg, &plan);
    SimResult with_comm;
    simulate(&cfg, t, &cm, 3, &with_comm);
    assert_int_equal(with_comm.steps, 3);
    for (int s = 0; s < 4; s++)
        cm.msg[s] = 0, cm.step[s] = 0;
    SimResult free_comm;
    simulate(&cfg, t, &cm, 3, &free_comm);
    assert_true(with_comm.makespan > free_comm.makespan);
    assert_true(free_comm.tokens_per_s > with_comm.tokens_per_s);
    sim_result_free(&with_comm);
    sim_result_free(&free_comm);
    schedule_free(t);
}

/* A run shorter than a segment simulates exactly that many steps' events. */
static void test_partial_segment(void **state)
{
    (void)state;
    Config cfg = make_config(PACI_SCHED_PACI, 4, 2, 1000);
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    paci_table *t = schedule_build(&cfg, &plan);
    CostModel cm = uniform_costs(4);
    SimResult res;
    simulate(&cfg, t, &cm, 5, &res);
    long fwd = 0, steps = 0;
    for (long i = 0; i < res.n_events; i++) {
        fwd += res.events[i].op == PACI_OP_FWD;
        steps += res.events[i].op == PACI_OP_STEP;
    }
    assert_int_equal(fwd, 5 * 2 * 4);
    assert_int_equal(steps, 5 * 4);
    sim_result_free(&res);
    schedule_free(t);
}

static char *write_temp(const char *text)
{
    char *path = xstrdup("/tmp/pacic_profile_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

/* A stage line's `w` is what a zero-bubble W costs in the replay; without it, W takes its
 * products' share of the backward's FLOPs; a W above the whole backward is an error. */
static void test_profile_w(void **state)
{
    (void)state;
    Config cfg = make_config(PACI_SCHED_ZBH1, 2, 4, 4);
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    CostModel cm;
    cost_model_from_plan(&cfg, &plan, &cm);
    double by_flops = cm.w[0];
    assert_true(by_flops > 0 && by_flops < cm.bwd[0]);
    char *with_w = write_temp("stage 0 fwd 0.5 bwd 1.5 step 0.25 w 0.375\nstage 1 fwd 0.5 bwd 1.5 step 0.25\n");
    assert_true(cost_model_load_profile(with_w, &plan, &cm));
    cost_model_allreduce(&cfg, &plan, &cm);
    assert_true(cm.w[0] == 0.375);
    assert_true(cm.w[1] == 1.5 * plan.stage[1].w_flops / plan.stage[1].bwd_flops);
    unlink(with_w);
    free(with_w);
    char *too_much = write_temp("stage 0 fwd 0.5 bwd 1.5 step 0.25 w 2\n");
    FILE *quiet = tmpfile();
    diag_set_stream(quiet);
    assert_false(cost_model_load_profile(too_much, &plan, &cm));
    diag_set_stream(stderr);
    fclose(quiet);
    diag_reset();
    unlink(too_much);
    free(too_much);
}

static void test_profile(void **state)
{
    (void)state;
    Config cfg = make_config(PACI_SCHED_PACI, 2, 2, 4);
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    CostModel cm;
    cost_model_from_plan(&cfg, &plan, &cm);
    char *good = write_temp("# measured\nstage 0 fwd 0.5 bwd 1.5 step 0.25\n\nlink 0 0.125  # nvlink\n");
    assert_true(cost_model_load_profile(good, &plan, &cm));
    assert_true(cm.fwd[0] == 0.5 && cm.bwd[0] == 1.5 && cm.step[0] == 0.25 && cm.msg[0] == 0.125);
    assert_true(cm.w_measured[0] == 0);

    char out_path[] = "/tmp/pacic_diag_XXXXXX";
    int fd = mkstemp(out_path);
    FILE *diag = fdopen(fd, "w+");
    diag_set_stream(diag);
    CostModel before = cm;
    char *bad = write_temp("stage 0 fwd 1 bwd 1 step 1\nstage 5 fwd 1 bwd 1 step 1\n");
    assert_false(cost_model_load_profile(bad, &plan, &cm));
    char *bad2 = write_temp("link 0 -3\n");
    assert_false(cost_model_load_profile(bad2, &plan, &cm));
    assert_memory_equal(&before, &cm, sizeof cm); /* a bad file changes nothing */
    diag_set_stream(stderr);
    rewind(diag);
    char text[1024] = {0};
    size_t got = fread(text, 1, sizeof text - 1, diag);
    assert_true(got > 0);
    char *where = xasprintf("%s:2: expected a stage number", bad);
    assert_non_null(strstr(text, where));
    free(where);
    where = xasprintf("%s:1: expected SECONDS", bad2);
    assert_non_null(strstr(text, where));
    free(where);
    fclose(diag);
    unlink(out_path);
    unlink(good);
    unlink(bad);
    unlink(bad2);
    free(good);
    free(bad);
    free(bad2);
    diag_reset();
}

/* --balance: a version 2 profile gives each part of the model its measured cost, the
 * sections' op times over their calls (a block's ops run once per layer, an op in a loop
 * more often), scaled to the stage lines' forward and backward times, AdamW over the
 * parameters; the partitioner then prices stages with them: here the embedding costs
 * more than the 4 layers together and the head nothing, so stage 0 holds the embedding
 * alone and the head goes with two layers. A profile without a section's ops is an error naming it. */
static void test_measured_costs(void **state)
{
    (void)state;
    Config cfg = make_config(PACI_SCHED_PACI, 3, 4, 4);
    cfg.layers = 4;
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    assert_true(plan.stage[0].n_layers > 0);
    /* the stage lines agree with the ops here (stage 0: 10 + 2 x 1 forward, 4 + 10 backward) */
    char *path = write_temp("version 2\n"
                            "stage 0 fwd 12 bwd 14 step 0.5\nstage 1 fwd 1 bwd 2 step 0.25\nstage 2 fwd 0 bwd 0 step 0.25\n"
                            "op 0 0 embed_forward k calls 8 total 80 mean 10 \"e\"\n"
                            "op 0 1 block_forward k calls 16 total 8 mean 0.5 \"a\"\n"
                            "op 0 2 block_forward k calls 16 total 8 mean 0.5 \"b\"\n"
                            "op 1 0 block_forward k calls 8 total 4 mean 0.5 \"a\"\n"
                            "op 1 1 block_forward k calls 64 total 4 mean 0.0625 \"in a loop\"\n"
                            "op 0 3 block_backward k calls 16 total 32 mean 2 \"c\"\n"
                            "op 1 2 block_backward k calls 8 total 16 mean 2 \"c\"\n"
                            "op 0 4 embed_backward k calls 8 total 80 mean 10 \"e\"\n"
                            "op 2 0 head_forward k calls 8 total 0 mean 0 \"h\"\n"
                            "op 2 1 head_backward k calls 8 total 0 mean 0 \"h\"\n");
    MeasuredCosts mc;
    assert_true(measured_costs_load(path, &plan, &mc));
    assert_true(mc.layer_fwd == 1 && mc.layer_bwd == 2 && mc.embed_fwd == 10 && mc.embed_bwd == 10);
    assert_true(mc.head_fwd == 0 && mc.head_bwd == 0);
    assert_true(mc.step_per_param == 1.0 / (double)plan.total_params);
    cfg.measured = &mc;
    assert_true(plan_build(&cfg, &plan));
    assert_int_equal(plan.stage[0].n_layers, 0);
    assert_int_equal(plan.stage[2].n_layers, 2);
    CostModel cm;
    cost_model_from_plan(&cfg, &plan, &cm);
    assert_true(cm.fwd[0] == 10 && cm.bwd[0] == 10);
    assert_true(cm.fwd[1] == plan.stage[1].n_layers * 1.0 && cm.bwd[1] == plan.stage[1].n_layers * 2.0);
    /* stage lines twice the ops' times (the ops' clock counted less): the ops scale to them */
    char *first = read_file(path, NULL);
    unlink(path);
    free(path);
    char *doubled = xasprintf("version 2\nstage 0 fwd 24 bwd 28 step 0.5\nstage 1 fwd 2 bwd 4 step 0.25\n%s",
                              strstr(first, "stage 2 fwd"));
    path = write_temp(doubled);
    cfg.measured = NULL;
    assert_true(measured_costs_load(path, &plan, &mc));
    assert_true(mc.layer_fwd == 2 && mc.layer_bwd == 4 && mc.embed_fwd == 20 && mc.embed_bwd == 20);
    assert_true(mc.step_per_param == 1.0 / (double)plan.total_params);
    free(first);
    free(doubled);
    unlink(path);
    free(path);

    char out_path[] = "/tmp/pacic_diag_XXXXXX";
    FILE *diag = fdopen(mkstemp(out_path), "w+");
    diag_set_stream(diag);
    path = write_temp("stage 0 fwd 1 bwd 1 step 1\n");
    assert_false(measured_costs_load(path, &plan, &mc));
    diag_set_stream(stderr);
    rewind(diag);
    char text[1024] = {0};
    assert_true(fread(text, 1, sizeof text - 1, diag) > 0);
    char *want = xasprintf("%s has no per-op times for block_forward (--balance needs a profile that run "
                           "--profile-out wrote, version 2)", path);
    assert_non_null(strstr(text, want));
    free(want);
    fclose(diag);
    unlink(out_path);
    unlink(path);
    free(path);
    diag_reset();
}

/* Version 2: the op and compute lines are read into an OpProfile; stage lines still set the
 * costs; a malformed op line or an unknown version is an error naming file and line. */
static void test_profile_ops(void **state)
{
    (void)state;
    Config cfg = make_config(PACI_SCHED_PACI, 2, 2, 4);
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    CostModel cm;
    cost_model_from_plan(&cfg, &plan, &cm);
    char *good = write_temp("# run\nversion 2\nstage 1 fwd 0.5 bwd 1 step 0.25\ncompute 1 2.5\n"
                            "op 1 0 block_forward gemm calls 4 total 2 mean 0.5 \"qkv # = ln1\"  # note\n"
                            "op 1 3 adamw adamw calls 0 total 0 mean 0 \"AdamW\"\n");
    OpProfile ops;
    assert_true(profile_load(good, &plan, &cm, &ops));
    assert_true(cm.fwd[1] == 0.5 && cm.bwd[1] == 1 && cm.step[1] == 0.25);
    assert_int_equal(ops.version, 2);
    assert_int_equal(ops.n_ops, 2);
    assert_true(ops.compute[1] == 2.5 && ops.compute[0] < 0);
    assert_int_equal(ops.ops[0].stage, 1);
    assert_int_equal(ops.ops[0].index, 0);
    assert_string_equal(ops.ops[0].section, "block_forward");
    assert_string_equal(ops.ops[0].name, "gemm");
    assert_string_equal(ops.ops[0].what, "qkv # = ln1");
    assert_int_equal(ops.ops[0].calls, 4);
    assert_true(ops.ops[0].total == 2 && ops.ops[0].mean == 0.5);
    op_profile_free(&ops);

    static const char *const bad[][2] = {
        {"op 0 0 block_forward gemm calls 1 total 1 mean 1 \"x\"\n", ":1: 'op' and 'compute' lines need 'version 2'"},
        {"version 3\n", ":1: a newer profile format"},
        {"stage 0 fwd 1 bwd 1 step 1\nversion 2\n", ":2: 'version' must come before"},
        {"version 2\nop 0 0 block_forward gemm calls x total 1 mean 1 \"x\"\n", ":2: expected 'calls N', in 'op 0 0"},
        {"version 2\nop 0 0 block_forward gemm calls 2 total 1 mean 1 \"x\"\n", ":2: the mean is not the total"},
        {"version 2\nop 0 0 block_forward gemm calls 1 total 1 mean 1 x\n", ":2: expected the op's description"},
        {"version 2\nop 0 0 block_forward gemm calls 1 total 1 mean 1 \"x\"\n"
         "op 0 0 block_forward gemm calls 1 total 1 mean 1 \"x\"\n", ":3: a second line for the same stage"},
        {"version 2\nop 2 0 block_forward gemm calls 1 total 1 mean 1 \"x\"\n", ":2: expected a stage number"},
        {"version 2\ncompute 0 -1\n", ":2: expected SECONDS"},
        // past 1e30 s a step's time would add up to inf, and --explain print nan
        {"stage 0 fwd 1e308 bwd 1 step 1\n", ":1: expected 'fwd SECONDS', SECONDS in [0, 1e30], in 'stage 0 fwd 1e308"},
        {"version 2\ncompute 0 1e31\n", ":2: expected SECONDS after the stage number, SECONDS in [0, 1e30]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char out_path[] = "/tmp/pacic_diag_XXXXXX";
        FILE *diag = fdopen(mkstemp(out_path), "w+");
        diag_set_stream(diag);
        char *path = write_temp(bad[i][0]);
        CostModel before = cm;
        OpProfile none = {0};
        assert_false(profile_load(path, &plan, &cm, &none));
        assert_memory_equal(&before, &cm, sizeof cm);
        assert_int_equal(none.n_ops, 0);
        diag_set_stream(stderr);
        rewind(diag);
        char text[1024] = {0};
        assert_true(fread(text, 1, sizeof text - 1, diag) > 0);
        char *where = xasprintf("%s%s", path, bad[i][1]);
        if (!strstr(text, where))
            fail_msg("case %zu: '%s' lacks '%s'", i, text, where);
        free(where);
        fclose(diag);
        unlink(out_path);
        unlink(path);
        free(path);
    }
    unlink(good);
    free(good);
    diag_reset();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_onef1b_bubble_is_analytic),
        cmocka_unit_test(test_paci_steady_bubble_is_zero),
        cmocka_unit_test(test_gpipe_bubble),
        cmocka_unit_test(test_zero_bubble_idle_is_the_papers),
        cmocka_unit_test(test_costs_from_plan),
        cmocka_unit_test(test_partial_segment),
        cmocka_unit_test(test_profile),
        cmocka_unit_test(test_profile_w),
        cmocka_unit_test(test_profile_ops),
        cmocka_unit_test(test_measured_costs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
