/* codegen.c: per-stage memory layout, tensor tables and backend-neutral op lists; writes
 * the generated sources.
 *
 * A stage is made of sections: the embedding (first stage), one transformer block repeated
 * for each of its layers, and the head (last stage), forward and backward. The op lists of
 * the sections are the same for every stage, so a layer computes bitwise the same whichever
 * stage holds it, and pipelined synchronous training can equal training at p = 1.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pacic.h"

/* The runtime's enumerators are written by name into the generated tables, so the
 * compiler never depends on their values (it does not include runtime/pacirt.h). */
#define CKPT(name) "PR_CKPT_" #name
#define INIT_NORMAL "PR_INIT_NORMAL"
#define INIT_RESIDUAL "PR_INIT_RESIDUAL"
#define INIT_ZEROS "PR_INIT_ZEROS"
#define INIT_ONES "PR_INIT_ONES"

/* Appends a named range; ranges follow each other with no gaps. */
/* Every entry starts on 256 bytes and every block is a multiple of them, so any pointer a
 * generated op forms from the arena's start is as aligned as cuBLASLt's algorithms assume
 * unless told otherwise (and vector loads want). */
enum { LAYOUT_ALIGN_FLOATS = 64 };

static void layout_add(Layout *l, const char *name, long size, const char *doc)
{
    if (l->n == (int)(sizeof l->entry / sizeof l->entry[0]))
        ICE("layout overflow at %s", name);
    l->entry[l->n++] = (LayoutEntry){name, l->total, size, doc};
    l->total += (size + LAYOUT_ALIGN_FLOATS - 1) / LAYOUT_ALIGN_FLOATS * LAYOUT_ALIGN_FLOATS;
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
 * to slices of the checkpoint's tensors one to one. */
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
enum { N_LAYER_TENSORS = sizeof layer_tensors / sizeof layer_tensors[0] };

static long layer_tensor_size(int i, long C)
{
    long rows = layer_tensors[i].rows ? layer_tensors[i].rows * C : 1;
    return rows * layer_tensors[i].cols * C;
}

/* Parameters: [wte wpe] layers... [lnfw lnfb lm_head]; activations: input, layers...,
 * [lnf, its statistics, probabilities]; scratch: the backward's temporaries. */
void stage_layout(const Config *cfg, const StagePlan *sp, StageLayout *lay)
{
    long B = cfg->micro, T = cfg->context, C = cfg->width, V = cfg->vocab, VP = vocab_stride(cfg), NH = cfg->heads;
    long BT = B * T;
    *lay = (StageLayout){0};

    for (int i = 0; i < N_LAYER_TENSORS; i++)
        layout_add(&lay->layer_params, layer_tensors[i].name, layer_tensor_size(i, C),
                   layer_tensors[i].ckpt_name);

    Layout *la = &lay->layer_acts;
    bool flash = cfg->attention == ATTN_FLASH;
    layout_add_operand(la, cfg, flash, "A_LN1", BT * C, "LayerNorm 1 output (bf16 under bf16, flash)");
    layout_add(la, "A_LN1_MEAN", BT, "its row means");
    layout_add(la, "A_LN1_RSTD", BT, "its row 1/std");
    layout_add(la, "A_QKV", BT * 3 * C, "q | k | v per row");
    layout_add_operand(la, cfg, flash, "A_ATTY", BT * C, "attention output, heads side by side (bf16 under bf16, flash)");
    layout_add(la, "A_ATT_LSE", B * NH * T, "log-sum-exp of each attention row");
    if (cfg->attention == ATTN_MATMUL)
        layout_add(la, "A_ATT_WORK", T * T, "attention scores of one (batch, head): workspace");
    layout_add(la, "A_RESID2", BT * C, "residual after attention");
    layout_add_operand(la, cfg, true, "A_LN2", BT * C, "LayerNorm 2 output (bf16 under bf16)");
    layout_add(la, "A_LN2_MEAN", BT, "its row means");
    layout_add(la, "A_LN2_RSTD", BT, "its row 1/std");
    layout_add(la, "A_FC_PRE", BT * 4 * C, "MLP pre-activation (with bias)");
    layout_add_operand(la, cfg, true, "A_FC_GELU", BT * 4 * C, "GELU output (bf16 under bf16)");
    layout_add(la, "A_RESID3", BT * C, "residual after the MLP: the layer's output");

    Layout *p = &lay->params;
    if (sp->has_embed) {
        layout_add(p, "PARAM_WTE", V * C, "token embedding [V, C]");
        layout_add(p, "PARAM_WPE", T * C, "position embedding [T, C]");
    }
    layout_add(p, "PARAM_LAYERS", sp->n_layers * lay->layer_params.total, "the layers' blocks");
    if (sp->has_head) {
        layout_add(p, "PARAM_LNFW", C, "final LayerNorm weight");
        layout_add(p, "PARAM_LNFB", C, "final LayerNorm bias");
        if (!cfg->tied)
            layout_add(p, "PARAM_LM_HEAD", V * C, "LM head [V, C]");
    }

    Layout *a = &lay->acts;
    layout_add(a, "ACT_INPUT", BT * C, sp->has_embed ? "embedding output" : "received input");
    layout_add(a, "ACT_LAYERS", sp->n_layers * la->total, "the layers' blocks");
    if (sp->has_head) {
        layout_add_operand(a, cfg, true, "ACT_LNF", BT * C, "final LayerNorm output (bf16 under bf16)");
        layout_add(a, "ACT_LNF_MEAN", BT, "its row means");
        layout_add(a, "ACT_LNF_RSTD", BT, "its row 1/std");
        layout_add(a, "ACT_PROBS", BT * VP, "probabilities, rows of VP (the backward turns them into dlogits); "
                   "on the GPU logits (bf16 under bf16), which the forward turns into unscaled dlogits");
    }

    Layout *s = &lay->scratch;
    layout_add(s, "S_DRES", BT * C, "d(loss)/d(residual stream), updated layer by layer");
    layout_add(s, "S_DLN", BT * C, "d(loss)/d(LayerNorm output)");
    layout_add(s, "S_DQKV", BT * 3 * C, "d(loss)/d(qkv)");
    layout_add(s, "S_DATTY", BT * C, "d(loss)/d(attention output)");
    layout_add(s, "S_DFC", BT * 4 * C, "d(loss)/d(GELU output), then d(pre-activation)");
    if (cfg->attention == ATTN_MATMUL) {
        layout_add(s, "S_ATT_P", T * T, "attention probabilities of one (batch, head), recomputed");
        layout_add(s, "S_ATT_DP", T * T, "their gradient, then the scores' gradient");
    } else {
        layout_add(s, "S_ATT_DELTA", B * NH * T, "d(attention output) . attention output, per row");
    }
    layout_add_bf16(s, cfg, "S_DRES_H", BT * C, "S_DRES in bf16 (the GPU's product operand)");
    layout_add_bf16(s, cfg, "S_DFC_H", BT * 4 * C, "S_DFC in bf16");
    if (cfg->attention == ATTN_FLASH)
        layout_add_bf16(s, cfg, "S_DQKV_H", BT * 3 * C, "S_DQKV in bf16");

    lay->in_offset = layout_offset(a, "ACT_INPUT");
    lay->out_offset = sp->n_layers > 0
        ? layout_offset(a, "ACT_LAYERS") + (sp->n_layers - 1) * la->total + layout_offset(la, "A_RESID3")
        : lay->in_offset;
    lay->probs_offset = sp->has_head ? layout_offset(a, "ACT_PROBS") : 0;
}

/* The plan sizes memory with formulas (plan.c); the blocks codegen lays out must be what they
 * count, up to the entries' padding, or --explain and the memory errors would be wrong. */
static void check_plan_sizes(const Config *cfg, const Plan *plan)
{
    for (int s = 0; s < plan->stages; s++) {
        const StagePlan *sp = &plan->stage[s];
        StageLayout lay;
        stage_layout(cfg, sp, &lay);
        long act_pad = (lay.acts.n + (long)lay.layer_acts.n * sp->n_layers) * LAYOUT_ALIGN_FLOATS;
        if (labs(lay.scratch.total - sp->scratch_floats) > lay.scratch.n * LAYOUT_ALIGN_FLOATS ||
            labs(lay.acts.total - sp->act_bytes / 4) > act_pad)
            ICE("stage %d: the plan counts %ld scratch and %ld activation floats, the layout %ld and %ld", s,
                sp->scratch_floats, sp->act_bytes / 4, lay.scratch.total, lay.acts.total);
    }
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

/* Every parameter tensor of the stage, in parameter-block order. A layer's tensor is the
 * slice [layer * size, (layer + 1) * size) of llm.c's tensor of all layers. */
int stage_tensors(const Config *cfg, const StagePlan *sp, const StageLayout *lay, TensorInfo **tensors)
{
    long C = cfg->width;
    int n = 0;
    TensorInfo *out = *tensors = xmalloc(sizeof *out * (size_t)(5 + N_LAYER_TENSORS * sp->n_layers));
    if (sp->has_embed) {
        tensor_add(out, &n, "wte", CKPT(WTE), 0, layout_offset(&lay->params, "PARAM_WTE"),
                   (long)cfg->vocab * C, true, INIT_NORMAL);
        tensor_add(out, &n, "wpe", CKPT(WPE), 0, layout_offset(&lay->params, "PARAM_WPE"),
                   (long)cfg->context * C, true, INIT_NORMAL);
    }
    long layers = layout_offset(&lay->params, "PARAM_LAYERS");
    for (int l = 0; l < sp->n_layers; l++) {
        int layer = sp->first_layer + l;
        for (int i = 0; i < N_LAYER_TENSORS; i++) {
            char name[32];
            snprintf(name, sizeof name, "h%d.%s", layer, layer_tensors[i].ckpt_name);
            long size = layer_tensor_size(i, C);
            tensor_add(out, &n, name, layer_tensors[i].ckpt_tensor, layer * size,
                       layers + l * lay->layer_params.total + lay->layer_params.entry[i].offset,
                       size, layer_tensors[i].decay, layer_tensors[i].init);
        }
    }
    if (sp->has_head) {
        tensor_add(out, &n, "lnfw", CKPT(LNFW), 0, layout_offset(&lay->params, "PARAM_LNFW"), C,
                   false, INIT_ONES);
        tensor_add(out, &n, "lnfb", CKPT(LNFB), 0, layout_offset(&lay->params, "PARAM_LNFB"), C,
                   false, INIT_ZEROS);
        if (!cfg->tied)
            tensor_add(out, &n, "lm_head", CKPT(LM_HEAD), 0,
                       layout_offset(&lay->params, "PARAM_LM_HEAD"), (long)cfg->vocab * C, true,
                       INIT_NORMAL);
    }
    return n;
}

static Op *op_push(OpList *l, OpKind kind, const char *comment, const char *fmt, va_list ap)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->ops = xrealloc(l->ops, (size_t)l->cap * sizeof *l->ops);
    }
    Op *op = &l->ops[l->n++];
    *op = (Op){.kind = kind, .comment = xstrdup(comment)};
    va_list copy;
    va_copy(copy, ap);
    int len = vsnprintf(NULL, 0, fmt, copy);
    va_end(copy);
    op->args = xmalloc((size_t)len + 1);
    vsnprintf(op->args, (size_t)len + 1, fmt, ap);
    return op;
}

