/* Planning: GPT-2 sizes, the partition (automatic and manual) and the memory check. */
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

static Config gpt2(int layers, int width, int heads, int stages, int kind, int window)
{
    Config cfg = {0};
    cfg.layers = layers;
    cfg.width = width;
    cfg.heads = heads;
    cfg.context = 1024;
    cfg.vocab = 50257;
    cfg.stages = stages;
    cfg.schedule = kind;
    cfg.window = window;
    cfg.micro = 16;
    cfg.global_batch = 16L * window;
    cfg.steps = 100;
    cfg.precision = PREC_BF16;
    cfg.device_flops = 989e12;
    cfg.link_bandwidth = 450e9;
    cfg.link_latency = 5e-6;
    cfg.device_memory = 80e9;
    cfg.memory_bandwidth = 3.35e12;
    return cfg;
}

/* A config built by hand without a hardware block (no FLOP/s, no memory bandwidth, no
 * memory: tests/numeric/gen_stages.c) prices every stage at infinity and fits none: the
 * partition still places every layer, and at least one on each stage that must hold one. */
static void test_partition_without_hardware(void **state)
{
    (void)state;
    for (int stages = 1; stages <= 4; stages++) {
        Config cfg = gpt2(4, 64, 2, stages, PACI_SCHED_PACI, 4);
        cfg.device_flops = 0;
        cfg.memory_bandwidth = 0;
        cfg.device_memory = 0;
        Plan plan;
        plan_layout(&cfg, &plan);
        int total = 0;
        for (int s = 0; s < stages; s++) {
            total += plan.stage[s].n_layers;
            if (s > 0 && s < stages - 1)
                assert_true(plan.stage[s].n_layers > 0);
        }
        assert_int_equal(total, 4);
    }
}

/* GPT-2 Small with its tied head has 124,439,808 parameters (vocabulary 50257). */
static void test_gpt2_small_parameters(void **state)
{
    (void)state;
    Config cfg = gpt2(12, 768, 12, 1, PACI_SCHED_PACI, 1);
    cfg.tied = true;
    Plan plan;
    plan_layout(&cfg, &plan);
    assert_int_equal(plan.total_params, 124439808L);
    cfg.tied = false;
    plan_layout(&cfg, &plan);
    assert_int_equal(plan.total_params, 124439808L + 50257L * 768);
    /* forward FLOPs: 2 per matrix parameter per token plus causal attention */
    double tokens = 16.0 * 1024;
    double expected = 12 * (2 * 12 * 768.0 * 768 * tokens + 2 * 16.0 * 1024 * 1024 * 768) +
                      2 * 50257.0 * 768 * tokens;
    assert_true(plan.stage[0].fwd_flops == expected);
    assert_true(plan.stage[0].bwd_flops == 2 * expected);
}

/* Every layer on exactly one stage, in order, each stage at least one but an end stage
 * (embedding only, head only), over many shapes, up to layers + 2 stages. */
static void test_partition_covers_layers(void **state)
{
    (void)state;
    for (int layers = 1; layers <= 48; layers += 5)
        for (int p = 1; p <= layers + 2 && p <= 16; p++) {
            Config cfg = gpt2(layers, 256, 4, p, PACI_SCHED_ONEF1B, 4);
            Plan plan;
            plan_layout(&cfg, &plan);
            int next = 0;
            for (int s = 0; s < p; s++) {
                assert_int_equal(plan.stage[s].first_layer, next);
                bool end = p > 1 && (s == 0 || s == p - 1);
                assert_true(plan.stage[s].n_layers >= (end ? 0 : 1));
                next += plan.stage[s].n_layers;
                assert_int_equal(plan.stage[s].has_embed, s == 0);
                assert_int_equal(plan.stage[s].has_head, s == p - 1);
            }
            assert_int_equal(next, layers);
        }
}

/* The slowest stage's seconds per optimizer step as the cost model prices the plan: K
 * forwards and backwards and one AdamW step. */
static double bottleneck(const Config *cfg, const Plan *plan)
{
    CostModel cm;
    cost_model_from_plan(cfg, plan, &cm);
    double worst = 0;
    for (int s = 0; s < plan->stages; s++) {
        double t = cfg->window * (cm.fwd[s] + cm.bwd[s]) + cm.step[s];
        worst = t > worst ? t : worst;
    }
    return worst;
}

