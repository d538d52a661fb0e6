/* The GPU cost model (compiler/costs.c) against hand computations for a tiny model: a
 * product's FLOPs are 2 M N K and its bytes its operands and result once; causal attention
 * is 4 B NH T^2 HS / 2 FLOPs forward; each op's time is its roofline. Its op numbering must
 * be the generated code's (the profile's), and every kernel the op lists use needs a cost. */
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
#include "../../runtime/pacirt.h"

static const Source test_source = {.path = "test.paci", .text = "", .len = 0};

/* B 2, T 4, C 8, NH 2 (HS 4), V 16; one stage of one layer; a slow memory so that the
 * small ops are memory-bound rather than launch-bound. */
static Config tiny_config(Precision precision, AttentionImpl attention, int stages, int layers)
{
    Config cfg = {0};
    cfg.src = &test_source;
    cfg.layers = layers;
    cfg.width = 8;
    cfg.heads = 2;
    cfg.context = 4;
    cfg.vocab = 16;
    cfg.stages = stages;
    cfg.schedule = PACI_SCHED_ONEF1B;
    cfg.window = 2;
    cfg.micro = 2;
    cfg.global_batch = 4;
    cfg.steps = 4;
    cfg.precision = precision;
    cfg.attention = attention;
    cfg.beta1 = 0.9;
    cfg.beta2 = 0.95;
    cfg.device_flops = 1e9;
    cfg.memory_bandwidth = 1e7;
    cfg.link_bandwidth = 1e9;
    cfg.device_memory = 1e15;
    return cfg;
}

static const OpCost *find_op(const StageCosts *sc, const char *section, const char *what_prefix)
{
    for (int i = 0; i < sc->n_ops; i++)
        if (strcmp(sc->ops[i].section, section) == 0 && strncmp(sc->ops[i].what, what_prefix, strlen(what_prefix)) == 0)
            return &sc->ops[i];
    fail_msg("no op '%s...' in %s", what_prefix, section);
    return NULL;
}

/* The GPU costs of plan, lowered as pacic lowers it. */
static void costs_of(const Config *cfg, const Plan *plan, GpuCosts *gc)
{
    Lowered low;
    lower_build(cfg, plan, &low);
    gpu_costs_build(cfg, &low, gc);
    lower_free(&low);
}

static void assert_close(double got, double want, const char *what)
{
    if (fabs(got - want) > 1e-9 * fabs(want))
        fail_msg("%s: %.10g, by hand %.10g", what, got, want);
}

