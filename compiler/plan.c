/* plan.c: what each stage holds and costs: GPT-2 parameter counts, FLOPs and activation
 * bytes per layer, the stage partition, and memory per stage.
 *
 * Counts, with B sequences of T tokens per micro-batch, width C, NH heads, vocabulary V:
 *  - a block holds 12C^2 + 13C parameters (two LayerNorms 4C, qkv 3C^2+3C, attention
 *    projection C^2+C, MLP 8C^2+5C); the first stage adds the token and position
 *    embeddings V*C + T*C, the last the final LayerNorm 2C and, untied, the LM head V*C;
 *  - forward FLOPs: 2 per matrix parameter per token, plus attention's two T x T products
 *    counted causally (half of 4*B*T*T*C: only keys at or before the query are computed);
 *    embeddings, LayerNorm, GELU and softmax are element-wise and not counted; backward
 *    FLOPs are twice the forward's;
 *  - one activation slot keeps what the backward reads, per layer B*T*(16C + 4 + NH)
 *    elements (ln1 C, qkv 3C, attention output C, residual C, ln2 C, MLP pre- and
 *    post-GELU 4C + 4C, residual C; two LayerNorm means and reciprocal deviations; the
 *    attention rows' log-sum-exp), with `attention matmul` a T x T workspace, plus the
 *    received input B*T*C on every stage but the first (the embedding output on the
 *    first), and on the last the final LayerNorm B*T*(C + 2), the probabilities B*T*V and
 *    the per-token losses B*T;
 *  - bytes: the runtime stores every tensor in 4 bytes under either precision: weights 4,
 *    gradients 4, optimizer state 8 per parameter; under bf16 the GPU adds a 2-byte copy of
 *    each weight, and of the gradients that feed products and are also read in fp32 (in the
 *    scratch the residual, MLP and, flash, qkv gradients; the last stage's dlogits are bf16 in
 *    place of its logits on the GPU);
 *    the activations only products read (ln1 and attention's output with flash attention,
 *    ln2, the GELU output, the final LayerNorm) are kept in bf16, 2 bytes an element, on
 *    either device. PipeDream's stashed versions are copies of the weights (with their bf16
 *    copy).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/pacirt.h"
#include "pacic.h"

typedef struct ModelCounts {
    double layer_params, embed_params, head_params;
    double layer_fwd, embed_fwd, head_fwd;     /* FLOPs per micro-batch */
    double layer_acts, input_acts, head_acts;  /* elements per slot */
    double scratch, head_scratch;              /* elements of the backward's scratch; the last stage's extra */
    int act_bytes, weight_bytes;               /* bytes per element */
} ModelCounts;

static ModelCounts model_counts(const Config *cfg)
{
    double C = cfg->width, T = cfg->context, V = cfg->vocab, B = cfg->micro, NH = cfg->heads;
    double tokens = B * T;
    ModelCounts m;
    m.layer_params = 12 * C * C + 13 * C;
    m.embed_params = V * C + T * C;
    m.head_params = 2 * C + (cfg->tied ? 0 : V * C);
    m.layer_fwd = 2 * 12 * C * C * tokens + 2 * B * T * T * C;
    m.embed_fwd = 0;
    m.head_fwd = 2 * V * C * tokens;
    /* what stage_layout gives a layer: the matmul attention adds its T x T workspace */
    m.layer_acts = tokens * (16 * C + 4 + NH) + (cfg->attention == ATTN_MATMUL ? T * T : 0);
    m.input_acts = tokens * C;
    m.head_acts = tokens * (C + 2) + tokens * (double)vocab_stride(cfg); /* losses: mem_work */
    /* stage_layout's scratch: dres, dln, dqkv, datty, dfc, and the attention's own */
    m.scratch = tokens * 10 * C + (cfg->attention == ATTN_MATMUL ? 2 * T * T : B * NH * T);
    m.head_scratch = 0;
    m.act_bytes = 4;
    m.weight_bytes = 4;
    if (cfg->precision == PREC_BF16) {
        // stage_layout's bf16 copies, counted in floats (two elements a float)
        bool flash = cfg->attention == ATTN_FLASH;
        m.scratch += tokens * (2.5 * C + (flash ? 1.5 * C : 0));
        // ln2 and the GELU output (and ln1 and attention's output with flash attention) per
        // layer, and the final LayerNorm, are kept in bf16: half their floats
        m.layer_acts -= tokens * (2.5 * C + (flash ? C : 0));
        m.head_acts -= tokens * C / 2;
        m.weight_bytes = 6;
    }
    return m;
}

