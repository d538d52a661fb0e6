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

/* Per micro-batch (FLOPs, slot elements) or in all (parameters); a layer's are its attention
 * half's (index HALF_ATTN) plus its MLP half's (HALF_MLP). */
enum { HALF_ATTN, HALF_MLP };
typedef struct ModelCounts {
    double half_params[2], embed_params, lnf_params, head_row_params;
    double half_fwd[2], embed_fwd, head_row_fwd;  /* FLOPs per micro-batch (the head's per row) */
    double half_w[2];                             /* the weight-gradient products' FLOPs (W's) */
    double half_acts[2], input_acts, lnf_acts;    /* elements per slot */
    double lnf_message;                           /* the floats the final LayerNorm's output takes */
    double message;                               /* floats of a residual-stream message (messages bf16: half) */
    double scratch;                               /* elements of the backward's scratch */
    int act_bytes, weight_bytes;                  /* bytes per element */
} ModelCounts;

/* n floats padded as layout.c pads every entry (to 64). */
static double padded(double n)
{
    return ceil(n / 64) * 64;
}

static ModelCounts model_counts(const Config *cfg)
{
    double C = cfg->width, T = cfg->context, B = cfg->micro, NH = cfg->heads;
    double tokens = B * T;
    ModelCounts m;
    m.half_params[HALF_ATTN] = 4 * C * C + 6 * C;  /* ln1, qkv, attention projection */
    m.half_params[HALF_MLP] = 8 * C * C + 7 * C;   /* ln2, fc, MLP projection */
    m.embed_params = cfg->vocab * C + T * C;
    m.lnf_params = 2 * C;
    m.head_row_params = cfg->tied ? 0 : C;
    m.half_fwd[HALF_ATTN] = 2 * 4 * C * C * tokens + 2 * B * T * T * C;
    m.half_fwd[HALF_MLP] = 2 * 8 * C * C * tokens;
    m.embed_fwd = 0;
    m.head_row_fwd = 2 * C * tokens;
    /* d W = d Y^T X of each product with weights: its forward's FLOPs (attention has none) */
    m.half_w[HALF_ATTN] = 2 * 4 * C * C * tokens;
    m.half_w[HALF_MLP] = 2 * 8 * C * C * tokens;
    /* what stage_layout gives each half: the matmul attention adds its T x T workspace */
    m.half_acts[HALF_ATTN] = tokens * (6 * C + 2 + NH) + (cfg->attention == ATTN_MATMUL ? T * T : 0);
    m.half_acts[HALF_MLP] = tokens * (10 * C + 2);
    /* zero-bubble: what B keeps for W takes no memory (stage_layout puts it over activations B has read) */
    m.input_acts = tokens * C;
    m.lnf_acts = tokens * (C + 2);
    m.lnf_message = tokens * C;
    m.message = (double)residual_message_floats(cfg);
    /* stage_layout's scratch: dres, dln, dqkv, datty, dfc, and the attention's own */
    m.scratch = tokens * 10 * C + (cfg->attention == ATTN_MATMUL ? 2 * T * T : B * NH * T);
    m.act_bytes = 4;
    m.weight_bytes = 4;
    if (cfg->precision == PREC_BF16) {
        // stage_layout's bf16 copies, counted in floats (two elements a float)
        bool flash = cfg->attention == ATTN_FLASH;
        m.scratch += tokens * (2.5 * C + (flash ? 1.5 * C : 0));
        // ln2 and the GELU output (and ln1 and attention's output with flash attention) per
        // layer, and the final LayerNorm, are kept in bf16: half their floats
        m.half_acts[HALF_ATTN] -= tokens * (flash ? C : 0);
        m.half_acts[HALF_MLP] -= tokens * 2.5 * C;
        m.lnf_acts -= tokens * C / 2;
        m.lnf_message = ceil(tokens * C / 2);
        m.weight_bytes = 6;
    }
    return m;
}

double head_message_floats(const Config *cfg, bool backward)
{
    ModelCounts m = model_counts(cfg);
    double tokens = (double)cfg->micro * cfg->context;
    return backward ? padded(m.message) + tokens : padded(m.lnf_message) + 2 * tokens;
}

/* Sums a count over the stage's halves: the leading MLP half, whole layers, the trailing attention half. */
static double over_halves(const StagePlan *sp, const double per_half[2])
{
    return (sp->lead_mlp ? per_half[HALF_MLP] : 0) + sp->n_layers * (per_half[HALF_ATTN] + per_half[HALF_MLP]) +
           (sp->tail_attn ? per_half[HALF_ATTN] : 0);
}