static void PRINTF_LIKE(4, 5) kernel_op(OpList *l, const char *kernel, const char *comment, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    op_push(l, OP_KERNEL, comment, fmt, ap)->kernel = kernel_find(kernel);
    va_end(ap);
}

static void PRINTF_LIKE(4, 5) plain_op(OpList *l, OpKind kind, const char *comment, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    op_push(l, kind, comment, fmt, ap);
    va_end(ap);
}

#define GEMM(list, comment, ...) plain_op(list, OP_GEMM, comment, __VA_ARGS__)

/* The GPU's form of the last op (Op.gpu_kernel, gpu_args): `kernel` (NULL: the op's own)
 * with the arguments fmt. */
static void PRINTF_LIKE(3, 4) gpu_instead(OpList *l, const char *kernel, const char *fmt, ...)
{
    Op *op = &l->ops[l->n - 1];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    op->gpu_args = xmalloc((size_t)len + 1);
    va_start(ap, fmt);
    vsnprintf(op->gpu_args, (size_t)len + 1, fmt, ap);
    va_end(ap);
    if (kernel)
        op->gpu_kernel = kernel_find(kernel);
}

/* The GPU runs the last op, a kernel, as the block kernel `kernel` with the same arguments. */
static void gpu_block_kernel(OpList *l, const char *kernel)
{
    gpu_instead(l, kernel, "%s", l->ops[l->n - 1].args);
}