static bool fits(const Config *cfg, const Plan *plan)
{
    for (int s = 0; s < plan->stages; s++)
        if ((double)plan->stage[s].mem_total > cfg->device_memory)
            return false;
    return true;
}

/* The best bottleneck over every split that fits the memory, by enumeration (INFINITY if
 * none fits): stage 0 and the last may hold no layer, the others at least one. */
static double best_by_enumeration(Config *cfg, int *split, int s, int left)
{
    int p = cfg->stages;
    if (s == p - 1) {
        if (left < (p > 1 ? 0 : 1))
            return INFINITY;
        split[s] = left;
        cfg->split = split;
        Plan plan;
        plan_layout(cfg, &plan);
        cfg->split = NULL;
        return fits(cfg, &plan) ? bottleneck(cfg, &plan) : INFINITY;
    }
    double best = INFINITY;
    for (int n = s == 0 ? 0 : 1; n <= left; n++) {
        split[s] = n;
        double b = best_by_enumeration(cfg, split, s + 1, left - n);
        best = b < best ? b : best;
    }
    return best;
}

/* The automatic split is the fastest that fits: its bottleneck equals the enumerated
 * optimum, with the memory unbounded and with the memory just below what that split
 * needs (then the partitioner must find another); heads of every weight relative to a
 * layer (vocabulary 256 to 50257), and steps of so few tokens that the optimizer step
 * outweighs the products. */
static void test_partition_is_optimal_within_memory(void **state)
{
    (void)state;
    int vocabs[] = {256, 8192, 50257};
    int constrained = 0;
    for (int v = 0; v < 3; v++)
        for (int p = 1; p <= 5; p++)
            for (int kind = 0; kind < 3; kind++) {
                Config cfg = gpt2(7, 512, 8, p, kind == 1 ? PACI_SCHED_GPIPE : PACI_SCHED_PACI, 4);
                cfg.vocab = vocabs[v];
                if (kind == 2) { /* few tokens a step: AdamW's pass over the weights dominates */
                    cfg.micro = 1;
                    cfg.context = 16;
                    cfg.window = 1;
                    cfg.global_batch = 1;
                }
                cfg.device_memory = 1e15;
                int split[PACI_MAX_STAGES];
                Plan plan;
                plan_layout(&cfg, &plan);
                double best = best_by_enumeration(&cfg, split, 0, cfg.layers);
                assert_true(fabs(bottleneck(&cfg, &plan) - best) <= 1e-9 * best);
                /* a device just too small for the unconstrained choice */
                cfg.device_memory = (double)plan_peak_memory(&plan, NULL) - 1;
                best = best_by_enumeration(&cfg, split, 0, cfg.layers);
                if (best == INFINITY)
                    continue;
                constrained++;
                plan_layout(&cfg, &plan);
                assert_true(fits(&cfg, &plan));
                assert_true(fabs(bottleneck(&cfg, &plan) - best) <= 1e-9 * best);
            }
    assert_true(constrained >= 10); /* the memory bound took part (11 of the 45 cases) */
}

/* A stage may hold only the head: on the paper's setting (GPT-2 Medium, 8 stages) the head
 * costs about 3.8 layers, and the last stage holds it alone. */
static void test_head_only_stage(void **state)
{
    (void)state;
    Config cfg = gpt2(24, 1024, 16, 8, PACI_SCHED_PACI, 8);
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    assert_int_equal(plan.stage[7].n_layers, 0);
    assert_int_equal(plan.stage[7].first_layer, 24);
    assert_true(plan.stage[7].has_head);
    int split[8] = {0, 4, 4, 4, 4, 4, 4, 0}; /* an embedding-only first stage, by hand */
    cfg.split = split;
    assert_true(plan_build(&cfg, &plan));
    assert_int_equal(plan.stage[0].n_layers, 0);
    assert_true(plan.stage[0].has_embed);
    assert_int_equal(plan.stage[1].first_layer, 0);
    assert_true(plan.stage[0].fwd_flops == 0);
}