double stage_layer_count(const Config *cfg, const StagePlan *sp)
{
    ModelCounts m = model_counts(cfg);
    double layer = m.half_fwd[HALF_ATTN] + m.half_fwd[HALF_MLP];
    return sp->n_layers + (sp->lead_mlp ? m.half_fwd[HALF_MLP] / layer : 0) +
           (sp->tail_attn ? m.half_fwd[HALF_ATTN] / layer : 0);
}

int stage_grad_ranges(const Config *cfg, const StagePlan *sp, GradRange *out)
{
    ModelCounts m = model_counts(cfg);
    double layer_params = m.half_params[HALF_ATTN] + m.half_params[HALF_MLP];
    double layer_fwd = m.half_fwd[HALF_ATTN] + m.half_fwd[HALF_MLP];
    int n = 0;
    double rows = (double)(sp->vocab_end - sp->vocab_begin);
    if (sp->has_lnf || rows > 0)
        out[n++] = (GradRange){(sp->has_lnf ? m.lnf_params : 0) + rows * m.head_row_params, 2 * rows * m.head_row_fwd};
    if (sp->tail_attn)
        out[n++] = (GradRange){m.half_params[HALF_ATTN], 2 * m.half_fwd[HALF_ATTN]};
    for (int l = 0; l < sp->n_layers; l++)
        out[n++] = (GradRange){layer_params, 2 * layer_fwd};
    if (sp->lead_mlp)
        out[n++] = (GradRange){m.half_params[HALF_MLP], 2 * m.half_fwd[HALF_MLP]};
    if (sp->has_embed)
        out[n++] = (GradRange){m.embed_params, 2 * m.embed_fwd};
    return n;
}

/* The schedule's activation slots and stashed weight copies at every stage. */
static void stage_slots(const Config *cfg, int *slots, int *stash)
{
    for (int s = 0; s < cfg->stages; s++) {
        slots[s] = schedule_table_slots(cfg, s);
        stash[s] = schedule_table_stash(cfg, s);
    }
}

/* Fills sp for stage s holding the half layers [first, first + n) (half 2l is layer l's
 * attention, 2l + 1 its MLP; the embedding on the first stage; the final LayerNorm and the
 * head on the last, or with vocab_split N the LayerNorm and the head's rows [0, N) on the
 * stage before it and rows [N, V) on the last): parameters, FLOPs and memory, with the
 * schedule's slots. */
static void stage_fill(const Config *cfg, const ModelCounts *m, int s, int first, int n, long vocab_split, int slots,
                       int stash, StagePlan *sp)
{
    int p = cfg->stages, end = first + n;
    long V = cfg->vocab;
    double tokens = (double)cfg->micro * cfg->context;
    memset(sp, 0, sizeof *sp);
    sp->lead_mlp = n > 0 && first % 2 == 1;
    sp->tail_attn = n > 0 && end % 2 == 1;
    sp->first_layer = (first + 1) / 2;
    sp->n_layers = n > 0 ? end / 2 - sp->first_layer : 0;
    sp->has_embed = s == 0;
    sp->has_head = s == p - 1;
    sp->has_lnf = s == (vocab_split > 0 ? p - 2 : p - 1);
    if (sp->has_head)
        sp->vocab_begin = vocab_split > 0 ? vocab_split : 0, sp->vocab_end = V;
    else if (sp->has_lnf)
        sp->vocab_begin = 0, sp->vocab_end = vocab_split;
    double rows = (double)(sp->vocab_end - sp->vocab_begin);
    double params = over_halves(sp, m->half_params) + (sp->has_embed ? m->embed_params : 0) +
                    (sp->has_lnf ? m->lnf_params : 0) + rows * m->head_row_params;
    sp->params = (long)params;
    sp->fwd_flops = over_halves(sp, m->half_fwd) + (sp->has_embed ? m->embed_fwd : 0) + rows * m->head_row_fwd;
    sp->bwd_flops = 2 * sp->fwd_flops;
    sp->w_flops = over_halves(sp, m->half_w) + rows * m->head_row_fwd;
    // The split's front sends the final LayerNorm's output and two floats a token (its rows'
    // log-sum-exp and target logit), which the back takes as its input. Under messages bf16 a
    // stage keeps the bf16 message it receives beside its fp32 input, and the one it sends
    // beside its output.
    double input = stage_head_back(sp) ? head_message_floats(cfg, false) : m->input_acts;
    double kept = stage_head_back(sp) ? input : m->message; /* what a recompute slot keeps: the message */
    sp->msg_bytes = (long)((stage_head_front(sp) ? head_message_floats(cfg, false) : m->message) * m->act_bytes);
    double message_copies = (receives_residual(cfg, sp) + sends_residual(cfg, sp)) * m->message;
    double head_acts = (sp->has_lnf ? m->lnf_acts : 0) + (rows > 0 ? tokens * padded(rows) : 0) +
                       (stage_head_front(sp) ? 2 * tokens : 0) + (stage_head_back(sp) ? tokens : 0);
    double acts = over_halves(sp, m->half_acts) + input + head_acts + message_copies;
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
    sp->keep_bytes = sp->has_embed ? 0 : (long)(kept * 4);
    sp->recompute = cfg->recompute == RECOMPUTE_FULL && slots > 1;
    sp->mem_acts = sp->recompute ? sp->keep_bytes * sp->slots + sp->act_bytes : sp->act_bytes * sp->slots;
    sp->mem_stash = sp->params * m->weight_bytes * (long)sp->stash;
    sp->scratch_floats = (long)m->scratch;
    // what runtime/executor.c allocates beside the blocks: two message buffers (the larger
    // of the split's backward message and B T C), and per slot int32 tokens and targets and
    // float losses per token
    double message = vocab_split > 0 ? fmax(m->input_acts, head_message_floats(cfg, true)) : m->input_acts;
    sp->mem_work = (long)((sp->scratch_floats + 2 * message) * 4 + sp->slots * tokens * 12);
    sp->mem_total = sp->mem_weights + sp->mem_grads + sp->mem_optim + sp->mem_acts + sp->mem_stash +
                    sp->mem_work;
}