int stage_grad_ranges(const Config *cfg, const StagePlan *sp, GradRange *out)
{
    ModelCounts m = model_counts(cfg);
    int n = 0;
    if (sp->has_head)
        out[n++] = (GradRange){m.head_params, 2 * m.head_fwd};
    for (int l = 0; l < sp->n_layers; l++)
        out[n++] = (GradRange){m.layer_params, 2 * m.layer_fwd};
    if (sp->has_embed)
        out[n++] = (GradRange){m.embed_params, 2 * m.embed_fwd};
    return n;
}

/* The schedule's activation slots and stashed weight copies at every stage. */
static void stage_slots(const Config *cfg, int *slots, int *stash)
{
    long segment = schedule_segment_steps(cfg);
    for (int s = 0; s < cfg->stages; s++) {
        slots[s] = schedule_slots(cfg->schedule, cfg->stages, s, cfg->window, segment);
        stash[s] = schedule_stash(cfg->schedule, cfg->stages, s, cfg->window, segment);
    }
}

/* Fills sp for stage s holding layers [first, first + n) (and the embedding on the first
 * stage, the head on the last): parameters, FLOPs and memory, with the schedule's slots. */
static void stage_fill(const Config *cfg, const ModelCounts *m, int s, int first, int n, int slots, int stash,
                       StagePlan *sp)
{
    int p = cfg->stages;
    memset(sp, 0, sizeof *sp);
    sp->first_layer = first;
    sp->n_layers = n;
    sp->has_embed = s == 0;
    sp->has_head = s == p - 1;
    double params = n * m->layer_params + (sp->has_embed ? m->embed_params : 0) +
                    (sp->has_head ? m->head_params : 0);
    sp->params = (long)params;
    sp->fwd_flops = n * m->layer_fwd + (sp->has_embed ? m->embed_fwd : 0) + (sp->has_head ? m->head_fwd : 0);
    sp->bwd_flops = 2 * sp->fwd_flops;
    sp->msg_bytes = (long)(m->input_acts * m->act_bytes);
    double acts = n * m->layer_acts + m->input_acts + (sp->has_head ? m->head_acts : 0);
    sp->act_bytes = (long)(acts * m->act_bytes);
    sp->slots = slots;
    sp->stash = stash;
    sp->mem_weights = sp->params * m->weight_bytes;
    // accumulate pairwise: the tree's buffers beside the stage's gradients (runtime/pacirt.h)
    sp->mem_grads = sp->params * 4 *
                    (1 + (cfg->accumulate == ACCUMULATE_PAIRWISE ? pr_pairwise_buffers(cfg->window) : 0));
    sp->mem_optim = sp->params * 8;
    // recompute full: a slot keeps the stage's input only (the first stage's tokens are in
    // mem_work), and one full slot is the workspace every forward and backward runs in. A
    // stage with one slot keeps it whole: recomputing there would save nothing and cost a
    // forward (runtime/executor.c decides alike).
    sp->keep_bytes = sp->has_embed ? 0 : (long)(m->input_acts * 4);
    sp->recompute = cfg->recompute == RECOMPUTE_FULL && slots > 1;
    sp->mem_acts = sp->recompute ? sp->keep_bytes * sp->slots + sp->act_bytes : sp->act_bytes * sp->slots;
    sp->mem_stash = sp->params * m->weight_bytes * (long)sp->stash;
    sp->scratch_floats = (long)(m->scratch + (sp->has_head ? m->head_scratch : 0));
    // what runtime/executor.c allocates beside the blocks: two B T C buffers, and per slot
    // int32 tokens and targets and float losses per token
    double tokens = (double)cfg->micro * cfg->context;
    sp->mem_work = (long)((sp->scratch_floats + 2 * m->input_acts) * 4 + sp->slots * tokens * 12);
    sp->mem_total = sp->mem_weights + sp->mem_grads + sp->mem_optim + sp->mem_acts + sp->mem_stash +
                    sp->mem_work;
}

