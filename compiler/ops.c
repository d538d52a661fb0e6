/* ops.c: how the model is lowered to operations. A stage is made of sections: the embedding
 * (first stage), one transformer block repeated for each of its layers, and the head (last
 * stage), forward and backward. Each section is a backend-neutral op list (kernel launches of
 * kernels.c's descriptions, matrix products, zeroing, copies, loops) whose arguments name the
 * layout's offsets (layout.c); the C emitter, the CUDA emitter and the GPU cost model all read
 * these lists. Where the GPU runs an op otherwise, the op says so here (Op.gpu_kernel,
 * gpu_args, gpu_skip); how attention's kernels are tiled for the GPU is attention_gpu.c's.
 *
 * The op lists of the sections are the same for every stage, so a layer computes bitwise the
 * same whichever stage holds it, and pipelined synchronous training can equal training at
 * p = 1.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "pacic.h"

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
    l->ops[l->n - 1].parallel = true;
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

/* A product of the matmul attention whose T x T operand is zero above the diagonal, or whose
 * T x T result is read only up to it (Op.causal). */
#define CAUSAL_GEMM(list, comment, ...) (GEMM(list, comment, __VA_ARGS__), (list)->ops[(list)->n - 1].causal = true)

/* The attention scores of head h of sequence b, q k^T / sqrt(HS), into the T x T `scores`. */
static void scores_product(OpList *l, const char *comment, const char *scores)
{
    CAUSAL_GEMM(l, comment, "0, 1, T, T, HS, " SCORE_SCALE ", a + A_QKV + " QKV_HEAD ", 3 * C, a + A_QKV + "
                QKV_HEAD " + C, 3 * C, 0.0f, %s, T", scores);
}

/* Head h of sequence b's T x T probabilities under `attention stored`. */
#define PROBS_HEAD "((long)(b * NH + h) * T * T)"

/* Attention per (sequence, head) as matrix products over a T x T matrix: a workspace under
 * `attention matmul`, the head's kept probabilities under `stored`; the causal softmax is the
 * only elementwise part. */
static void matmul_attention_forward(OpList *l, const Config *cfg)
{
    const char *probs = cfg->attention == ATTN_STORED ? "a + A_ATT_P + " PROBS_HEAD : "a + A_ATT_WORK";
    heads_loop(l);
    scores_product(l, "scores = q k^T / sqrt(HS)", probs);
    kernel_op(l, "attention_softmax_forward", "causal softmax of the scores", "%s, a + A_ATT_LSE + " LSE_HEAD ", T",
              probs);
    CAUSAL_GEMM(l, "atty = probabilities v",
                "0, 0, T, HS, T, 1.0f, %s, T, a + A_QKV + " QKV_HEAD " + 2 * C, 3 * C, "
                "0.0f, a + A_PROJ + A_ATTY + " ROW_HEAD ", C", probs); // the loop body sees a and s only
    heads_end(l);
}

/* Its backward: under `matmul` the probabilities recomputed from the saved log-sum-exp into a
 * T x T buffer, under `stored` read where the forward kept them. */
static void matmul_attention_backward(OpList *l, const Config *cfg)
{
    bool stored = cfg->attention == ATTN_STORED;
    const char *probs = stored ? "a + A_ATT_P + " PROBS_HEAD : "s + S_ATT_P";
    heads_loop(l);
    if (!stored) {
        scores_product(l, "scores = q k^T / sqrt(HS), again", probs);
        kernel_op(l, "attention_probs", "probabilities from the saved log-sum-exp",
                  "%s, a + A_ATT_LSE + " LSE_HEAD ", T", probs);
    }
    CAUSAL_GEMM(l, "d v = probabilities^T d atty",
                "1, 0, T, HS, T, 1.0f, %s, T, s + S_DATTY + " ROW_HEAD ", C, "
                "0.0f, s + S_DQKV + " QKV_HEAD " + 2 * C, 3 * C", probs);
    CAUSAL_GEMM(l, "d probabilities = d atty v^T",
                "0, 1, T, T, HS, 1.0f, s + S_DATTY + " ROW_HEAD ", C, a + A_QKV + " QKV_HEAD " + 2 * C, 3 * C, "
                "0.0f, s + S_ATT_DP, T");
    kernel_op(l, "attention_softmax_backward", "d scores, in place", "s + S_ATT_DP, %s, T", probs);
    CAUSAL_GEMM(l, "d q = d scores k",
                "0, 0, T, HS, T, 1.0f, s + S_ATT_DP, T, a + A_QKV + " QKV_HEAD " + C, 3 * C, "
                "0.0f, s + S_DQKV + " QKV_HEAD ", 3 * C");
    CAUSAL_GEMM(l, "d k = d scores^T q",
                "1, 0, T, HS, T, 1.0f, s + S_ATT_DP, T, a + A_QKV + " QKV_HEAD ", 3 * C, "
                "0.0f, s + S_DQKV + " QKV_HEAD " + C, 3 * C");
    heads_end(l);
}

/* A layer's att piece forward, from its input x: ln1, qkv, attention, into the proj piece's
 * ap + A_ATTY. */
static void att_piece_forward(OpList *l, const Config *cfg)
{
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
                  "ap + A_ATTY, a + A_ATT_LSE, a + A_QKV, " STORE("ap", "A_ATTY"));
    else
        matmul_attention_forward(l, cfg);
}

/* Its proj piece forward, from atty (ap + A_ATTY) and x: the projection into resid2. In a whole
 * layer (`then_ln2`) the residual add fuses with the MLP half's LayerNorm 2, which writes
 * through the MLP half's bases; alone, the piece ends with the residual add. */
static void proj_piece_forward(OpList *l, const Config *cfg, bool then_ln2)
{
    bool flash = cfg->attention == ATTN_FLASH;
    gemm_bias(l, "attention projection + attprojb, into resid2 before the residual add",
              "0, 1, BT, C, C, 1.0f, ap + A_ATTY, C, pp + P_ATTPROJW, C, 0.0f, ap + A_RESID2, C", "pp + P_ATTPROJB");
    if (flash) // the matmul attention's output comes from per-head products: no bf16 copy
        operands_h(l, "ap + A_ATTY, pph + P_ATTPROJW");
    if (then_ln2)
        kernel_op(l, "residual_layernorm_forward", "resid2 = x + projection; ln2 = LayerNorm(resid2)",
                  "ap + A_RESID2, x, am + A_LN2, am + A_LN2_MEAN, am + A_LN2_RSTD, pm + P_LN2W, pm + P_LN2B, "
                  STORE("am", "A_LN2"));
    else
        kernel_op(l, "residual_forward", "resid2 = x + projection", "ap + A_RESID2, x");
}

/* A layer's attention half forward: its att piece, then its proj piece. */
static void attention_half_forward(OpList *l, const Config *cfg, bool then_ln2)
{
    att_piece_forward(l, cfg);
    proj_piece_forward(l, cfg, then_ln2);
}

/* A layer's fc piece forward, from its input xm (resid2): ln2 (unless the attention half
 * fused it) and the fc product. Its bases are pm, am and pmh (the bf16 copy). */
static void fc_piece_forward(OpList *l, bool with_ln2)
{
    if (with_ln2)
        kernel_op(l, "layernorm_forward", "ln2 = LayerNorm(resid2)",
                  "am + A_LN2, am + A_LN2_MEAN, am + A_LN2_RSTD, xm, pm + P_LN2W, pm + P_LN2B, " STORE("am", "A_LN2"));
    gemm_bias(l, "fc = ln2 fcw^T + fcb", "0, 1, BT, 4 * C, C, 1.0f, am + A_LN2, C, pm + P_FCW, C, 0.0f, am + A_FC_PRE, 4 * C",
              "pm + P_FCB");
    operands_h(l, "am + A_LN2, pmh + P_FCW");
}

/* Its GELU piece forward, from fc (the fc product's output) and xm (resid2): GELU, the
 * projection, resid3. Its bases are pg, ag and pgh. */
