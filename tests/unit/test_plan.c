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
            int next = 0; /* in units, four a layer: att piece, proj piece, fc piece, GELU piece */
            for (int s = 0; s < p; s++) {
                const StagePlan *sp = &plan.stage[s];
                int units = sp->lead_proj + 2 * sp->lead_mlp + sp->lead_gelu + 4 * sp->n_layers + 2 * sp->tail_attn +
                            sp->tail_atty + sp->tail_fc;
                if (units > 0)
                    assert_int_equal(4 * sp->first_layer - sp->lead_proj - 2 * sp->lead_mlp - sp->lead_gelu, next);
                assert_false(sp->lead_mlp && sp->lead_gelu);
                assert_true(!sp->lead_proj || sp->lead_mlp);
                assert_true(!sp->tail_fc || sp->tail_attn);
                assert_false(sp->tail_attn && sp->tail_atty);
                bool end = p > 1 && (s == 0 || s == p - 1);
                assert_true(units >= (end ? 0 : 1));
                next += units;
                assert_int_equal(sp->has_embed, s == 0);
                assert_int_equal(sp->has_head, s == p - 1);
            }
            assert_int_equal(next, 4 * layers);
        }
}

/* The slowest stage's seconds per optimizer step as --explain prices the plan (the kernel
 * cost model over the lowered program, costs.c): K forwards and backwards and one optimizer
 * step. */