/* A stage's predicted seconds per optimizer step, as the cost model prices it (cost_stage):
 * K forwards and backwards and one AdamW step. */
static double stage_seconds(const Config *cfg, const StagePlan *sp)
{
    double fwd, bwd, step;
    cost_stage(cfg, sp, &fwd, &bwd, &step);
    return cfg->window * (fwd + bwd) + step;
}

/* Balanced contiguous partition by dynamic programming: minimises the slowest stage's time
 * (stage_seconds) over the partitions whose every stage fits the device memory with its
 * slots (stage s of PACI and 1F1B keeps p - s). Every stage holds at least one layer but the
 * first and the last, which may hold only the embedding or only the head. Among equal
 * optima, the one with the least sum of squared stage times (the most even), so no stage
 * idles when it need not. With no partition that fits, the one that ignores memory (and
 * plan_build reports the stage that does not fit). */
static void balanced_split(const Config *cfg, const ModelCounts *m, int *split)
{
    int layers = cfg->layers, stages = cfg->stages;
    /* worst[k][l], squares[k][l]: best (max, sum of squares) of the first k stages over l layers. */
    size_t cells = (size_t)(stages + 1) * (size_t)(layers + 1);
    double *worst = xmalloc(cells * sizeof *worst);
    double *squares = xmalloc(cells * sizeof *squares);
    int *choice = xmalloc(cells * sizeof *choice);
    int slots[PACI_MAX_STAGES], stash[PACI_MAX_STAGES];
    stage_slots(cfg, slots, stash);
    /* a scale for the squares: the whole model's time over its layers and head */
    StagePlan whole;
    stage_fill(cfg, m, 0, 0, layers, slots[0], stash[0], &whole);
    double unit = stage_seconds(cfg, &whole) / (layers + 1);
    if (!(unit > 0 && unit < INFINITY)) /* measured costs of zero (--balance): any scale does */
        unit = 1;
#define AT(k, l) ((size_t)(k) * (size_t)(layers + 1) + (size_t)(l))
    /* stage_time[k][n], fits[k][n]: the k-th stage holding n layers (which ones does not matter) */
    double *stage_time = xmalloc(cells * sizeof *stage_time);
    bool *fits = xmalloc(cells * sizeof *fits);
    for (int k = 1; k <= stages; k++)
        for (int n = 0; n <= layers; n++) {
            StagePlan sp;
            stage_fill(cfg, m, k - 1, 0, n, slots[k - 1], stash[k - 1], &sp);
            stage_time[AT(k, n)] = stage_seconds(cfg, &sp) / unit;
            fits[AT(k, n)] = (double)sp.mem_total <= cfg->device_memory;
        }
    for (int pass = 0; pass < 2; pass++) {
        bool check_memory = pass == 0;
        for (int l = 0; l <= layers; l++) {
            worst[AT(0, l)] = l == 0 ? 0 : INFINITY;
            squares[AT(0, l)] = 0;
        }
        for (int k = 1; k <= stages; k++) {
            bool end = stages > 1 && (k == 1 || k == stages); /* may hold no layer */
            for (int l = 0; l <= layers; l++) {
                size_t at = AT(k, l);
                worst[at] = INFINITY;
                squares[at] = INFINITY;
                choice[at] = -1;
                /* the k-th stage takes layers [l - n, l); trying the largest n first gives
                 * exact ties to later stages, which keep fewer slots in flight. worst[k-1][.]
                 * grows with its layers, so once it is above the best so far, so is the rest. */
                for (int n = l; n >= (end ? 0 : 1); n--) {
                    size_t prev = AT(k - 1, l - n);
                    if (worst[prev] > worst[at] + 1e-9)
                        break;
                    if (k > 1 ? choice[prev] < 0 : l - n != 0) /* no way to place layers [0, l - n) */
                        continue;
                    if (check_memory && !fits[AT(k, n)])
                        continue;
                    double here = stage_time[AT(k, n)];
                    double w = worst[prev] > here ? worst[prev] : here;
                    double sq = squares[prev] + here * here;
                    // the first candidate stands even at an infinite cost (a config without a
                    // hardware block prices every stage at infinity); then only a better one
                    bool better = choice[at] < 0 || w < worst[at] - 1e-9 ||
                                  (w <= worst[at] + 1e-9 && sq < squares[at] - 1e-9);
                    if (better) {
                        worst[at] = w;
                        squares[at] = sq;
                        choice[at] = n;
                    }
                }
            }
        }
        if (choice[AT(stages, layers)] >= 0)
            break;
    }
    for (int k = stages, l = layers; k >= 1; k--) {
        split[k - 1] = choice[AT(k, l)];
        if (split[k - 1] < 0)
            ICE("no partition of %d layers over %d stages", layers, stages);
        l -= split[k - 1];
    }
#undef AT
    free(stage_time);
    free(fits);
    free(worst);
    free(squares);
    free(choice);
}

