/* test_dp_compile.c: the compiler's side of data parallelism (`parallel { data D }`): the
 * generated program names D only when D > 1; each stage's gradient allreduce is 4 bytes a
 * parameter, a ring sends 2 (D-1)/D of it per rank over network_bandwidth, --explain prints
 * those figures and the simulation runs it before each of the stage's steps; the schedule
 * is per pipeline, so the drift --explain reports does not depend on D. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pacic.h"

/* A 4-stage model whose stages differ in size (the first holds the embedding, the last the
 * head), so a figure taken from the wrong stage shows. */
#define DSL_HEAD "model gpt2 { layers 6; width 64; heads 4; context 32; vocab 256 }\n" \
                 "pipeline { stages 4; schedule %s; window 4 }\n"
#define DSL_TAIL "batch { micro 2 }\n" \
                 "train { steps 40; optimizer adamw { lr 1e-3 at 8 scale sqrt } }\n" \
                 "hardware { network_bandwidth 1e9 }\n"

/* Everything one compile makes from the text, for one schedule and D. */
typedef struct Compiled {
    char *text;
    Source src;
    Ast *ast;
    Config cfg;
    Plan plan;
    paci_table *table;
    VerifyReport report;
} Compiled;

static Compiled *compile(const char *schedule, int replicas)
{
    Compiled *c = xcalloc(1, sizeof *c);
    c->text = xasprintf(DSL_HEAD "parallel { data %d }\n" DSL_TAIL, schedule, replicas);
    c->src = (Source){"dp.paci", c->text, strlen(c->text)};
    diag_reset();
    c->ast = parse_source(&c->src);
    assert_non_null(c->ast);
    assert_true(sema_check(&c->src, c->ast, false, &c->cfg));
    assert_int_equal(c->cfg.replicas, replicas);
    assert_true(plan_build(&c->cfg, &c->plan));
    c->table = schedule_build(&c->cfg, &c->plan);
    assert_true(verify_schedule(c->table, &c->plan, &c->report));
    return c;
}

static void compiled_free(Compiled *c)
{
    schedule_free(c->table);
    config_free(&c->cfg);
    ast_free(c->ast);
    free(c->text);
    free(c);
}

/* What `print` writes, as one malloc'ed string. */
#define CAPTURE(out_text, print)                                                          \
    do {                                                                                  \
        size_t capture_size = 0;                                                          \
        FILE *out = open_memstream(&(out_text), &capture_size);                           \
        print;                                                                            \
        fclose(out);                                                                      \
    } while (0)

static char *explain_text(const Compiled *c)
{
    CostModel cm;
    cost_model_from_plan(&c->cfg, &c->plan, &cm);
    SimResult sim;
    simulate(&c->cfg, c->table, &cm, 32, &sim);
    char *text = NULL;
    SimView view = sim_view(&c->cfg, &sim, "the FLOPs model", 3);
    CAPTURE(text, inspect_explain(out, &c->cfg, &c->plan, c->table, &c->report, &view));
    sim_result_free(&sim);
    return text;
}

static char *program_text(const Compiled *c)
{
    StrBuf sb = {0};
    Lowered low;
    lower_build(&c->cfg, &c->plan, &low);
    emit_c_program(&sb, &c->cfg, &low, c->table);
    lower_free(&low);
    return sb.data;
}

static void test_replicas_emitted_only_above_one(void **state)
{
    (void)state;
    Compiled *one = compile("paci", 1), *two = compile("paci", 2);
    char *a = program_text(one), *b = program_text(two);
    assert_null(strstr(a, "replicas")); /* one pipeline's program.c is what it was before D */
    assert_non_null(strstr(b, "\n    .replicas = 2,"));
    /* the lr written into the program is the one scaled to micro x window x D */
    assert_true(fabs(two->cfg.lr - 1e-3 * sqrt(16.0 / 8.0)) < 1e-15);
    assert_true(fabs(one->cfg.lr - 1e-3) < 1e-15);
    free(a);
    free(b);
    compiled_free(one);
    compiled_free(two);
}