static double bottleneck(const Config *cfg, const Plan *plan)
{
    Lowered low;
    GpuCosts gc;
    CostModel cm;
    lower_build(cfg, plan, &low);
    gpu_costs_build(cfg, &low, &gc);
    cost_model_from_gpu_costs(cfg, plan, &gc, &cm);
    gpu_costs_free(&gc);
    lower_free(&low);
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

/* Where a boundary may fall at a grain, in units (four a layer: 0 whole layers, 1 also
 * between the halves, 2 also after the fc product, 3 after attention instead, 4 after both),
 * and whether a stage may hold [at, at + n): one that starts inside a layer holds the rest of it. */
static bool allowed(int grain, int u)
{
    return u % 4 == 0 || (u % 4 == 2 && grain >= 1) || (u % 4 == 3 && (grain == 2 || grain == 4)) ||
           (u % 4 == 1 && grain >= 3);
}

static bool holdable(int at, int n)
{
    return n == 0 || at % 4 == 0 || n >= 4 - at % 4;
}

/* The best bottleneck over every split that fits the memory, by enumeration (INFINITY if
 * none fits): stage 0 and the last may hold no layer, the others at least one unit; split[]
 * counts units from `at`, boundaries where the grain allows them. */
static double best_by_enumeration(Config *cfg, int *split, int s, int at, int grain)
{
    int p = cfg->stages, total = 4 * cfg->layers, left = total - at;
    if (s == p - 1) {
        if (left < (p > 1 ? 0 : 1) || (left > 0 && !holdable(at, left)))
            return INFINITY;
        split[s] = left;
        cfg->split_units = split;
        Plan plan;
        plan_layout(cfg, &plan);
        cfg->split_units = NULL;
        return fits(cfg, &plan) ? bottleneck(cfg, &plan) : INFINITY;
    }
    double best = INFINITY;
    for (int n = s == 0 ? 0 : 1; n <= left; n++) {
        if (!allowed(grain, at + n) || (n > 0 && !holdable(at, n)))
            continue;
        split[s] = n;
        double b = best_by_enumeration(cfg, split, s + 1, at + n, grain);
        best = b < best ? b : best;
    }
    return best;
}

/* What the automatic split must reach: the best over whole layers, or over half layers when
 * that is at least 1% faster, or with cuts after the fc product too when that is at least 1%
 * faster again, or with cuts after attention instead, or after both, each when that is at least 1%
 * faster than the best before it. */
static double best_automatic(Config *cfg)
{
    int split[PACI_MAX_STAGES];
    double best = best_by_enumeration(cfg, split, 0, 0, 0);
    for (int grain = 1; grain <= 4; grain++) {
        double finer = best_by_enumeration(cfg, split, 0, 0, grain);
        best = finer < best * 0.99 ? finer : best;
    }
    return best;
}

/* The tests' fixed CPU (tests/cpu-calibration.txt's rates), two cores. */
static CpuRates test_cpu(void)
{
    CpuRates r = {.name = "the tests' fixed CPU", .cores = 2, .memory = 2.528e10, .n_gemm = 6,
                  .gemm_size = {16, 32, 64, 128, 256, 512},
                  .gemm_flops = {1.232e10, 3.046e10, 5.147e10, 5.833e10, 6.781e10, 6.485e10},
                  .vector_flops = 1.174e10, .memory_bandwidth = 2.039e10, .latency = 7.423e-6,
                  .bandwidth = 1.451e10, .measured = true};
    return r;
}

/* The machines the split is checked on: 0 the H100 of gpt2() (products compute-bound, the
 * element-wise kernels memory-bound), 1 a GPU whose memory is slow for its FLOP/s (every
 * kernel but the products memory-bound, so the layer's non-product share weighs more), 2 the
 * tests' CPU (sgemm rates by size, its own kernels). */
enum { MACHINES = 3 };
static void on_machine(Config *cfg, int machine, CpuRates *cpu)
{
    if (machine == 1) {
        cfg->device_flops = 2e15;
        cfg->memory_bandwidth = 1e12;
    } else if (machine == 2) {
        *cpu = test_cpu();
        cfg->machine = MACHINE_CPU;
        cfg->cpu = cpu;
        cfg->device_flops = 3e10; /* machine_cpu_config's nominal rates, which the CPU model does not read */
        cfg->memory_bandwidth = 1e10;
    }
}

/* The automatic split is the fastest that fits, as --explain prices it (the kernel cost
 * model of the file's machine): its bottleneck equals the enumerated optimum, with the memory
 * unbounded and with the memory just below what that split needs (then the partitioner must
 * find another); heads of every weight relative to a layer (vocabulary 256 to 50257), steps
 * of so few tokens that the optimizer step outweighs the products, and three machines. Some
 * of these cases split inside a layer, some after its fc product. */
static void test_partition_is_optimal_within_memory(void **state)
{
    (void)state;
    int vocabs[] = {256, 8192, 50257};
    int constrained = 0, halved = 0, fc_cut = 0, att_cut = 0;
    for (int machine = 0; machine < MACHINES; machine++)
    for (int v = 0; v < 3; v++)
        for (int p = 1; p <= (machine == 0 ? 5 : 3); p++) /* the other machines: fewer, for time */
            for (int kind = 0; kind < 3; kind++) {
                Config cfg = gpt2(4, 512, 8, p, kind == 1 ? PACI_SCHED_GPIPE : PACI_SCHED_PACI, 4);
                CpuRates cpu;
                on_machine(&cfg, machine, &cpu);
                cfg.vocab = vocabs[v];
                if (kind == 2) { /* few tokens a step: AdamW's pass over the weights dominates */
                    cfg.micro = 1;
                    cfg.context = 16;
                    cfg.window = 1;
                    cfg.global_batch = 1;
                }
                cfg.device_memory = 1e15;
                Plan plan;
                plan_layout(&cfg, &plan);
                double best = best_automatic(&cfg);
                assert_true(fabs(bottleneck(&cfg, &plan) - best) <= 1e-9 * best);
                for (int s = 0; s < p; s++) {
                    halved += plan.stage[s].lead_mlp || plan.stage[s].tail_attn;
                    fc_cut += plan.stage[s].tail_fc;
                    att_cut += plan.stage[s].tail_atty;
                }
                /* a device just too small for the unconstrained choice */
                cfg.device_memory = (double)plan_peak_memory(&plan, NULL) - 1;
                best = best_automatic(&cfg);
                if (best == INFINITY)
                    continue;
                constrained++;
                plan_layout(&cfg, &plan);
                assert_true(fits(&cfg, &plan));
                assert_true(fabs(bottleneck(&cfg, &plan) - best) <= 1e-9 * best);
            }
    assert_true(constrained >= 10); /* the memory bound took part */
    assert_true(halved >= 5);       /* and so did boundaries inside layers */
    assert_true(fc_cut >= 2);       /* some of them after the fc product */
    assert_true(att_cut >= 1);      /* and after attention */
}

/* The partitioner prices a stage as the sum of its parts' kernel-model prices (plan.c); that
 * sum is the lowered stage's price --explain prints, on stages that cut inside layers and
 * divide the head, with recompute full, on a GPU and the CPU. */
static void test_stage_price_is_sum_of_parts(void **state)
{
    (void)state;
    for (int machine = 0; machine < MACHINES; machine++)
        for (int recompute = 0; recompute < 2; recompute++) {
            Config cfg = gpt2(5, 256, 4, 4, PACI_SCHED_PACI, 4);
            CpuRates cpu;
            on_machine(&cfg, machine, &cpu);
            cfg.vocab = 4096;
            cfg.vocab_split = 1024;
            cfg.recompute = recompute ? RECOMPUTE_FULL : RECOMPUTE_NONE;
            int split[4] = {7, 6, 7, 0}; /* in units: 0-1f+emb, 1g-2t, 2p-4+hA, headB */
            cfg.split_units = split;
            Plan plan;
            plan_layout(&cfg, &plan);
            Lowered low;
            GpuCosts gc;
            lower_build(&cfg, &plan, &low);
            gpu_costs_build(&cfg, &low, &gc);
            for (int s = 0; s < 4; s++) {
                const StagePlan *sp = &plan.stage[s];
                StagePlan parts[5] = {{.has_embed = sp->has_embed},
                                      {.lead_mlp = sp->lead_mlp, .lead_gelu = sp->lead_gelu,
                                       .lead_proj = sp->lead_proj, .first_layer = sp->first_layer},
                                      {.n_layers = sp->n_layers, .first_layer = sp->first_layer},
                                      {.tail_attn = sp->tail_attn, .tail_fc = sp->tail_fc, .tail_atty = sp->tail_atty,
                                       .first_layer = sp->first_layer},
                                      {.has_lnf = sp->has_lnf, .has_head = sp->has_head,
                                       .vocab_begin = sp->vocab_begin, .vocab_end = sp->vocab_end}};
                double fwd = 0, bwd = 0, step = 0;
                for (int i = 0; i < 5; i++) {
                    double f, b, st;
                    parts[i].recompute = sp->recompute;
                    stage_kernel_costs(&cfg, &low.ops, &parts[i], &f, &b, &st);
                    fwd += f, bwd += b, step += st;
                }
                double want_bwd = gc.stage[s].bwd + (sp->recompute ? gc.stage[s].fwd : 0);
                assert_true(fabs(fwd - gc.stage[s].fwd) <= 1e-12 * gc.stage[s].fwd);
                assert_true(fabs(bwd - want_bwd) <= 1e-12 * want_bwd);
                assert_true(fabs(step - gc.stage[s].step) <= 1e-12 * gc.stage[s].step);
            }
            gpu_costs_free(&gc);
            lower_free(&low);
        }
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
    int split[8] = {0, 16, 16, 16, 16, 16, 16, 0}; /* an embedding-only first stage, by hand (in units) */
    cfg.split_units = split;
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
    int even[8] = {12, 12, 12, 12, 12, 12, 12, 12}; /* 3 layers each, in units */
    cfg.split_units = even;
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
    int split[3] = {20, 4, 16}; /* [5, 1, 4] in units */
    cfg.split_units = split;
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    assert_int_equal(plan.stage[0].n_layers, 5);
    assert_int_equal(plan.stage[1].first_layer, 5);
    assert_int_equal(plan.stage[1].n_layers, 1);
    assert_int_equal(plan.stage[2].first_layer, 6);
    assert_int_equal(plan.stage[2].n_layers, 4);
}

/* Splits inside layers, [1.5, 0.5, 2, 1]: each stage holds the halves it was given (flags,
 * labels), the parameters add up to the model's, and every slice of every checkpoint tensor
 * belongs to exactly one stage's tensor table, at the layer offsets of llm.c's file. */
static void test_half_layer_split(void **state)
{
    (void)state;
    Config cfg = gpt2(5, 64, 4, 4, PACI_SCHED_ONEF1B, 4);
    cfg.vocab = 128;
    Plan whole, plan;
    plan_layout(&cfg, &whole);
    int split[4] = {6, 2, 8, 4}; /* in units */
    cfg.split_units = split;
    assert_true(plan_build(&cfg, &plan));
    static const struct {
        int first, n;
        bool lead, tail;
        const char *label;
    } want[4] = {{0, 1, false, true, "0-1a+emb"}, {2, 0, true, false, "1b"}, {2, 2, false, false, "2-3"},
                 {4, 1, false, false, "4-4+head"}};
    long params = 0;
    for (int s = 0; s < 4; s++) {
        const StagePlan *sp = &plan.stage[s];
        assert_int_equal(sp->first_layer, want[s].first);
        assert_int_equal(sp->n_layers, want[s].n);
        assert_int_equal(sp->lead_mlp, want[s].lead);
        assert_int_equal(sp->tail_attn, want[s].tail);
        char label[32];
        stage_layers_label(sp, label, sizeof label);
        assert_string_equal(label, want[s].label);
        params += sp->params;
    }
    assert_int_equal(params, whole.total_params);
    assert_int_equal(plan.total_params, whole.total_params);
    /* a 2.5-layer stage: layer 1's MLP half, layer 2, layer 3's attention half */
    int odd[4] = {6, 8, 2, 4};
    cfg.split_units = odd;
    Plan other;
    assert_true(plan_build(&cfg, &other));
    char label[32];
    stage_layers_label(&other.stage[1], label, sizeof label);
    assert_string_equal(label, "1b-3a");
    stage_layers_label(&other.stage[2], label, sizeof label);
    assert_string_equal(label, "3b");
    /* cuts after the fc product, [1.75, 1.75, 0.5, 1]: layer 1 to its fc product, then its
     * GELU piece, layer 2, layer 3's attention half */
    int fc[4] = {7, 7, 2, 4};
    cfg.split_units = fc;
    Plan fc_plan;
    assert_true(plan_build(&cfg, &fc_plan));
    static const char *const fc_labels[4] = {"0-1f+emb", "1g-3a", "3b", "4-4+head"};
    long fc_params = 0;
    for (int s = 0; s < 4; s++) {
        stage_layers_label(&fc_plan.stage[s], label, sizeof label);
        assert_string_equal(label, fc_labels[s]);
        fc_params += fc_plan.stage[s].params;
    }
    assert_true(fc_plan.stage[0].tail_fc && fc_plan.stage[1].lead_gelu && !fc_plan.stage[1].tail_fc);
    assert_int_equal(fc_params, whole.total_params);
    /* the message across the cut: resid2 and the fc output, both ways */
    assert_int_equal(fc_plan.stage[0].msg_bytes, 4 * fc_message_floats(&cfg));
    StageLayout fc_lay;
    stage_layout(&cfg, &fc_plan.stage[1], &fc_lay);
    assert_int_equal(fc_lay.dx_floats, fc_message_floats(&cfg));
    stage_layout(&cfg, &fc_plan.stage[0], &fc_lay);
    assert_int_equal(fc_lay.out_floats, fc_message_floats(&cfg));
    /* cuts after attention, [1.25, 1.25, 1.5, 1]: layer 1 to its attention kernel, then its
     * projection and the rest, layer 2's attention half */
    int att[4] = {5, 5, 6, 4};
    cfg.split_units = att;
    Plan att_plan;
    assert_true(plan_build(&cfg, &att_plan));
    static const char *const att_labels[4] = {"0-1t+emb", "1p-2a", "2b-3", "4-4+head"};
    long att_params = 0;
    for (int s = 0; s < 4; s++) {
        stage_layers_label(&att_plan.stage[s], label, sizeof label);
        assert_string_equal(label, att_labels[s]);
        att_params += att_plan.stage[s].params;
    }
    assert_true(att_plan.stage[0].tail_atty && !att_plan.stage[0].tail_attn);
    assert_true(att_plan.stage[1].lead_proj && att_plan.stage[1].lead_mlp && att_plan.stage[1].tail_attn);
    assert_int_equal(att_params, whole.total_params);
    /* the message across the cut: x and the attention's output, both ways */
    assert_int_equal(att_plan.stage[0].msg_bytes, 4 * atty_message_floats(&cfg));
    stage_layout(&cfg, &att_plan.stage[1], &fc_lay);
    assert_int_equal(fc_lay.dx_floats, atty_message_floats(&cfg));
    stage_layout(&cfg, &att_plan.stage[0], &fc_lay);
    assert_int_equal(fc_lay.out_floats, atty_message_floats(&cfg));

    /* every checkpoint tensor's elements covered once; the checkpoint's tensors are the
     * runtime's enumerators, named here by their strings */
    enum { MAX_TENSORS = 32 };
    const char *names[MAX_TENSORS] = {0};
    long covered[3][MAX_TENSORS] = {{0}}, expected[MAX_TENSORS] = {0};
    for (int pass = 0; pass < 4; pass++) {
        const Plan *pl = pass == 0 ? &whole : pass == 1 ? &plan : pass == 2 ? &fc_plan : &att_plan;
        for (int s = 0; s < pl->stages; s++) {
            StageLayout lay;
            stage_layout(&cfg, &pl->stage[s], &lay);
            TensorInfo *t;
            int n = stage_tensors(&cfg, &pl->stage[s], &lay, &t);
            for (int i = 0; i < n; i++) {
                int k = 0;
                while (names[k] && strcmp(names[k], t[i].ckpt_tensor) != 0)
                    k++;
                assert_true(k < MAX_TENSORS - 1);
                names[k] = t[i].ckpt_tensor;
                /* a checksum of the slices: their sizes, and where they start */
                long sum = t[i].size * 1000003L + t[i].ckpt_offset;
                if (pass == 0)
                    expected[k] += sum;
                else
                    covered[pass - 1][k] += sum;
                /* inside the stage's parameter block */
                assert_true(t[i].offset >= 0 && t[i].offset + t[i].size <= lay.params.total);
            }
            free(t);
        }
    }
    for (int k = 0; names[k]; k++) {
        assert_int_equal(covered[0][k], expected[k]);
        assert_int_equal(covered[1][k], expected[k]);
        assert_int_equal(covered[2][k], expected[k]);
    }
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
        cmocka_unit_test(test_stage_price_is_sum_of_parts),
        cmocka_unit_test(test_head_only_stage),
        cmocka_unit_test(test_manual_split_respected),
        cmocka_unit_test(test_half_layer_split),
        cmocka_unit_test(test_memory_by_schedule),
        cmocka_unit_test(test_memory_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