/* Fills every number of the plan; never fails and prints nothing. */
void plan_layout(const Config *cfg, Plan *plan)
{
    memset(plan, 0, sizeof *plan);
    ModelCounts m = model_counts(cfg);
    int p = cfg->stages;
    int split[PACI_MAX_STAGES];
    if (cfg->split)
        memcpy(split, cfg->split, (size_t)p * sizeof *split);
    else
        balanced_split(cfg, &m, split);

    plan->stages = p;
    plan->recompute = cfg->recompute == RECOMPUTE_FULL;
    int slots[PACI_MAX_STAGES], stash[PACI_MAX_STAGES];
    stage_slots(cfg, slots, stash);
    int next_layer = 0;
    for (int s = 0; s < p; s++) {
        stage_fill(cfg, &m, s, next_layer, split[s], slots[s], stash[s], &plan->stage[s]);
        next_layer += split[s];
        plan->total_params += plan->stage[s].params;
    }
    /* Every layer is on exactly one stage, in order, and only an end stage may hold none: a
     * wrong split is a compiler bug here. */
    if (next_layer != cfg->layers)
        ICE("the partition covers %d of %d layers", next_layer, cfg->layers);
    for (int s = 0; s < p; s++) {
        bool end = p > 1 && (s == 0 || s == p - 1);
        if (plan->stage[s].n_layers < (end ? 0 : 1) ||
            plan->stage[s].first_layer != (s ? plan->stage[s - 1].first_layer + plan->stage[s - 1].n_layers : 0))
            ICE("stage %d of the partition holds layers from %d, %d of them", s,
                plan->stage[s].first_layer, plan->stage[s].n_layers);
    }
}

long plan_peak_memory(const Plan *plan, int *stage)
{
    long peak = -1;
    for (int s = 0; s < plan->stages; s++)
        if (plan->stage[s].mem_total > peak) {
            peak = plan->stage[s].mem_total;
            if (stage)
                *stage = s;
        }
    return peak;
}

static double gib(double bytes)
{
    return bytes / (1024.0 * 1024.0 * 1024.0);
}