/* Per stage: 4 bytes a parameter, 2 (D-1)/D of them on the wire per rank, over 1e9 B/s. */
static void test_allreduce_figures_by_hand(void **state)
{
    (void)state;
    Compiled *c = compile("paci", 8);
    char *text = explain_text(c);
    assert_non_null(strstr(text, "world size p x D = 4 x 8 = 32 ranks"));
    assert_non_null(strstr(text, "global batch 2 x 4 x 8 = 64"));
    for (int s = 0; s < c->plan.stages; s++) {
        long params = c->plan.stage[s].params;
        Allreduce a = stage_allreduce(&c->cfg, &c->plan.stage[s]);
        assert_true(a.bytes == 4.0 * (double)params);
        assert_true(fabs(a.ring_bytes - 4.0 * (double)params * 14.0 / 8.0) < 1e-6);
        assert_true(fabs(a.seconds - 4.0 * (double)params * 14.0 / 8.0 / 1e9) < 1e-15);
        double fwd, bwd, step;
        cost_stage(&c->cfg, &c->plan.stage[s], &fwd, &bwd, &step);
        char line[160];
        snprintf(line, sizeof line, "\n  %5d  %7.1fM  %12.4g  %22.4g  %12.3g  %10.3g\n", s, params / 1e6,
                 4.0 * params / 1e6, 7.0 * params / 1e6, 7.0 * params / 1e9 * 1e3,
                 allreduce_exposed(&c->cfg, &c->plan.stage[s], bwd) * 1e3);
        if (!strstr(text, line))
            fail_msg("no allreduce line%s in\n%s", line, text);
    }
    free(text);
    compiled_free(c);
    c = compile("paci", 1);
    for (int s = 0; s < c->plan.stages; s++)
        assert_true(stage_allreduce(&c->cfg, &c->plan.stage[s]).seconds == 0);
    text = explain_text(c);
    assert_null(strstr(text, "allreduce"));
    free(text);
    compiled_free(c);
}

/* Every step of every stage is preceded by its allreduce, of the predicted length, ending
 * where the step starts; none with D = 1. Under paci and under a flushing schedule. */
static void test_simulated_allreduce_precedes_each_step(void **state)
{
    (void)state;
    static const char *const schedules[] = {"paci", "1f1b"};
    for (int k = 0; k < 2; k++)
        for (int replicas = 1; replicas <= 4; replicas += 3) {
            Compiled *c = compile(schedules[k], replicas);
            CostModel cm;
            cost_model_from_plan(&c->cfg, &c->plan, &cm);
            SimResult sim;
            simulate(&c->cfg, c->table, &cm, 0, &sim);
            for (int s = 0; s < c->plan.stages; s++) {
                double expected = allreduce_exposed(&c->cfg, &c->plan.stage[s], cm.bwd[s]);
                assert_true(replicas == 1 ? expected == 0 : expected > 0);
                long steps = 0, allreduces = 0;
                const SimEvent *previous = NULL;
                for (long i = 0; i < sim.n_events; i++) {
                    const SimEvent *e = &sim.events[i];
                    if (e->stage != s)
                        continue;
                    if (e->op == SIM_OP_ALLREDUCE) {
                        allreduces++;
                        assert_true(fabs(e->end - e->start - expected) < 1e-12);
                    }
                    if (e->op == PACI_OP_STEP) {
                        steps++;
                        if (replicas > 1) { // right after it, or at the global norm's barrier after it
                            assert_non_null(previous);
                            assert_int_equal(previous->op, SIM_OP_ALLREDUCE);
                            assert_true(cm.step_barrier ? previous->end <= e->start : previous->end == e->start);
                        }
                    }
                    previous = e;
                }
                assert_int_equal(steps, c->cfg.steps);
                assert_int_equal(allreduces, replicas > 1 ? steps : 0);
            }
            sim_result_free(&sim);
            compiled_free(c);
        }
}

