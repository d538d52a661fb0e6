/* layout.c: where each tensor of a stage lives. The named ranges of a stage's blocks
 * (parameters, saved activations, backward scratch; one layer's block repeated per layer)
 * and the tensor table the runtime initialises, checkpoints and steps by.
 *
 * Both emitters and the GPU cost model read these layouts; nothing here emits code. The
 * offsets become the generated files' constants (P_*, A_*, PARAM_*, ACT_*, S_*), which the
 * op lists (ops.c) name in their arguments.
 */
#include <stdlib.h>
#include <string.h>

#include "pacic.h"

/* The runtime's enumerators are written by name into the generated tables, so the
 * compiler never depends on their values (it does not include runtime/pacirt.h). */
#define CKPT(name) "PR_CKPT_" #name
#define INIT_NORMAL "PR_INIT_NORMAL"
#define INIT_RESIDUAL "PR_INIT_RESIDUAL"
#define INIT_ZEROS "PR_INIT_ZEROS"
#define INIT_ONES "PR_INIT_ONES"

/* Every entry starts on 256 bytes and every block is a multiple of them, so any pointer a
 * generated op forms from the arena's start is as aligned as cuBLASLt's algorithms assume
 * unless told otherwise (and vector loads want). */

/* Appends a named range after the last, padded to LAYOUT_ALIGN_FLOATS. */
static void layout_add(Layout *l, const char *name, long size, const char *doc)
{
    if (l->n == (int)(sizeof l->entry / sizeof l->entry[0]))
        ICE("layout overflow at %s", name);
    l->entry[l->n++] = (LayoutEntry){name, l->total, size, doc};
    l->total += (size + LAYOUT_ALIGN_FLOATS - 1) / LAYOUT_ALIGN_FLOATS * LAYOUT_ALIGN_FLOATS;
}

/* A name for the range of an earlier entry, `of`, which is dead by the time `name` is written:
 * it takes no memory of its own. */
static void layout_alias(Layout *l, const char *name, const char *of, const char *doc)
{
    if (l->n == (int)(sizeof l->entry / sizeof l->entry[0]))
        ICE("layout overflow at %s", name);
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->entry[i].name, of) == 0) {
            l->entry[l->n++] = (LayoutEntry){name, l->entry[i].offset, l->entry[i].size, doc};
            return;
        }
    ICE("no layout entry '%s' for %s", of, name);
}

/* Under bf16, the bf16 copy of an n-element tensor a product reads (in floats: half as many). */
static void layout_add_bf16(Layout *l, const Config *cfg, const char *name, long n, const char *doc)
{
    if (cfg->precision == PREC_BF16)
        layout_add(l, name, (n + 1) / 2, doc);
}

/* An activation of n elements that only products (and the attention backward) read: under
 * bf16, when `stored_bf16`, it is kept in bf16 on both devices (BF16_STORE), in half the floats. */
static void layout_add_operand(Layout *l, const Config *cfg, bool stored_bf16, const char *name, long n,
                               const char *doc)
{
    layout_add(l, name, cfg->precision == PREC_BF16 && stored_bf16 ? (n + 1) / 2 : n, doc);
}

long layout_offset(const Layout *l, const char *name)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->entry[i].name, name) == 0)
            return l->entry[i].offset;
    ICE("no layout entry '%s'", name);
}

/* One layer's parameters in llm.c's per-layer tensor order, so that a layer's tensors map
 * to slices of the checkpoint's tensors one to one: the att piece's four (LayerNorm 1, the qkv
 * product), the proj piece's two (the attention projection), the fc piece's four (LayerNorm 2,
 * the fc product), then the GELU piece's two (the MLP projection). */
