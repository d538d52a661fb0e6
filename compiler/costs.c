/* costs.c: the GPU cost model, kernel by kernel. Every op of a stage's forward, backward
 * and optimizer step, taken from the op lists the code generators read (ops.c)
 * and numbered as the generated code numbers them for `run --profile-out`, gets its FLOPs,
 * the fewest bytes it must move through device memory (each input read once, each output
 * written once) and a roofline time:
 *
 *     seconds = max(FLOPs / (flops x efficiency), bytes / (memory_bandwidth x MEMORY_EFFICIENCY),
 *                   LAUNCH_SECONDS)
 *
 * with `flops` and `memory_bandwidth` from the file's hardware block and the efficiencies
 * below, stated once. What is modelled is the GPU path as issue 14 builds it, not every
 * kernel as it stands today:
 *  - matrix products (cuBLASLt) run at GEMM_EFFICIENCY of `flops`; bytes: A and B (bf16
 *    under bf16 where the op reads bf16 copies), C written in fp32, read too when beta is
 *    not 0, and the bias;
 *  - attention is the tiled tensor-core FlashAttention: the causal half of the T x T work,
 *    4 B NH T^2 HS / 2 FLOPs forward and 2.5x that backward in one kernel; split into a
 *    query-side and a key-side kernel that each recompute the scores, the two do 3/2 and
 *    2x the forward's; bytes: q, k, v, the output and the gradients once; at
 *    ATTENTION_EFFICIENCY of `flops`;
 *  - the LM head's softmax cross-entropy is a fused classifier (llm.c's): one pass over the
 *    logits (bf16 under bf16) writes the loss and dlogits in place, so the backward's own
 *    kernel has nothing left to do;
 *  - the other kernels do their arithmetic on the CUDA cores, VECTOR_SHARE of `flops`,
 *    which leaves every one of them memory-bound;
 *  - AdamW streams 32 bytes per parameter (34 under bf16), as simulate.c counts it.
 * Copies at a stage's edges (the received gradient, a few MB) are left out.
 */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pacic.h"
#include "../runtime/pacirt.h"

/* A bf16 8192^3 product ran at 769-798 TFLOP/s, 0.78-0.81 of 989, on the H200 this work was
 * planned for (docs/gpu.md); GPT-2's products are smaller and have epilogues. */
#define GEMM_EFFICIENCY 0.70
/* FlashAttention-2 reaches about a third of an H100's dense rate at head size 64. */
#define ATTENTION_EFFICIENCY 0.35
/* An H100's fp32 CUDA-core rate over its dense bf16 tensor rate: 67 / 989. */
#define VECTOR_SHARE (67.0 / 989.0)
/* A device-to-device copy moved about 4.3 TB/s of an H200's 4.8. */
#define MEMORY_EFFICIENCY 0.90
/* The least a launch costs on the GPU: its start and the drain of the one before. */
#define LAUNCH_SECONDS 3e-6

/* ---- shape expressions: the op lists' sizes, as the generated code spells them ---------- */

typedef struct Shapes {
    double B, T, C, NH, HS, V, VP, BT;
    double HEAD_VN, HEAD_VP; /* the stage's rows of a divided head (the vocabulary split), and their stride */
} Shapes;

typedef struct Expr {
    const char *p;
    const Shapes *sh;
    bool ok;
} Expr;

static double expr_sum(Expr *e);

static void expr_blanks(Expr *e)
{
    while (*e->p == ' ')
        e->p++;
}

static bool shape_named(const Shapes *sh, const char *name, size_t len, double *out)
{
    static const struct {
        const char *name;
        size_t offset;
    } names[] = {
        {"B", offsetof(Shapes, B)}, {"T", offsetof(Shapes, T)}, {"C", offsetof(Shapes, C)},
        {"NH", offsetof(Shapes, NH)}, {"HS", offsetof(Shapes, HS)}, {"V", offsetof(Shapes, V)},
        {"VP", offsetof(Shapes, VP)}, {"BT", offsetof(Shapes, BT)}, {"HEAD_VN", offsetof(Shapes, HEAD_VN)},
        {"HEAD_VP", offsetof(Shapes, HEAD_VP)},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i].name) == len && strncmp(names[i].name, name, len) == 0) {
            *out = *(const double *)((const char *)sh + names[i].offset);
            return true;
        }
    return false;
}

/* A number, a shape constant, a parenthesised sum, or a cast such as (long) before a factor. */
static double expr_factor(Expr *e)
{
    expr_blanks(e);
    if (*e->p == '-') {
        e->p++;
        return -expr_factor(e);
    }
    if (*e->p == '(') {
        static const char *const casts[] = {"(long)", "(int64_t)", "(int)", "(size_t)", "(double)", "(float)"};
        for (size_t i = 0; i < sizeof casts / sizeof casts[0]; i++)
            if (strncmp(e->p, casts[i], strlen(casts[i])) == 0) {
                e->p += strlen(casts[i]);
                return expr_factor(e);
            }
        e->p++;
        double v = expr_sum(e);
        expr_blanks(e);
        if (*e->p != ')')
            e->ok = false;
        else
            e->p++;
        return v;
    }
    if (isdigit((unsigned char)*e->p)) {
        char *end;
        double v = strtod(e->p, &end);
        e->p = end;
        while (*e->p == 'f' || *e->p == 'L' || *e->p == 'l')
            e->p++;
        return v;
    }
    const char *begin = e->p;
    while (isalnum((unsigned char)*e->p) || *e->p == '_')
        e->p++;
    double v = 0;
    if (e->p == begin || !shape_named(e->sh, begin, (size_t)(e->p - begin), &v))
        e->ok = false;
    return v;
}

static double expr_product(Expr *e)
{
    double v = expr_factor(e);
    for (;;) {
        expr_blanks(e);
        if (*e->p == '*') {
            e->p++;
            v *= expr_factor(e);
        } else if (*e->p == '/') {
            e->p++;
            double d = expr_factor(e);
            if (d == 0)
                e->ok = false;
            else
                v /= d;
        } else {
            return v;
        }
    }
}

static double expr_sum(Expr *e)
{
    double v = expr_product(e);
    for (;;) {
        expr_blanks(e);
        if (*e->p == '+') {
            e->p++;
            v += expr_product(e);
        } else if (*e->p == '-') {
            e->p++;
            v -= expr_product(e);
        } else {
            return v;
        }
    }
}

/* The value of a size written in the op lists ("3 * C", "(long)BT * 4 * C"); false when it
 * names anything but numbers and shape constants. */
static bool shape_eval(const char *text, const Shapes *sh, double *out)
{
    Expr e = {text, sh, true};
    double v = expr_sum(&e);
    expr_blanks(&e);
    if (!e.ok || *e.p != '\0')
        return false;
    *out = v;
    return true;
}