/* The overlap (GPU): a backward that takes no time hides nothing; a very long one hides all
 * but what it finishes last (the others: their first layer, 12 C^2 + 13 C parameters, or
 * their leading MLP half, 8 C^2 + 7 C, where the split cuts inside a layer; stage 0: that
 * and the embeddings, V C + T C, whose backward the model counts as no FLOPs, so both are
 * final only at the end); in between, the longer the backward, the less left. */
static void test_allreduce_hidden_behind_backward(void **state)
{
    (void)state;
    Compiled *c = compile("paci", 8);
    double C = c->cfg.width, V = c->cfg.vocab, T = c->cfg.context;
    for (int s = 0; s < c->plan.stages; s++) {
        const StagePlan *sp = &c->plan.stage[s];
        double whole = stage_allreduce(&c->cfg, sp).seconds;
        double first = sp->lead_mlp ? 8 * C * C + 7 * C : 12 * C * C + 13 * C;
        double last = (s == 0 ? V * C + T * C : 0) + first;
        assert_true(fabs(allreduce_exposed(&c->cfg, sp, 0) - whole) < 1e-12 * whole);
        double tail = allreduce_exposed(&c->cfg, sp, 1e3 * whole);
        assert_true(fabs(tail - whole * last / (double)sp->params) < 1e-9 * whole);
        double before = whole;
        for (double bwd = whole / 64; bwd < 4 * whole; bwd *= 2) {
            double exposed = allreduce_exposed(&c->cfg, sp, bwd);
            assert_true(exposed <= before + 1e-12 * whole && exposed >= tail - 1e-12 * whole);
            before = exposed;
        }
    }
    compiled_free(c);
}

static int count_of(const char *text, const char *what)
{
    int n = 0;
    for (const char *at = strstr(text, what); at; at = strstr(at + 1, what))
        n++;
    return n;
}

/* The timeline, the picture and the trace draw one allreduce per stage and step (3 steps
 * shown), named in their legends; with D = 1 none of them mentions it. */
static void test_views_draw_the_allreduce(void **state)
{
    (void)state;
    for (int replicas = 1; replicas <= 2; replicas++) {
        Compiled *c = compile("paci", replicas);
        CostModel cm;
        cost_model_from_plan(&c->cfg, &c->plan, &cm);
        SimResult sim;
        simulate(&c->cfg, c->table, &cm, 3, &sim);
        char *timeline = NULL, *svg = NULL, *trace = NULL;
        SimView view = sim_view(&c->cfg, &sim, "the FLOPs model", 0); /* all 3 steps */
        CAPTURE(timeline, inspect_timeline(out, &c->cfg, &view));
        CAPTURE(svg, inspect_svg(out, &c->cfg, &view));
        CAPTURE(trace, inspect_trace(out, &c->cfg, &sim));
        int expected = replicas > 1 ? 3 * c->plan.stages : 0;
        assert_int_equal(count_of(trace, "{\"name\": \"allreduce\", \"cat\": \"allreduce\""), expected);
        assert_int_equal(count_of(svg, "<title>allreduce "), expected);
        assert_int_equal(count_of(svg, ">gradient allreduce</text>"), replicas > 1);
        assert_int_equal(count_of(timeline, "A gradient allreduce among the replicas"), replicas > 1);
        if (replicas > 1) /* allreduces that dwarf this small model's compute fill many of the 96 columns */
            assert_true(count_of(timeline, "A") > 3 * c->plan.stages);
        free(timeline);
        free(svg);
        free(trace);
        sim_result_free(&sim);
        compiled_free(c);
    }
}

/* A stage row of --explain's table ends "drift-bound drifted-share% busy%": the first two
 * of those three, for each row, in one string. */
static char *drift_columns(const char *explain, int stages)
{
    StrBuf sb = {0};
    const char *header = strstr(explain, "\nstage  layers");
    assert_non_null(header);
    const char *line = strchr(header + 1, '\n') + 1;
    line = strchr(line, '\n') + 1; /* the units line */
    for (int s = 0; s < stages; s++) {
        const char *end = strchr(line, '\n');
        char row[256], *words[32];
        int n = 0;
        snprintf(row, sizeof row, "%.*s", (int)(end - line), line);
        for (char *w = strtok(row, " "); w && n < 32; w = strtok(NULL, " "))
            words[n++] = w;
        assert_true(n >= 3);
        sb_printf(&sb, "stage %d: bound %s share %s\n", s, words[n - 3], words[n - 2]);
        line = end + 1;
    }
    const char *drift = strstr(explain, "\ndrift: ");
    assert_non_null(drift);
    sb_printf(&sb, "%.*s", (int)(strchr(drift + 1, '\n') - drift), drift);
    return sb.data;
}