static void gelu_piece_forward(OpList *l)
{
    // not fused into cuBLASLt's epilogue: it writes fp32 only, where the GPU wants bf16
    kernel_op(l, "gelu_forward", "gelu = GELU(fc)", "fc, ag + A_FC_GELU, " STORE("ag", "A_FC_GELU"));
    gemm_bias(l, "MLP projection + fcprojb, into resid3 before the residual add",
              "0, 1, BT, C, 4 * C, 1.0f, ag + A_FC_GELU, 4 * C, pg + P_FCPROJW, 4 * C, 0.0f, ag + A_RESID3, C",
              "pg + P_FCPROJB");
    operands_h(l, "ag + A_FC_GELU, pgh + P_FCPROJW");
    kernel_op(l, "residual_forward", "resid3 = resid2 + projection", "ag + A_RESID3, xm");
}

/* The MLP half: both pieces. */
static void mlp_half_forward(OpList *l, bool with_ln2)
{
    fc_piece_forward(l, with_ln2);
    gelu_piece_forward(l);
}

/* A half layer's backward in four parts: W1, the gradients of the product into the residual
 * (weight and bias) from dres; B1, down through that product (and GELU, or attention) to the
 * first product's output gradient; W2, that product's weight and bias gradients from it; B2,
 * down through it and the LayerNorm, which adds into dres. The fused backward runs them in
 * order; a zero-bubble B runs B1 and B2, keeping dres and the middle gradient in the slot
 * (A_W_*) for its W, which runs W1 and W2 from there. `dres` and `dmid` name where W1 and W2
 * read them. Under bf16 the GPU's W1 and W2 products read the gradients' bf16 copies in the
 * scratch (S_*_H): in the fused backward the kernel that wrote the gradient wrote its copy;
 * a W, whose gradient comes from the slot (`kept`), finds another micro-batch's copy there, so
 * its bias kernel, which reads the gradient first, writes the copy again on the way. */
static void mlp_w1(OpList *l, const char *dres, bool kept)
{
    kernel_op(l, "bias_backward", "d fcprojb", "gg + P_FCPROJB, %s, C", dres);
    gpu_instead(l, "bias_backward_tiles", "gg + P_FCPROJB, %s, C, %s", dres,
                kept ? COPY("s", "S_DRES_H") : "(pr_bf16 *)0");
    GEMM(l, "d fcprojw += dres^T gelu",
         "1, 0, C, 4 * C, BT, 1.0f, %s, C, ag + A_FC_GELU, 4 * C, 1.0f, gg + P_FCPROJW, 4 * C", dres);
    operands_h(l, "s + S_DRES_H, ag + A_FC_GELU");
}

static void mlp_b1(OpList *l)
{
    GEMM(l, "d gelu = dres fcprojw", "0, 0, BT, 4 * C, C, 1.0f, s + S_DRES, C, pg + P_FCPROJW, 4 * C, 0.0f, s + S_DFC, 4 * C");
    operands_h(l, "s + S_DRES_H, pgh + P_FCPROJW");
    gelu_follows(l, EPI_DGELU, "fc");
    kernel_op(l, "gelu_backward", "d fc = d gelu * GELU'(fc)", "s + S_DFC, fc, " COPY("s", "S_DFC_H"));
}

static void fc_bias_gradient(OpList *l, const char *dfc)
{
    kernel_op(l, "bias_backward", "d fcb", "gm + P_FCB, %s, 4 * C", dfc);
    // after a product fused with GELU's gradient nothing else writes the bf16 copy
    gpu_instead(l, "bias_backward_tiles", "gm + P_FCB, %s, 4 * C, " COPY("s", "S_DFC_H"), dfc);
}

static void fc_weight_gradient(OpList *l, const char *dfc)
{
    GEMM(l, "d fcw += dfc^T ln2", "1, 0, 4 * C, C, BT, 1.0f, %s, 4 * C, am + A_LN2, C, 1.0f, gm + P_FCW, C", dfc);
    operands_h(l, "s + S_DFC_H, am + A_LN2");
}

static void mlp_w2(OpList *l, const char *dfc)
{
    fc_bias_gradient(l, dfc);
    fc_weight_gradient(l, dfc);
}

static void mlp_b2(OpList *l)
{
    GEMM(l, "d ln2 = dfc fcw", "0, 0, BT, C, 4 * C, 1.0f, s + S_DFC, 4 * C, pm + P_FCW, C, 0.0f, s + S_DLN, C");
    operands_h(l, "s + S_DFC_H, pmh + P_FCW");
    kernel_op(l, "layernorm_backward", "dres += d(LayerNorm 2): now d(resid2)",
              "s + S_DRES, gm + P_LN2W, gm + P_LN2B, s + S_DLN, xm, pm + P_LN2W, am + A_LN2_MEAN, am + A_LN2_RSTD, "
              COPY("s", "S_DRES_H"));
    gpu_block_kernel(l, "layernorm_backward_blocks");
}

/* The GELU piece's backward: S_DRES holds d(resid3) on entry and, unchanged, the residual's
 * share of d(resid2) on exit; S_DFC then holds d fc. The fc piece's: from d fc in S_DFC, adds
 * LayerNorm 2's share to S_DRES, which then holds d(resid2). The MLP half's is both. */
static void gelu_piece_backward(OpList *l)
{
    mlp_w1(l, "s + S_DRES", false);
    mlp_b1(l);
}

static void fc_piece_backward(OpList *l)
{
    mlp_w2(l, "s + S_DFC");
    mlp_b2(l);
}

static void mlp_half_backward(OpList *l)
{
    gelu_piece_backward(l);
    fc_piece_backward(l);
}

/* Their zero-bubble parts: B keeps d(resid3) and d fc in the slot, W reads them there (the
 * LayerNorm's gain and bias gradients stay in B: its one kernel computes them with d(x)).
 * Under bf16 the GPU's product fused with GELU's gradient writes d fc in fp32 only, and the
 * bias kernel that writes its bf16 copy in the fused backward is W's: so B's keep writes it,
 * for B2's product (on the stage after a cut after the fc product it comes in a message). */
static void gelu_piece_backward_b(OpList *l)
{
    plain_op(l, OP_COPY, "keep d(resid3) for W", "ag + A_W_DRES3, s + S_DRES, BT * C");
    mlp_b1(l);
}

static void fc_piece_backward_b(OpList *l, const Config *cfg)
{
    if (cfg->precision == PREC_BF16)
        kernel_op(l, "keep_gradient", "keep d fc for W, and its bf16 copy for the next product",
                  "am + A_W_DFC, s + S_DFC, BT * 4 * C, " COPY("s", "S_DFC_H"));
    else
        plain_op(l, OP_COPY, "keep d fc for W", "am + A_W_DFC, s + S_DFC, BT * 4 * C");
    mlp_b2(l);
}

static void mlp_half_backward_b(OpList *l, const Config *cfg)
{
    gelu_piece_backward_b(l);
    fc_piece_backward_b(l, cfg);
}

static void gelu_piece_backward_w(OpList *l)
{
    mlp_w1(l, "ag + A_W_DRES3", true);
}

static void fc_piece_backward_w(OpList *l)
{
    mlp_w2(l, "am + A_W_DFC");
}

static void mlp_half_backward_w(OpList *l)
{
    gelu_piece_backward_w(l);
    fc_piece_backward_w(l);
}

static void attention_w1(OpList *l, const Config *cfg, const char *dres, bool kept)
{
    // the matmul attention's projection reads fp32 operands: no copy to write
    bool copy = kept && cfg->attention == ATTN_FLASH;
    kernel_op(l, "bias_backward", "d attprojb", "gp + P_ATTPROJB, %s, C", dres);
    gpu_instead(l, "bias_backward_tiles", "gp + P_ATTPROJB, %s, C, %s", dres,
                copy ? COPY("s", "S_DRES_H") : "(pr_bf16 *)0");
    GEMM(l, "d attprojw += dres^T atty", "1, 0, C, C, BT, 1.0f, %s, C, ap + A_ATTY, C, 1.0f, gp + P_ATTPROJW, C", dres);
    if (cfg->attention == ATTN_FLASH)
        operands_h(l, "s + S_DRES_H, ap + A_ATTY");
}

/* B1 is two parts, one a piece: the projection's (d atty) and the attention's (d qkv). */
static void proj_b1(OpList *l)
{
    GEMM(l, "d atty = dres attprojw", "0, 0, BT, C, C, 1.0f, s + S_DRES, C, pp + P_ATTPROJW, C, 0.0f, s + S_DATTY, C");
    operands_h(l, "s + S_DRES_H, pph + P_ATTPROJW");
}