static const struct {
    const char *name, *ckpt_name, *ckpt_tensor;
    int rows, cols; /* in units of C (rows 0: a vector of cols * C) */
    bool decay;
    const char *init;
} layer_tensors[] = {
    {"P_LN1W", "ln1w", CKPT(LN1W), 0, 1, false, INIT_ONES},
    {"P_LN1B", "ln1b", CKPT(LN1B), 0, 1, false, INIT_ZEROS},
    {"P_QKVW", "qkvw", CKPT(QKVW), 3, 1, true, INIT_NORMAL},
    {"P_QKVB", "qkvb", CKPT(QKVB), 0, 3, false, INIT_ZEROS},
    {"P_ATTPROJW", "attprojw", CKPT(ATTPROJW), 1, 1, true, INIT_RESIDUAL},
    {"P_ATTPROJB", "attprojb", CKPT(ATTPROJB), 0, 1, false, INIT_ZEROS},
    {"P_LN2W", "ln2w", CKPT(LN2W), 0, 1, false, INIT_ONES},
    {"P_LN2B", "ln2b", CKPT(LN2B), 0, 1, false, INIT_ZEROS},
    {"P_FCW", "fcw", CKPT(FCW), 4, 1, true, INIT_NORMAL},
    {"P_FCB", "fcb", CKPT(FCB), 0, 4, false, INIT_ZEROS},
    {"P_FCPROJW", "fcprojw", CKPT(FCPROJW), 1, 4, true, INIT_RESIDUAL},
    {"P_FCPROJB", "fcprojb", CKPT(FCPROJB), 0, 1, false, INIT_ZEROS},
};
enum { N_LAYER_TENSORS = sizeof layer_tensors / sizeof layer_tensors[0], N_ATT_END = 4, N_PROJ_END = 6, N_FC_END = 10 };

static long layer_tensor_size(int i, long C)
{
    long rows = layer_tensors[i].rows ? layer_tensors[i].rows * C : 1;
    return rows * layer_tensors[i].cols * C;
}

/* A layer's saved activations: its att piece's block, its proj piece's, then its fc piece's,
 * then its GELU piece's. */
static void layer_act_layouts(const Config *cfg, StageLayout *lay)
{
    long B = cfg->micro, T = cfg->context, C = cfg->width, NH = cfg->heads;
    long BT = B * T;
    Layout *la = &lay->att_acts, *lp = &lay->proj_acts;
    bool flash = cfg->attention == ATTN_FLASH;
    layout_add_operand(la, cfg, flash, "A_LN1", BT * C, "LayerNorm 1 output (bf16 under bf16, flash)");
    layout_add(la, "A_LN1_MEAN", BT, "its row means");
    layout_add(la, "A_LN1_RSTD", BT, "its row 1/std");
    layout_add(la, "A_QKV", BT * 3 * C, "q | k | v per row");
    layout_add(la, "A_ATT_LSE", B * NH * T, "log-sum-exp of each attention row");
    if (cfg->attention == ATTN_MATMUL)
        layout_add(la, "A_ATT_WORK", T * T, "attention scores of one (batch, head): workspace");
    if (cfg->attention == ATTN_STORED)
        layout_add(la, "A_ATT_P", B * NH * T * T, "attention probabilities of every (batch, head), kept for the backward");
    layout_add_operand(lp, cfg, flash, "A_ATTY", BT * C, "attention output, heads side by side (bf16 under bf16, flash)");
    layout_add(lp, "A_RESID2", BT * C, "residual after attention: the half's output");
    /* zero-bubble: what B keeps for W, each over an activation of the same size that only B
     * reads, and that B has read when it writes the gradient there (ops.c orders the copies) */
    bool split = config_splits_backward(cfg);
    if (split) {
        layout_alias(lp, "A_W_DRES2", "A_RESID2", "d(resid2), kept by B for W (over A_RESID2: the MLP half's "
                     "B has read it)");
        layout_alias(la, "A_W_DQKV", "A_QKV", "d(qkv), kept by B for W (over A_QKV: the attention's B has read it)");
    }
    Layout *lf = &lay->fc_acts;
    layout_add(lf, "A_FC_PRE", BT * 4 * C, "MLP pre-activation (with bias)");
    layout_add_operand(lf, cfg, true, "A_LN2", BT * C, "LayerNorm 2 output (bf16 under bf16)");
    layout_add(lf, "A_LN2_MEAN", BT, "its row means");
    layout_add(lf, "A_LN2_RSTD", BT, "its row 1/std");
    if (split)
        layout_alias(lf, "A_W_DFC", "A_FC_PRE", "d(fc pre-activation), kept by B for W (over A_FC_PRE: GELU's "
                     "backward has read it)");
    Layout *lg = &lay->gelu_acts;
    layout_add_operand(lg, cfg, true, "A_FC_GELU", BT * 4 * C, "GELU output (bf16 under bf16)");
    layout_add(lg, "A_RESID3", BT * C, "residual after the MLP: the layer's output");
    if (split)
        layout_alias(lg, "A_W_DRES3", "A_RESID3", "d(resid3), kept by B for W (over A_RESID3: the next half's B "
                     "has read it)");
}