/* A stage over the device's memory is the user's error: say which and by how much. */
bool plan_build(const Config *cfg, Plan *plan)
{
    plan_layout(cfg, plan);
    bool ok = true, slots_reported = false;
    for (int s = 0; s < plan->stages; s++) {
        const StagePlan *sp = &plan->stage[s];
        if (sp->slots > PACI_MAX_SLOTS && !slots_reported) {
            slots_reported = true; /* once: every gpipe stage keeps as many */
            /* instr.slot is 16 bits in the table */
            char *msg = xasprintf("stage %d would keep %d activation slots (%s keeps one per micro-batch of "
                                  "the window); at most %d fit the schedule table",
                                  s, sp->slots, paci_schedule_name(cfg->schedule), PACI_MAX_SLOTS);
            if (cfg->src)
                error_at(cfg->src, cfg->span_window, "%s", msg);
            else
                diag_plain(DIAG_ERROR, "%s", msg);
            free(msg);
            ok = false;
        }
        if ((double)sp->mem_total <= cfg->device_memory)
            continue;
        double over = (double)sp->mem_total - cfg->device_memory;
        char acts[96];
        if (plan->recompute)
            snprintf(acts, sizeof acts, "%d x %.2f inputs + %.2f workspace (recompute full)", sp->slots,
                     gib(sp->keep_bytes), gib(sp->act_bytes));
        else
            snprintf(acts, sizeof acts, "%d x %.2f", sp->slots, gib(sp->act_bytes));
        char *msg = xasprintf("stage %d needs %.2f GiB (weights %.2f, gradients %.2f, optimizer %.2f, "
                              "activations %s, stash %.2f, working %.2f), %.0f bytes (%.2f GiB) more "
                              "than the device's %.2f GiB",
                              s, gib(sp->mem_total), gib(sp->mem_weights), gib(sp->mem_grads),
                              gib(sp->mem_optim), acts, gib(sp->mem_stash),
                              gib(sp->mem_work), over, gib(over), gib(cfg->device_memory));
        if (cfg->src) {
            Span at = cfg->span_memory.end > cfg->span_memory.begin ? cfg->span_memory : cfg->span_micro;
            error_at(cfg->src, at, "%s", msg);
        } else {
            diag_plain(DIAG_ERROR, "%s", msg);
        }
        free(msg);
        ok = false;
    }
    return ok;
}

void plan_dump(FILE *out, const Config *cfg, const Plan *plan)
{
    fprintf(out, "plan: %d stages, %ld parameters, schedule %s, window %d\n", plan->stages,
            plan->total_params, paci_schedule_name(cfg->schedule), cfg->window);
    for (int s = 0; s < plan->stages; s++) {
        const StagePlan *sp = &plan->stage[s];
        char layers[32] = "none";
        if (sp->n_layers > 0)
            snprintf(layers, sizeof layers, "%d..%d", sp->first_layer, sp->first_layer + sp->n_layers - 1);
        fprintf(out,
                "stage %d: layers %s%s%s params %ld fwd %.4g bwd %.4g FLOP msg %ld B "
                "slot %ld B x %d stash %d | weights %ld grads %ld optim %ld acts %ld stash %ld work %ld "
                "total %ld\n",
                s, layers, sp->has_embed ? " +embed" : "", sp->has_head ? " +head" : "", sp->params,
                sp->fwd_flops, sp->bwd_flops, sp->msg_bytes, sp->act_bytes, sp->slots, sp->stash,
                sp->mem_weights, sp->mem_grads, sp->mem_optim, sp->mem_acts, sp->mem_stash,
                sp->mem_work, sp->mem_total);
    }
}

void stage_layers_label(const StagePlan *sp, char *out, size_t size)
{
    if (sp->n_layers == 0) /* an embedding-only first or head-only last stage */
        snprintf(out, size, "%s", sp->has_embed && sp->has_head ? "e+h" : sp->has_embed ? "emb" : "head");
    else
        snprintf(out, size, "%d-%d%s", sp->first_layer, sp->first_layer + sp->n_layers - 1,
                 sp->has_embed && sp->has_head ? "+e+h" : sp->has_embed ? "+emb" : sp->has_head ? "+head" : "");
}