static void test_figures_by_hand(void **state)
{
    (void)state;
    Config cfg = tiny_config(PREC_FP32, ATTN_FLASH, 1, 1);
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    GpuCosts gc;
    costs_of(&cfg, &plan, &gc);
    assert_int_equal(gc.unknown, 0);
    const StageCosts *sc = &gc.stage[0];
    double B = 2, T = 4, C = 8, NH = 2, HS = 4, V = 16, BT = B * T;
    double memory = 1e7 * 0.90; /* memory_bandwidth x the stated efficiency */

    /* qkv = ln1 qkvw^T + qkvb: M = BT, N = 3C, K = C, fp32 operands, the bias read once */
    const OpCost *qkv = find_op(sc, "block_forward", "qkv = ln1");
    assert_string_equal(qkv->name, "gemm");
    assert_close(qkv->flops, 2 * BT * 3 * C * C, "qkv FLOPs");
    double qkv_bytes = 4 * (BT * C + 3 * C * C) + 4 * BT * 3 * C + 4 * 3 * C;
    assert_close(qkv->bytes, qkv_bytes, "qkv bytes");
    assert_int_equal(qkv->bound, BOUND_MEMORY);
    assert_close(qkv->seconds, qkv_bytes / memory, "qkv seconds");

    /* d fcprojw += dres^T gelu accumulates: its result is read and written */
    const OpCost *dw = find_op(sc, "block_backward", "d fcprojw");
    assert_close(dw->flops, 2 * C * 4 * C * BT, "d fcprojw FLOPs");
    assert_close(dw->bytes, 4 * (C * BT + BT * 4 * C) + 2 * 4 * C * 4 * C, "d fcprojw bytes");

    /* the LM head: V columns */
    const OpCost *logits = find_op(sc, "head_forward", "logits");
    assert_close(logits->flops, 2 * BT * V * C, "logits FLOPs");

    /* causal attention, forward: 4 B NH T^2 HS / 2; backward split 3 : 4 of the forward's 2 */
    const OpCost *att = find_op(sc, "block_forward", "atty = causal attention");
    assert_close(att->flops, 4 * B * NH * T * T * HS / 2, "attention forward FLOPs");
    assert_close(att->bytes, B * NH * T * (12 * HS + 4 * HS + 4), "attention forward bytes");
    const OpCost *query = find_op(sc, "block_backward", "d q, and delta");
    const OpCost *key = find_op(sc, "block_backward", "d k, d v");
    assert_close(query->flops + key->flops, 3.5 * att->flops, "attention backward FLOPs");

    /* a row kernel: LayerNorm reads and writes BT x C floats, its statistics and parameters */
    const OpCost *ln = find_op(sc, "block_forward", "ln1 = LayerNorm");
    assert_close(ln->bytes, 8 * BT * C + 8 * BT + 8 * C, "LayerNorm bytes");
    assert_close(ln->seconds, ln->bytes / memory, "LayerNorm seconds");

    /* AdamW: 32 bytes per parameter, one roofline per tensor (each over the launch floor) */
    const OpCost *adamw = find_op(sc, "adamw", "AdamW");
    assert_int_equal((long)adamw->calls_per_step, 2 + 12 + 3); /* wte wpe, a layer, lnf w b, the LM head */
    assert_close(sc->step, 32 * (double)plan.total_params / memory, "AdamW seconds per step");

    /* per-step calls: block ops once per layer and micro-batch */
    assert_close(qkv->calls_per_step, cfg.window * cfg.layers, "qkv calls per step");

    /* the stage's forward is the sum of its forward ops */
    double fwd = 0;
    for (int i = 0; i < sc->n_ops; i++)
        if (sc->ops[i].forward)
            fwd += sc->ops[i].seconds * sc->ops[i].launches;
    assert_close(sc->fwd, fwd, "stage forward");

    /* MFU: the plan's FLOPs per step over the simulated step time and the device's rate */
    paci_table *t = schedule_build(&cfg, &plan);
    GpuPrediction p = gpu_costs_predict(&cfg, &plan, t, &gc, 4);
    double model = (plan.stage[0].fwd_flops + plan.stage[0].bwd_flops) * cfg.window;
    assert_close(p.model_flops, model, "model FLOPs per step");
    assert_close(p.mfu, model / (p.step_time * 1e9), "MFU");
    /* one stage: a step is its forwards, backwards and AdamW one after another */
    assert_close(p.step_time, cfg.window * (sc->fwd + sc->bwd) + sc->step, "step time");
    schedule_free(t);
    gpu_costs_free(&gc);
}

/* bf16: products read bf16 copies (2 bytes an operand element); the GELU gradient runs in
 * the product's epilogue, so its own kernel costs nothing. */
static void test_bf16(void **state)
{
    (void)state;
    Config cfg = tiny_config(PREC_BF16, ATTN_FLASH, 1, 1);
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    GpuCosts gc;
    costs_of(&cfg, &plan, &gc);
    const StageCosts *sc = &gc.stage[0];
    double BT = 8, C = 8;
    const OpCost *fc = find_op(sc, "block_forward", "fc = ln2");
    assert_close(fc->bytes, 2 * (BT * C + 4 * C * C) + 4 * BT * 4 * C + 4 * 4 * C, "bf16 fc bytes");
    const OpCost *gelu = find_op(sc, "block_backward", "d fc = d gelu");
    assert_int_equal(gelu->bound, BOUND_FOLDED);
    assert_true(gelu->seconds == 0 && gelu->calls_per_step == 0);
    const OpCost *ln = find_op(sc, "block_forward", "ln1 = LayerNorm");
    assert_close(ln->bytes, BT * C * (4 + 2) + 8 * BT + 8 * C, "LayerNorm writing bf16");
    gpu_costs_free(&gc);
}

/* An op the GPU runs in another form is priced as that form and named by it (the profile's
 * name stays in table_name); an op an earlier GPU op did costs nothing. */