/* The automatic split is no slower than the even split, and the head stage gets fewer layers. */
static void test_partition_balances_head(void **state)
{
    (void)state;
    Config cfg = gpt2(24, 1024, 16, 8, PACI_SCHED_PACI, 8);
    Plan plan;
    plan_layout(&cfg, &plan);
    double slowest = 0;
    for (int s = 0; s < 8; s++)
        if (plan.stage[s].fwd_flops > slowest)
            slowest = plan.stage[s].fwd_flops;
    int even[8] = {3, 3, 3, 3, 3, 3, 3, 3};
    cfg.split = even;
    Plan even_plan;
    plan_layout(&cfg, &even_plan);
    double even_slowest = 0;
    for (int s = 0; s < 8; s++)
        if (even_plan.stage[s].fwd_flops > even_slowest)
            even_slowest = even_plan.stage[s].fwd_flops;
    assert_true(slowest < even_slowest);
    assert_true(plan.stage[7].n_layers < 3);
}

static void test_manual_split_respected(void **state)
{
    (void)state;
    Config cfg = gpt2(10, 256, 4, 3, PACI_SCHED_PACI, 4);
    int split[3] = {5, 1, 4};
    cfg.split = split;
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    assert_int_equal(plan.stage[0].n_layers, 5);
    assert_int_equal(plan.stage[1].first_layer, 5);
    assert_int_equal(plan.stage[1].n_layers, 1);
    assert_int_equal(plan.stage[2].first_layer, 6);
    assert_int_equal(plan.stage[2].n_layers, 4);
}

/* Slots and memory by schedule: PACI and 1F1B agree, GPipe keeps K, PipeDream adds stash. */
static void test_memory_by_schedule(void **state)
{
    (void)state;
    Plan paci, flush, gpipe, pipedream;
    Config cfg = gpt2(24, 1024, 16, 8, PACI_SCHED_PACI, 8);
    plan_layout(&cfg, &paci);
    cfg.schedule = PACI_SCHED_ONEF1B;
    plan_layout(&cfg, &flush);
    cfg.schedule = PACI_SCHED_GPIPE;
    plan_layout(&cfg, &gpipe);
    cfg.schedule = PACI_SCHED_PIPEDREAM;
    plan_layout(&cfg, &pipedream);
    for (int s = 0; s < 8; s++) {
        assert_int_equal(paci.stage[s].slots, 8 - s);
        assert_int_equal(paci.stage[s].mem_total, flush.stage[s].mem_total);
        assert_int_equal(gpipe.stage[s].slots, 8);
        assert_int_equal(pipedream.stage[s].stash, s < 7 ? 1 : 0);
        assert_true(pipedream.stage[s].mem_total >= paci.stage[s].mem_total);
        /* bf16: 4 bytes of weights and 2 of their bf16 copy, 4 of gradients, 8 of moments
         * per parameter (the runtime keeps fp32 masters; products read the copy) */
        assert_int_equal(paci.stage[s].mem_weights, paci.stage[s].params * 6);
        assert_int_equal(pipedream.stage[s].mem_stash, pipedream.stage[s].params * 6 * pipedream.stage[s].stash);
        assert_int_equal(paci.stage[s].mem_optim, paci.stage[s].params * 8);
        assert_int_equal(paci.stage[s].mem_acts, paci.stage[s].act_bytes * paci.stage[s].slots);
    }
}

/* Over the device's memory: an error naming the stage and the excess, and false. */
static void test_memory_error(void **state)
{
    (void)state;
    Config cfg = gpt2(24, 1024, 16, 2, PACI_SCHED_GPIPE, 16);
    cfg.device_memory = 20e9;
    char *text = NULL;
    size_t len = 0;
    FILE *diag = open_memstream(&text, &len);
    diag_set_stream(diag);
    Plan plan;
    bool ok = plan_build(&cfg, &plan);
    diag_set_stream(stderr);
    fclose(diag);
    assert_false(ok);
    assert_non_null(strstr(text, "stage 0 needs"));
    assert_non_null(strstr(text, "more than the device's 18.63 GiB"));
    long over = plan.stage[0].mem_total - 20000000000L;
    char *bytes = xasprintf("%ld bytes", over);
    assert_non_null(strstr(text, bytes));
    free(bytes);
    free(text);
    diag_reset();
    cfg.device_memory = 1e13;
    assert_true(plan_build(&cfg, &plan));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_small_parameters),
        cmocka_unit_test(test_partition_without_hardware),
        cmocka_unit_test(test_partition_covers_layers),
        cmocka_unit_test(test_partition_balances_head),
        cmocka_unit_test(test_partition_is_optimal_within_memory),
        cmocka_unit_test(test_head_only_stage),
        cmocka_unit_test(test_manual_split_respected),
        cmocka_unit_test(test_memory_by_schedule),
        cmocka_unit_test(test_memory_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