/* The stage's prices, from its FLOPs and the device's rates, or from a profile's measured
 * parts (cfg->measured). */
void cost_stage(const Config *cfg, const StagePlan *sp, double *fwd, double *bwd, double *step)
{
    const MeasuredCosts *mc = cfg->measured;
    if (mc) {
        // a profile measures whole layers; a half layer is priced by its share of the FLOPs
        double layers = stage_layer_count(cfg, sp);
        // the head by its share of the rows (a vocabulary split divides it)
        double head = (double)(sp->vocab_end - sp->vocab_begin) / cfg->vocab;
        *fwd = layers * mc->layer_fwd + (sp->has_embed ? mc->embed_fwd : 0) + head * mc->head_fwd;
        *bwd = layers * mc->layer_bwd + (sp->has_embed ? mc->embed_bwd : 0) + head * mc->head_bwd;
        *step = (double)sp->params * mc->step_per_param;
    } else {
        double adamw_bytes = cfg->precision == PREC_BF16 ? 34 : 32;
        *fwd = sp->fwd_flops / cfg->device_flops;
        *bwd = sp->bwd_flops / cfg->device_flops;
        *step = (double)sp->params * adamw_bytes / cfg->memory_bandwidth;
    }
    // recompute full: every backward reruns its forward first (on stages with several slots)
    if (sp->recompute)
        *bwd += *fwd;
}

/* What the partitioner balances: each stage priced by the cost model --explain prices the
 * program with, the kernel-by-kernel model of costs.c on the machine the file names (with
 * cfg->measured, cost_stage's measured parts). That model prices a stage section by section
 * and tensor by tensor, so a stage's price is the sum of its parts' (the embedding, a leading
 * MLP half, each layer, a trailing attention half, the head's part); the search tries
 * thousands of stages, so each part is priced once and kept (test_plan checks the sum). */
typedef struct PartPrice {
    long key[3]; /* the part: its flags, and the head's rows */
    double seconds;
} PartPrice;
typedef struct StagePrices {
    bool kernel;     /* false: cost_stage's */
    ModelOps ops;    /* the kernel model's op lists */
    PartPrice *parts;
    int n_parts;
} StagePrices;

static void stage_prices_init(const Config *cfg, StagePrices *pr)
{
    memset(pr, 0, sizeof *pr);
    pr->kernel = !cfg->measured;
    if (!pr->kernel)
        return;
    if (cfg->machine == MACHINE_CPU && !cfg->cpu)
        ICE("a CPU program planned without its rates (machine_cpu_config)");
    model_ops_build(cfg, &pr->ops);
}

static void stage_prices_free(StagePrices *pr)
{
    if (pr->kernel)
        model_ops_free(&pr->ops);
    free(pr->parts);
}