static void att_b1(OpList *l, const Config *cfg)
{
    if (cfg->attention == ATTN_FLASH) {
        kernel_op(l, "attention_backward_query", "d q, and delta for the key side",
                  "s + S_DQKV, s + S_ATT_DELTA, s + S_DATTY, ap + A_ATTY, a + A_QKV, a + A_ATT_LSE, " COPY("s", "S_DQKV_H")
                  ", " STORE("ap", "A_ATTY"));
        kernel_op(l, "attention_backward_key", "d k, d v",
                  "s + S_DQKV, s + S_ATT_DELTA, s + S_DATTY, a + A_QKV, a + A_ATT_LSE, " COPY("s", "S_DQKV_H"));
    } else {
        matmul_attention_backward(l, cfg);
    }
}

static void attention_b1(OpList *l, const Config *cfg)
{
    proj_b1(l);
    att_b1(l, cfg);
}

static void attention_w2(OpList *l, const Config *cfg, const char *dqkv, bool kept)
{
    bool copy = kept && cfg->attention == ATTN_FLASH;
    kernel_op(l, "bias_backward", "d qkvb", "g + P_QKVB, %s, 3 * C", dqkv);
    gpu_instead(l, "bias_backward_tiles", "g + P_QKVB, %s, 3 * C, %s", dqkv,
                copy ? COPY("s", "S_DQKV_H") : "(pr_bf16 *)0");
    GEMM(l, "d qkvw += dqkv^T ln1", "1, 0, 3 * C, C, BT, 1.0f, %s, 3 * C, a + A_LN1, C, 1.0f, g + P_QKVW, C", dqkv);
    if (cfg->attention == ATTN_FLASH) // the matmul attention's gradients come from per-head products: no bf16 copy
        operands_h(l, "s + S_DQKV_H, a + A_LN1");
}

static void attention_b2(OpList *l, const Config *cfg)
{
    GEMM(l, "d ln1 = dqkv qkvw", "0, 0, BT, C, 3 * C, 1.0f, s + S_DQKV, 3 * C, p + P_QKVW, C, 0.0f, s + S_DLN, C");
    if (cfg->attention == ATTN_FLASH)
        operands_h(l, "s + S_DQKV_H, ph + P_QKVW");
    kernel_op(l, "layernorm_backward", "dres += d(LayerNorm 1): now d(x)",
              "s + S_DRES, g + P_LN1W, g + P_LN1B, s + S_DLN, x, p + P_LN1W, a + A_LN1_MEAN, a + A_LN1_RSTD, "
              COPY("s", "S_DRES_H"));
    gpu_block_kernel(l, "layernorm_backward_blocks");
}

/* The attention half's backward: S_DRES holds d(resid2) on entry and d(x) on exit. */
static void attention_half_backward(OpList *l, const Config *cfg)
{
    attention_w1(l, cfg, "s + S_DRES", false);
    attention_b1(l, cfg);
    attention_w2(l, cfg, "s + S_DQKV", false);
    attention_b2(l, cfg);
}

/* Its backward without W2, the qkv product's weight and bias gradients: down to d(x). */
static void attention_half_backward_down(OpList *l, const Config *cfg)
{
    attention_w1(l, cfg, "s + S_DRES", false);
    attention_b1(l, cfg);
    attention_b2(l, cfg);
}

static void attention_half_backward_b(OpList *l, const Config *cfg)
{
    plain_op(l, OP_COPY, "keep d(resid2) for W", "ap + A_W_DRES2, s + S_DRES, BT * C");
    attention_b1(l, cfg);
    plain_op(l, OP_COPY, "keep d qkv for W", "a + A_W_DQKV, s + S_DQKV, BT * 3 * C");
    attention_b2(l, cfg);
}

static void attention_half_backward_w(OpList *l, const Config *cfg)
{
    attention_w1(l, cfg, "ap + A_W_DRES2", true);
    attention_w2(l, cfg, "a + A_W_DQKV", true);
}

/* The pieces of a layer cut after its attention kernel. The proj piece's backward: S_DRES holds
 * d(resid2) on entry and, unchanged, the residual's share of d x on exit; S_DATTY then holds
 * d atty. The att piece's: from d atty in S_DATTY, adds LayerNorm 1's share to S_DRES, which
 * then holds d x. Their zero-bubble parts keep what the half's do. */
static void proj_piece_backward(OpList *l, const Config *cfg)
{
    attention_w1(l, cfg, "s + S_DRES", false);
    proj_b1(l);
}

static void att_piece_backward(OpList *l, const Config *cfg)
{
    att_b1(l, cfg);
    attention_w2(l, cfg, "s + S_DQKV", false);
    attention_b2(l, cfg);
}

static void proj_piece_backward_b(OpList *l)
{
    plain_op(l, OP_COPY, "keep d(resid2) for W", "ap + A_W_DRES2, s + S_DRES, BT * C");
    proj_b1(l);
}

static void att_piece_backward_b(OpList *l, const Config *cfg)
{
    att_b1(l, cfg);
    plain_op(l, OP_COPY, "keep d qkv for W", "a + A_W_DQKV, s + S_DQKV, BT * 3 * C");
    attention_b2(l, cfg);
}

/* The head's backward in three parts: the dlogits (in place over the probabilities), the LM
 * head's gradient from them (W's), and the gradient down to the residual stream (B's). */
static void head_logits_gradient(OpList *l)
{
    kernel_op(l, "softmax_xent_backward", "dlogits, in place over the probabilities",
              "acts + ACT_PROBS, targets, dloss, (pr_bf16 *)0");
    l->ops[l->n - 1].gpu_skip = true; // classifier_fused wrote them in the forward
}

static void head_weight_gradient(OpList *l)
{
    // On the GPU the dlogits are unscaled (and bf16 under bf16): the products scale by dloss.
    GEMM(l, "d lm_head += dlogits^T lnf",
         "1, 0, V, C, BT, 1.0f, acts + ACT_PROBS, VP, acts + ACT_LNF, C, 1.0f, grads + PARAM_LM_HEAD, C");
    operands_h(l, "NULL, acts + ACT_LNF"); // the CPU's: lnf is kept in bf16, the dlogits are not
    gpu_instead(l, NULL, "1, 0, V, C, BT, dloss, acts + ACT_PROBS, VP, acts + ACT_LNF, C, 1.0f, grads + PARAM_LM_HEAD, C");
    l->ops[l->n - 1].gpu_operands_h = xstrdup("acts + ACT_PROBS, acts + ACT_LNF");
}

static void final_layernorm_backward(OpList *l);

static void head_input_gradient(OpList *l)
{
    GEMM(l, "dlnf = dlogits lm_head", "0, 0, BT, C, V, 1.0f, acts + ACT_PROBS, VP, params + PARAM_LM_HEAD, C, 0.0f, scratch + S_DLN, C");
    gpu_instead(l, NULL, "0, 0, BT, C, V, dloss, acts + ACT_PROBS, VP, params + PARAM_LM_HEAD, C, 0.0f, scratch + S_DLN, C");
    l->ops[l->n - 1].gpu_operands_h = xstrdup("acts + ACT_PROBS, params_h + PARAM_LM_HEAD");
    final_layernorm_backward(l);
}

/* The head's backward from d(final LayerNorm output) in S_DLN down to the residual gradient,
 * which starts in S_DRES here; x is the LayerNorm's input. */
static void final_layernorm_backward(OpList *l)
{
    plain_op(l, OP_ZERO, "the residual gradient starts here", "scratch + S_DRES, BT * C");
    kernel_op(l, "layernorm_backward", "dres = d(final LayerNorm)",
              "scratch + S_DRES, grads + PARAM_LNFW, grads + PARAM_LNFB, scratch + S_DLN, x, params + PARAM_LNFW, "
              "acts + ACT_LNF_MEAN, acts + ACT_LNF_RSTD, " COPY("scratch", "S_DRES_H"));
    gpu_block_kernel(l, "layernorm_backward_blocks");
}

/* A divided head's d lm_head += dloss dlogits^T lnf over its rows, lnf at `lnf` (kept in bf16
 * under bf16): the CPU widens lnf, the GPU reads the bf16 dlogits and lnf. */
