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
 *    attention rows' log-sum-exp), with `attention matmul` a T x T workspace, with
 *    `attention stored` the probabilities B*NH*T*T, plus the
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

/* Per micro-batch (FLOPs, slot elements) or in all (parameters); a layer's are its pieces':
 * LayerNorm 1, the qkv product and attention (PIECE_ATT), the attention projection and its
 * residual (PIECE_PROJ; the attention half is the first two), LayerNorm 2 with the fc product
 * (PIECE_FC), GELU with the MLP projection and its residual (PIECE_GELU; the MLP half is the
 * last two). */
enum { PIECE_ATT, PIECE_PROJ, PIECE_FC, PIECE_GELU, N_PIECES };
typedef struct ModelCounts {
    double piece_params[N_PIECES], embed_params, lnf_params, head_row_params;
    double piece_fwd[N_PIECES], embed_fwd, head_row_fwd; /* FLOPs per micro-batch (the head's per row) */
    double piece_w[N_PIECES];                            /* the weight-gradient products' FLOPs (W's) */
    double piece_acts[N_PIECES], input_acts, lnf_acts;   /* elements per slot */
    double atty_acts;                             /* elements of A_ATTY, which a stage ending with an att piece keeps */
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
    m.piece_params[PIECE_ATT] = 3 * C * C + 5 * C;  /* ln1, qkv */
    m.piece_params[PIECE_PROJ] = C * C + C;         /* attention projection */
    m.piece_params[PIECE_FC] = 4 * C * C + 6 * C;   /* ln2, fc */
    m.piece_params[PIECE_GELU] = 4 * C * C + C;     /* MLP projection */
    m.embed_params = cfg->vocab * C + T * C;
    m.lnf_params = 2 * C;
    m.head_row_params = cfg->tied ? 0 : C;
    m.piece_fwd[PIECE_ATT] = 2 * 3 * C * C * tokens + 2 * B * T * T * C;
    m.piece_fwd[PIECE_PROJ] = 2 * C * C * tokens;
    m.piece_fwd[PIECE_FC] = m.piece_fwd[PIECE_GELU] = 2 * 4 * C * C * tokens;
    m.embed_fwd = 0;
    m.head_row_fwd = 2 * C * tokens;
    /* d W = d Y^T X of each product with weights: its forward's FLOPs (attention has none) */
    m.piece_w[PIECE_ATT] = 2 * 3 * C * C * tokens;
    m.piece_w[PIECE_PROJ] = 2 * C * C * tokens;
    m.piece_w[PIECE_FC] = m.piece_w[PIECE_GELU] = 2 * 4 * C * C * tokens;
    /* what stage_layout gives each piece: the matmul attention adds its T x T workspace, the
     * stored one every (sequence, head)'s probabilities */
    m.piece_acts[PIECE_ATT] = tokens * (4 * C + 2 + NH) + (cfg->attention == ATTN_MATMUL   ? T * T
                                                           : cfg->attention == ATTN_STORED ? B * NH * T * T
                                                                                           : 0);
    m.piece_acts[PIECE_PROJ] = tokens * 2 * C; /* atty, resid2 */
    m.atty_acts = tokens * C;
    m.piece_acts[PIECE_FC] = tokens * (5 * C + 2); /* ln2 and its statistics, fc's output */
    m.piece_acts[PIECE_GELU] = tokens * 5 * C;     /* GELU's output, resid3 */
    /* zero-bubble: what B keeps for W takes no memory (stage_layout puts it over activations B has read) */
    m.input_acts = tokens * C;
    m.lnf_acts = tokens * (C + 2);
    m.lnf_message = tokens * C;
    m.message = (double)residual_message_floats(cfg);
    /* stage_layout's scratch: dres, dln, dqkv, datty, dfc, and the attention's own */
    m.scratch = tokens * 10 * C + (cfg->attention == ATTN_MATMUL   ? 2 * T * T
                                   : cfg->attention == ATTN_STORED ? T * T
                                                                   : B * NH * T);
    m.act_bytes = 4;
    m.weight_bytes = 4;
    if (cfg->precision == PREC_BF16) {
        // stage_layout's bf16 copies, counted in floats (two elements a float)
        bool flash = cfg->attention == ATTN_FLASH;
        m.scratch += tokens * (2.5 * C + (flash ? 1.5 * C : 0));
        // ln2 and the GELU output (and ln1 and attention's output with flash attention) per
        // layer, and the final LayerNorm, are kept in bf16: half their floats
        m.piece_acts[PIECE_ATT] -= tokens * (flash ? 0.5 * C : 0);
        m.piece_acts[PIECE_PROJ] -= tokens * (flash ? 0.5 * C : 0);
        m.atty_acts -= tokens * (flash ? 0.5 * C : 0);
        m.piece_acts[PIECE_FC] -= tokens * 0.5 * C;
        m.piece_acts[PIECE_GELU] -= tokens * 2 * C;
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

/* Sums a count over the stage's pieces: the leading proj piece, MLP half or GELU piece, whole
 * layers, the trailing att piece, attention half and fc piece. */
static double over_pieces(const StagePlan *sp, const double per_piece[N_PIECES])
{
    double layer = per_piece[PIECE_ATT] + per_piece[PIECE_PROJ] + per_piece[PIECE_FC] + per_piece[PIECE_GELU];
    return (sp->lead_proj ? per_piece[PIECE_PROJ] : 0) + (sp->lead_mlp ? per_piece[PIECE_FC] : 0) +
           (sp->lead_mlp || sp->lead_gelu ? per_piece[PIECE_GELU] : 0) + sp->n_layers * layer +
           (sp->tail_attn || sp->tail_atty ? per_piece[PIECE_ATT] : 0) + (sp->tail_attn ? per_piece[PIECE_PROJ] : 0) +
           (sp->tail_fc ? per_piece[PIECE_FC] : 0);
}

double stage_layer_count(const Config *cfg, const StagePlan *sp)
{
    ModelCounts m = model_counts(cfg);
    double layer = m.piece_fwd[PIECE_ATT] + m.piece_fwd[PIECE_PROJ] + m.piece_fwd[PIECE_FC] + m.piece_fwd[PIECE_GELU];
    return over_pieces(sp, m.piece_fwd) / layer;
}

int stage_grad_ranges(const Config *cfg, const StagePlan *sp, GradRange *out)
{
    ModelCounts m = model_counts(cfg);
    StagePlan layer = {.n_layers = 1}, mlp = {.lead_mlp = true}, gelu = {.lead_gelu = true};
    StagePlan attn = {.tail_attn = true}, att = {.tail_atty = true};
    int n = 0;
    double rows = (double)(sp->vocab_end - sp->vocab_begin);
    if (sp->has_lnf || rows > 0)
        out[n++] = (GradRange){(sp->has_lnf ? m.lnf_params : 0) + rows * m.head_row_params, 2 * rows * m.head_row_fwd};
    if (sp->tail_fc) // the fc piece's backward runs first, and the GPU reports its gradients apart
        out[n++] = (GradRange){m.piece_params[PIECE_FC], 2 * m.piece_fwd[PIECE_FC]};
    if (sp->tail_attn)
        out[n++] = (GradRange){over_pieces(&attn, m.piece_params), 2 * over_pieces(&attn, m.piece_fwd)};
    if (sp->tail_atty)
        out[n++] = (GradRange){over_pieces(&att, m.piece_params), 2 * over_pieces(&att, m.piece_fwd)};
    for (int l = 0; l < sp->n_layers; l++)
        out[n++] = (GradRange){over_pieces(&layer, m.piece_params), 2 * over_pieces(&layer, m.piece_fwd)};
    const StagePlan *lead = sp->lead_mlp ? &mlp : sp->lead_gelu ? &gelu : NULL;
    if (lead)
        out[n++] = (GradRange){over_pieces(lead, m.piece_params), 2 * over_pieces(lead, m.piece_fwd)};
    if (sp->lead_proj) // below the MLP half it leads with, reported apart
        out[n++] = (GradRange){m.piece_params[PIECE_PROJ], 2 * m.piece_fwd[PIECE_PROJ]};
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

/* The partitioner's units: a layer's four pieces (PIECE_ATT, PIECE_PROJ, PIECE_FC,
 * PIECE_GELU), unit 4l + i being layer l's piece i. A stage holds a run of them; one that
 * starts inside a layer holds the rest of it (a stage starts with the GELU piece, the MLP half
 * or the proj piece with the MLP half: no stage has the shape of, say, the fc piece alone). */
enum { UNITS_PER_LAYER = N_PIECES };
static bool units_hold_stage(int first, int n)
{
    int piece = first % UNITS_PER_LAYER;
    return n == 0 || piece == 0 || n >= UNITS_PER_LAYER - piece;
}

/* The cuts inside layers a program has somewhere (their messages size every stage's buffers). */
enum { CUT_FC = 1, CUT_ATT = 2 };

/* The floats of each of a stage's two message buffers: the larger of B T C, the vocabulary
 * split's backward message and the messages of the program's cuts inside layers. */
static double work_message(const Config *cfg, const ModelCounts *m, long vocab_split, int cuts)
{
    double message = vocab_split > 0 ? fmax(m->input_acts, head_message_floats(cfg, true)) : m->input_acts;
    if (cuts & CUT_FC)
        message = fmax(message, (double)fc_message_floats(cfg));
    if (cuts & CUT_ATT)
        message = fmax(message, (double)atty_message_floats(cfg));
    return message;
}

/* Fills sp for stage s holding the units [first, first + n) (the embedding on the first
 * stage; the final LayerNorm and the head on the last, or with vocab_split N the LayerNorm
 * and the head's rows [0, N) on the stage before it and rows [N, V) on the last):
 * parameters, FLOPs and memory, with the schedule's slots. */
static void stage_fill(const Config *cfg, const ModelCounts *m, int s, int first, int n, long vocab_split, int slots,
                       int stash, int program_cuts, StagePlan *sp)
{
    int p = cfg->stages, end = first + n;
    long V = cfg->vocab;
    double tokens = (double)cfg->micro * cfg->context;
    memset(sp, 0, sizeof *sp);
    if (!units_hold_stage(first, n))
        ICE("a stage of %d units from layer %d's piece %d", n, first / UNITS_PER_LAYER, first % UNITS_PER_LAYER);
    int lead = first % UNITS_PER_LAYER, tail = end % UNITS_PER_LAYER;
    sp->lead_proj = n > 0 && lead == PIECE_PROJ;
    sp->lead_mlp = n > 0 && (lead == PIECE_PROJ || lead == PIECE_FC);
    sp->lead_gelu = n > 0 && lead == PIECE_GELU;
    sp->tail_atty = n > 0 && tail == PIECE_PROJ; // the units end before the proj piece
    sp->tail_attn = n > 0 && (tail == PIECE_FC || tail == PIECE_GELU);
    sp->tail_fc = n > 0 && tail == PIECE_GELU;
    sp->first_layer = (first + UNITS_PER_LAYER - 1) / UNITS_PER_LAYER;
    sp->n_layers = n > 0 ? end / UNITS_PER_LAYER - sp->first_layer : 0;
    sp->has_embed = s == 0;
    sp->has_head = s == p - 1;
    sp->has_lnf = s == (vocab_split > 0 ? p - 2 : p - 1);
    if (sp->has_head)
        sp->vocab_begin = vocab_split > 0 ? vocab_split : 0, sp->vocab_end = V;
    else if (sp->has_lnf)
        sp->vocab_begin = 0, sp->vocab_end = vocab_split;
    double rows = (double)(sp->vocab_end - sp->vocab_begin);
    double params = over_pieces(sp, m->piece_params) + (sp->has_embed ? m->embed_params : 0) +
                    (sp->has_lnf ? m->lnf_params : 0) + rows * m->head_row_params;
    sp->params = (long)params;
    sp->fwd_flops = over_pieces(sp, m->piece_fwd) + (sp->has_embed ? m->embed_fwd : 0) + rows * m->head_row_fwd;
    sp->bwd_flops = 2 * sp->fwd_flops;
    sp->w_flops = over_pieces(sp, m->piece_w) + rows * m->head_row_fwd;
    // the late sections' products: the first piece's weight gradient (the att piece's: qkv's),
    // and the fc product's where an MLP half comes just before (ops.c, late_backward_ops)
    LatePiece late = stage_late_piece(sp, config_splits_backward(cfg));
    sp->late_flops = late == LATE_GELU    ? m->piece_w[PIECE_GELU]
                     : late == LATE_PROJ  ? m->piece_w[PIECE_PROJ] + m->piece_w[PIECE_FC]
                     : late == LATE_MLP   ? m->piece_w[PIECE_FC]
                     : late == LATE_BLOCK ? m->piece_w[PIECE_ATT] + m->piece_w[PIECE_FC]
                     : late == LATE_ATTN  ? m->piece_w[PIECE_ATT]
                                          : 0;
    // The split's front sends the final LayerNorm's output and two floats a token (its rows'
    // log-sum-exp and target logit), which the back takes as its input. Under messages bf16 a
    // stage keeps the bf16 message it receives beside its fp32 input, and the one it sends
    // beside its output.
    // A stage that starts with a GELU piece receives resid2 and the fc product's output (and
    // one that ends with an fc piece sends them): fc_message_floats. One that starts with a
    // proj piece receives x and the attention's output (atty_message_floats); one that ends
    // with an att piece assembles them in an output of its own before it sends them.
    double fc_message = (double)fc_message_floats(cfg), atty_message = (double)atty_message_floats(cfg);
    double input = stage_head_back(sp) ? head_message_floats(cfg, false)
                   : sp->lead_gelu     ? padded(m->input_acts) + 4 * m->input_acts
                   : sp->lead_proj     ? padded(m->input_acts) + m->input_acts
                                       : m->input_acts;
    double received = stage_head_back(sp) ? input
                      : sp->lead_gelu     ? fc_message
                      : sp->lead_proj     ? atty_message
                                          : m->message;
    double sent = stage_head_front(sp) ? head_message_floats(cfg, false)
                  : sp->tail_fc        ? fc_message
                  : sp->tail_atty      ? atty_message
                                       : m->message;
    double atty_output = sp->tail_atty ? m->atty_acts + padded(m->input_acts) + m->input_acts : 0;
    double kept = received; /* what a recompute slot keeps: the message */
    sp->msg_bytes = (long)(sent * m->act_bytes);
    double message_copies = receives_residual(cfg, sp) * received + sends_residual(cfg, sp) * sent;
    double head_acts = (sp->has_lnf ? m->lnf_acts : 0) + (rows > 0 ? tokens * padded(rows) : 0) +
                       (stage_head_front(sp) ? 2 * tokens : 0) + (stage_head_back(sp) ? tokens : 0);
    double acts = over_pieces(sp, m->piece_acts) + input + head_acts + message_copies + atty_output;
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
    // what runtime/executor.c allocates beside the blocks: two message buffers (the program's
    // largest message: program_cuts, the cuts inside layers anywhere), and per slot int32
    // tokens and targets and float losses per token
    double message = work_message(cfg, m, vocab_split,
                                  program_cuts | (sp->lead_gelu || sp->tail_fc ? CUT_FC : 0) |
                                      (sp->lead_proj || sp->tail_atty ? CUT_ATT : 0));
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
    long key[3] = {(long)part->n_layers << 10 | part->has_embed | part->lead_mlp << 1 | part->tail_attn << 2 |
                       part->has_lnf << 3 | part->has_head << 4 | part->recompute << 5 | part->lead_gelu << 6 |
                       part->tail_fc << 7 | part->lead_proj << 8 | part->tail_atty << 9,
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
    lead.lead_mlp = sp->lead_mlp;
    lead.lead_gelu = sp->lead_gelu;
    lead.lead_proj = sp->lead_proj;
    layer.n_layers = 1;
    tail.tail_attn = sp->tail_attn;
    tail.tail_fc = sp->tail_fc;
    tail.tail_atty = sp->tail_atty;
    head.has_lnf = sp->has_lnf;
    head.has_head = sp->has_head;
    head.vocab_begin = sp->vocab_begin;
    head.vocab_end = sp->vocab_end;
    return (sp->has_embed ? part_seconds(cfg, pr, &embed) : 0) +
           (sp->lead_mlp || sp->lead_gelu ? part_seconds(cfg, pr, &lead) : 0) +
           (sp->n_layers ? sp->n_layers * part_seconds(cfg, pr, &layer) : 0) +
           (sp->tail_attn || sp->tail_atty ? part_seconds(cfg, pr, &tail) : 0) +
           (sp->has_lnf || sp->has_head ? part_seconds(cfg, pr, &head) : 0);
}

/* Where a grain lets stage boundaries fall: between layers; also between a layer's halves;
 * also after its fc product (GRAIN_FC), or after its attention kernel (GRAIN_ATTY), or after
 * both (GRAIN_BOTH). A grain's cuts inside layers size every stage's message buffers, so each
 * set of them is a grain of its own, priced with the memory it needs. */
enum grain { GRAIN_LAYERS, GRAIN_HALVES, GRAIN_FC, GRAIN_ATTY, GRAIN_BOTH, N_GRAINS };
static int grain_cuts(int grain)
{
    return (grain == GRAIN_FC || grain == GRAIN_BOTH ? CUT_FC : 0) | (grain >= GRAIN_ATTY ? CUT_ATT : 0);
}
static bool boundary_allowed(int grain, int u)
{
    int piece = u % UNITS_PER_LAYER, cuts = grain_cuts(grain);
    return piece == PIECE_ATT || (piece == PIECE_FC && grain >= GRAIN_HALVES) ||
           (piece == PIECE_GELU && (cuts & CUT_FC)) || (piece == PIECE_PROJ && (cuts & CUT_ATT));
}

/* Balanced contiguous partition by dynamic programming over the model's units (4 a layer:
 * UNITS_PER_LAYER), with boundaries where the grain allows them: minimises the slowest stage's
 * time (stage_seconds) over the partitions whose every stage fits the device memory with its
 * slots (stage s of PACI and 1F1B keeps p - s), and returns that time. Every stage holds at
 * least one unit but the first and the last, which may hold only the embedding or only the
 * head. Among equal optima, the one with the least sum of squared stage times (the most
 * even), so no stage idles when it need not. With no partition that fits, the one that
 * ignores memory (and plan_build reports the stage that does not fit; *fits_memory false).
 * split[] gets units per stage. */
static double balanced_split(const Config *cfg, const ModelCounts *m, StagePrices *pr, int grain, long vocab_split,
                             int *split, bool *fits_memory)
{
    // under a vocabulary split the last stage holds no layer: the units go over the others
    int units = UNITS_PER_LAYER * cfg->layers, stages = vocab_split > 0 ? cfg->stages - 1 : cfg->stages;
    // the memory of a split that cuts inside layers anywhere its grain lets it (layer_split
    // keeps a finer grain only when no coarser split does as well)
    int program_cuts = grain_cuts(grain);
    bool *allowed = xmalloc((size_t)(units + 1) * sizeof *allowed); /* boundary_allowed at each unit */
    for (int u = 0; u <= units; u++)
        allowed[u] = boundary_allowed(grain, u);
    /* worst[k][u], squares[k][u]: best (max, sum of squares) of the first k stages over u units. */
    size_t cells = (size_t)(stages + 1) * (size_t)(units + 1);
    double *worst = xmalloc(cells * sizeof *worst);
    double *squares = xmalloc(cells * sizeof *squares);
    int *choice = xmalloc(cells * sizeof *choice);
    int slots[PACI_MAX_STAGES], stash[PACI_MAX_STAGES];
    stage_slots(cfg, slots, stash);
    /* a scale for the squares: the whole model's time over its layers and head */
    StagePlan whole;
    stage_fill(cfg, m, 0, 0, units, 0, slots[0], stash[0], 0, &whole);
    double unit = stage_seconds(cfg, pr, &whole) / (cfg->layers + 1);
    if (!(unit > 0 && unit < INFINITY)) /* measured costs of zero (--balance): any scale does */
        unit = 1;
#define AT(k, u) ((size_t)(k) * (size_t)(units + 1) + (size_t)(u))
    /* stage_time[k][n][start], fits[.]: the k-th stage holding n units from a unit of that
     * piece (beyond that, which ones does not matter) */
    size_t time_cells = cells * UNITS_PER_LAYER;
    double *stage_time = xmalloc(time_cells * sizeof *stage_time);
    bool *fits = xmalloc(time_cells * sizeof *fits);
    for (int k = 1; k <= stages; k++)
        for (int n = 0; n <= units; n++)
            for (int start = 0; start < UNITS_PER_LAYER; start++) {
                size_t at = UNITS_PER_LAYER * AT(k, n) + (size_t)start;
                if (!units_hold_stage(start, n) || !boundary_allowed(grain, start) ||
                    !boundary_allowed(grain, start + n)) {
                    stage_time[at] = INFINITY;
                    fits[at] = false;
                    continue;
                }
                StagePlan sp;
                stage_fill(cfg, m, k - 1, start, n, vocab_split, slots[k - 1], stash[k - 1], program_cuts, &sp);
                // a middle stage's time depends on what it holds, not where (but for recompute,
                // which its slots decide): the second stage's, priced first, serves the others
                bool recompute_as_second = stages > 2 && sp.recompute == (cfg->recompute == RECOMPUTE_FULL && slots[1] > 1);
                if (k > 2 && k < stages && recompute_as_second)
                    stage_time[at] = stage_time[UNITS_PER_LAYER * AT(2, n) + (size_t)start];
                else
                    stage_time[at] = stage_seconds(cfg, pr, &sp) / unit;
                fits[at] = (double)sp.mem_total <= cfg->device_memory;
            }
    double back_time = 0;
    bool back_fits = true;
    if (vocab_split > 0) {
        StagePlan back;
        stage_fill(cfg, m, cfg->stages - 1, units, 0, vocab_split, slots[cfg->stages - 1], stash[cfg->stages - 1],
                   program_cuts, &back);
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
            for (int u = 0; u <= units; u++) {
                size_t at = AT(k, u);
                worst[at] = INFINITY;
                squares[at] = INFINITY;
                choice[at] = -1;
                if (!allowed[u])
                    continue;
                /* the k-th stage takes units [u - n, u); trying the largest n first gives
                 * exact ties to later stages, which keep fewer slots in flight. worst[k-1][.]
                 * grows with its units, so once it is above the best so far, so is the rest. */
                for (int n = u; n >= (end ? 0 : 1); n--) {
                    if (!allowed[u - n])
                        continue;
                    size_t prev = AT(k - 1, u - n);
                    if (worst[prev] > worst[at] + 1e-9)
                        break;
                    if (k > 1 ? choice[prev] < 0 : u - n != 0) /* no way to place units [0, u - n) */
                        continue;
                    size_t cost = UNITS_PER_LAYER * AT(k, n) + (size_t)((u - n) % UNITS_PER_LAYER);
                    if (!units_hold_stage(u - n, n) || (check_memory && !fits[cost]))
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
            ICE("no partition of %d units over %d stages", units, stages);
        u -= split[k - 1];
    }
#undef AT
    free(allowed);
    free(stage_time);
    free(fits);
    free(worst);
    free(squares);
    free(choice);
    return slowest;
}

/* The split for a given vocab_split: whole layers, unless boundaries inside layers make the
 * slowest stage at least 1% faster: first between a layer's attention and its MLP halves (the
 * message is the same residual stream; the unfused residual add is in the kernel model's
 * price), then also after a layer's fc product (the message is resid2 and the fc output, five
 * times the residual stream's), or instead after its attention kernel (x and the attention's
 * output, twice), or after both; each kept when it is 1% faster than the best before it.
 * Whole layers read better, and the finer cuts send more.
 * Measured costs (--balance) split whole layers only. Returns the slowest stage's time. */
static double layer_split(const Config *cfg, const ModelCounts *m, StagePrices *pr, long vocab_split, int *split,
                          bool *fits)
{
    double best = balanced_split(cfg, m, pr, GRAIN_LAYERS, vocab_split, split, fits);
    if (cfg->measured) /* a profile measures whole layers: it cannot price their pieces apart */
        return best;
    for (int grain = GRAIN_HALVES; grain < N_GRAINS; grain++) {
        int finer[PACI_MAX_STAGES];
        bool finer_fits;
        double t = balanced_split(cfg, m, pr, grain, vocab_split, finer, &finer_fits);
        if (finer_fits > *fits || (finer_fits == *fits && t < best * 0.99)) {
            memcpy(split, finer, (size_t)cfg->stages * sizeof *split);
            *fits = finer_fits;
            best = t;
        }
    }
    return best;
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
    double *bytes; /* [stage][units]: mem_total, < 0 until asked */
} ChunkMemory;

static double chunk_bytes(ChunkMemory *cm, int s, int units)
{
    double *at = &cm->bytes[(size_t)s * (size_t)(UNITS_PER_LAYER * cm->cfg->layers + 1) + (size_t)units];
    if (*at < 0) {
        StagePlan sp;
        stage_fill(cm->cfg, cm->m, s, 0, units, 0, cm->slots[s], cm->stash[s], 0, &sp);
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
        if (split[s] % UNITS_PER_LAYER != 0)
            return; /* a boundary inside a layer: a stage's cost depends on where it is */
    size_t cells = (size_t)cfg->stages * (size_t)(UNITS_PER_LAYER * cfg->layers + 1);
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
    int split[PACI_MAX_STAGES]; /* units per stage */
    long vocab_split = cfg->vocab_split > 0 ? cfg->vocab_split : 0;
    bool fits;
    if (cfg->split_units) {
        memcpy(split, cfg->split_units, (size_t)p * sizeof *split);
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
    if (!cfg->split_units)
        arrange_chunks(cfg, &m, split, slots, stash);

    plan->stages = p;
    PipeShape shape = config_shape(cfg);
    plan->devices = shape.devices;
    plan->chunks = shape.chunks;
    plan->placement = shape.placement;
    for (int s = 0; s < p; s++)
        plan->stage_device[s] = shape_device(&shape, s);
    plan->recompute = cfg->recompute == RECOMPUTE_FULL;
    int program_cuts = 0; /* boundaries inside layers: after an fc product, after attention */
    for (int s = 0, at = 0; s + 1 < p; s++) {
        at += split[s];
        program_cuts |= (at % UNITS_PER_LAYER == PIECE_GELU ? CUT_FC : 0) | (at % UNITS_PER_LAYER == PIECE_PROJ ? CUT_ATT : 0);
    }
    int next = 0;
    for (int s = 0; s < p; s++) {
        stage_fill(cfg, &m, s, next, split[s], vocab_split, slots[s], stash[s], program_cuts, &plan->stage[s]);
        next += split[s];
        plan->total_params += plan->stage[s].params;
    }
    /* Every unit is on exactly one stage, in order, and only an end stage may hold none: a
     * wrong split is a compiler bug here. */
    if (next != UNITS_PER_LAYER * cfg->layers)
        ICE("the partition covers %d of %d units", next, UNITS_PER_LAYER * cfg->layers);
    for (int s = 0, at = 0; s < p; s++) {
        const StagePlan *sp = &plan->stage[s];
        bool end = p > 1 && (s == 0 || s == p - 1 || (vocab_split > 0 && s == p - 2));
        int first = UNITS_PER_LAYER * sp->first_layer - sp->lead_proj - 2 * sp->lead_mlp - sp->lead_gelu;
        int n = sp->lead_proj + 2 * sp->lead_mlp + sp->lead_gelu + UNITS_PER_LAYER * sp->n_layers +
                2 * sp->tail_attn + sp->tail_atty + sp->tail_fc;
        if (n < (end ? 0 : 1) || (n > 0 && first != at) || n != split[s] || (stage_head_back(sp) && n > 0))
            ICE("stage %d of the partition holds %d units from %d", s, n, first);
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

/* The first and the last piece a stage holds, "3", "2p", "2b" or "2g" and "5", "6t", "6a" or
 * "6f" (false: none); a stage inside one layer gives its letter once, in `first`, and "" in
 * `last`. */
static bool stage_ends(const StagePlan *sp, char *first, char *last, size_t size)
{
    bool lead = sp->lead_mlp || sp->lead_gelu, tail = sp->tail_attn || sp->tail_atty;
    if (sp->n_layers == 0 && !lead && !tail)
        return false;
    const char *tail_letter = sp->tail_fc ? "f" : sp->tail_atty ? "t" : "a";
    const char *lead_letter = sp->lead_proj ? "p" : sp->lead_mlp ? "b" : "g";
    if (lead)
        snprintf(first, size, "%d%s", sp->first_layer - 1, lead_letter);
    else
        snprintf(first, size, "%d%s", sp->first_layer, sp->n_layers == 0 ? tail_letter : "");
    if (tail)
        snprintf(last, size, "%d%s", sp->first_layer + sp->n_layers, tail_letter);
    else
        snprintf(last, size, "%d%s", sp->first_layer + sp->n_layers - 1, sp->n_layers == 0 ? lead_letter : "");
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
    /* "5a", not "5a-5a" */
    bool half_alone = sp->n_layers == 0 && (sp->lead_mlp || sp->lead_gelu) != (sp->tail_attn || sp->tail_atty);
    snprintf(out, size, "%s%s%s%s%s%s", first, half_alone ? "" : "-", half_alone ? "" : last,
             sp->has_embed && holds_head ? "+e+h" : sp->has_embed ? "+emb" : "", !sp->has_embed && holds_head ? "+" : "",
             !sp->has_embed && holds_head ? head : "");
}