/* Marks the last op, a matrix product, as reading the bf16 copies "a_h, b_h" of its operands
 * on the GPU under bf16. */
static void operands_h(OpList *l, const char *copies)
{
    Op *op = &l->ops[l->n - 1];
    if (op->kind != OP_GEMM)
        ICE("bf16 operands on an op that is not a matrix product");
    op->operands_h = xstrdup(copies);
}

/* A matrix product whose rows then get `bias` added: beta must be 0. */
static void gemm_bias(OpList *l, const char *comment, const char *args, const char *bias)
{
    plain_op(l, OP_GEMM, comment, "%s", args);
    l->ops[l->n - 1].bias = xstrdup(bias);
}

/* Marks the last op, a matrix product, as followed by GELU's forward or backward op. */
static void gelu_follows(OpList *l, OpEpilogue epilogue, const char *arg)
{
    Op *op = &l->ops[l->n - 1];
    if (op->kind != OP_GEMM)
        ICE("a GELU epilogue on an op that is not a matrix product");
    op->epilogue = epilogue;
    op->epilogue_arg = xstrdup(arg);
}

/* Offsets of head h of sequence b, inside the loops over (b, h): in qkv rows (its q; k and
 * v are C and 2 C further), in rows of width C, and in the log-sum-exp of the rows. */