static void rows_weight_gradient(OpList *l, const char *lnf)
{
    GEMM(l, "d lm_head += dlogits^T lnf",
         "1, 0, HEAD_VN, C, BT, dloss, acts + ACT_LOGITS, HEAD_VP, %s, C, 1.0f, grads + PARAM_LM_HEAD, C", lnf);
    Op *op = &l->ops[l->n - 1];
    op->operands_h = xasprintf("NULL, %s", lnf);
    op->gpu_args = xstrdup(op->args);
    op->gpu_operands_h = xasprintf("acts + ACT_LOGITS, %s", lnf);
}

/* The split's back: d(LayerNorm output) from its rows and the log-sum-exp, the message back. */
static void head_back_input_gradient(OpList *l, const Config *cfg)
{
    bool bf16_messages = cfg->messages == MESSAGES_BF16; // d(lnf) goes back in bf16
    GEMM(l, "d lnf from these rows = dlogits lm_head, into the message back",
         "0, 0, BT, C, HEAD_VN, dloss, acts + ACT_LOGITS, HEAD_VP, params + PARAM_LM_HEAD, C, 0.0f, %s, C",
         bf16_messages ? "scratch + S_DLN" : "dx");
    gpu_instead(l, NULL, "%s", l->ops[l->n - 1].args);
    l->ops[l->n - 1].gpu_operands_h = xstrdup("acts + ACT_LOGITS, params_h + PARAM_LM_HEAD");
    if (bf16_messages)
        kernel_op(l, "to_bf16", "the message back in bf16", "scratch + S_DLN, (pr_bf16 *)dx, (long)BT * C");
    plain_op(l, OP_COPY, "the log-sum-exp goes back with it", "dx + MSG_LSE, acts + ACT_XENT_LSE, BT");
}

/* The split's front: its rows' dlogits in place from the received log-sum-exp. */
static void head_front_logits_gradient(OpList *l)
{
    kernel_op(l, "xent_part_backward", "unscaled dlogits of these rows in place, from the received log-sum-exp",
              "acts + ACT_LOGITS, BF16_COPY(acts + ACT_LOGITS), dy + MSG_LSE, targets, HEAD_VN, HEAD_VP, HEAD_V0");
}

/* The split's front: d lnf from the received part and its rows', down through the LayerNorm. */
static void head_front_input_gradient(OpList *l, const Config *cfg)
{
    bool bf16_messages = cfg->messages == MESSAGES_BF16;
    if (bf16_messages)
        kernel_op(l, "from_bf16", "dlnf starts from the last stage's rows", "(const pr_bf16 *)dy, scratch + S_DLN, (long)BT * C");
    else
        plain_op(l, OP_COPY, "dlnf starts from the last stage's rows", "scratch + S_DLN, dy, BT * C");
    GEMM(l, "dlnf += dlogits lm_head",
         "0, 0, BT, C, HEAD_VN, dloss, acts + ACT_LOGITS, HEAD_VP, params + PARAM_LM_HEAD, C, 1.0f, scratch + S_DLN, C");
    gpu_instead(l, NULL, "%s", l->ops[l->n - 1].args);
    l->ops[l->n - 1].gpu_operands_h = xstrdup("acts + ACT_LOGITS, params_h + PARAM_LM_HEAD");
    final_layernorm_backward(l);
}

/* The head divided by vocabulary rows between the last two stages (Plan.vocab_split). The
 * front (the stage before the last) runs the final LayerNorm, its rows' logits and, per token,
 * their log-sum-exp and the target's logit, which it sends with the LayerNorm's output; the
 * back (the last stage) runs its rows' logits, the token's whole log-sum-exp and loss, and
 * turns its logits into unscaled dlogits in place. Backward, the back sends d(LayerNorm
 * output) from its rows with the log-sum-exp; the front turns its logits into dlogits with it,
 * adds its rows' share and goes down through the LayerNorm. The products scale the dlogits by
 * dloss on both devices; under bf16 the GPU's logits and dlogits are bf16, the CPU's fp32. Its
 * stage's HEAD_V0, HEAD_VN and HEAD_VP are the first row, the row count and the row stride. */
static void head_split_ops(const Config *cfg, ModelOps *ops)
{
    OpList *l = &ops->head_front_fwd;
    kernel_op(l, "layernorm_forward", "lnf = LayerNorm(x)",
              "acts + ACT_LNF, acts + ACT_LNF_MEAN, acts + ACT_LNF_RSTD, x, params + PARAM_LNFW, params + PARAM_LNFB, "
              STORE("acts", "ACT_LNF"));
    GEMM(l, "logits of this stage's rows = lnf lm_head^T",
         "0, 1, BT, HEAD_VN, C, 1.0f, acts + ACT_LNF, C, params + PARAM_LM_HEAD, C, 0.0f, acts + ACT_LOGITS, HEAD_VP");
    operands_h(l, "acts + ACT_LNF, params_h + PARAM_LM_HEAD");
    l->ops[l->n - 1].out_h = true;
    kernel_op(l, "xent_part_forward", "per token: these rows' log-sum-exp and the target's logit, sent on with lnf",
              "acts + ACT_LOGITS, BF16_COPY(acts + ACT_LOGITS), acts + ACT_XENT_PART, targets, HEAD_VN, HEAD_VP, HEAD_V0");

    l = &ops->head_back_fwd;
    GEMM(l, "logits of this stage's rows = lnf lm_head^T (lnf received)",
         "0, 1, BT, HEAD_VN, C, 1.0f, x, C, params + PARAM_LM_HEAD, C, 0.0f, acts + ACT_LOGITS, HEAD_VP");
    operands_h(l, "x, params_h + PARAM_LM_HEAD");
    l->ops[l->n - 1].out_h = true;
    kernel_op(l, "xent_split_forward", "per-token losses and log-sum-exp; unscaled dlogits in place",
              "acts + ACT_LOGITS, BF16_COPY(acts + ACT_LOGITS), acts + ACT_INPUT_PART, acts + ACT_XENT_LSE, losses, "
              "targets, HEAD_VN, HEAD_VP, HEAD_V0");

    l = &ops->head_back_bwd;
    rows_weight_gradient(l, "x");
    head_back_input_gradient(l, cfg);

    l = &ops->head_front_bwd;
    head_front_logits_gradient(l);
    rows_weight_gradient(l, "acts + ACT_LNF");
    head_front_input_gradient(l, cfg);
    if (config_splits_backward(cfg)) {
        head_back_input_gradient(&ops->head_back_bwd_b, cfg);
        rows_weight_gradient(&ops->head_back_bwd_w, "x");
        head_front_logits_gradient(&ops->head_front_bwd_b);
        head_front_input_gradient(&ops->head_front_bwd_b, cfg);
        rows_weight_gradient(&ops->head_front_bwd_w, "acts + ACT_LNF");
    }
}


/* Section bases (the generated functions' parameters): embedding and head sections see the
 * stage's `params`, `grads`, `acts`, `scratch`; an attention half sees its layer's `p`, `g`,
 * `a`, its input `x` and the stage's scratch `s`, an MLP half (and its fc piece) `pm`, `gm`,
 * `am` and its input `xm`, its GELU piece `pg`, `gg`, `ag`, `xm` and the fc product's output
 * `fc`; a whole layer's block and an MLP half declare the bases of their parts inside their
 * own (section_signatures). The head reads its input as `x`. */
static void split_backward_ops(const Config *cfg, ModelOps *ops);
static void late_backward_ops(const Config *cfg, ModelOps *ops);