static Shapes shapes_of(const Config *cfg)
{
    Shapes sh;
    sh.B = cfg->micro;
    sh.T = cfg->context;
    sh.C = cfg->width;
    sh.NH = cfg->heads;
    sh.HS = (double)(cfg->width / cfg->heads);
    sh.V = cfg->vocab;
    sh.VP = (double)vocab_stride(cfg);
    sh.BT = sh.B * sh.T;
    return sh;
}

/* ---- one launch ------------------------------------------------------------------------ */

typedef enum { ENGINE_VECTOR, ENGINE_TENSOR_GEMM, ENGINE_TENSOR_ATTENTION } Engine;

/* What a kernel's cost depends on besides the shapes. */
typedef struct Launch {
    double n;          /* indices of its iteration space */
    double out;        /* bytes per element of its main output: 2 when written in bf16 */
    double copy;       /* bytes per element of the bf16 copy it writes beside (0: none) */
    double logit;      /* bytes per logit: the fused classifier's are bf16 under bf16 */
    bool bf16;
} Launch;

typedef struct KernelCost {
    const char *name;
    Engine engine;
    void (*cost)(const Shapes *sh, const Launch *l, double *flops, double *bytes);
    const char *note;  /* why the model differs from the kernel's own body; NULL if it does not */
} KernelCost;

#define COST_FN(name) static void name(const Shapes *sh, const Launch *l, double *flops, double *bytes)

COST_FN(cost_encoder_forward) /* per row: its token, a wte row, the output row; wpe once */
{
    *flops = l->n * sh->C;
    *bytes = l->n * (4 + 8 * sh->C) + 4 * sh->T * sh->C;
}
COST_FN(cost_encoder_backward) /* the gradient row read, added into wte's row and wpe's */
{
    *flops = 2 * l->n * sh->C;
    *bytes = l->n * (4 + 12 * sh->C) + 8 * sh->T * sh->C;
}
COST_FN(cost_layernorm_forward)
{
    *flops = 8 * l->n * sh->C;
    *bytes = l->n * sh->C * (4 + l->out) + 8 * l->n + 8 * sh->C;
}
COST_FN(cost_residual_layernorm_forward) /* the residual read, added to and written back */
{
    *flops = 10 * l->n * sh->C;
    *bytes = l->n * sh->C * (12 + l->out) + 8 * l->n + 8 * sh->C;
}
COST_FN(cost_residual_forward)
{
    *flops = l->n * sh->C;
    *bytes = 12 * l->n * sh->C;
}
COST_FN(cost_gelu_forward)
{
    *flops = 10 * l->n * 4 * sh->C;
    *bytes = l->n * 4 * sh->C * (4 + l->out);
}
COST_FN(cost_gelu_backward) /* in place, with the pre-activation read */
{
    *flops = 16 * l->n * 4 * sh->C;
    *bytes = l->n * 4 * sh->C * (12 + l->copy);
}
COST_FN(cost_bias_backward) /* n columns of BT rows; the GPU's may write their bf16 copy */
{
    *flops = sh->BT * l->n;
    *bytes = (4 + l->copy) * sh->BT * l->n + 8 * l->n;
}
COST_FN(cost_layernorm_backward) /* dout, the input, dinp added to; dweight and dbias once */
{
    *flops = 14 * l->n * sh->C;
    *bytes = l->n * sh->C * (16 + l->copy) + 8 * l->n + 16 * sh->C;
}
/* The matmul attention's row kernels, n rows of T: the causal half read, the row written. */
COST_FN(cost_attention_softmax_forward)
{
    *flops = 5 * l->n * sh->T / 2;
    *bytes = 4 * l->n * (sh->T / 2 + sh->T) + 4 * l->n;
}
COST_FN(cost_attention_probs)
{
    *flops = 2 * l->n * sh->T / 2;
    *bytes = 4 * l->n * (sh->T / 2 + sh->T) + 4 * l->n;
}
COST_FN(cost_attention_softmax_backward)
{
    *flops = 4 * l->n * sh->T / 2;
    *bytes = 4 * l->n * (2 * sh->T / 2 + sh->T);
}
/* FlashAttention, n = B NH T query rows: a row meets T/2 keys on average, and each (query,
 * key) pair costs 2 HS FLOPs per T x T product: scores and output forward (2), and backward
 * the scores again, dp, dv, dk, dq (5), of which the query side does scores, dp, dq (3) and
 * the key side scores, dp, dv, dk (4). */