static void test_gpu_forms(void **state)
{
    (void)state;
    Config cfg = tiny_config(PREC_BF16, ATTN_FLASH, 1, 1);
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    GpuCosts gc;
    costs_of(&cfg, &plan, &gc);
    const StageCosts *sc = &gc.stage[0];
    double BT = 8, C = 8;
    const OpCost *att = find_op(sc, "block_forward", "atty = causal attention");
    assert_string_equal(att->name, "flash_attention_forward");
    assert_string_equal(att->table_name, "attention_forward");
    assert_true(att->attention);
    const OpCost *xent = find_op(sc, "head_forward", "per-token losses");
    assert_string_equal(xent->name, "classifier_fused");
    const OpCost *dlogits = find_op(sc, "head_backward", "dlogits, in place");
    assert_int_equal(dlogits->bound, BOUND_FOLDED);
    assert_true(dlogits->seconds == 0);
    // the bias kernel after the fused GELU product writes the bf16 copy the next product reads
    const OpCost *dfcb = find_op(sc, "block_backward", "d fcb");
    assert_string_equal(dfcb->name, "bias_backward_tiles");
    assert_close(dfcb->bytes, (4 + 2) * BT * 4 * C + 8 * 4 * C, "d fcb bytes with its bf16 copy");
    gpu_costs_free(&gc);
}

/* Zero-bubble under bf16 (zb-h1): a W's bias kernels, which read the gradients B kept in the slot,
 * write their bf16 copies again for W's products (the scratch holds another micro-batch's), and
 * B's keep of d fc writes its copy for B's next product (the fused GELU product wrote none). */
static void test_zero_bubble_bf16(void **state)
{
    (void)state;
    Config cfg = tiny_config(PREC_BF16, ATTN_FLASH, 1, 1);
    cfg.schedule = PACI_SCHED_ZBH1;
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    GpuCosts gc;
    costs_of(&cfg, &plan, &gc);
    assert_int_equal(gc.unknown, 0);
    const StageCosts *sc = &gc.stage[0];
    double BT = 8, C = 8;
    const OpCost *w = find_op(sc, "block_backward_w", "d fcprojb");
    assert_string_equal(w->name, "bias_backward_tiles");
    assert_close(w->bytes, (4 + 2) * BT * C + 8 * C, "W's d fcprojb bytes with its bf16 copy");
    const OpCost *qkvb = find_op(sc, "block_backward_w", "d qkvb");
    assert_close(qkvb->bytes, (4 + 2) * BT * 3 * C + 8 * 3 * C, "W's d qkvb bytes with its bf16 copy");
    const OpCost *keep = find_op(sc, "block_backward_b", "keep d fc for W");
    assert_string_equal(keep->name, "keep_gradient");
    assert_close(keep->bytes, (8 + 2) * BT * 4 * C, "B's keep of d fc with its bf16 copy");
    gpu_costs_free(&gc);
}

/* The optimizer step by hand for one layer at C = 8: Muon's four weight matrices (qkv as three
 * 8 x 8, fc 32 x 8, its projection 8 x 32, the attention projection 8 x 8) get momentum,
 * normalisation, 5 Newton-Schulz steps of 4 m^2 M + 2 m^3 FLOPs (m the shorter side) and the
 * update; every other tensor AdamW's 12 FLOPs a parameter. LARS costs less than AdamW. */
static void test_optimizer_steps(void **state)
{
    (void)state;
    Config cfg = tiny_config(PREC_FP32, ATTN_FLASH, 1, 1);
    cfg.optimizer = PR_OPT_MUON;
    cfg.ns_steps = 5;
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    GpuCosts gc;
    costs_of(&cfg, &plan, &gc);
    const OpCost *step = find_op(&gc.stage[0], "adamw", "Muon");
    double C = 8, params = (double)plan.stage[0].params;
    double matrices[][3] = {{3, 8, 8}, {1, 8, 8}, {1, 8, 32}, {1, 8, 32}}; /* count, m, M */
    double muon_params = 0, want = 0;
    for (int i = 0; i < 4; i++) {
        double count = matrices[i][0], m = matrices[i][1], M = matrices[i][2];
        muon_params += count * m * M;
        want += count * (2 * m * M + 5 * (4 * m * m * M + 2 * m * m * m));
    }
    assert_close(muon_params, 12 * C * C, "Muon's parameters");
    want += 6 * muon_params + 12 * (params - muon_params);
    assert_close(step->flops * step->launches, want, "Muon step FLOPs");
    double muon_seconds = gc.stage[0].step;
    gpu_costs_free(&gc);
    cfg.optimizer = PR_OPT_ADAMW;
    costs_of(&cfg, &plan, &gc);
    double adamw_seconds = gc.stage[0].step;
    gpu_costs_free(&gc);
    cfg.optimizer = PR_OPT_LARS;
    costs_of(&cfg, &plan, &gc);
    assert_true(gc.stage[0].step < adamw_seconds && adamw_seconds < muon_seconds);
    gpu_costs_free(&gc);
}