void model_ops_build(const Config *cfg, ModelOps *ops)
{
    /* shapes are the generated constants; only the attention's form depends on cfg */
    *ops = (ModelOps){0};

    OpList *l = &ops->embed_fwd;
    kernel_op(l, "encoder_forward", "token + position embedding",
              "acts + ACT_INPUT, tokens, params + PARAM_WTE, params + PARAM_WPE");

    attention_half_forward(&ops->block_fwd, cfg, true);
    mlp_half_forward(&ops->block_fwd, false);
    attention_half_forward(&ops->attn_fwd, cfg, false);
    mlp_half_forward(&ops->mlp_fwd, true);
    fc_piece_forward(&ops->fc_fwd, true);
    gelu_piece_forward(&ops->gelu_fwd);
    att_piece_forward(&ops->att_fwd, cfg);
    proj_piece_forward(&ops->proj_fwd, cfg, false);

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

    head_logits_gradient(&ops->head_bwd);
    head_weight_gradient(&ops->head_bwd);
    head_input_gradient(&ops->head_bwd);

    head_split_ops(cfg, ops);

    mlp_half_backward(&ops->block_bwd);
    attention_half_backward(&ops->block_bwd, cfg);
    mlp_half_backward(&ops->mlp_bwd);
    attention_half_backward(&ops->attn_bwd, cfg);
    fc_piece_backward(&ops->fc_bwd);
    gelu_piece_backward(&ops->gelu_bwd);
    att_piece_backward(&ops->att_bwd, cfg);
    proj_piece_backward(&ops->proj_bwd, cfg);

    l = &ops->embed_bwd;
    kernel_op(l, "encoder_backward", "d wte, d wpe", "grads + PARAM_WTE, grads + PARAM_WPE, scratch + S_DRES, tokens");
    if (config_splits_backward(cfg))
        split_backward_ops(cfg, ops);
    else
        late_backward_ops(cfg, ops);
}

/* The backward of the piece a stage starts with, where the stage sends a gradient back
 * (stage_late_piece): `down` to that gradient, the weight gradients of the piece's first
 * product `late`, after it has gone (and, where an MLP half's backward comes just before it,
 * the fc product's: a stage that starts with a whole layer or a proj piece). They read what
 * down leaves intact (that product's output gradient and input), so the two compute the
 * fused backward's bits. */
static void late_backward_ops(const Config *cfg, ModelOps *ops)
{
    // a whole layer's MLP half leaves its fc weight gradient too: the attention half's backward
    // writes neither d fc nor ln2
    gelu_piece_backward(&ops->block_bwd_down);
    fc_bias_gradient(&ops->block_bwd_down, "s + S_DFC");
    mlp_b2(&ops->block_bwd_down);
    attention_half_backward_down(&ops->block_bwd_down, cfg);
    fc_weight_gradient(&ops->block_bwd_late, "s + S_DFC");
    attention_w2(&ops->block_bwd_late, cfg, "s + S_DQKV", false);
    attention_half_backward_down(&ops->attn_bwd_down, cfg);
    attention_w2(&ops->attn_bwd_late, cfg, "s + S_DQKV", false);
    gelu_piece_backward(&ops->mlp_bwd_down);
    fc_bias_gradient(&ops->mlp_bwd_down, "s + S_DFC"); // it writes d fc's bf16 copy, which B2 reads
    mlp_b2(&ops->mlp_bwd_down);
    fc_weight_gradient(&ops->mlp_bwd_late, "s + S_DFC");
    mlp_b1(&ops->gelu_bwd_down);
    mlp_w1(&ops->gelu_bwd_late, "s + S_DRES", false);
    proj_b1(&ops->proj_bwd_down);
    attention_w1(&ops->proj_bwd_late, cfg, "s + S_DRES", false);
}

/* The zero-bubble schedules' backward in two parts (Config: config_splits_backward): B, every
 * gradient of an input, down the stage, keeping in the slot the gradients of the outputs of
 * the products with weights (A_W_*, ACT_W_DEMB); W, those weights' gradients, from the slot. */
static void split_backward_ops(const Config *cfg, ModelOps *ops)
{
    head_logits_gradient(&ops->head_bwd_b);
    head_input_gradient(&ops->head_bwd_b);
    head_weight_gradient(&ops->head_bwd_w);
    mlp_half_backward_b(&ops->block_bwd_b, cfg);
    attention_half_backward_b(&ops->block_bwd_b, cfg);
    mlp_half_backward_w(&ops->block_bwd_w);
    attention_half_backward_w(&ops->block_bwd_w, cfg);
    mlp_half_backward_b(&ops->mlp_bwd_b, cfg);
    mlp_half_backward_w(&ops->mlp_bwd_w);
    fc_piece_backward_b(&ops->fc_bwd_b, cfg);
    fc_piece_backward_w(&ops->fc_bwd_w);
    gelu_piece_backward_b(&ops->gelu_bwd_b);
    gelu_piece_backward_w(&ops->gelu_bwd_w);
    attention_half_backward_b(&ops->attn_bwd_b, cfg);
    attention_half_backward_w(&ops->attn_bwd_w, cfg);
    att_piece_backward_b(&ops->att_bwd_b, cfg);
    attention_w2(&ops->att_bwd_w, cfg, "a + A_W_DQKV", true);
    proj_piece_backward_b(&ops->proj_bwd_b);
    attention_w1(&ops->proj_bwd_w, cfg, "ap + A_W_DRES2", true);
    plain_op(&ops->embed_bwd_b, OP_COPY, "keep d(embedding output) for W", "acts + ACT_W_DEMB, scratch + S_DRES, BT * C");
    kernel_op(&ops->embed_bwd_w, "encoder_backward", "d wte, d wpe",
              "grads + PARAM_WTE, grads + PARAM_WPE, acts + ACT_W_DEMB, tokens");
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
    op_list_free(&ops->attn_fwd);
    op_list_free(&ops->mlp_fwd);
    op_list_free(&ops->mlp_bwd);
    op_list_free(&ops->attn_bwd);
    op_list_free(&ops->fc_fwd);
    op_list_free(&ops->fc_bwd);
    op_list_free(&ops->gelu_fwd);
    op_list_free(&ops->gelu_bwd);
    op_list_free(&ops->head_front_fwd);
    op_list_free(&ops->head_front_bwd);
    op_list_free(&ops->head_back_fwd);
    op_list_free(&ops->head_back_bwd);
    OpList *split[] = {&ops->head_bwd_b, &ops->head_bwd_w, &ops->block_bwd_b, &ops->block_bwd_w, &ops->attn_bwd_b,
                       &ops->attn_bwd_w, &ops->mlp_bwd_b, &ops->mlp_bwd_w, &ops->head_front_bwd_b,
                       &ops->head_front_bwd_w, &ops->head_back_bwd_b, &ops->head_back_bwd_w, &ops->embed_bwd_b,
                       &ops->embed_bwd_w, &ops->fc_bwd_b, &ops->fc_bwd_w, &ops->gelu_bwd_b, &ops->gelu_bwd_w,
                       &ops->block_bwd_down, &ops->block_bwd_late, &ops->attn_bwd_down, &ops->attn_bwd_late,
                       &ops->mlp_bwd_down, &ops->mlp_bwd_late, &ops->gelu_bwd_down, &ops->gelu_bwd_late,
                       &ops->att_fwd, &ops->proj_fwd, &ops->att_bwd, &ops->proj_bwd, &ops->att_bwd_b,
                       &ops->att_bwd_w, &ops->proj_bwd_b, &ops->proj_bwd_w, &ops->proj_bwd_down, &ops->proj_bwd_late};
    for (size_t i = 0; i < sizeof split / sizeof *split; i++)
        op_list_free(split[i]);
}


/* ---- numbering: the order the generated code and the per-op profile number ops in ---------- */

bool op_is_timed(const Op *op)
{
    return op->kind != OP_LOOP && op->kind != OP_END;
}

const char *op_profile_name(const Op *op)
{
    switch (op->kind) {
    case OP_KERNEL:
        return op->kernel->name;
    case OP_GEMM:
        return "gemm";
    case OP_ZERO:
        return "zero";
    case OP_COPY:
        return "copy";
    case OP_LOOP:
    case OP_END:
        break;
    }
    unreachable();
}

/* The sections' generated functions: what each computes and its parameters, the bases the op
 * lists' arguments name (model_ops_build), and what a whole layer's block declares for its MLP
 * half; under bf16 the GPU's also take the weights' bf16 copy, named by weights_h, after the
 * first parameter. */