COST_FN(cost_attention_forward)
{
    *flops = l->n * (sh->T / 2) * 2 * sh->HS * 2;
    *bytes = l->n * (12 * sh->HS + l->out * sh->HS + 4);
}
COST_FN(cost_attention_backward)
{
    *flops = l->n * (sh->T / 2) * 2 * sh->HS * 5;
    *bytes = l->n * (12 * sh->HS + 4 * sh->HS + l->out * sh->HS + 8 + 12 * sh->HS + l->copy * 3 * sh->HS);
}
COST_FN(cost_attention_backward_query) /* q, k, v, dout, out and lse read; dq and delta written */
{
    *flops = l->n * (sh->T / 2) * 2 * sh->HS * 3;
    *bytes = l->n * (12 * sh->HS + 4 * sh->HS + l->out * sh->HS + 4 + (4 + l->copy) * sh->HS + 4);
}
COST_FN(cost_attention_backward_key) /* q, k, v, dout, lse and delta read; dk and dv written */
{
    *flops = l->n * (sh->T / 2) * 2 * sh->HS * 4;
    *bytes = l->n * (12 * sh->HS + 4 * sh->HS + 8 + (4 + l->copy) * 2 * sh->HS);
}
COST_FN(cost_softmax_xent_forward) /* the fused classifier: logits read, dlogits written in place */
{
    *flops = 5 * l->n * sh->V;
    *bytes = l->n * sh->V * 2 * l->logit + 8 * l->n;
}
COST_FN(cost_xent_part_forward) /* the vocabulary split's: its rows' logits read once */
{
    *flops = 3 * l->n * sh->HEAD_VN;
    *bytes = l->n * sh->HEAD_VN * l->logit + 12 * l->n;
}
COST_FN(cost_xent_split_forward) /* a fused classifier over the stage's rows */
{
    *flops = 5 * l->n * sh->HEAD_VN;
    *bytes = l->n * sh->HEAD_VN * 2 * l->logit + 20 * l->n;
}
COST_FN(cost_xent_part_backward) /* logits read, dlogits written in place */
{
    *flops = 3 * l->n * sh->HEAD_VN;
    *bytes = l->n * sh->HEAD_VN * 2 * l->logit + 8 * l->n;
}
COST_FN(cost_folded) /* work the fused classifier's forward pass already did */
{
    *flops = 0;
    *bytes = 0;
}
COST_FN(cost_adamw) /* weight, gradient, two moments read; weight, moments written; gradient zeroed */
{
    *flops = 12 * l->n;
    *bytes = l->n * (32 + (l->bf16 ? 2 : 0));
}
/* The other optimizers' element-wise kernels (runtime/cuda/optim.c), n elements each. */
COST_FN(cost_optim_momentum) /* gradient and buffer read; buffer and the product's operand written */
{
    *flops = 3 * l->n;
    *bytes = 16 * l->n;
}
COST_FN(cost_scale_add)
{
    *flops = 2 * l->n;
    *bytes = 12 * l->n;
}
COST_FN(cost_muon_apply) /* weight and orthogonalised update read; weight written */
{
    *flops = 3 * l->n;
    *bytes = 12 * l->n;
}
COST_FN(cost_lamb_direction) /* weight, gradient, two moments read; moments and direction written */
{
    *flops = 12 * l->n;
    *bytes = 28 * l->n;
}
COST_FN(cost_lans_direction) /* weight, gradient, two moments read; moments and two directions written */
{
    *flops = 16 * l->n;
    *bytes = 32 * l->n;
}
COST_FN(cost_lars_apply) /* weight, gradient, buffer read; buffer and weight written */
{
    *flops = 5 * l->n;
    *bytes = 20 * l->n;
}
COST_FN(cost_nadam_apply) /* weight, gradient, two moments read; weight, moments written */
{
    *flops = 14 * l->n;
    *bytes = 28 * l->n;
}
COST_FN(cost_optim_predict) /* weight and two moments read; the predicted weight written */
{
    *flops = 8 * l->n;
    *bytes = 16 * l->n;
}
COST_FN(cost_wide_copy)
{
    *flops = 0;
    *bytes = 8 * l->n;
}
COST_FN(cost_to_bf16)
{
    *flops = l->n;
    *bytes = 6 * l->n;
}

static const KernelCost kernel_costs[] = {
    {"encoder_forward", ENGINE_VECTOR, cost_encoder_forward, NULL},
    {"encoder_backward", ENGINE_VECTOR, cost_encoder_backward, NULL},
    {"layernorm_forward", ENGINE_VECTOR, cost_layernorm_forward, NULL},
    {"residual_layernorm_forward", ENGINE_VECTOR, cost_residual_layernorm_forward, NULL},
    {"residual_forward", ENGINE_VECTOR, cost_residual_forward, NULL},
    {"gelu_forward", ENGINE_VECTOR, cost_gelu_forward, NULL},
    {"gelu_backward", ENGINE_VECTOR, cost_gelu_backward, NULL},
    {"bias_backward", ENGINE_VECTOR, cost_bias_backward, NULL},
    {"layernorm_backward", ENGINE_VECTOR, cost_layernorm_backward, NULL},
    {"attention_softmax_forward", ENGINE_VECTOR, cost_attention_softmax_forward, NULL},
    {"attention_probs", ENGINE_VECTOR, cost_attention_probs, NULL},
    {"attention_softmax_backward", ENGINE_VECTOR, cost_attention_softmax_backward, NULL},
    {"attention_forward", ENGINE_TENSOR_ATTENTION, cost_attention_forward, "as tiled FlashAttention"},
    {"attention_backward", ENGINE_TENSOR_ATTENTION, cost_attention_backward, "as tiled FlashAttention"},
    {"attention_backward_query", ENGINE_TENSOR_ATTENTION, cost_attention_backward_query, "as tiled FlashAttention"},
    {"attention_backward_key", ENGINE_TENSOR_ATTENTION, cost_attention_backward_key, "as tiled FlashAttention"},
    {"softmax_xent_forward", ENGINE_VECTOR, cost_softmax_xent_forward, "as a fused classifier"},
    {"softmax_xent_backward", ENGINE_VECTOR, cost_folded, "folded into the fused classifier"},
    /* the GPU's own forms of the kernels above (Op.gpu_kernel, KernelDesc.gpu_form), priced
     * from the launch of the CPU kernel they stand in for */
    {"flash_attention_forward", ENGINE_TENSOR_ATTENTION, cost_attention_forward, NULL},
    {"flash_attention_backward_query", ENGINE_TENSOR_ATTENTION, cost_attention_backward_query, NULL},
    {"flash_attention_backward_key", ENGINE_TENSOR_ATTENTION, cost_attention_backward_key, NULL},
    {"classifier_fused", ENGINE_VECTOR, cost_softmax_xent_forward, NULL},
    {"xent_part_forward", ENGINE_VECTOR, cost_xent_part_forward, NULL},
    {"xent_split_forward", ENGINE_VECTOR, cost_xent_split_forward, NULL},
    {"xent_part_backward", ENGINE_VECTOR, cost_xent_part_backward, NULL},
    {"bias_backward_tiles", ENGINE_VECTOR, cost_bias_backward, NULL},
    {"layernorm_backward_blocks", ENGINE_VECTOR, cost_layernorm_backward, NULL},
    {"adamw", ENGINE_VECTOR, cost_adamw, NULL},
    {"optim_momentum", ENGINE_VECTOR, cost_optim_momentum, NULL},
    {"scale_add", ENGINE_VECTOR, cost_scale_add, NULL},
    {"muon_apply", ENGINE_VECTOR, cost_muon_apply, NULL},
    {"lamb_direction", ENGINE_VECTOR, cost_lamb_direction, NULL},
    {"lars_apply", ENGINE_VECTOR, cost_lars_apply, NULL},
    {"nadam_apply", ENGINE_VECTOR, cost_nadam_apply, NULL},
    {"lans_direction", ENGINE_VECTOR, cost_lans_direction, NULL},
    {"optim_predict", ENGINE_VECTOR, cost_optim_predict, NULL},
    {"wide_copy", ENGINE_VECTOR, cost_wide_copy, NULL},
    {"to_bf16", ENGINE_VECTOR, cost_to_bf16, NULL},
    {"from_bf16", ENGINE_VECTOR, cost_to_bf16, NULL}, /* the same bytes the other way */
};

static const KernelCost *kernel_cost_find(const char *name)
{
    for (size_t i = 0; i < sizeof kernel_costs / sizeof kernel_costs[0]; i++)
        if (strcmp(kernel_costs[i].name, name) == 0)
            return &kernel_costs[i];
    return NULL;
}

bool gpu_cost_has_kernel(const char *name)
{
    return kernel_cost_find(name) != NULL;
}