/* The numbering is the generated code's: pr_stage_S_ops lists {section, name, comment} in
 * op order, which run --profile-out's op lines follow. */
static void test_numbering_is_the_generated_codes(void **state)
{
    (void)state;
    for (int variant = 0; variant < 16; variant++) { /* bf16, matmul attention, zero-bubble, stored attention */
        AttentionImpl attention = variant & 2 ? ATTN_MATMUL : variant & 8 ? ATTN_STORED : ATTN_FLASH;
        Config cfg = tiny_config(variant & 1 ? PREC_BF16 : PREC_FP32, attention, 2, 3);
        if (variant & 4)
            cfg.schedule = PACI_SCHED_ZBH1;
        Plan plan;
        assert_true(plan_build(&cfg, &plan));
        GpuCosts gc;
        costs_of(&cfg, &plan, &gc);
        assert_int_equal(gc.unknown, 0);
        Lowered low;
        lower_build(&cfg, &plan, &low);
        for (int s = 0; s < plan.stages; s++) {
            StrBuf sb = {0};
            emit_c_stage(&sb, &cfg, &low, s);
            char *table = strstr(sb.data, "pr_op_info pr_stage_");
            assert_non_null(table);
            table = strchr(table, '\n') + 1;
            const StageCosts *sc = &gc.stage[s];
            for (int i = 0; i < sc->n_ops; i++) {
                char want[256];
                snprintf(want, sizeof want, "{\"%s\", \"%s\", ", sc->ops[i].section, sc->ops[i].table_name);
                char *line = table;
                while (*line == ' ')
                    line++;
                if (strncmp(line, want, strlen(want)) != 0)
                    fail_msg("variant %d stage %d op %d: the model has %s, the generated table %.60s", variant, s, i,
                             want, line);
                assert_int_equal(sc->ops[i].index, i);
                table = strchr(table, '\n') + 1;
            }
            while (*table == ' ')
                table++;
            assert_true(strncmp(table, "};", 2) == 0); /* no op the model lacks */
            sb_free(&sb);
        }
        lower_free(&low);
        gpu_costs_free(&gc);
    }
}

/* Every kernel description has a cost entry, so a new kernel cannot go unpriced. */
static void test_every_kernel_has_a_cost(void **state)
{
    (void)state;
    for (int i = 0; i < kernel_desc_count; i++)
        if (!gpu_cost_has_kernel(kernel_descs[i].name))
            fail_msg("kernel %s has no cost entry in compiler/costs.c", kernel_descs[i].name);
}

/* --emit costs joins a profile's measured mean to the op with the same stage and number. */
static void test_emit_with_profile(void **state)
{
    (void)state;
    Config cfg = tiny_config(PREC_FP32, ATTN_FLASH, 1, 1);
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    GpuCosts gc;
    costs_of(&cfg, &plan, &gc);
    ProfileOp measured = {.stage = 0, .index = 2, .section = "block_forward", .name = "gemm", .what = "qkv",
                          .calls = 4, .total = 0.5, .mean = 0.125};
    OpProfile prof = {.version = 2, .ops = &measured, .n_ops = 1};
    GpuPrediction p = {0};
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    gpu_costs_emit(out, &cfg, &gc, &p, &prof);
    fclose(out);
    assert_non_null(strstr(text, "\nop 0 2 block_forward gemm calls 2 flops 3072 bytes 1888 predicted "));
    assert_non_null(strstr(text, " measured 0.125 \"qkv = ln1 qkvw^T + qkvb\"\n"));
    assert_non_null(strstr(text, "\nop 0 1 block_forward layernorm_forward calls 2 "));
    assert_non_null(strstr(text, "memory measured - \"ln1 = LayerNorm(x)\"\n"));
    free(text);
    gpu_costs_free(&gc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_figures_by_hand),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_gpu_forms),
        cmocka_unit_test(test_zero_bubble_bf16),
        cmocka_unit_test(test_optimizer_steps),
        cmocka_unit_test(test_numbering_is_the_generated_codes),
        cmocka_unit_test(test_every_kernel_has_a_cost),
        cmocka_unit_test(test_emit_with_profile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