/* the attention half's proj piece, inside it (emit_section_prelude leaves out what a section does not name) */
#define PROJ_BASES "const float *pp = p + P_PROJ;\nfloat *ap = a + A_PROJ;\n"
#define PROJ_BWD_BASES "const float *pp = p + P_PROJ;\nfloat *gp = g + P_PROJ;\nconst float *ap = a + A_PROJ;\n"
#define PROJ_B_BASES "const float *pp = p + P_PROJ;\nfloat *gp = g + P_PROJ;\nfloat *ap = a + A_PROJ;\n"
#define PROJ_BASES_H "const pr_bf16 *pph = ph + P_PROJ;\n"
#define MLP_BASES PROJ_BASES "const float *pm = p + P_MLP;\nfloat *am = a + A_MLP;\nconst float *xm = ap + A_RESID2;\n" GELU_BASES
/* an MLP half's GELU piece, inside it: its parameters, activations and input */
#define GELU_BASES "const float *pg = pm + (P_GELU - P_MLP);\nfloat *ag = am + (A_GELU - A_MLP);\nconst float *fc = am + A_FC_PRE;"
#define GELU_BASES_H "const pr_bf16 *pgh = pmh + (P_GELU - P_MLP);"
#define GELU_GRADS "float *gg = gm + (P_GELU - P_MLP);"
/* the same where the section reads its activations only */
#define CONST_GELU_BASES "const float *pg = pm + (P_GELU - P_MLP);\nconst float *ag = am + (A_GELU - A_MLP);\nconst float *fc = am + A_FC_PRE;"
static const struct {
    const char *name, *doc, *params, *weights_h, *prelude, *prelude_h;
} section_signatures[] = {
    {"embed_forward", "Embedding forward.", "const float *params, float *acts, const int *tokens", NULL, NULL, NULL},
    {"mlp_forward", "The MLP half of the layer before the stage's first: pm, am are its parameters and "
     "activations, xm its input (that layer's resid2).", "const float *pm, float *am, const float *xm", "pmh",
     GELU_BASES, GELU_BASES_H},
    {"gelu_piece_forward", "The GELU piece of the layer before the stage's first (the stage before cut it after its fc "
     "product): pg, ag are its parameters and activations, xm that layer's resid2 and fc its fc product's output.",
     "const float *pg, float *ag, const float *xm, const float *fc", "pgh", NULL, NULL},
    {"fc_piece_forward", "The fc piece of the layer after the stage's last, after its attention half: pm, am are its "
     "parameters and activations, xm its input (that layer's resid2); its output am + A_FC_PRE.",
     "const float *pm, float *am, const float *xm", "pmh", NULL, NULL},
    {"block_forward", "One transformer block forward: p, a are the layer's parameters and activations, x its input.",
     "const float *p, float *a, const float *x", "ph", MLP_BASES, PROJ_BASES_H "const pr_bf16 *pmh = ph + P_MLP;\n" GELU_BASES_H},
    {"attn_forward", "The attention half of the layer after the stage's last: p, a are its parameters and "
     "activations, x its input; its output is a + A_PROJ + A_RESID2.", "const float *p, float *a, const float *x", "ph",
     PROJ_BASES, PROJ_BASES_H},
    {"att_piece_forward", "The att piece of the layer after the stage's last (LayerNorm 1, qkv, attention; the stage "
     "after starts at its projection): p, a are its parameters and activations, x its input; its output is "
     "a + A_PROJ + A_ATTY.", "const float *p, float *a, const float *x", "ph", PROJ_BASES, PROJ_BASES_H},
    {"proj_piece_forward", "The proj piece of the layer before the stage's first (the attention projection and the "
     "residual): pp, ap are its parameters and activations (ap + A_ATTY the received attention output), x that "
     "layer's input; its output is ap + A_RESID2.", "const float *pp, float *ap, const float *x", "pph", NULL, NULL},
    {"head_forward", "Final LayerNorm, LM head and cross-entropy forward; x is the last layer's output.",
     "const float *params, float *acts, const float *x, const int *targets, float *losses", "params_h", NULL, NULL},
    {"head_backward", "Head backward: dlogits scaled by dloss, then down to d(last layer's output) in S_DRES.",
     "const float *params, float *grads, float *acts, const float *x, float *scratch, const int *targets, float dloss",
     "params_h", NULL, NULL},
    {"head_front_forward", "The vocabulary split's first part: final LayerNorm, the logits of rows [HEAD_V0, HEAD_V0 + "
     "HEAD_VN) and each token's log-sum-exp over them; x is the last layer's output.",
     "const float *params, float *acts, const float *x, const int *targets", "params_h", NULL, NULL},
    {"head_back_forward", "The vocabulary split's last part: the logits of rows [HEAD_V0, V), each token's loss, and "
     "unscaled dlogits in place; x is the received LayerNorm output.",
     "const float *params, float *acts, const float *x, const int *targets, float *losses", "params_h", NULL, NULL},
    {"head_back_backward", "Its backward: d(LayerNorm output) from these rows, scaled by dloss, and the log-sum-exp, "
     "into dx, the message to the stage before.",
     "const float *params, float *grads, const float *acts, const float *x, float *scratch, const int *targets, "
     "float *dx, float dloss", "params_h", NULL, NULL},
    {"head_front_backward", "The first part's backward: dlogits from the received log-sum-exp, the received d(LayerNorm "
     "output) dy plus these rows', then down to d(last layer's output) in S_DRES.",
     "const float *params, float *grads, float *acts, const float *x, float *scratch, const int *targets, "
     "const float *dy, float dloss", "params_h", NULL, NULL},
    {"attn_backward", "The trailing attention half backward: S_DRES holds d(resid2) on entry and d(x) on exit.",
     "const float *p, float *g, const float *a, const float *x, float *s", "ph", PROJ_BWD_BASES, PROJ_BASES_H},
    {"block_backward", "One transformer block backward: S_DRES holds d(output) on entry and d(x) on exit.",
     "const float *p, float *g, const float *a, const float *x, float *s", "ph",
     PROJ_BWD_BASES "const float *pm = p + P_MLP;\nfloat *gm = g + P_MLP;\nconst float *am = a + A_MLP;\nconst float *xm = ap + A_RESID2;\n"
     CONST_GELU_BASES "\n" GELU_GRADS, PROJ_BASES_H "const pr_bf16 *pmh = ph + P_MLP;\n" GELU_BASES_H},
    {"mlp_backward", "The leading MLP half backward: S_DRES holds d(resid3) on entry and d(xm) on exit.",
     "const float *pm, float *gm, const float *am, const float *xm, float *s", "pmh", CONST_GELU_BASES "\n" GELU_GRADS,
     GELU_BASES_H},
    {"gelu_piece_backward", "The leading GELU piece backward: S_DRES holds d(resid3) on entry and on exit (the residual's "
     "share of d(resid2)), S_DFC d fc on exit: the message back.",
     "const float *pg, float *gg, const float *ag, const float *fc, float *s", "pgh", NULL, NULL},
    {"fc_piece_backward", "The trailing fc piece backward: S_DFC holds d fc and S_DRES the residual's share of d(resid2) "
     "on entry (the message back), S_DRES d(resid2) on exit.",
     "const float *pm, float *gm, const float *am, const float *xm, float *s", "pmh", NULL, NULL},
    {"embed_backward", "Embedding backward from S_DRES.", "float *grads, const float *scratch, const int *tokens", NULL,
     NULL, NULL},
    {"att_piece_backward", "The trailing att piece backward: S_DATTY holds d atty and S_DRES the residual's share of "
     "d x on entry (the message back), S_DRES d x on exit.", "const float *p, float *g, const float *a, const float *x, "
     "float *s", "ph", PROJ_BWD_BASES, PROJ_BASES_H},
    {"proj_piece_backward", "The leading proj piece backward: S_DRES holds d(resid2) on entry and, unchanged, the "
     "residual's share of d x on exit, S_DATTY d atty: the message back.",
     "const float *pp, float *gp, const float *ap, const float *x, float *s", "pph", NULL, NULL},
    {"proj_piece_backward_down", "The leading proj piece backward down to d atty in S_DATTY: all but the projection's "
     "weight and bias gradients.", "const float *pp, float *gp, const float *ap, const float *x, float *s", "pph", NULL,
     NULL},
    {"proj_piece_backward_late", "Its projection's weight and bias gradients, after d atty has gone.",
     "const float *pp, float *gp, const float *ap, const float *x, float *s", "pph", NULL, NULL},
    /* a stage's first piece, where it sends a gradient back: down to it, then its last W */
    {"block_backward_down", "The stage's first block backward, down to d(x) in S_DRES: all but the fc product's "
     "weight gradient and the qkv product's weight and bias gradients.", "const float *p, float *g, const float *a, const float *x, float *s", "ph",
     PROJ_BWD_BASES "const float *pm = p + P_MLP;\nfloat *gm = g + P_MLP;\nconst float *am = a + A_MLP;\nconst float *xm = ap + A_RESID2;\n"
     CONST_GELU_BASES "\n" GELU_GRADS, PROJ_BASES_H "const pr_bf16 *pmh = ph + P_MLP;\n" GELU_BASES_H},
    {"block_backward_late", "The stage's first block's fc weight gradient and qkv weight and bias gradients, after "
     "d(x) has gone.", "const float *p, float *g, const float *a, const float *x, float *s", "ph",
     PROJ_BWD_BASES "float *gm = g + P_MLP;\nconst float *am = a + A_MLP;", PROJ_BASES_H},
    {"attn_backward_down", "The trailing attention half backward, the stage's only piece, down to d(x) in S_DRES: all "
     "but the qkv product's weight and bias gradients.", "const float *p, float *g, const float *a, const float *x, float *s",
     "ph", PROJ_BWD_BASES, PROJ_BASES_H},
    {"attn_backward_late", "Its qkv weight and bias gradients, after d(x) has gone.",
     "const float *p, float *g, const float *a, const float *x, float *s", "ph", PROJ_BWD_BASES, PROJ_BASES_H},
    {"mlp_backward_down", "The leading MLP half backward down to d(xm) in S_DRES: all but the fc weight gradient.",
     "const float *pm, float *gm, const float *am, const float *xm, float *s", "pmh", CONST_GELU_BASES "\n" GELU_GRADS,
     GELU_BASES_H},
    {"mlp_backward_late", "Its fc weight gradient, after d(xm) has gone.",
     "const float *pm, float *gm, const float *am, const float *xm, float *s", "pmh", NULL, NULL},
    {"gelu_piece_backward_down", "The leading GELU piece backward down to d fc in S_DFC: all but the MLP projection's "
     "weight and bias gradients.", "const float *pg, float *gg, const float *ag, const float *fc, float *s", "pgh", NULL,
     NULL},
    {"gelu_piece_backward_late", "Its MLP projection's weight and bias gradients, after d fc has gone.",
     "const float *pg, float *gg, const float *ag, const float *fc, float *s", "pgh", NULL, NULL},
    /* the zero-bubble parts (B and W) of the backward sections: their bases, and B writes the slot */
    {"head_backward_b", "Head B: dlogits, and down to d(last layer's output) in S_DRES.",
     "const float *params, float *grads, float *acts, const float *x, float *scratch, const int *targets, float dloss",
     "params_h", NULL, NULL},
    {"head_backward_w", "Head W: the LM head's gradient from the dlogits B left in the slot.",
     "const float *params, float *grads, float *acts, const float *x, float *scratch, const int *targets, float dloss",
     "params_h", NULL, NULL},
    {"head_back_backward_b", "The split's last part, B: d(LayerNorm output) from these rows and the log-sum-exp "
     "into dx.", "const float *params, float *grads, const float *acts, const float *x, float *scratch, "
     "const int *targets, float *dx, float dloss", "params_h", NULL, NULL},
    {"head_back_backward_w", "The split's last part, W: these rows' gradient.",
     "const float *params, float *grads, const float *acts, const float *x, float *scratch, const int *targets, "
     "float *dx, float dloss", "params_h", NULL, NULL},
    {"head_front_backward_b", "The split's first part, B: dlogits, the received dy plus these rows', down to "
     "d(last layer's output) in S_DRES.", "const float *params, float *grads, float *acts, const float *x, "
     "float *scratch, const int *targets, const float *dy, float dloss", "params_h", NULL, NULL},
    {"head_front_backward_w", "The split's first part, W: these rows' gradient.",
     "const float *params, float *grads, float *acts, const float *x, float *scratch, const int *targets, "
     "const float *dy, float dloss", "params_h", NULL, NULL},
    {"attn_backward_b", "The trailing attention half's B: S_DRES from d(resid2) to d(x); keeps W's inputs in a.",
     "const float *p, float *g, float *a, const float *x, float *s", "ph", PROJ_B_BASES, PROJ_BASES_H},
    {"attn_backward_w", "The trailing attention half's W: its weights' gradients from what B kept.",
     "const float *p, float *g, float *a, const float *x, float *s", "ph", PROJ_B_BASES, PROJ_BASES_H},
    {"block_backward_b", "One transformer block's B: S_DRES from d(output) to d(x); keeps W's inputs in a.",
     "const float *p, float *g, float *a, const float *x, float *s", "ph",
     PROJ_B_BASES "const float *pm = p + P_MLP;\nfloat *gm = g + P_MLP;\nfloat *am = a + A_MLP;\nconst float *xm = ap + A_RESID2;\n"
     GELU_BASES "\n" GELU_GRADS, PROJ_BASES_H "const pr_bf16 *pmh = ph + P_MLP;\n" GELU_BASES_H},
    {"block_backward_w", "One transformer block's W: its weights' gradients from what B kept.",
     "const float *p, float *g, float *a, const float *x, float *s", "ph",
     PROJ_B_BASES "const float *pm = p + P_MLP;\nfloat *gm = g + P_MLP;\nfloat *am = a + A_MLP;\nconst float *xm = ap + A_RESID2;\n"
     GELU_BASES "\n" GELU_GRADS, PROJ_BASES_H "const pr_bf16 *pmh = ph + P_MLP;\n" GELU_BASES_H},
    {"mlp_backward_b", "The leading MLP half's B: S_DRES from d(resid3) to d(xm); keeps W's inputs in am.",
     "const float *pm, float *gm, float *am, const float *xm, float *s", "pmh", GELU_BASES "\n" GELU_GRADS,
     GELU_BASES_H},
    {"mlp_backward_w", "The leading MLP half's W: its weights' gradients from what B kept.",
     "const float *pm, float *gm, float *am, const float *xm, float *s", "pmh", GELU_BASES "\n" GELU_GRADS,
     GELU_BASES_H},
    {"gelu_piece_backward_b", "The leading GELU piece's B: d fc into S_DFC; keeps W's inputs in ag.",
     "const float *pg, float *gg, float *ag, const float *fc, float *s", "pgh", NULL, NULL},
    {"gelu_piece_backward_w", "The leading GELU piece's W: its weights' gradients from what B kept.",
     "const float *pg, float *gg, float *ag, const float *fc, float *s", "pgh", NULL, NULL},
    {"fc_piece_backward_b", "The trailing fc piece's B: S_DRES to d(resid2); keeps W's inputs in am.",
     "const float *pm, float *gm, float *am, const float *xm, float *s", "pmh", NULL, NULL},
    {"fc_piece_backward_w", "The trailing fc piece's W: its weights' gradients from what B kept.",
     "const float *pm, float *gm, float *am, const float *xm, float *s", "pmh", NULL, NULL},
    {"att_piece_backward_b", "The trailing att piece's B: S_DRES to d x; keeps W's inputs in a.",
     "const float *p, float *g, float *a, const float *x, float *s", "ph", PROJ_B_BASES, PROJ_BASES_H},
    {"att_piece_backward_w", "The trailing att piece's W: its weights' gradients from what B kept.",
     "const float *p, float *g, float *a, const float *x, float *s", "ph", PROJ_B_BASES, PROJ_BASES_H},
    {"proj_piece_backward_b", "The leading proj piece's B: d atty into S_DATTY; keeps W's inputs in ap.",
     "const float *pp, float *gp, float *ap, const float *x, float *s", "pph", NULL, NULL},
    {"proj_piece_backward_w", "The leading proj piece's W: its weights' gradients from what B kept.",
     "const float *pp, float *gp, float *ap, const float *x, float *s", "pph", NULL, NULL},
    {"embed_backward_b", "Embedding B: keeps d(embedding output) from S_DRES for W.", "float *acts, const float *scratch",
     NULL, NULL, NULL},
    {"embed_backward_w", "Embedding W: d wte, d wpe.", "float *grads, const float *acts, const int *tokens", NULL,
     NULL, NULL},
    {"adamw", "The optimizer step.", "const pr_adamw_args *args", NULL, NULL, NULL},
};