/* The CPU's softmax cross-entropy backward is a kernel of its own (the GPU folds it into the
 * forward): per row its probabilities again from the logits, dlogits written. */
COST_FN(cost_softmax_xent_backward_cpu)
{
    *flops = 3 * l->n * sh->V;
    *bytes = 8 * l->n * sh->V + 8 * l->n;
}

double kernel_counted_flops(const Config *cfg, const char *name, double n, double *bytes)
{
    const KernelCost *kc = kernel_cost_find(name);
    if (!kc)
        ICE("no cost entry for kernel %s", name);
    Shapes sh = shapes_of(cfg);
    Launch l = {.n = n, .out = 4, .logit = 4};
    double flops, b;
    kc->cost(&sh, &l, &flops, &b);
    *bytes += b;
    return flops;
}

static double engine_rate(const Config *cfg, Engine engine)
{
    if (cfg->machine == MACHINE_CPU) /* a stage thread's loops, its share of a core */
        return cfg->cpu->vector_flops * cpu_core_share(cfg);
    switch (engine) {
    case ENGINE_VECTOR: return cfg->device_flops * VECTOR_SHARE;
    case ENGINE_TENSOR_GEMM: return cfg->device_flops * GEMM_EFFICIENCY;
    case ENGINE_TENSOR_ATTENTION: return cfg->device_flops * ATTENTION_EFFICIENCY;
    }
    unreachable();
}

/* The roofline of one launch; *bound says which term won. */
static double roofline(const Config *cfg, Engine engine, double flops, double bytes, CostBound *bound)
{
    double compute = flops / engine_rate(cfg, engine);
    if (cfg->machine == MACHINE_CPU) { /* no launches; one thread's copy rate, measured */
        double memory = bytes / (cfg->cpu->memory_bandwidth * cpu_core_share(cfg));
        *bound = compute >= memory ? BOUND_COMPUTE : BOUND_MEMORY;
        return compute >= memory ? compute : memory;
    }
    double memory = bytes / (cfg->memory_bandwidth * MEMORY_EFFICIENCY);
    if (compute >= memory && compute >= LAUNCH_SECONDS) {
        *bound = BOUND_COMPUTE;
        return compute;
    }
    if (memory >= LAUNCH_SECONDS) {
        *bound = BOUND_MEMORY;
        return memory;
    }
    *bound = BOUND_LAUNCH;
    return LAUNCH_SECONDS;
}

/* Does any argument start with `macro`? (BF16_STORE: the output goes out in bf16 under bf16;
 * BF16_COPY: a bf16 copy is written beside it.) */
static bool has_macro_arg(char items[][128], int n, const char *macro)
{
    for (int i = 0; i < n; i++)
        if (strncmp(items[i], macro, strlen(macro)) == 0)
            return true;
    return false;
}

/* The extent of a kernel's launch: a shape expression, or the parameter it names. */
static bool kernel_extent(const KernelDesc *k, char args[][128], int n_args, const Shapes *sh, double *out)
{
    char params[16][128];
    int n_params = split_list(k->params, params, 16);
    for (int i = 0; i < n_params && i < n_args; i++) {
        const char *end = params[i] + strlen(params[i]);
        const char *name = end;
        while (name > params[i] && (isalnum((unsigned char)name[-1]) || name[-1] == '_'))
            name--;
        if (strcmp(name, k->extent) == 0)
            return shape_eval(args[i], sh, out);
    }
    return shape_eval(k->extent, sh, out);
}

/* The kernel the GPU launches for a kernel op: its own form (Op.gpu_kernel), else the tiled
 * form that fits (KernelDesc.gpu_form), else the op's kernel. */
static const KernelDesc *gpu_kernel_of(const Config *cfg, const Op *op)
{
    if (cfg->machine == MACHINE_CPU) /* the CPU runs the op's own kernel */
        return op->kernel;
    if (op->gpu_kernel)
        return op->gpu_kernel;
    const char *form = attention_gpu_kernel(cfg, op->kernel);
    return form ? kernel_find(form) : op->kernel;
}

/* Priced as the kernel the GPU runs, over the extent of the CPU kernel it stands in for (the
 * same rows or columns); bf16 stores and copies as the GPU's arguments write them. */
static void cost_kernel(const Config *cfg, const Shapes *sh, const Op *op, OpCost *c)
{
    const KernelDesc *gk = gpu_kernel_of(cfg, op);
    const KernelCost *kc = kernel_cost_find(gk->name);
    char args[16][128], gpu_args[16][128];
    int n_args = split_list(op->args, args, 16);
    bool cpu = cfg->machine == MACHINE_CPU;
    int n_gpu_args = op->gpu_args && !cpu ? split_list(op->gpu_args, gpu_args, 16) : n_args;
    if (!op->gpu_args || cpu)
        memcpy(gpu_args, args, sizeof args);
    Launch l = {.bf16 = cfg->precision == PREC_BF16 && !cpu}; /* the CPU's kernels run in fp32 */
    static const KernelCost xent_backward_cpu = {"softmax_xent_backward", ENGINE_VECTOR,
                                                 cost_softmax_xent_backward_cpu, NULL};
    if (cpu && strcmp(gk->name, "softmax_xent_backward") == 0)
        kc = &xent_backward_cpu;
    c->name = gk->name;
    if (!kc || !kernel_extent(op->kernel, args, n_args, sh, &l.n))
        return;
    l.out = l.bf16 && has_macro_arg(gpu_args, n_gpu_args, "BF16_STORE(") ? 2 : 4;
    l.copy = l.bf16 && has_macro_arg(gpu_args, n_gpu_args, "BF16_COPY(") ? 2 : 0;
    l.logit = l.bf16 ? 2 : 4;
    kc->cost(sh, &l, &c->flops, &c->bytes);
    c->attention = kc->engine == ENGINE_TENSOR_ATTENTION;
    c->note = cpu ? NULL : kc->note;
    c->known = true;
    if (c->flops == 0 && c->bytes == 0) {
        c->bound = BOUND_FOLDED;
        c->seconds = 0;
        return;
    }
    c->seconds = roofline(cfg, kc->engine, c->flops, c->bytes, &c->bound);
}