#define QKV_HEAD "((long)b * T * 3 * C + h * HS)"
#define ROW_HEAD "((long)b * T * C + h * HS)"
#define LSE_HEAD "((long)(b * NH + h) * T)"
#define SCORE_SCALE "1.0f / sqrtf((float)HS)"

/* The loops over every (sequence, head) of the matmul attention. */
static void heads_loop(OpList *l)
{
    plain_op(l, OP_LOOP, "every sequence of the micro-batch", "b, B");
    plain_op(l, OP_LOOP, "every head", "h, NH");
}

static void heads_end(OpList *l)
{
    plain_op(l, OP_END, "end of the loop", "%s", "");
    plain_op(l, OP_END, "end of the loop", "%s", "");
}

/* Kernel arguments: the bf16 copy at offset `name` of base `base`, which the GPU's products
 * read (NULL on the CPU); and an activation kept in bf16 only under bf16, on both devices
 * (layout_add_operand), which the kernels that produce it write in bf16 instead. */
#define COPY(base, name) "BF16_COPY(" base " + " name ")"
#define STORE(base, name) "BF16_STORE(" base " + " name ")"

/* Attention per (sequence, head) as matrix products over a T x T workspace; the causal
 * softmax is the only elementwise part. */
static void matmul_attention_forward(OpList *l)
{
    heads_loop(l);
    GEMM(l, "scores = q k^T / sqrt(HS)",
         "0, 1, T, T, HS, " SCORE_SCALE ", a + A_QKV + " QKV_HEAD ", 3 * C, a + A_QKV + " QKV_HEAD " + C, 3 * C, "
         "0.0f, a + A_ATT_WORK, T");
    kernel_op(l, "attention_softmax_forward", "causal softmax of the scores",
              "a + A_ATT_WORK, a + A_ATT_LSE + " LSE_HEAD ", T");
    GEMM(l, "atty = probabilities v",
         "0, 0, T, HS, T, 1.0f, a + A_ATT_WORK, T, a + A_QKV + " QKV_HEAD " + 2 * C, 3 * C, "
         "0.0f, a + A_ATTY + " ROW_HEAD ", C");
    heads_end(l);
}

/* Its backward: probabilities recomputed from the saved log-sum-exp into a T x T buffer. */
static void matmul_attention_backward(OpList *l)
{
    heads_loop(l);
    GEMM(l, "scores = q k^T / sqrt(HS), again",
         "0, 1, T, T, HS, " SCORE_SCALE ", a + A_QKV + " QKV_HEAD ", 3 * C, a + A_QKV + " QKV_HEAD " + C, 3 * C, "
         "0.0f, s + S_ATT_P, T");
    kernel_op(l, "attention_probs", "probabilities from the saved log-sum-exp",
              "s + S_ATT_P, a + A_ATT_LSE + " LSE_HEAD ", T");
    GEMM(l, "d v = probabilities^T d atty",
         "1, 0, T, HS, T, 1.0f, s + S_ATT_P, T, s + S_DATTY + " ROW_HEAD ", C, "
         "0.0f, s + S_DQKV + " QKV_HEAD " + 2 * C, 3 * C");
    GEMM(l, "d probabilities = d atty v^T",
         "0, 1, T, T, HS, 1.0f, s + S_DATTY + " ROW_HEAD ", C, a + A_QKV + " QKV_HEAD " + 2 * C, 3 * C, "
         "0.0f, s + S_ATT_DP, T");
    kernel_op(l, "attention_softmax_backward", "d scores, in place", "s + S_ATT_DP, s + S_ATT_P, T");
    GEMM(l, "d q = d scores k",
         "0, 0, T, HS, T, 1.0f, s + S_ATT_DP, T, a + A_QKV + " QKV_HEAD " + C, 3 * C, "
         "0.0f, s + S_DQKV + " QKV_HEAD ", 3 * C");
    GEMM(l, "d k = d scores^T q",
         "1, 0, T, HS, T, 1.0f, s + S_ATT_DP, T, a + A_QKV + " QKV_HEAD ", 3 * C, "
         "0.0f, s + S_DQKV + " QKV_HEAD " + C, 3 * C");
    heads_end(l);
}