static StageSection section(const char *name, const OpList *ops, int runs, bool forward)
{
    for (size_t i = 0; i < sizeof section_signatures / sizeof section_signatures[0]; i++)
        if (strcmp(section_signatures[i].name, name) == 0)
            return (StageSection){name, ops, runs, forward, section_signatures[i].doc, section_signatures[i].params,
                                  section_signatures[i].weights_h, section_signatures[i].prelude,
                                  section_signatures[i].prelude_h};
    ICE("no section '%s'", name);
}

/* The zero-bubble stage's backward sections: every B, then every W, each in the fused order. */
static int split_backward_sections(const StagePlan *sp, const ModelOps *ops, StageSection *out)
{
    int n = 0;
    for (int part = 0; part < 2; part++) {
        bool b = part == 0;
        if (stage_head_front(sp))
            out[n++] = section(b ? "head_front_backward_b" : "head_front_backward_w",
                               b ? &ops->head_front_bwd_b : &ops->head_front_bwd_w, 1, false);
        else if (stage_head_back(sp))
            out[n++] = section(b ? "head_back_backward_b" : "head_back_backward_w",
                               b ? &ops->head_back_bwd_b : &ops->head_back_bwd_w, 1, false);
        else if (sp->has_head)
            out[n++] = section(b ? "head_backward_b" : "head_backward_w", b ? &ops->head_bwd_b : &ops->head_bwd_w, 1, false);
        if (sp->tail_fc)
            out[n++] = section(b ? "fc_piece_backward_b" : "fc_piece_backward_w", b ? &ops->fc_bwd_b : &ops->fc_bwd_w, 1, false);
        if (sp->tail_attn)
            out[n++] = section(b ? "attn_backward_b" : "attn_backward_w", b ? &ops->attn_bwd_b : &ops->attn_bwd_w, 1, false);
        if (sp->tail_atty)
            out[n++] = section(b ? "att_piece_backward_b" : "att_piece_backward_w", b ? &ops->att_bwd_b : &ops->att_bwd_w,
                               1, false);
        out[n++] = section(b ? "block_backward_b" : "block_backward_w", b ? &ops->block_bwd_b : &ops->block_bwd_w,
                           sp->n_layers, false);
        if (sp->lead_mlp)
            out[n++] = section(b ? "mlp_backward_b" : "mlp_backward_w", b ? &ops->mlp_bwd_b : &ops->mlp_bwd_w, 1, false);
        if (sp->lead_gelu)
            out[n++] = section(b ? "gelu_piece_backward_b" : "gelu_piece_backward_w", b ? &ops->gelu_bwd_b : &ops->gelu_bwd_w, 1,
                               false);
        if (sp->lead_proj)
            out[n++] = section(b ? "proj_piece_backward_b" : "proj_piece_backward_w",
                               b ? &ops->proj_bwd_b : &ops->proj_bwd_w, 1, false);
        if (sp->has_embed)
            out[n++] = section(b ? "embed_backward_b" : "embed_backward_w", b ? &ops->embed_bwd_b : &ops->embed_bwd_w,
                               1, false);
    }
    return n;
}