/* "transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc" (pr_gemm's order). */
static void cost_gemm(const Config *cfg, const Shapes *sh, const Op *op, bool dgelu_fused, OpCost *c)
{
    char args[13][128];
    double m, n, k;
    bool cpu = cfg->machine == MACHINE_CPU;
    if (split_list(op->gpu_args && !cpu ? op->gpu_args : op->args, args, 13) != 13 || !shape_eval(args[2], sh, &m) ||
        !shape_eval(args[3], sh, &n) || !shape_eval(args[4], sh, &k))
        return;
    if (cpu) { /* OpenBLAS on the stage's BLAS threads, at the rate measured for its size */
        c->flops = 2 * m * n * k;
        c->bytes = 4 * (m * k + k * n + m * n);
        c->known = true;
        c->bound = BOUND_COMPUTE;
        c->seconds = cpu_gemm_seconds(cfg->cpu, m, n, k) / (cpu_blas_threads(cfg) * cpu_core_share(cfg));
        return;
    }
    bool bf16_operands = cfg->precision == PREC_BF16 && (op->gpu_args ? op->gpu_operands_h : op->operands_h);
    double operand = bf16_operands ? 2 : 4;
    bool accumulates = strtod(args[10], NULL) != 0;
    c->flops = 2 * m * n * k;
    c->bytes = operand * (m * k + k * n) + 4 * m * n * (accumulates ? 2 : 1) + (op->bias ? 4 * n : 0);
    // the GELU gradient in the epilogue reads the pre-activation (the bias kernel after it
    // writes the result's bf16 copy)
    if (dgelu_fused)
        c->bytes += 4 * m * n;
    c->known = true;
    c->seconds = roofline(cfg, ENGINE_TENSOR_GEMM, c->flops, c->bytes, &c->bound);
}

/* ---- a stage's ops, numbered as the generated code numbers them ---------------------------- */

static OpCost *push_cost(StageCosts *sc)
{
    sc->ops = xrealloc(sc->ops, (size_t)(sc->n_ops + 1) * sizeof *sc->ops);
    OpCost *c = &sc->ops[sc->n_ops++];
    *c = (OpCost){.index = sc->n_ops - 1};
    return c;
}

/* The ops of one section; loops multiply the launches of the ops inside them. */
static void cost_section(const Config *cfg, const Shapes *sh, const StageSection *cs, StageCosts *sc)
{
    enum { MAX_LOOPS = 8 };
    double loops[MAX_LOOPS];
    int depth = 0;
    double launches = 1;
    bool bf16 = cfg->precision == PREC_BF16;
    const OpList *l = cs->ops;
    if (cfg->machine == MACHINE_CPU) // the GPU's fusions and skips are not the CPU's
        bf16 = false;
    for (int i = 0; i < l->n; i++) {
        const Op *op = &l->ops[i];
        if (op->kind == OP_LOOP) {
            char items[2][128];
            double extent = 1;
            if (split_list(op->args, items, 2) != 2 || !shape_eval(items[1], sh, &extent))
                sc->unknown++;
            if (depth == MAX_LOOPS)
                ICE("loops nested deeper than %d in %s", MAX_LOOPS, cs->name);
            loops[depth++] = extent;
            launches *= extent;
            continue;
        }
        if (op->kind == OP_END) {
            if (depth == 0)
                ICE("an OP_END outside a loop in %s", cs->name);
            launches /= loops[--depth];
            continue;
        }
        OpCost *c = push_cost(sc);
        c->section = cs->name;
        c->name = c->table_name = op_profile_name(op);
        c->what = xstrdup(op->comment);
        c->forward = cs->forward;
        c->launches = launches;
        c->calls_per_step = launches * cs->runs * cfg->window;
        // under bf16 the GELU gradient runs in the product's epilogue (emit_cuda.c)
        bool dgelu_fused = bf16 && op->kind == OP_GEMM && op->epilogue == EPI_DGELU;
        bool fused_away = bf16 && i > 0 && l->ops[i - 1].kind == OP_GEMM && l->ops[i - 1].epilogue == EPI_DGELU;
        if (op->gpu_skip && cfg->machine == MACHINE_GPU) {
            *c = (OpCost){.index = c->index, .section = c->section, .name = c->name, .table_name = c->table_name,
                          .what = c->what, .forward = c->forward, .known = true, .bound = BOUND_FOLDED,
                          .note = "done by an earlier op on the GPU"};
            continue;
        }
        if (fused_away) {
            *c = (OpCost){.index = c->index, .section = c->section, .name = c->name, .table_name = c->table_name,
                          .what = c->what, .forward = c->forward, .known = true, .bound = BOUND_FOLDED,
                          .note = "in the product's epilogue"};
            continue;
        }
        switch (op->kind) {
        case OP_KERNEL: cost_kernel(cfg, sh, op, c); break;
        case OP_GEMM: cost_gemm(cfg, sh, op, dgelu_fused, c); break;
        case OP_ZERO:
        case OP_COPY: {
            char items[3][128];
            int n = split_list(op->args, items, 3);
            double count;
            if (n >= 2 && shape_eval(items[n - 1], sh, &count)) {
                c->bytes = count * (op->kind == OP_ZERO ? 4 : 8);
                c->known = true;
                c->seconds = roofline(cfg, ENGINE_VECTOR, 0, c->bytes, &c->bound);
            }
            break;
        }
        case OP_LOOP:
        case OP_END: unreachable();
        }
        if (!c->known) {
            sc->unknown++;
            continue;
        }
        double per_mb = c->seconds * launches * cs->runs;
        if (cs->forward) {
            sc->fwd += per_mb;
        } else {
            sc->bwd += per_mb;
        }
        sc->by_kind[c->attention ? COST_ATTENTION : op->kind == OP_GEMM ? COST_GEMM : COST_OTHER] += per_mb;
    }
    if (depth != 0)
        ICE("an OP_LOOP without its OP_END in %s", cs->name);
}

/* The matrices Muon orthogonalises in one layer's slice of a tensor (as runtime/optim_rules.c
 * cuts them: qkv as three C x C, fc 4C x C, its projection C x 4C, the attention projection
 * C x C); 0 for a tensor its AdamW group takes. */
static int muon_matrices(const TensorInfo *t, long C, long *rows, long *cols)
{
    *rows = *cols = C;
    if (strcmp(t->ckpt_tensor, "PR_CKPT_QKVW") == 0)
        return 3;
    if (strcmp(t->ckpt_tensor, "PR_CKPT_ATTPROJW") == 0)
        return 1;
    if (strcmp(t->ckpt_tensor, "PR_CKPT_FCW") == 0) {
        *rows = 4 * C;
        return 1;
    }
    if (strcmp(t->ckpt_tensor, "PR_CKPT_FCPROJW") == 0) {
        *cols = 4 * C;
        return 1;
    }
    return 0;
}