/* One part's seconds per optimizer step (K forwards and backwards, one optimizer step). */
static double part_seconds(const Config *cfg, StagePrices *pr, const StagePlan *part)
{
    long key[3] = {(long)part->n_layers << 8 | part->has_embed | part->lead_mlp << 1 | part->tail_attn << 2 |
                       part->has_lnf << 3 | part->has_head << 4 | part->recompute << 5,
                   part->vocab_begin, part->vocab_end};
    for (int i = 0; i < pr->n_parts; i++) /* few: the layer parts, and the head at each row count tried */
        if (memcmp(pr->parts[i].key, key, sizeof key) == 0)
            return pr->parts[i].seconds;
    double fwd, bwd, step;
    stage_kernel_costs(cfg, &pr->ops, part, &fwd, &bwd, &step);
    double seconds = cfg->window * (fwd + bwd) + step;
    pr->parts = xrealloc(pr->parts, (size_t)(pr->n_parts + 1) * sizeof *pr->parts);
    pr->parts[pr->n_parts++] = (PartPrice){{key[0], key[1], key[2]}, seconds};
    return seconds;
}

/* A stage's predicted seconds per optimizer step: K forwards and backwards and one
 * optimizer step. */
static double stage_seconds(const Config *cfg, StagePrices *pr, const StagePlan *sp)
{
    if (!pr->kernel) {
        double fwd, bwd, step;
        cost_stage(cfg, sp, &fwd, &bwd, &step);
        return cfg->window * (fwd + bwd) + step;
    }
    const StagePlan none = {.recompute = sp->recompute, .first_layer = sp->first_layer};
    StagePlan embed = none, lead = none, layer = none, tail = none, head = none;
    embed.has_embed = true;
    lead.lead_mlp = true;
    layer.n_layers = 1;
    tail.tail_attn = true;
    head.has_lnf = sp->has_lnf;
    head.has_head = sp->has_head;
    head.vocab_begin = sp->vocab_begin;
    head.vocab_end = sp->vocab_end;
    return (sp->has_embed ? part_seconds(cfg, pr, &embed) : 0) + (sp->lead_mlp ? part_seconds(cfg, pr, &lead) : 0) +
           (sp->n_layers ? sp->n_layers * part_seconds(cfg, pr, &layer) : 0) +
           (sp->tail_attn ? part_seconds(cfg, pr, &tail) : 0) +
           (sp->has_lnf || sp->has_head ? part_seconds(cfg, pr, &head) : 0);
}

/* Balanced contiguous partition by dynamic programming over the model's 2 x layers halves
 * (step 1) or its whole layers (step 2): minimises the slowest stage's time (stage_seconds)
 * over the partitions whose every stage fits the device memory with its slots (stage s of
 * PACI and 1F1B keeps p - s), and returns that time. Every stage holds at least one step of
 * halves but the first and the last, which may hold only the embedding or only the head.
 * Among equal optima, the one with the least sum of squared stage times (the most even), so
 * no stage idles when it need not. With no partition that fits, the one that ignores memory
 * (and plan_build reports the stage that does not fit; *fits_memory false). split[] gets
 * halves per stage. */