/* The schedule is per pipeline: drift is the same with 1 and 8 replicas, in the verifier's
 * report and in --explain's lines. */
static void test_drift_unchanged_by_replicas(void **state)
{
    (void)state;
    static const char *const schedules[] = {"paci", "1f1b", "pipedream"};
    for (int k = 0; k < 3; k++) {
        Compiled *one = compile(schedules[k], 1), *eight = compile(schedules[k], 8);
        for (int s = 0; s < one->plan.stages; s++) {
            assert_int_equal(one->report.max_drift[s], eight->report.max_drift[s]);
            assert_true(one->report.drift_share[s] == eight->report.drift_share[s]);
            assert_int_equal(one->report.effective_drift[s], eight->report.effective_drift[s]);
            assert_int_equal(drift_bound(one->table, s), drift_bound(eight->table, s));
        }
        char *a = explain_text(one), *b = explain_text(eight);
        char *da = drift_columns(a, one->plan.stages), *db = drift_columns(b, eight->plan.stages);
        assert_string_equal(da, db);
        if (k == 0) /* paci: stage 0 crosses ceil(3/4) = 1 update, a share of its micro-batches */
            assert_non_null(strstr(da, "stage 0: bound 1 share "));
        free(da);
        free(db);
        free(a);
        free(b);
        compiled_free(one);
        compiled_free(eight);
    }
}

/* --emit costs' model FLOPs per token are one pipeline's FLOPs over one pipeline's tokens:
 * the same for any D (dividing by the D replicas' global batch made them D times too small). */
static void test_model_flops_per_token_is_per_pipeline(void **state)
{
    (void)state;
    char *lines[2];
    int replicas[2] = {1, 8};
    for (int i = 0; i < 2; i++) {
        Compiled *c = compile("paci", replicas[i]);
        GpuCosts gc;
        Lowered low;
        lower_build(&c->cfg, &c->plan, &low);
        gpu_costs_build(&c->cfg, &low, &gc);
        lower_free(&low);
        GpuPrediction p = gpu_costs_predict(&c->cfg, &c->plan, c->table, &gc, 32);
        char *text = NULL;
        CAPTURE(text, gpu_costs_emit(out, &c->cfg, &gc, &p, NULL));
        const char *at = strstr(text, "model_flops_per_token ");
        assert_non_null(at);
        lines[i] = xstrdup(at);
        free(text);
        // the whole job's throughput is the pipelines' together, each slowed by its allreduce
        CAPTURE(text, gpu_costs_explain(out, &c->cfg, &c->plan, &gc, &p, true));
        if (replicas[i] > 1) {
            char whole[128];
            snprintf(whole, sizeof whole, "whole job: 8 pipelines x %.4g tokens/s = %.4g tokens/s on 32 GPUs",
                     p.tokens_per_s, 8 * p.tokens_per_s);
            assert_non_null(strstr(text, whole));
        } else {
            assert_null(strstr(text, "whole job"));
        }
        free(text);
        gpu_costs_free(&gc);
        compiled_free(c);
    }
    assert_string_equal(lines[0], lines[1]);
    free(lines[0]);
    free(lines[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replicas_emitted_only_above_one),
        cmocka_unit_test(test_allreduce_figures_by_hand),
        cmocka_unit_test(test_simulated_allreduce_precedes_each_step),
        cmocka_unit_test(test_allreduce_hidden_behind_backward),
        cmocka_unit_test(test_views_draw_the_allreduce),
        cmocka_unit_test(test_drift_unchanged_by_replicas),
        cmocka_unit_test(test_model_flops_per_token_is_per_pipeline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