int stage_sections(const StagePlan *sp, const ModelOps *ops, StageSection out[MAX_STAGE_SECTIONS])
{
    int n = 0;
    // a zero-bubble program's lists are built (model_ops_build): its backward goes as B and W
    bool split = ops->block_bwd_b.n > 0;
    if (sp->has_embed)
        out[n++] = section("embed_forward", &ops->embed_fwd, 1, true);
    if (sp->lead_proj)
        out[n++] = section("proj_piece_forward", &ops->proj_fwd, 1, true);
    if (sp->lead_mlp)
        out[n++] = section("mlp_forward", &ops->mlp_fwd, 1, true);
    if (sp->lead_gelu)
        out[n++] = section("gelu_piece_forward", &ops->gelu_fwd, 1, true);
    out[n++] = section("block_forward", &ops->block_fwd, sp->n_layers, true);
    if (sp->tail_attn)
        out[n++] = section("attn_forward", &ops->attn_fwd, 1, true);
    if (sp->tail_fc)
        out[n++] = section("fc_piece_forward", &ops->fc_fwd, 1, true);
    if (sp->tail_atty)
        out[n++] = section("att_piece_forward", &ops->att_fwd, 1, true);
    if (split) {
        if (stage_head_front(sp))
            out[n++] = section("head_front_forward", &ops->head_front_fwd, 1, true);
        else if (stage_head_back(sp))
            out[n++] = section("head_back_forward", &ops->head_back_fwd, 1, true);
        else if (sp->has_head)
            out[n++] = section("head_forward", &ops->head_fwd, 1, true);
        n += split_backward_sections(sp, ops, out + n);
        out[n++] = section("adamw", NULL, 0, false);
        return n;
    }
    if (stage_head_front(sp)) {
        out[n++] = section("head_front_forward", &ops->head_front_fwd, 1, true);
        out[n++] = section("head_front_backward", &ops->head_front_bwd, 1, false);
    } else if (stage_head_back(sp)) {
        out[n++] = section("head_back_forward", &ops->head_back_fwd, 1, true);
        out[n++] = section("head_back_backward", &ops->head_back_bwd, 1, false);
    } else if (sp->has_head) {
        out[n++] = section("head_forward", &ops->head_fwd, 1, true);
        out[n++] = section("head_backward", &ops->head_bwd, 1, false);
    }
    LatePiece late = stage_late_piece(sp, false);
    if (sp->tail_fc)
        out[n++] = section("fc_piece_backward", &ops->fc_bwd, 1, false);
    if (sp->tail_attn && late == LATE_ATTN)
        out[n++] = section("attn_backward_down", &ops->attn_bwd_down, 1, false);
    else if (sp->tail_attn)
        out[n++] = section("attn_backward", &ops->attn_bwd, 1, false);
    if (sp->tail_atty)
        out[n++] = section("att_piece_backward", &ops->att_bwd, 1, false);
    if (late != LATE_BLOCK || sp->n_layers > 1) // a stage of one layer runs it as down and late alone
        out[n++] = section("block_backward", &ops->block_bwd, sp->n_layers - (late == LATE_BLOCK), false);
    if (late == LATE_BLOCK)
        out[n++] = section("block_backward_down", &ops->block_bwd_down, 1, false);
    if (sp->lead_mlp) // under LATE_PROJ too: its fc weight gradient goes late
        out[n++] = late == LATE_MLP || late == LATE_PROJ ? section("mlp_backward_down", &ops->mlp_bwd_down, 1, false)
                                                         : section("mlp_backward", &ops->mlp_bwd, 1, false);
    if (sp->lead_gelu)
        out[n++] = late == LATE_GELU ? section("gelu_piece_backward_down", &ops->gelu_bwd_down, 1, false)
                                     : section("gelu_piece_backward", &ops->gelu_bwd, 1, false);
    if (sp->lead_proj)
        out[n++] = late == LATE_PROJ ? section("proj_piece_backward_down", &ops->proj_bwd_down, 1, false)
                                     : section("proj_piece_backward", &ops->proj_bwd, 1, false);
    if (late == LATE_PROJ) // after the message back: the MLP half's late part, then the proj piece's
        out[n++] = section("mlp_backward_late", &ops->mlp_bwd_late, 1, false);
    if (late != LATE_NONE) { // after the message back
        static const char *const name[] = {[LATE_BLOCK] = "block_backward_late", [LATE_ATTN] = "attn_backward_late",
                                           [LATE_MLP] = "mlp_backward_late", [LATE_GELU] = "gelu_piece_backward_late",
                                           [LATE_PROJ] = "proj_piece_backward_late"};
        const OpList *list[] = {[LATE_BLOCK] = &ops->block_bwd_late, [LATE_ATTN] = &ops->attn_bwd_late,
                                [LATE_MLP] = &ops->mlp_bwd_late, [LATE_GELU] = &ops->gelu_bwd_late,
                                [LATE_PROJ] = &ops->proj_bwd_late};
        out[n++] = section(name[late], list[late], 1, false);
    }
    if (sp->has_embed)
        out[n++] = section("embed_backward", &ops->embed_bwd, 1, false);
    out[n++] = section("adamw", NULL, 0, false);
    return n;
}

int section_timed_ops(const StageSection *section)
{
    if (!section->ops)
        return 1;
    int n = 0;
    for (int i = 0; i < section->ops->n; i++)
        n += op_is_timed(&section->ops->ops[i]);
    return n;
}