/* Section bases (the generated functions' parameters): embedding and head sections see the
 * stage's `params`, `grads`, `acts`, `scratch`; a block sees its layer's `p`, `g`, `a`,
 * its input `x` and the stage's scratch `s`. The head reads its input as `x`. */
void model_ops_build(const Config *cfg, ModelOps *ops)
{
    /* shapes are the generated constants; only the attention's form depends on cfg */
    *ops = (ModelOps){0};

    OpList *l = &ops->embed_fwd;
    kernel_op(l, "encoder_forward", "token + position embedding",
              "acts + ACT_INPUT, tokens, params + PARAM_WTE, params + PARAM_WPE");

    l = &ops->block_fwd;
    // ln1 is also read by d qkvw's product, whose other operand has a bf16 copy with flash only
    bool flash = cfg->attention == ATTN_FLASH;
    kernel_op(l, "layernorm_forward", "ln1 = LayerNorm(x)", "a + A_LN1, a + A_LN1_MEAN, a + A_LN1_RSTD, x, p + P_LN1W, "
              "p + P_LN1B, %s", flash ? STORE("a", "A_LN1") : "(pr_bf16 *)0");
    gemm_bias(l, "qkv = ln1 qkvw^T + qkvb", "0, 1, BT, 3 * C, C, 1.0f, a + A_LN1, C, p + P_QKVW, C, 0.0f, a + A_QKV, 3 * C",
              "p + P_QKVB");
    if (flash)
        operands_h(l, "a + A_LN1, ph + P_QKVW");
    if (flash)
        kernel_op(l, "attention_forward", "atty = causal attention, online softmax",
                  "a + A_ATTY, a + A_ATT_LSE, a + A_QKV, " STORE("a", "A_ATTY"));
    else
        matmul_attention_forward(l);
    gemm_bias(l, "attention projection + attprojb, into resid2 before the residual add",
              "0, 1, BT, C, C, 1.0f, a + A_ATTY, C, p + P_ATTPROJW, C, 0.0f, a + A_RESID2, C", "p + P_ATTPROJB");
    if (flash) // the matmul attention's output comes from per-head products: no bf16 copy
        operands_h(l, "a + A_ATTY, ph + P_ATTPROJW");
    kernel_op(l, "residual_layernorm_forward", "resid2 = x + projection; ln2 = LayerNorm(resid2)",
              "a + A_RESID2, x, a + A_LN2, a + A_LN2_MEAN, a + A_LN2_RSTD, p + P_LN2W, p + P_LN2B, "
              STORE("a", "A_LN2"));
    gemm_bias(l, "fc = ln2 fcw^T + fcb", "0, 1, BT, 4 * C, C, 1.0f, a + A_LN2, C, p + P_FCW, C, 0.0f, a + A_FC_PRE, 4 * C",
              "p + P_FCB");
    operands_h(l, "a + A_LN2, ph + P_FCW");
    // not fused into cuBLASLt's epilogue: it writes fp32 only, where the GPU wants bf16
    kernel_op(l, "gelu_forward", "gelu = GELU(fc)", "a + A_FC_PRE, a + A_FC_GELU, " STORE("a", "A_FC_GELU"));
    gemm_bias(l, "MLP projection + fcprojb, into resid3 before the residual add",
              "0, 1, BT, C, 4 * C, 1.0f, a + A_FC_GELU, 4 * C, p + P_FCPROJW, 4 * C, 0.0f, a + A_RESID3, C",
              "p + P_FCPROJB");
    operands_h(l, "a + A_FC_GELU, ph + P_FCPROJW");
    kernel_op(l, "residual_forward", "resid3 = resid2 + projection", "a + A_RESID3, a + A_RESID2");

    l = &ops->head_fwd;
    kernel_op(l, "layernorm_forward", "lnf = LayerNorm(x)",
              "acts + ACT_LNF, acts + ACT_LNF_MEAN, acts + ACT_LNF_RSTD, x, params + PARAM_LNFW, params + PARAM_LNFB, "
              STORE("acts", "ACT_LNF"));
    GEMM(l, "logits = lnf lm_head^T", "0, 1, BT, V, C, 1.0f, acts + ACT_LNF, C, params + PARAM_LM_HEAD, C, 0.0f, acts + ACT_PROBS, VP");
    operands_h(l, "acts + ACT_LNF, params_h + PARAM_LM_HEAD");
    l->ops[l->n - 1].out_h = true; // the GPU's logits are bf16 under bf16
    kernel_op(l, "softmax_xent_forward", "per-token losses; probabilities (the GPU: unscaled dlogits)",
              "acts + ACT_PROBS, losses, targets");
    // the GPU's classifier: losses and unscaled dlogits in place, in one kernel (llm.c's)
    gpu_instead(l, "classifier_fused", "acts + ACT_PROBS, BF16_COPY(acts + ACT_PROBS), losses, targets");

    l = &ops->head_bwd;
    kernel_op(l, "softmax_xent_backward", "dlogits, in place over the probabilities",
              "acts + ACT_PROBS, targets, dloss, (pr_bf16 *)0");
    l->ops[l->n - 1].gpu_skip = true; // classifier_fused wrote them in the forward
    // On the GPU the dlogits are unscaled (and bf16 under bf16): the products scale by dloss.
    GEMM(l, "d lm_head += dlogits^T lnf",
         "1, 0, V, C, BT, 1.0f, acts + ACT_PROBS, VP, acts + ACT_LNF, C, 1.0f, grads + PARAM_LM_HEAD, C");
    operands_h(l, "NULL, acts + ACT_LNF"); // the CPU's: lnf is kept in bf16, the dlogits are not
    gpu_instead(l, NULL, "1, 0, V, C, BT, dloss, acts + ACT_PROBS, VP, acts + ACT_LNF, C, 1.0f, grads + PARAM_LM_HEAD, C");
    l->ops[l->n - 1].gpu_operands_h = xstrdup("acts + ACT_PROBS, acts + ACT_LNF");
    GEMM(l, "dlnf = dlogits lm_head", "0, 0, BT, C, V, 1.0f, acts + ACT_PROBS, VP, params + PARAM_LM_HEAD, C, 0.0f, scratch + S_DLN, C");
    gpu_instead(l, NULL, "0, 0, BT, C, V, dloss, acts + ACT_PROBS, VP, params + PARAM_LM_HEAD, C, 0.0f, scratch + S_DLN, C");
    l->ops[l->n - 1].gpu_operands_h = xstrdup("acts + ACT_PROBS, params_h + PARAM_LM_HEAD");
    plain_op(l, OP_ZERO, "the residual gradient starts here", "scratch + S_DRES, BT * C");
    kernel_op(l, "layernorm_backward", "dres = d(final LayerNorm)",
              "scratch + S_DRES, grads + PARAM_LNFW, grads + PARAM_LNFB, scratch + S_DLN, x, params + PARAM_LNFW, "
              "acts + ACT_LNF_MEAN, acts + ACT_LNF_RSTD, " COPY("scratch", "S_DRES_H"));
    gpu_block_kernel(l, "layernorm_backward_blocks");

    l = &ops->block_bwd;
    kernel_op(l, "bias_backward", "d fcprojb", "g + P_FCPROJB, s + S_DRES, C");
    gpu_instead(l, "bias_backward_tiles", "g + P_FCPROJB, s + S_DRES, C, (pr_bf16 *)0");
    GEMM(l, "d fcprojw += dres^T gelu",
         "1, 0, C, 4 * C, BT, 1.0f, s + S_DRES, C, a + A_FC_GELU, 4 * C, 1.0f, g + P_FCPROJW, 4 * C");
    operands_h(l, "s + S_DRES_H, a + A_FC_GELU");
    GEMM(l, "d gelu = dres fcprojw", "0, 0, BT, 4 * C, C, 1.0f, s + S_DRES, C, p + P_FCPROJW, 4 * C, 0.0f, s + S_DFC, 4 * C");
    operands_h(l, "s + S_DRES_H, ph + P_FCPROJW");
    gelu_follows(l, EPI_DGELU, "a + A_FC_PRE");
    kernel_op(l, "gelu_backward", "d fc = d gelu * GELU'(fc)", "s + S_DFC, a + A_FC_PRE, " COPY("s", "S_DFC_H"));
    kernel_op(l, "bias_backward", "d fcb", "g + P_FCB, s + S_DFC, 4 * C");
    // after a product fused with GELU's gradient nothing else writes the bf16 copy
    gpu_instead(l, "bias_backward_tiles", "g + P_FCB, s + S_DFC, 4 * C, " COPY("s", "S_DFC_H"));
    GEMM(l, "d fcw += dfc^T ln2", "1, 0, 4 * C, C, BT, 1.0f, s + S_DFC, 4 * C, a + A_LN2, C, 1.0f, g + P_FCW, C");
    operands_h(l, "s + S_DFC_H, a + A_LN2");
    GEMM(l, "d ln2 = dfc fcw", "0, 0, BT, C, 4 * C, 1.0f, s + S_DFC, 4 * C, p + P_FCW, C, 0.0f, s + S_DLN, C");
    operands_h(l, "s + S_DFC_H, ph + P_FCW");
    kernel_op(l, "layernorm_backward", "dres += d(LayerNorm 2): now d(resid2)",
              "s + S_DRES, g + P_LN2W, g + P_LN2B, s + S_DLN, a + A_RESID2, p + P_LN2W, a + A_LN2_MEAN, a + A_LN2_RSTD, "
              COPY("s", "S_DRES_H"));
    gpu_block_kernel(l, "layernorm_backward_blocks");
    kernel_op(l, "bias_backward", "d attprojb", "g + P_ATTPROJB, s + S_DRES, C");
    gpu_instead(l, "bias_backward_tiles", "g + P_ATTPROJB, s + S_DRES, C, (pr_bf16 *)0");
    GEMM(l, "d attprojw += dres^T atty", "1, 0, C, C, BT, 1.0f, s + S_DRES, C, a + A_ATTY, C, 1.0f, g + P_ATTPROJW, C");
    if (flash)
        operands_h(l, "s + S_DRES_H, a + A_ATTY");
    GEMM(l, "d atty = dres attprojw", "0, 0, BT, C, C, 1.0f, s + S_DRES, C, p + P_ATTPROJW, C, 0.0f, s + S_DATTY, C");
    operands_h(l, "s + S_DRES_H, ph + P_ATTPROJW");
    if (flash) {
        kernel_op(l, "attention_backward_query", "d q, and delta for the key side",
                  "s + S_DQKV, s + S_ATT_DELTA, s + S_DATTY, a + A_ATTY, a + A_QKV, a + A_ATT_LSE, " COPY("s", "S_DQKV_H")
                  ", " STORE("a", "A_ATTY"));
        kernel_op(l, "attention_backward_key", "d k, d v",
                  "s + S_DQKV, s + S_ATT_DELTA, s + S_DATTY, a + A_QKV, a + A_ATT_LSE, " COPY("s", "S_DQKV_H"));
    } else {
        matmul_attention_backward(l);
    }
    kernel_op(l, "bias_backward", "d qkvb", "g + P_QKVB, s + S_DQKV, 3 * C");
    gpu_instead(l, "bias_backward_tiles", "g + P_QKVB, s + S_DQKV, 3 * C, (pr_bf16 *)0");
    GEMM(l, "d qkvw += dqkv^T ln1", "1, 0, 3 * C, C, BT, 1.0f, s + S_DQKV, 3 * C, a + A_LN1, C, 1.0f, g + P_QKVW, C");
    if (flash) // the matmul attention's gradients come from per-head products: no bf16 copy
        operands_h(l, "s + S_DQKV_H, a + A_LN1");
    GEMM(l, "d ln1 = dqkv qkvw", "0, 0, BT, C, 3 * C, 1.0f, s + S_DQKV, 3 * C, p + P_QKVW, C, 0.0f, s + S_DLN, C");
    if (flash)
        operands_h(l, "s + S_DQKV_H, ph + P_QKVW");
    kernel_op(l, "layernorm_backward", "dres += d(LayerNorm 1): now d(x)",
              "s + S_DRES, g + P_LN1W, g + P_LN1B, s + S_DLN, x, p + P_LN1W, a + A_LN1_MEAN, a + A_LN1_RSTD, "
              COPY("s", "S_DRES_H"));
    gpu_block_kernel(l, "layernorm_backward_blocks");

    l = &ops->embed_bwd;
    kernel_op(l, "encoder_backward", "d wte, d wpe", "grads + PARAM_WTE, grads + PARAM_WPE, scratch + S_DRES, tokens");
}