/* One kernel's launch over n elements: its roofline seconds; adds its FLOPs and bytes. */
static double priced_launch(const Config *cfg, const char *kernel, double n, double *flops, double *bytes)
{
    const KernelCost *kc = kernel_cost_find(kernel);
    Launch l = {.n = n, .bf16 = cfg->precision == PREC_BF16};
    double f, b;
    CostBound bound;
    kc->cost(&(Shapes){0}, &l, &f, &b);
    *flops += f;
    *bytes += b;
    return roofline(cfg, kc->engine, f, b, &bound);
}

/* A sum of squares over n floats, as the trust ratios and Muon's normalisation take it. */
static double priced_norm(const Config *cfg, double n, double *bytes)
{
    CostBound bound;
    *bytes += 4 * n;
    return roofline(cfg, ENGINE_VECTOR, 2 * n, 4 * n, &bound);
}

/* Newton-Schulz on an m x M matrix (m <= M, the shorter side first), `steps` times: A = X X^T,
 * B = b A + c A A, X = a X + B X: fp32 products (cuBLASLt's fp32 rate, the CUDA cores'). */
static double priced_newton_schulz(const Config *cfg, double m, double M, int steps, double *flops, double *bytes)
{
    double seconds = 0;
    CostBound bound;
    const double products[3][2] = {
        {2 * m * m * M, 4 * (2 * m * M + m * m)},    /* X X^T */
        {2 * m * m * m, 4 * (3 * m * m)},            /* A A, with b A added */
        {2 * m * m * M, 4 * (m * m + 3 * m * M)},    /* B X, with a X added */
    };
    const double shapes[3][3] = {{m, m, M}, {m, m, m}, {m, M, m}}; /* the products' m, n, k */
    for (int i = 0; i < steps; i++)
        for (int k = 0; k < 3; k++) {
            *flops += products[k][0];
            *bytes += products[k][1];
            seconds += cfg->machine == MACHINE_CPU
                           ? cpu_gemm_seconds(cfg->cpu, shapes[k][0], shapes[k][1], shapes[k][2]) /
                                 (cpu_blas_threads(cfg) * cpu_core_share(cfg))
                           : roofline(cfg, ENGINE_VECTOR, products[k][0], products[k][1], &bound);
        }
    return seconds;
}

/* The optimizer step: per tensor, each launch its own roofline; reported as one op whose
 * figures are the mean per tensor. AdamW and NAdamW one kernel; LAMB its direction, two norms
 * and the update; LANS its directions, four norms (gradient, weights, both directions) and two
 * updates; LARS two norms and its update; Muon, for the blocks' matrices, the momentum, a norm,
 * the Newton-Schulz products and the update (its AdamW group as AdamW). */
static void cost_optimizer_step(const Config *cfg, const LoweredStage *ls, StageCosts *sc)
{
    static const char *const step_names[] = {[PR_OPT_ADAMW] = "adamw", [PR_OPT_MUON] = "muon step",
                                              [PR_OPT_LAMB] = "lamb step", [PR_OPT_LARS] = "lars step",
                                              [PR_OPT_NADAMW] = "nadamw step", [PR_OPT_LANS] = "lans step"};
    static const char *const what[] = {[PR_OPT_ADAMW] = "AdamW update of one tensor",
                                       [PR_OPT_MUON] = "Muon (or its AdamW group's) update of one tensor",
                                       [PR_OPT_LAMB] = "LAMB update of one tensor",
                                       [PR_OPT_LARS] = "LARS update of one tensor",
                                       [PR_OPT_NADAMW] = "NAdamW update of one tensor",
                                       [PR_OPT_LANS] = "LANS update of one tensor"};
    const TensorInfo *tensors = ls->tensors;
    int n = ls->n_tensors;
    OpCost *c = push_cost(sc);
    c->section = "adamw";
    c->table_name = "adamw";
    c->name = step_names[cfg->optimizer];
    c->what = xstrdup(what[cfg->optimizer]);
    c->launches = n;
    c->calls_per_step = n;
    c->known = true;
    double flops = 0, bytes = 0, largest = -1;
    for (int i = 0; i < n; i++) {
        double size = (double)tensors[i].size, f = 0, b = 0, seconds = 0;
        long rows, cols;
        int per_layer = muon_matrices(&tensors[i], cfg->width, &rows, &cols);
        switch (cfg->optimizer) {
        case PR_OPT_MUON:
            if (per_layer) {
                double matrices = size / ((double)rows * cols), m = rows < cols ? rows : cols,
                       M = rows < cols ? cols : rows;
                seconds += priced_launch(cfg, "optim_momentum", size, &f, &b);
                for (double k = 0; k < matrices; k++) {
                    seconds += priced_norm(cfg, m * M, &b);
                    seconds += priced_launch(cfg, "scale_add", m * M, &f, &b);
                    seconds += priced_newton_schulz(cfg, m, M, cfg->ns_steps, &f, &b);
                }
                seconds += priced_launch(cfg, "muon_apply", size, &f, &b);
                break;
            }
            seconds += priced_launch(cfg, "adamw", size, &f, &b);
            break;
        case PR_OPT_LAMB:
            seconds += priced_launch(cfg, "lamb_direction", size, &f, &b);
            seconds += 2 * priced_norm(cfg, size, &b);
            seconds += priced_launch(cfg, "scale_add", size, &f, &b);
            break;
        case PR_OPT_LANS:
            seconds += priced_launch(cfg, "lans_direction", size, &f, &b);
            seconds += 4 * priced_norm(cfg, size, &b);
            seconds += 2 * priced_launch(cfg, "scale_add", size, &f, &b);
            break;
        case PR_OPT_LARS:
            seconds += 2 * priced_norm(cfg, size, &b);
            seconds += priced_launch(cfg, "lars_apply", size, &f, &b);
            break;
        case PR_OPT_NADAMW:
            seconds += priced_launch(cfg, "nadam_apply", size, &f, &b);
            break;
        default:
            seconds += priced_launch(cfg, "adamw", size, &f, &b);
            break;
        }
        sc->step += seconds;
        flops += f;
        bytes += b;
        if (size > largest) { /* the bound is the largest tensor's */
            largest = size;
            CostBound bound;
            roofline(cfg, ENGINE_VECTOR, f, b, &bound);
            c->bound = bound;
        }
    }
    c->flops = n ? flops / n : 0;
    c->bytes = n ? bytes / n : 0;
    c->seconds = n ? sc->step / n : 0;
}

/* Every op of one lowered stage, section by section, and its optimizer step. */
static void cost_stage_ops(const Config *cfg, const LoweredStage *ls, StageCosts *sc)
{
    Shapes sh = shapes_of(cfg);
    sh.HEAD_VN = (double)(ls->plan->vocab_end - ls->plan->vocab_begin);
    sh.HEAD_VP = ceil(sh.HEAD_VN / 64) * 64;
    for (int i = 0; i < ls->n_sections; i++) {
        if (ls->sections[i].ops)
            cost_section(cfg, &sh, &ls->sections[i], sc);
        else
            cost_optimizer_step(cfg, ls, sc);
    }
}