/* Parameters: [wte wpe] layers... [lnfw lnfb lm_head]; activations: input, layers...,
 * [lnf, its statistics, probabilities]; scratch: the backward's temporaries. */
void stage_layout(const Config *cfg, const StagePlan *sp, StageLayout *lay)
{
    long B = cfg->micro, T = cfg->context, C = cfg->width, V = cfg->vocab, VP = vocab_stride(cfg), NH = cfg->heads;
    long BT = B * T;
    *lay = (StageLayout){0};

    for (int i = 0; i < N_LAYER_TENSORS; i++)
        layout_add(i < N_ATT_END    ? &lay->att_params
                   : i < N_PROJ_END ? &lay->proj_params
                   : i < N_FC_END   ? &lay->fc_params
                                    : &lay->gelu_params,
                   layer_tensors[i].name, layer_tensor_size(i, C), layer_tensors[i].ckpt_name);
    long mlp_params = lay->fc_params.total + lay->gelu_params.total;
    long attn_params = lay->att_params.total + lay->proj_params.total;
    lay->layer_params = attn_params + mlp_params;

    layer_act_layouts(cfg, lay);
    Layout *la = &lay->att_acts, *lp = &lay->proj_acts, *lf = &lay->fc_acts, *lg = &lay->gelu_acts;
    long attn_acts = la->total + lp->total;
    lay->layer_acts = attn_acts + lf->total + lg->total;

    Layout *p = &lay->params;
    if (sp->has_embed) {
        layout_add(p, "PARAM_WTE", V * C, "token embedding [V, C]");
        layout_add(p, "PARAM_WPE", T * C, "position embedding [T, C]");
    }
    if (sp->lead_proj)
        layout_add(p, "PARAM_LEAD_PROJ", lay->proj_params.total, "the proj piece of the layer before the first");
    if (sp->lead_mlp)
        layout_add(p, "PARAM_LEAD_MLP", mlp_params, "the MLP half of the layer before the first");
    if (sp->lead_gelu)
        layout_add(p, "PARAM_LEAD_GELU", lay->gelu_params.total, "the GELU piece of the layer before the first");
    layout_add(p, "PARAM_LAYERS", sp->n_layers * lay->layer_params, "the layers' blocks");
    if (sp->tail_attn)
        layout_add(p, "PARAM_TAIL_ATTN", attn_params + (sp->tail_fc ? lay->fc_params.total : 0),
                   sp->tail_fc ? "the attention half and the fc piece of the layer after the last"
                               : "the attention half of the layer after the last");
    if (sp->tail_atty)
        layout_add(p, "PARAM_TAIL_ATTN", lay->att_params.total, "the att piece of the layer after the last");
    long rows = sp->vocab_end - sp->vocab_begin, RP = (rows + 63) / 64 * 64;
    if (sp->has_lnf) {
        layout_add(p, "PARAM_LNFW", C, "final LayerNorm weight");
        layout_add(p, "PARAM_LNFB", C, "final LayerNorm bias");
    }
    if (rows > 0 && !cfg->tied)
        layout_add(p, "PARAM_LM_HEAD", rows * C, rows == V ? "LM head [V, C]" : "the LM head's rows [HEAD_V0, HEAD_V0 + HEAD_VN), [HEAD_VN, C]");

    Layout *a = &lay->acts;
    if (stage_head_back(sp)) { // the split's front sends LayerNorm's output as stored, then its statistics
        layout_add_operand(a, cfg, true, "ACT_INPUT", BT * C, "received final LayerNorm output (bf16 under bf16)");
        layout_add(a, "ACT_INPUT_PART", 2 * BT, "received per token: log-sum-exp over rows [0, HEAD_V0), the "
                   "target's logit if among them");
    } else {
        if (receives_residual(cfg, sp)) // messages bf16: the received message, widened into ACT_INPUT
            layout_add(a, "ACT_INPUT_MSG",
                       sp->lead_gelu   ? fc_message_floats(cfg)
                       : sp->lead_proj ? atty_message_floats(cfg)
                                       : residual_message_floats(cfg),
                       "received input in bf16 (messages bf16)");
        layout_add(a, "ACT_INPUT", BT * C, sp->has_embed ? "embedding output" : "received input");
        if (sp->lead_gelu) // right after ACT_INPUT: the two are the message from the stage before
            layout_add(a, "ACT_INPUT_FC", BT * 4 * C, "received fc product output (ACT_INPUT is resid2)");
        if (sp->lead_proj) // the same
            layout_add(a, "ACT_INPUT_ATTY", BT * C, "received attention output, in fp32 (ACT_INPUT is the layer's "
                       "input); the proj piece keeps it as its A_ATTY");
    }
    if (sp->lead_proj)
        layout_add(a, "ACT_LEAD_PROJ", lp->total, "the leading proj piece's block");
    if (sp->lead_mlp)
        layout_add(a, "ACT_LEAD_MLP", lf->total + lg->total, "the leading MLP half's block");
    if (sp->lead_gelu)
        layout_add(a, "ACT_LEAD_GELU", lg->total, "the leading GELU piece's block");
    layout_add(a, "ACT_LAYERS", sp->n_layers * lay->layer_acts, "the layers' blocks");
    if (sp->tail_attn)
        layout_add(a, "ACT_TAIL_ATTN", attn_acts + (sp->tail_fc ? lf->total : 0),
                   sp->tail_fc ? "the trailing attention half's and fc piece's block (its A_RESID2 and A_FC_PRE "
                                 "the message to the next stage)"
                               : "the trailing attention half's block");
    if (sp->tail_atty) {
        layout_add(a, "ACT_TAIL_ATTN", la->total + layout_offset(lp, "A_RESID2"),
                   "the trailing att piece's block, and of the proj piece's its A_ATTY");
        layout_add(a, "ACT_OUTPUT_ATTY", message_dfc_offset(cfg) + BT * C, "the message to the next stage, in fp32: "
                   "the att piece's input x (padded), then its output atty");
    }
    if (sp->has_lnf) {
        layout_add_operand(a, cfg, true, "ACT_LNF", BT * C, "final LayerNorm output (bf16 under bf16)");
        if (stage_head_front(sp)) // right after ACT_LNF: the two are the message to the last stage
            layout_add(a, "ACT_XENT_PART", 2 * BT, "per token: log-sum-exp over this stage's rows, the target's "
                       "logit if among them (else 0)");
        layout_add(a, "ACT_LNF_MEAN", BT, "its row means");
        layout_add(a, "ACT_LNF_RSTD", BT, "its row 1/std");
    }
    if (sp->has_lnf && sp->has_head)
        layout_add(a, "ACT_PROBS", BT * VP, "probabilities, rows of VP (the backward turns them into dlogits); "
                   "on the GPU logits (bf16 under bf16), which the forward turns into unscaled dlogits");
    else if (rows > 0)
        layout_add(a, "ACT_LOGITS", BT * RP, "logits of the stage's rows, rows of HEAD_VP (bf16 on the GPU under "
                   "bf16), turned in place into unscaled dlogits");
    if (stage_head_back(sp))
        layout_add(a, "ACT_XENT_LSE", BT, "each token's log-sum-exp over the whole vocabulary");
    if (sends_residual(cfg, sp))
        layout_add(a, "ACT_OUTPUT_MSG",
                   sp->tail_fc     ? fc_message_floats(cfg)
                   : sp->tail_atty ? atty_message_floats(cfg)
                                   : residual_message_floats(cfg),
                   "the output in bf16, the message sent (messages bf16)");
    if (config_splits_backward(cfg) && sp->has_embed) // zero-bubble: what B keeps for W
        layout_alias(a, "ACT_W_DEMB", "ACT_INPUT", "d(embedding output), kept by B for W (over ACT_INPUT: the "
                     "first layer's B has read it)");

    Layout *s = &lay->scratch;
    layout_add(s, "S_DRES", BT * C, "d(loss)/d(residual stream), updated layer by layer");
    layout_add(s, "S_DLN", BT * C, "d(loss)/d(LayerNorm output)");
    layout_add(s, "S_DQKV", BT * 3 * C, "d(loss)/d(qkv)");
    layout_add(s, "S_DATTY", BT * C, "d(loss)/d(attention output)");
    layout_add(s, "S_DFC", BT * 4 * C, "d(loss)/d(GELU output), then d(pre-activation)");
    if (cfg->attention == ATTN_MATMUL)
        layout_add(s, "S_ATT_P", T * T, "attention probabilities of one (batch, head), recomputed");
    if (cfg->attention != ATTN_FLASH) {
        layout_add(s, "S_ATT_DP", T * T, "the probabilities' gradient, then the scores' gradient");
    } else {
        layout_add(s, "S_ATT_DELTA", B * NH * T, "d(attention output) . attention output, per row");
    }
    layout_add_bf16(s, cfg, "S_DRES_H", BT * C, "S_DRES in bf16 (the GPU's product operand)");
    layout_add_bf16(s, cfg, "S_DFC_H", BT * 4 * C, "S_DFC in bf16");
    if (cfg->attention == ATTN_FLASH)
        layout_add_bf16(s, cfg, "S_DQKV_H", BT * 3 * C, "S_DQKV in bf16");

    lay->in_offset = layout_offset(a, receives_residual(cfg, sp) ? "ACT_INPUT_MSG" : "ACT_INPUT");
    lay->out_offset = sp->tail_atty ? layout_offset(a, "ACT_OUTPUT_ATTY")
                      : sp->tail_attn ? layout_offset(a, "ACT_TAIL_ATTN") + la->total + layout_offset(lp, "A_RESID2")
                      : sp->n_layers > 0 ? layout_offset(a, "ACT_LAYERS") + (sp->n_layers - 1) * lay->layer_acts +
                                               attn_acts + lf->total + layout_offset(lg, "A_RESID3")
                      : sp->lead_mlp  ? layout_offset(a, "ACT_LEAD_MLP") + lf->total + layout_offset(lg, "A_RESID3")
                      : sp->lead_gelu ? layout_offset(a, "ACT_LEAD_GELU") + layout_offset(lg, "A_RESID3")
                                      : lay->in_offset;
    lay->probs_offset = sp->has_lnf && sp->has_head ? layout_offset(a, "ACT_PROBS")
                        : rows > 0                  ? layout_offset(a, "ACT_LOGITS")
                                                    : 0;
    lay->lse_offset = stage_head_back(sp) ? layout_offset(a, "ACT_XENT_LSE") : 0;
    lay->msg_offset = stage_head_front(sp)            ? layout_offset(a, "ACT_LNF")
                      : sends_residual(cfg, sp)         ? layout_offset(a, "ACT_OUTPUT_MSG")
                                                        : lay->out_offset;
    // the messages: B T C floats between layers; resid2 and the fc output across a cut after
    // the fc product; the split's own between the last two stages
    long message = residual_message_floats(cfg);
    lay->out_floats = stage_head_front(sp) ? (long)head_message_floats(cfg, false)
                      : sp->tail_fc        ? fc_message_floats(cfg)
                      : sp->tail_atty      ? atty_message_floats(cfg)
                                           : message;
    lay->dx_floats = stage_head_back(sp) ? (long)head_message_floats(cfg, true)
                     : sp->lead_gelu     ? fc_message_floats(cfg)
                     : sp->lead_proj     ? atty_message_floats(cfg)
                                         : message;
    long resid = message_dfc_offset(cfg); // resid2 as layout_add pads it
    if (sp->tail_fc && (layout_offset(lp, "A_RESID2") + resid != lp->total || layout_offset(lf, "A_FC_PRE") != 0))
        ICE("resid2 and the fc output are not one message");
    if (sp->lead_gelu && !stage_head_back(sp) && layout_offset(a, "ACT_INPUT_FC") != layout_offset(a, "ACT_INPUT") + resid)
        ICE("the received resid2 and fc output are not one message");
    if (sp->lead_proj && layout_offset(a, "ACT_INPUT_ATTY") != layout_offset(a, "ACT_INPUT") + resid)
        ICE("the received x and attention output are not one message");
    if (stage_head_front(sp) && layout_offset(a, "ACT_XENT_PART") + 2 * BT - lay->msg_offset != lay->out_floats)
        ICE("the split's message is not contiguous at ACT_LNF");
}