static void op_list_free(OpList *l)
{
    for (int i = 0; i < l->n; i++) {
        free(l->ops[i].args);
        free(l->ops[i].bias);
        free(l->ops[i].epilogue_arg);
        free(l->ops[i].operands_h);
        free(l->ops[i].gpu_args);
        free(l->ops[i].gpu_operands_h);
        free(l->ops[i].comment);
    }
    free(l->ops);
}

void model_ops_free(ModelOps *ops)
{
    op_list_free(&ops->embed_fwd);
    op_list_free(&ops->block_fwd);
    op_list_free(&ops->head_fwd);
    op_list_free(&ops->head_bwd);
    op_list_free(&ops->block_bwd);
    op_list_free(&ops->embed_bwd);
}

static bool write_source(const char *dir, const char *name, const StrBuf *sb)
{
    char *path = xasprintf("%s/%s", dir, name);
    bool ok = write_file_atomic(path, sb->data ? sb->data : "", sb->len) == 0;
    if (!ok)
        fprintf(stderr, "pacic: error: cannot write %s: %s\n", path, strerror(errno));
    free(path);
    return ok;
}

/* The GPU path's device half: every stage launches kernels of the same unit (it holds every
 * kernel at the model's shapes), so it is compiled once per architecture; the images go to
 * cuda_images.c, ptxas's report to cuda_resources.txt. An NVRTC error is a pacic bug: the
 * unit stays in dir for inspection and pacic exits 2. */