static void stage_costs_free(StageCosts *sc)
{
    for (int i = 0; i < sc->n_ops; i++)
        free(sc->ops[i].what);
    free(sc->ops);
}

void gpu_costs_build(const Config *cfg, const Lowered *low, GpuCosts *gc)
{
    *gc = (GpuCosts){.stages = low->stages};
    for (int s = 0; s < low->stages; s++) {
        cost_stage_ops(cfg, &low->stage[s], &gc->stage[s]);
        gc->unknown += gc->stage[s].unknown;
    }
}

void gpu_costs_free(GpuCosts *gc)
{
    for (int s = 0; s < gc->stages; s++)
        stage_costs_free(&gc->stage[s]);
    *gc = (GpuCosts){0};
}

void stage_kernel_costs(const Config *cfg, const ModelOps *ops, const StagePlan *sp, double *fwd, double *bwd,
                        double *step)
{
    // the stage lowered as lower_build lowers it, but only what the prices read
    LoweredStage ls = {.plan = sp};
    stage_layout(cfg, sp, &ls.layout);
    ls.n_tensors = stage_tensors(cfg, sp, &ls.layout, &ls.tensors);
    ls.n_sections = stage_sections(sp, ops, ls.sections);
    StageCosts sc = {0};
    cost_stage_ops(cfg, &ls, &sc);
    *fwd = sc.fwd;
    // recompute full reruns the forward before each backward, as cost_model_from_gpu_costs prices it
    *bwd = sc.bwd + (sp->recompute ? sc.fwd : 0);
    *step = sc.step;
    stage_costs_free(&sc);
    free(ls.tensors);
}

void cost_model_from_gpu_costs(const Config *cfg, const Plan *plan, const GpuCosts *gc, CostModel *cm)
{
    cost_model_from_plan(cfg, plan, cm); /* the links' costs */
    for (int s = 0; s < plan->stages; s++) {
        if (cfg->machine == MACHINE_CPU && s + 1 < plan->stages) // a stage thread's message to the next
            cm->msg[s] = cfg->cpu->latency + (double)plan->stage[s].msg_bytes / cfg->cpu->bandwidth;
        cm->fwd[s] = gc->stage[s].fwd;
        // recompute full reruns the forward's kernels before each backward's (MFU still counts
        // model FLOPs only: the rerun is not useful work)
        cm->bwd[s] = gc->stage[s].bwd + (plan->stage[s].recompute ? gc->stage[s].fwd : 0);
        cm->step[s] = gc->stage[s].step;
    }
    cost_model_allreduce(cfg, plan, cm);
}

/* Model FLOPs per optimizer step, as MFU counts them (plan.c: 2 per weight per token forward,
 * the causal attention products, backward twice the forward; llm.c's 6N + 6LTC per token
 * up to the embeddings). */
static double model_flops_per_step(const Config *cfg, const Plan *plan)
{
    double flops = 0;
    for (int s = 0; s < plan->stages; s++)
        flops += plan->stage[s].fwd_flops + plan->stage[s].bwd_flops;
    return flops * cfg->window;
}

/* One stage's peak, as MFU divides by: the GPU's `flops`; a CPU stage's largest sgemm rate
 * on its BLAS threads. */
static double machine_peak_flops(const Config *cfg)
{
    if (cfg->machine == MACHINE_GPU)
        return cfg->device_flops;
    const CpuRates *r = cfg->cpu;
    return r->gemm_flops[r->n_gemm - 1] * cpu_blas_threads(cfg) * cpu_core_share(cfg);
}

GpuPrediction gpu_costs_predict(const Config *cfg, const Plan *plan, const paci_table *t, const GpuCosts *gc,
                                long steps)
{
    CostModel cm;
    cost_model_from_gpu_costs(cfg, plan, gc, &cm);
    SimResult sim;
    simulate(cfg, t, &cm, steps, &sim);
    GpuPrediction p = {.step_time = sim.step_time, .tokens_per_s = sim.tokens_per_s, .bubble = sim.bubble};
    sim_result_free(&sim);
    p.model_flops = model_flops_per_step(cfg, plan);
    p.mfu = p.step_time > 0 ? p.model_flops / (p.step_time * config_devices(cfg) * machine_peak_flops(cfg)) : 0;
    return p;
}

/* ---- reports ---------------------------------------------------------------------------- */

static const char *bound_name(CostBound b)
{
    switch (b) {
    case BOUND_COMPUTE: return "compute";
    case BOUND_MEMORY: return "memory";
    case BOUND_LAUNCH: return "launch";
    case BOUND_FOLDED: return "fused";
    }
    unreachable();
}

/* The ops of one section of the first stage that has it (every stage runs the same lists). */
static void explain_section(FILE *out, const GpuCosts *gc, const char *section)
{
    for (int s = 0; s < gc->stages; s++) {
        const StageCosts *sc = &gc->stage[s];
        bool found = false;
        for (int i = 0; i < sc->n_ops; i++) {
            const OpCost *c = &sc->ops[i];
            if (strcmp(c->section, section) != 0)
                continue;
            found = true;
            if (!c->known) {
                fprintf(out, "  %-19s %-30s %8s %9s %9s %9s  %-7s  %s (no cost entry)\n", c->section, c->name, "?",
                        "?", "?", "?", "?", c->what);
                continue;
            }
            fprintf(out, "  %-19s %-30s %8.0f %9.4g %9.4g %9.4g  %-7s  %s%s%s%s\n", c->section, c->name,
                    c->launches, c->flops * c->launches / 1e9, c->bytes * c->launches / 1e6,
                    c->seconds * c->launches * 1e6, bound_name(c->bound), c->what, c->note ? " [" : "",
                    c->note ? c->note : "", c->note ? "]" : "");
        }
        if (found)
            return;
    }
}