static double balanced_split(const Config *cfg, const ModelCounts *m, StagePrices *pr, int step, long vocab_split,
                             int *split, bool *fits_memory)
{
    // under a vocabulary split the last stage holds no layer: the halves go over the others
    int units = 2 * cfg->layers, stages = vocab_split > 0 ? cfg->stages - 1 : cfg->stages;
    /* worst[k][u], squares[k][u]: best (max, sum of squares) of the first k stages over u halves. */
    size_t cells = (size_t)(stages + 1) * (size_t)(units + 1);
    double *worst = xmalloc(cells * sizeof *worst);
    double *squares = xmalloc(cells * sizeof *squares);
    int *choice = xmalloc(cells * sizeof *choice);
    int slots[PACI_MAX_STAGES], stash[PACI_MAX_STAGES];
    stage_slots(cfg, slots, stash);
    /* a scale for the squares: the whole model's time over its layers and head */
    StagePlan whole;
    stage_fill(cfg, m, 0, 0, units, 0, slots[0], stash[0], &whole);
    double unit = stage_seconds(cfg, pr, &whole) / (cfg->layers + 1);
    if (!(unit > 0 && unit < INFINITY)) /* measured costs of zero (--balance): any scale does */
        unit = 1;
#define AT(k, u) ((size_t)(k) * (size_t)(units + 1) + (size_t)(u))
    /* stage_time[k][n][parity], fits[.]: the k-th stage holding n halves from one of that
     * parity (an odd first half is an MLP half; beyond that, which ones does not matter) */
    size_t time_cells = cells * 2;
    double *stage_time = xmalloc(time_cells * sizeof *stage_time);
    bool *fits = xmalloc(time_cells * sizeof *fits);
    for (int k = 1; k <= stages; k++)
        for (int n = 0; n <= units; n++)
            for (int parity = 0; parity < 2; parity++) {
                StagePlan sp;
                stage_fill(cfg, m, k - 1, parity, n, vocab_split, slots[k - 1], stash[k - 1], &sp);
                stage_time[2 * AT(k, n) + parity] = stage_seconds(cfg, pr, &sp) / unit;
                fits[2 * AT(k, n) + parity] = (double)sp.mem_total <= cfg->device_memory;
            }
    double back_time = 0;
    bool back_fits = true;
    if (vocab_split > 0) {
        StagePlan back;
        stage_fill(cfg, m, cfg->stages - 1, units, 0, vocab_split, slots[cfg->stages - 1], stash[cfg->stages - 1], &back);
        back_time = stage_seconds(cfg, pr, &back) / unit;
        back_fits = (double)back.mem_total <= cfg->device_memory;
    }
    int pass;
    for (pass = 0; pass < 2; pass++) {
        bool check_memory = pass == 0;
        if (check_memory && !back_fits)
            continue;
        for (int u = 0; u <= units; u++) {
            worst[AT(0, u)] = u == 0 ? 0 : INFINITY;
            squares[AT(0, u)] = 0;
        }
        for (int k = 1; k <= stages; k++) {
            bool end = stages > 1 && (k == 1 || k == stages); /* may hold no layer */
            for (int u = 0; u <= units; u += step) {
                size_t at = AT(k, u);
                worst[at] = INFINITY;
                squares[at] = INFINITY;
                choice[at] = -1;
                /* the k-th stage takes halves [u - n, u); trying the largest n first gives
                 * exact ties to later stages, which keep fewer slots in flight. worst[k-1][.]
                 * grows with its halves, so once it is above the best so far, so is the rest. */
                for (int n = u; n >= (end ? 0 : step); n -= step) {
                    size_t prev = AT(k - 1, u - n);
                    if (worst[prev] > worst[at] + 1e-9)
                        break;
                    if (k > 1 ? choice[prev] < 0 : u - n != 0) /* no way to place halves [0, u - n) */
                        continue;
                    size_t cost = 2 * AT(k, n) + (size_t)((u - n) % 2);
                    if (check_memory && !fits[cost])
                        continue;
                    double here = stage_time[cost];
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
        if (choice[AT(stages, units)] >= 0)
            break;
    }
    double slowest = fmax(worst[AT(stages, units)], back_time) * unit;
    *fits_memory = pass == 0;
    if (vocab_split > 0)
        split[stages] = 0;
    for (int k = stages, u = units; k >= 1; k--) {
        split[k - 1] = choice[AT(k, u)];
        if (split[k - 1] < 0)
            ICE("no partition of %d halves over %d stages", units, stages);
        u -= split[k - 1];
    }
#undef AT
    free(stage_time);
    free(fits);
    free(worst);
    free(squares);
    free(choice);
    return slowest;
}

/* The split for a given vocab_split: whole layers, unless boundaries inside layers (between a
 * layer's attention and its MLP) make the slowest stage at least 1% faster; a half boundary
 * sends the same residual stream (its unfused residual add is in the kernel model's price),
 * but whole layers read better. Measured costs (--balance) split whole layers only. Returns the slowest stage's time. */
static double layer_split(const Config *cfg, const ModelCounts *m, StagePrices *pr, long vocab_split, int *split,
                          bool *fits)
{
    int halves[PACI_MAX_STAGES];
    bool whole_fits, half_fits;
    double whole = balanced_split(cfg, m, pr, 2, vocab_split, split, &whole_fits);
    *fits = whole_fits;
    if (cfg->measured) /* a profile measures whole layers: it cannot price their halves apart */
        return whole;
    double half = balanced_split(cfg, m, pr, 1, vocab_split, halves, &half_fits);
    if (half_fits > whole_fits || (half_fits == whole_fits && half < whole * 0.99)) {
        memcpy(split, halves, (size_t)cfg->stages * sizeof *split);
        *fits = half_fits;
        return half;
    }
    return whole;
}

/* The automatic split, and the vocabulary split it chooses (0: none). When the head costs
 * more than a stage's share, no split at layers can balance the last stage: the head's rows
 * are divided between the last two stages, the last keeping no layer, at the row count (a
 * multiple of 64) that minimises the slowest stage, if that makes it at least 1% faster.
 * The slowest stage's time is the larger of a time that grows with the rows of the stage
 * before the last and one that falls with them, so a ternary search over the rows finds it.
 * Not with measured costs (a profile does not price rows), a tied head (wte's rows are the
 * embedding's), or LAMB, LARS and LANS (per-tensor trust ratios). */
static long automatic_split(const Config *cfg, const ModelCounts *m, StagePrices *pr, int *split)
{
    bool fits;
    double whole_head = layer_split(cfg, m, pr, 0, split, &fits);
    long lo = 1, hi = (cfg->vocab - 1) / 64; /* in units of 64 rows */
    // LAMB's, LARS's and LANS's trust ratio is a tensor's norm: each part of a divided head would take its own
    bool trust_ratio = optimizer_takes_tensor_norms(cfg->optimizer);
    if (cfg->vocab_split == 0 || cfg->stages < 2 || cfg->tied || cfg->measured || trust_ratio ||
        !isfinite(whole_head) || hi < lo)
        return 0;
    int trial[PACI_MAX_STAGES];
    bool trial_fits;
    while (hi - lo > 2) {
        long m1 = lo + (hi - lo) / 3, m2 = hi - (hi - lo) / 3;
        double t1 = layer_split(cfg, m, pr, 64 * m1, trial, &trial_fits);
        double t2 = layer_split(cfg, m, pr, 64 * m2, trial, &trial_fits);
        if (t1 > t2)
            lo = m1;
        else
            hi = m2;
    }
    long best = 0;
    double best_time = whole_head;
    for (long u = lo; u <= hi; u++) {
        double t = layer_split(cfg, m, pr, 64 * u, trial, &trial_fits);
        if (trial_fits >= fits && t < best_time * 0.99 && (best == 0 || t < best_time)) {
            best = 64 * u;
            best_time = t;
            memcpy(split, trial, (size_t)cfg->stages * sizeof *split);
        }
    }
    return best;
}

/* With chunks a device holds stages that keep different numbers of slots (zb-v's stage s
 * about 2p - s, capped by the window), and the partitioner, which sees stages one at a time,
 * may put large stages with many slots on one device. The time balance cannot tell apart the
 * interior stages' whole-layer counts in any order, so among those orders take one whose
 * fullest device needs the least memory: swaps of two stages' counts while one lowers the
 * fullest device's bytes (then the sum of the devices' squares). */
typedef struct ChunkMemory {
    const Config *cfg;
    const ModelCounts *m;
    const int *slots, *stash;
    PipeShape shape;
    double *bytes; /* [stage][halves]: mem_total, < 0 until asked */
} ChunkMemory;

static double chunk_bytes(ChunkMemory *cm, int s, int halves)
{
    double *at = &cm->bytes[(size_t)s * (size_t)(2 * cm->cfg->layers + 1) + (size_t)halves];
    if (*at < 0) {
        StagePlan sp;
        stage_fill(cm->cfg, cm->m, s, 0, halves, 0, cm->slots[s], cm->stash[s], &sp);
        *at = (double)sp.mem_total;
    }
    return *at;
}

static void chunk_spread(ChunkMemory *cm, const int *split, double *worst, double *squares)
{
    *worst = *squares = 0;
    for (int d = 0; d < cm->shape.devices; d++) {
        double load = 0;
        for (int c = 0; c < cm->shape.chunks; c++) {
            int s = paci_placed_stage(cm->shape.placement, cm->shape.devices, d, c);
            load += chunk_bytes(cm, s, split[s]);
        }
        *worst = load > *worst ? load : *worst;
        *squares += load * load;
    }
}

static void arrange_chunks(const Config *cfg, const ModelCounts *m, int *split, const int *slots, const int *stash)
{
    if (config_chunks(cfg) < 2)
        return;
    for (int s = 1; s + 1 < cfg->stages; s++)
        if (split[s] % 2 != 0)
            return; /* a half layer at a boundary: a stage's cost depends on where it is */
    size_t cells = (size_t)cfg->stages * (size_t)(2 * cfg->layers + 1);
    ChunkMemory cm = {cfg, m, slots, stash, config_shape(cfg), xmalloc(cells * sizeof(double))};
    for (size_t i = 0; i < cells; i++)
        cm.bytes[i] = -1;
    double worst, squares;
    chunk_spread(&cm, split, &worst, &squares);
    for (bool better = true; better;) {
        better = false;
        for (int a = 1; a + 1 < cfg->stages; a++)
            for (int b = a + 1; b + 1 < cfg->stages; b++) {
                if (split[a] == split[b])
                    continue;
                int t = split[a];
                split[a] = split[b];
                split[b] = t;
                double w, sq;
                chunk_spread(&cm, split, &w, &sq);
                if (w < worst * (1 - 1e-12) || (w <= worst * (1 + 1e-12) && sq < squares * (1 - 1e-12))) {
                    worst = w;
                    squares = sq;
                    better = true;
                } else {
                    split[b] = split[a];
                    split[a] = t;
                }
            }
    }
    free(cm.bytes);
}

/* Fills every number of the plan; never fails and prints nothing. */
void plan_layout(const Config *cfg, Plan *plan)
{
    memset(plan, 0, sizeof *plan);
    ModelCounts m = model_counts(cfg);
    int p = cfg->stages;
    int split[PACI_MAX_STAGES]; /* halves per stage */
    long vocab_split = cfg->vocab_split > 0 ? cfg->vocab_split : 0;
    bool fits;
    if (cfg->split_halves) {
        memcpy(split, cfg->split_halves, (size_t)p * sizeof *split);
    } else {
        StagePrices prices;
        stage_prices_init(cfg, &prices);
        if (vocab_split > 0)
            layer_split(cfg, &m, &prices, vocab_split, split, &fits);
        else
            vocab_split = automatic_split(cfg, &m, &prices, split);
        stage_prices_free(&prices);
    }
    plan->vocab_split = vocab_split;
    int slots[PACI_MAX_STAGES], stash[PACI_MAX_STAGES];
    stage_slots(cfg, slots, stash);
    if (!cfg->split_halves)
        arrange_chunks(cfg, &m, split, slots, stash);

    plan->stages = p;
    PipeShape shape = config_shape(cfg);
    plan->devices = shape.devices;
    plan->chunks = shape.chunks;
    plan->placement = shape.placement;
    for (int s = 0; s < p; s++)
        plan->stage_device[s] = shape_device(&shape, s);
    plan->recompute = cfg->recompute == RECOMPUTE_FULL;
    int next = 0;
    for (int s = 0; s < p; s++) {
        stage_fill(cfg, &m, s, next, split[s], vocab_split, slots[s], stash[s], &plan->stage[s]);
        next += split[s];
        plan->total_params += plan->stage[s].params;
    }
    /* Every half layer is on exactly one stage, in order, and only an end stage may hold
     * none: a wrong split is a compiler bug here. */
    if (next != 2 * cfg->layers)
        ICE("the partition covers %d of %d half layers", next, 2 * cfg->layers);
    for (int s = 0, at = 0; s < p; s++) {
        const StagePlan *sp = &plan->stage[s];
        bool end = p > 1 && (s == 0 || s == p - 1 || (vocab_split > 0 && s == p - 2));
        int first = 2 * sp->first_layer - sp->lead_mlp;
        int n = sp->lead_mlp + 2 * sp->n_layers + sp->tail_attn;
        if (n < (end ? 0 : 1) || (n > 0 && first != at) || n != split[s] || (stage_head_back(sp) && n > 0))
            ICE("stage %d of the partition holds %d halves from %d", s, n, first);
        at += n;
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

long plan_device_memory(const Plan *plan, int device)
{
    long total = 0;
    for (int s = 0; s < plan->stages; s++)
        if (plan->stage_device[s] == device)
            total += plan->stage[s].mem_total;
    return total;
}

long plan_peak_device_memory(const Plan *plan, int *device)
{
    long peak = -1;
    for (int d = 0; d < plan->devices; d++)
        if (plan_device_memory(plan, d) > peak) {
            peak = plan_device_memory(plan, d);
            if (device)
                *device = d;
        }
    return peak;
}

static double gib(double bytes)
{
    return bytes / (1024.0 * 1024.0 * 1024.0);
}

/* An error about memory, at the file's `memory` (or `micro`) where there is a file; frees msg. */
static void report_over_memory(const Config *cfg, char *msg)
{
    if (cfg->src) {
        Span at = cfg->span_memory.end > cfg->span_memory.begin ? cfg->span_memory : cfg->span_micro;
        error_at(cfg->src, at, "%s", msg);
    } else {
        diag_plain(DIAG_ERROR, "%s", msg);
    }
    free(msg);
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
        report_over_memory(cfg, msg);
        ok = false;
    }
    for (int d = 0; d < plan->devices && ok && plan->chunks > 1; d++) {
        /* with chunks a device holds several stages, each of which fits alone */
        double need = (double)plan_device_memory(plan, d);
        if (need <= cfg->device_memory)
            continue;
        StrBuf held = {0};
        for (int s = 0; s < plan->stages; s++)
            if (plan->stage_device[s] == d)
                sb_printf(&held, "%s%d (%.2f GiB)", held.len ? ", " : "", s, gib(plan->stage[s].mem_total));
        char *msg = xasprintf("device %d needs %.2f GiB for its stages %s, %.0f bytes (%.2f GiB) more than the "
                              "device's %.2f GiB", d, gib(need), held.data, need - cfg->device_memory,
                              gib(need - cfg->device_memory), gib(cfg->device_memory));
        report_over_memory(cfg, msg);
        sb_free(&held);
        ok = false;
    }
    return ok;
}

/* The first and the last half layer a stage holds, "3" or "2b" and "5" or "6a" (false: none). */
static bool stage_ends(const StagePlan *sp, char *first, char *last, size_t size)
{
    if (sp->n_layers == 0 && !sp->lead_mlp && !sp->tail_attn)
        return false;
    if (sp->lead_mlp)
        snprintf(first, size, "%db", sp->first_layer - 1);
    else
        snprintf(first, size, "%d%s", sp->first_layer, sp->n_layers == 0 ? "a" : "");
    if (sp->tail_attn)
        snprintf(last, size, "%da", sp->first_layer + sp->n_layers);
    else
        snprintf(last, size, "%d%s", sp->first_layer + sp->n_layers - 1, sp->n_layers == 0 ? "b" : "");
    return true;
}

void plan_dump(FILE *out, const Config *cfg, const Plan *plan)
{
    fprintf(out, "plan: %d stages, %ld parameters, schedule %s, window %d\n", plan->stages,
            plan->total_params, paci_schedule_name(cfg->schedule), cfg->window);
    for (int s = 0; s < plan->stages; s++) {
        const StagePlan *sp = &plan->stage[s];
        char layers[40] = "none", first[16], last[16];
        if (stage_ends(sp, first, last, sizeof first))
            snprintf(layers, sizeof layers, "%s..%s", first, last);
        fprintf(out,
                "stage %d: layers %s%s%s params %ld fwd %.4g bwd %.4g FLOP msg %ld B "
                "slot %ld B x %d stash %d | weights %ld grads %ld optim %ld acts %ld stash %ld work %ld "
                "total %ld\n",
                s, layers, sp->has_embed ? " +embed" : "", stage_head_front(sp) ? " +headA" : stage_head_back(sp) ? " +headB" : sp->has_head ? " +head" : "", sp->params,
                sp->fwd_flops, sp->bwd_flops, sp->msg_bytes, sp->act_bytes, sp->slots, sp->stash,
                sp->mem_weights, sp->mem_grads, sp->mem_optim, sp->mem_acts, sp->mem_stash,
                sp->mem_work, sp->mem_total);
    }
    for (int d = 0; d < plan->devices && plan->chunks > 1; d++) {
        fprintf(out, "device %d: stages", d);
        for (int c = 0; c < plan->chunks; c++)
            fprintf(out, "%s %d", c ? "," : "", paci_placed_stage(plan->placement, plan->devices, d, c));
        fprintf(out, " | total %ld\n", plan_device_memory(plan, d));
    }
}

void stage_layers_label(const StagePlan *sp, char *out, size_t size)
{
    char first[16], last[16];
    // under a vocabulary split the head's two parts: hA on the stage before the last, headB on the last
    const char *head = stage_head_front(sp) ? "hA" : stage_head_back(sp) ? "headB" : "head";
    bool holds_head = sp->has_lnf || sp->has_head;
    if (!stage_ends(sp, first, last, sizeof first)) { /* an embedding-only first or head-only last stage */
        snprintf(out, size, "%s", sp->has_embed && holds_head ? "e+h" : sp->has_embed ? "emb" : head);
        return;
    }
    bool half_alone = sp->n_layers == 0 && sp->lead_mlp != sp->tail_attn; /* "5a", not "5a-5a" */
    snprintf(out, size, "%s%s%s%s%s%s", first, half_alone ? "" : "-", half_alone ? "" : last,
             sp->has_embed && holds_head ? "+e+h" : sp->has_embed ? "+emb" : "", !sp->has_embed && holds_head ? "+" : "",
             !sp->has_embed && holds_head ? head : "");
}