static bool cuda_write(const Config *cfg, const Plan *plan, const char *dir)
{
    StrBuf unit = {0}, report = {0}, images_c = {0};
    emit_cuda_stage(&unit, cfg, plan, 0);
    bool ok = write_source(dir, "stages.cu", &unit);
    CudaImage images[8];
    int n = 0, spilling = 0;
    for (int i = 0; i < cuda_arch_count && ok; i++, n++) {
        if (!cuda_compile(unit.data, "stages.cu", cuda_archs[i], cfg->precision == PREC_BF16, &images[n])) {
            fprintf(stderr, "pacic: internal error: NVRTC cannot compile the generated CUDA for %s; "
                            "the unit is kept in %s/stages.cu\n%s\nThis is a bug in pacic; please "
                            "report it with the input file.\n", cuda_archs[i], dir, images[n].log);
            exit(EXIT_INTERNAL);
        }
        spilling += cuda_resource_report(&report, &images[n]);
    }
    if (ok) {
        sb_printf(&report, "kernels with spills: %d\n", spilling);
        emit_cuda_images(&images_c, cfg, images, n);
        ok = write_source(dir, "cuda_resources.txt", &report) && write_source(dir, "cuda_images.c", &images_c);
    }
    for (int i = 0; i < n; i++)
        cuda_image_free(&images[i]);
    sb_free(&unit);
    sb_free(&report);
    sb_free(&images_c);
    return ok;
}

/* One stage_S.c per stage and program.c; the folder is created if missing. */
bool codegen_write(const Config *cfg, const Plan *plan, const paci_table *t, const char *dir)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "pacic: error: cannot create %s: %s\n", dir, strerror(errno));
        return false;
    }
    check_plan_sizes(cfg, plan);
    ModelOps ops;
    model_ops_build(cfg, &ops);
    bool ok = !cfg->cuda || cuda_write(cfg, plan, dir);
    for (int s = 0; s < plan->stages && ok; s++) {
        StrBuf sb = {0};
        emit_c_stage(&sb, cfg, plan, s, &ops);
        if (cfg->cuda)
            emit_cuda_host(&sb, cfg, plan, s, &ops);
        char *name = xasprintf("stage_%d.c", s);
        ok = write_source(dir, name, &sb);
        free(name);
        sb_free(&sb);
    }
    if (ok) {
        StrBuf sb = {0};
        emit_c_program(&sb, cfg, plan, t);
        ok = write_source(dir, "program.c", &sb);
        sb_free(&sb);
    }
    model_ops_free(&ops);
    return ok;
}