static void tensor_add(TensorInfo *out, int *n, const char *name, const char *ckpt,
                       long ckpt_offset, long offset, long size, bool decay, const char *init)
{
    TensorInfo *t = &out[(*n)++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ckpt_tensor = ckpt;
    t->ckpt_offset = ckpt_offset;
    t->offset = offset;
    t->size = size;
    t->decay = decay;
    t->init = init;
}

/* Layer `layer`'s tensors [from, to) of layer_tensors, in the piece block at `block` laid out by piece. */
static void layer_tensors_add(TensorInfo *out, int *n, long C, int layer, int from, int to, long block,
                              const Layout *piece)
{
    for (int i = from; i < to; i++) {
        char name[32];
        snprintf(name, sizeof name, "h%d.%s", layer, layer_tensors[i].ckpt_name);
        long size = layer_tensor_size(i, C);
        tensor_add(out, n, name, layer_tensors[i].ckpt_tensor, layer * size, block + piece->entry[i - from].offset,
                   size, layer_tensors[i].decay, layer_tensors[i].init);
    }
}

/* Layer `layer`'s pieces from `first` (0 att, 1 proj, 2 fc, 3 GELU) to the last before `end`,
 * in the block at `block`, one after the other. */
static void layer_pieces_add(TensorInfo *out, int *n, long C, const StageLayout *lay, int layer, int first, int end,
                             long block)
{
    static const int tensor_start[5] = {0, N_ATT_END, N_PROJ_END, N_FC_END, N_LAYER_TENSORS};
    const Layout *piece[4] = {&lay->att_params, &lay->proj_params, &lay->fc_params, &lay->gelu_params};
    for (int i = first; i < end; i++) {
        layer_tensors_add(out, n, C, layer, tensor_start[i], tensor_start[i + 1], block, piece[i]);
        block += piece[i]->total;
    }
}

/* Every parameter tensor of the stage, in parameter-block order. A layer's tensor is the
 * slice [layer * size, (layer + 1) * size) of llm.c's tensor of all layers. */
int stage_tensors(const Config *cfg, const StagePlan *sp, const StageLayout *lay, TensorInfo **tensors)
{
    long C = cfg->width;
    int n = 0;
    TensorInfo *out = *tensors = xmalloc(sizeof *out * (size_t)(5 + N_LAYER_TENSORS * (sp->n_layers + 2)));
    if (sp->has_embed) {
        tensor_add(out, &n, "wte", CKPT(WTE), 0, layout_offset(&lay->params, "PARAM_WTE"),
                   (long)cfg->vocab * C, true, INIT_NORMAL);
        tensor_add(out, &n, "wpe", CKPT(WPE), 0, layout_offset(&lay->params, "PARAM_WPE"),
                   (long)cfg->context * C, true, INIT_NORMAL);
    }
    if (sp->lead_proj)
        layer_pieces_add(out, &n, C, lay, sp->first_layer - 1, 1, 2, layout_offset(&lay->params, "PARAM_LEAD_PROJ"));
    if (sp->lead_mlp)
        layer_pieces_add(out, &n, C, lay, sp->first_layer - 1, 2, 4, layout_offset(&lay->params, "PARAM_LEAD_MLP"));
    if (sp->lead_gelu)
        layer_pieces_add(out, &n, C, lay, sp->first_layer - 1, 3, 4, layout_offset(&lay->params, "PARAM_LEAD_GELU"));
    long layers = layout_offset(&lay->params, "PARAM_LAYERS");
    for (int l = 0; l < sp->n_layers; l++)
        layer_pieces_add(out, &n, C, lay, sp->first_layer + l, 0, 4, layers + l * lay->layer_params);
    if (sp->tail_attn || sp->tail_atty)
        layer_pieces_add(out, &n, C, lay, sp->first_layer + sp->n_layers, 0, sp->tail_fc ? 3 : sp->tail_attn ? 2 : 1,
                         layout_offset(&lay->params, "PARAM_TAIL_ATTN"));
    if (sp->has_lnf) {
        tensor_add(out, &n, "lnfw", CKPT(LNFW), 0, layout_offset(&lay->params, "PARAM_LNFW"), C,
                   false, INIT_ONES);
        tensor_add(out, &n, "lnfb", CKPT(LNFB), 0, layout_offset(&lay->params, "PARAM_LNFB"), C,
                   false, INIT_ZEROS);
    }
    // under a vocabulary split each of the last two stages holds a slice of the head's rows
    if (sp->vocab_end > sp->vocab_begin && !cfg->tied)
        tensor_add(out, &n, "lm_head", CKPT(LM_HEAD), sp->vocab_begin * C, layout_offset(&lay->params, "PARAM_LM_HEAD"),
                   (sp->vocab_end - sp->vocab_begin) * C, true, INIT_NORMAL);
    return n;
}