void gpu_costs_explain(FILE *out, const Config *cfg, const Plan *plan, const GpuCosts *gc, const GpuPrediction *p,
                       bool priced_above)
{
    bool cpu = cfg->machine == MACHINE_CPU;
    if (cpu)
        fprintf(out, "\nCPU cost model, op by op (a stage thread's: products at the sgemm rate measured for their size\n"
                     "on %d BLAS thread%s, the other kernels the larger of FLOPs over %.3g GFLOP/s and bytes over %.3g GB/s;\n"
                     "messages %.3g us + bytes over %.3g GB/s; the rates of the line 'priced on' at the top):\n",
                cpu_blas_threads(cfg), cpu_blas_threads(cfg) == 1 ? "" : "s", cfg->cpu->vector_flops / 1e9,
                cfg->cpu->memory_bandwidth / 1e9, cfg->cpu->latency * 1e6, cfg->cpu->bandwidth / 1e9);
    else
    fprintf(out, "\nGPU cost model, kernel by kernel (roofline: the larger of FLOPs over %.0f TFLOP/s x an efficiency\n"
                 "and bytes over %.3g TB/s x %.2f, at least %.0f us a launch; products at %.2f, attention as tiled\n"
                 "tensor-core FlashAttention at %.2f, other kernels on the CUDA cores at %.3f; the cross-entropy as\n"
                 "a fused classifier; docs/gpu.md):\n",
            cfg->device_flops / 1e12, cfg->memory_bandwidth / 1e12, MEMORY_EFFICIENCY, LAUNCH_SECONDS * 1e6,
            GEMM_EFFICIENCY, ATTENTION_EFFICIENCY, VECTOR_SHARE);
    fprintf(out, "  one micro-batch of %d x %d tokens; block sections run once per layer, AdamW once per tensor\n",
            cfg->micro, cfg->context);
    fprintf(out, "  section             kernel                         launches     GFLOP        MB        us  bound    what\n");
    static const char *const sections[] = {"embed_forward", "block_forward", "head_forward", "head_front_forward",
                                           "head_back_forward", "head_backward", "head_back_backward",
                                           "head_front_backward",
                                           "block_backward", "embed_backward"};
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
        explain_section(out, gc, sections[i]);
    fprintf(out, "  per stage: ms per micro-batch forward and backward, ms per optimizer step, and the shares of\n"
                 "  forward + backward by kind of op\n");
    fprintf(out, "  stage  layers         forward  backward  optimizer  products  attention   other\n");
    for (int s = 0; s < gc->stages; s++) {
        const StageCosts *sc = &gc->stage[s];
        const StagePlan *sp = &plan->stage[s];
        char layers[32];
        stage_layers_label(sp, layers, sizeof layers);
        double compute = sc->fwd + sc->bwd;
        fprintf(out, "  %5d  %-12s %9.4g %9.4g  %9.4g  %7.1f%% %9.1f%% %6.1f%%\n", s, layers, sc->fwd * 1e3,
                sc->bwd * 1e3, sc->step * 1e3, compute > 0 ? 100 * sc->by_kind[COST_GEMM] / compute : 0.0,
                compute > 0 ? 100 * sc->by_kind[COST_ATTENTION] / compute : 0.0,
                compute > 0 ? 100 * sc->by_kind[COST_OTHER] / compute : 0.0);
    }
    if (gc->unknown)
        fprintf(out, "  %d op%s without a cost entry (costs.c) count as free\n", gc->unknown, gc->unknown == 1 ? "" : "s");
    if (priced_above)
        fprintf(out, "  predicted: as above (this model priced it)");
    else
        fprintf(out, "  this model alone would predict (the figures above are measured costs'): step time %.4g s, "
                     "%.4g tokens/s, bubble %.1f%% (steady state, the same steps)", p->step_time, p->tokens_per_s,
                100 * p->bubble);
    if (cpu)
        fprintf(out, "; MFU %.1f%% (%.4g model FLOPs a step over %d stages x %.3g GFLOP/s, the largest sgemm rate on "
                     "a stage's BLAS threads: 6 per weight per token plus causal attention, as llm.c counts)\n",
                100 * p->mfu, p->model_flops, config_devices(cfg), machine_peak_flops(cfg) / 1e9);
    else
        fprintf(out, "; MFU %.1f%% (%.4g model FLOPs a step over\n"
                     "  %d x %.0f TFLOP/s: 6 per weight per token plus causal attention, as llm.c counts)\n",
                100 * p->mfu, p->model_flops, config_devices(cfg), cfg->device_flops / 1e12);
    int replicas = config_replicas(cfg);
    if (replicas > 1)
        fprintf(out, "  whole job: %d pipelines x %.4g tokens/s = %.4g tokens/s on %d GPUs (the step time holds the "
                     "part of each stage's allreduce its last backward does not hide)\n",
                replicas, p->tokens_per_s, replicas * p->tokens_per_s, replicas * config_devices(cfg));
}

/* A profile's mean seconds per call of stage s's op `index`, or < 0 when it has none. */
static double measured_mean(const OpProfile *prof, int stage, int index)
{
    if (!prof)
        return -1;
    for (int i = 0; i < prof->n_ops; i++)
        if (prof->ops[i].stage == stage && prof->ops[i].index == index)
            return prof->ops[i].calls > 0 ? prof->ops[i].mean : -1;
    return -1;
}

void gpu_costs_emit(FILE *out, const Config *cfg, const GpuCosts *gc, const GpuPrediction *p, const OpProfile *prof)
{
    fprintf(out, "# pacic --emit costs: the GPU cost model of --explain, one line per op of each stage, numbered as\n"
                 "# run --profile-out numbers them; per call: FLOPs, bytes, predicted seconds, and with --profile the\n"
                 "# measured mean ('-' where the profile has none). calls: per optimizer step.\n");
    fprintf(out, "hardware flops %.6g memory_bandwidth %.6g\n", cfg->device_flops, cfg->memory_bandwidth);
    for (int s = 0; s < gc->stages; s++) {
        const StageCosts *sc = &gc->stage[s];
        for (int i = 0; i < sc->n_ops; i++) {
            const OpCost *c = &sc->ops[i];
            fprintf(out, "op %d %d %s %s calls %.0f", s, c->index, c->section, c->name, c->calls_per_step);
            if (c->known)
                fprintf(out, " flops %.6g bytes %.6g predicted %.6g %s", c->flops, c->bytes, c->seconds,
                        bound_name(c->bound));
            else
                fprintf(out, " flops - bytes - predicted - unknown");
            double mean = measured_mean(prof, s, c->index);
            if (mean >= 0)
                fprintf(out, " measured %.6g", mean);
            else
                fprintf(out, " measured -");
            fprintf(out, " \"%s\"\n", c->what);
        }
        fprintf(out, "stage %d fwd %.6g bwd %.6g step %.6g\n", s, sc->fwd, sc->bwd, sc->step);
    }
    /* model_flops counts one pipeline's step: its own tokens, not the D replicas' global batch */
    double tokens_per_step = (double)cfg->micro * cfg->window * cfg->context;
    fprintf(out, "predicted step_time %.6g tokens_per_s %.6g bubble %.4f mfu %.4f model_flops_per_token %.6g\n",
            p->step_time, p->tokens_per_s, p->bubble, p->mfu, p->model_flops / tokens_per_step);
}
