/* pacirt.h: the runtime's side of the contract with generated code.
 *
 * pacic generates, per stage, forward/backward/AdamW functions specialised to that stage's
 * shapes, plus one `pr_program` that describes the whole run; the runtime library (this
 * folder, linked as libpacirt.a) owns main(), threads, transport, data, optimizer driving,
 * checkpoints and metrics. This header is installed beside the library; the runtime never
 * includes a compiler header.
 */
#ifndef PACIRT_H
#define PACIRT_H

#include <stddef.h>
#include <stdint.h>

#include "paci_schedule.h"

/* A bfloat16 number: the upper half of an IEEE float. Under `precision bf16` the GPU path keeps
 * bf16 copies of what its matrix products read (weights, and the activations and gradients
 * that feed a product), written by the kernels that produce them. */
typedef uint16_t pr_bf16;

/* fp32 to bf16, to nearest even; NaN stays NaN and infinities stay infinite. */
static inline pr_bf16 pr_to_bf16(float x)
{
    union { float f; uint32_t u; } bits = {x};
    if ((bits.u & 0x7fffffffu) > 0x7f800000u)
        return (pr_bf16)((bits.u >> 16) | 0x40u);
    return (pr_bf16)((bits.u + 0x7fffu + ((bits.u >> 16) & 1u)) >> 16);
}

/* bf16 to fp32, exactly. */
static inline float pr_from_bf16(pr_bf16 h)
{
    union { uint32_t u; float f; } bits = {(uint32_t)h << 16};
    return bits.f;
}

/* llm.c's GPT-2 checkpoint tensors, in file order. LM_HEAD is ours: an untied head is not
 * part of llm.c's format and is kept in the state file beside the checkpoint. */
#define PR_CKPT_TENSORS(X)                                                                  \
    X(WTE, "wte")                                                                           \
    X(WPE, "wpe")                                                                           \
    X(LN1W, "ln1w")                                                                         \
    X(LN1B, "ln1b")                                                                         \
    X(QKVW, "qkvw")                                                                         \
    X(QKVB, "qkvb")                                                                         \
    X(ATTPROJW, "attprojw")                                                                 \
    X(ATTPROJB, "attprojb")                                                                 \
    X(LN2W, "ln2w")                                                                         \
    X(LN2B, "ln2b")                                                                         \
    X(FCW, "fcw")                                                                           \
    X(FCB, "fcb")                                                                           \
    X(FCPROJW, "fcprojw")                                                                   \
    X(FCPROJB, "fcprojb")                                                                   \
    X(LNFW, "lnfw")                                                                         \
    X(LNFB, "lnfb")                                                                         \
    X(LM_HEAD, "lm_head")

enum pr_ckpt_tensor {
#define PR_CKPT_ENUM(name, text) PR_CKPT_##name,
    PR_CKPT_TENSORS(PR_CKPT_ENUM)
#undef PR_CKPT_ENUM
    PR_CKPT_COUNT
};
#define PR_CKPT_LLMC_COUNT 16 /* tensors in llm.c's file: all but LM_HEAD */

/* One parameter tensor of a stage and where it sits in the checkpoint layout. A stage
 * holding layers [l0, l1) holds the slice [l0*per_layer, l1*per_layer) of llm.c's
 * per-layer tensors. */
typedef struct pr_tensor {
    const char *name;     /* readable name, e.g. "h3.qkvw" */
    int32_t ckpt_tensor;  /* enum pr_ckpt_tensor */
    int64_t ckpt_offset;  /* floats into that checkpoint tensor */
    int64_t offset;       /* floats into the stage's parameter block */
    int64_t size;         /* floats */
    int32_t decay;        /* AdamW weight decay applies (matrices and embeddings) */
    int32_t init;         /* enum pr_init */
} pr_tensor;

enum pr_init {
    PR_INIT_NORMAL,   /* N(0, 0.02) */
    PR_INIT_RESIDUAL, /* N(0, 0.02 / sqrt(2 * layers)): projections into the residual */
    PR_INIT_ZEROS,
    PR_INIT_ONES,
};

typedef struct pr_fwd_args {
    const float *params;    /* the stage's parameter block */
    float *acts;            /* this micro-batch's activation slot (act_floats) */
    const int32_t *tokens;  /* B*T input tokens (read by the first stage) */
    const int32_t *targets; /* B*T targets (read by the last stage) */
    float *losses;          /* B*T per-token losses (written by the last stage) */
    const pr_bf16 *params_h; /* bf16 copy of params (the GPU path under bf16), else NULL */
} pr_fwd_args;

typedef struct pr_bwd_args {
    const float *params;    /* the weights to differentiate at: live or stashed */
    float *grads;           /* gradient accumulator, same layout as params; added to */
    float *acts;            /* the slot the matching forward filled */
    float *scratch;         /* scratch_floats of per-stage scratch */
    const int32_t *tokens;
    const int32_t *targets;
    const float *dx_out;    /* B*T*C d(loss)/d(output) from the next stage; NULL on the last */
    float *dx_in;           /* B*T*C d(loss)/d(input) for the previous stage; NULL on the first */
    float loss_scale;       /* multiplies d(mean token loss): 1/window */
    const pr_bf16 *params_h; /* bf16 copy of params (the GPU path under bf16), else NULL */
    /* Replicas on GPUs, in the window's last backward: told when grads[offset, offset +
     * count) is final, so that its allreduce overlaps the rest of the backward; else NULL.
     * The GPU backward reports every range once (the C backward never calls it). */
    void (*grads_ready)(void *ctx, int64_t offset, int64_t count);
    void *ready_ctx;
    /* Where the schedule sends dx_in next: told once dx_in is complete, before the stage's
     * last weight gradients (the late section), so that the message overlaps them; else NULL. */
    void (*dx_ready)(void *ctx);
} pr_bwd_args;

typedef struct pr_adamw_args {
    float *params;
    const float *grads;
    float *m;
    float *v;
    float lr;
    float grad_scale;       /* gradient clipping factor, 1 when not clipped */
    int64_t t;              /* this stage's step number, from 1, for bias correction */
    pr_bf16 *params_h;      /* written with the updated weights (GPU path under bf16), or NULL */
} pr_adamw_args;

/* The update rules besides AdamW (runtime/optim_rules.c, docs/dsl.md "optimizer"). Their
 * state uses the stage's m and v blocks: Muon's momentum and its AdamW group's moments in m
 * and v, LAMB's, NAdamW's and LANS's moments in m and v, LARS's momentum in m (v stays zero). The
 * order of the enumeration is the DSL's list of optimizer names and state.bin's optimizer
 * field. */
enum pr_optimizer { PR_OPT_ADAMW, PR_OPT_MUON, PR_OPT_LAMB, PR_OPT_LARS, PR_OPT_NADAMW, PR_OPT_LANS };
/* Muon's shape scaling of the orthogonalised update of a rows x cols matrix. */
enum pr_muon_scale {
    PR_MUON_SCALE_RATIO, /* sqrt(max(1, rows / cols)) (Keller Jordan) */
    PR_MUON_SCALE_RMS,   /* 0.2 * sqrt(max(rows, cols)): AdamW's update RMS (Moonlight) */
};
typedef struct pr_optim_rule {
    int32_t kind;           /* enum pr_optimizer; PR_OPT_ADAMW only for pr_optim_predict */
    int32_t width;          /* C: a block matrix's shape follows from its checkpoint tensor */
    double beta1, beta2, eps, weight_decay; /* LAMB, NAdamW, LANS; Muon's AdamW group; LARS's eps */
    double momentum, trust_coefficient;     /* Muon and LARS; LARS */
    int32_t nesterov, ns_steps, shape_scale; /* Muon */
    double muon_weight_decay;               /* Muon's matrices */
    double group_lr_ratio;  /* Muon: the AdamW group's lr over Muon's (the schedule scales both) */
    double momentum_decay;  /* NAdamW: psi of mu_t = beta1 (1 - 0.5 * 0.96^(t psi)) */
} pr_optim_rule;
/* One step of `rule` on one tensor of a stage (args as for AdamW; t->offset into them). */
void pr_optim_step(const pr_optim_rule *rule, const pr_tensor *t, const pr_adamw_args *args);
/* `delay_correction predict` on one tensor (docs/dsl.md "Delay correction"): out = W - d lr u,
 * u the rule's update direction from its state after t >= 1 steps (params, m, v, indexed as
 * the step indexes them), lr the next step's. Adamw, muon, lamb, nadamw and lans; not lars. */
void pr_optim_predict(const pr_optim_rule *rule, const pr_tensor *t, const float *params, const float *m,
                      const float *v, int64_t steps_done, double lr, int32_t d, float *out);
/* A stage's whole prediction (the device layer's `predict`): out = W - d lr u over every
 * tensor as pr_optim_predict, and out_h, when given, its bf16 copy (the GPU under bf16). */
typedef struct pr_predict_args {
    const float *params, *m, *v;
    int64_t steps_done;     /* t >= 1: the state is the one after t steps */
    double lr;              /* the next step's */
    int32_t d;              /* steps ahead, from the schedule table */
    float *out;
    pr_bf16 *out_h;
} pr_predict_args;
/* The same on the GPU (runtime/cuda/optim.c): kernels of the stage's unit, indexed as in its
 * list, and cuBLASLt products on the stage's compute stream; pointers in device memory. */
typedef struct pr_optim_kernels {
    int32_t momentum, scale_add, muon_apply, lamb_direction, lars_apply, adamw, to_bf16, nadam_apply, lans_direction;
    int32_t optim_predict, wide_copy;
    int32_t block;          /* threads per block the unit's kernels are bounded to */
} pr_optim_kernels;
void pr_cuda_optim_step(const pr_optim_rule *rule, const pr_tensor *t, const pr_adamw_args *args,
                        int32_t stage, const pr_optim_kernels *kernels);
void pr_cuda_optim_predict(const pr_optim_rule *rule, const pr_tensor *t, const pr_predict_args *args,
                           int32_t stage, const pr_optim_kernels *kernels);

/* One op of a stage's generated sections, as the per-op profile (run --profile-out) names
 * it; pr_stage_code.ops lists them in the order the stage file numbers them. */
typedef struct pr_op_info {
    const char *section;  /* "block_forward", ..., "adamw" */
    const char *name;     /* the kernel, or "gemm", "zero", "copy" */
    const char *what;     /* what it computes (the op's comment) */
} pr_op_info;

/* Per-op timing hooks: generated code calls begin and end around op `op` of the stage's
 * list while the stage's timer pointer is set (the runtime sets it only when profiling, so
 * otherwise each op costs one test of a pointer). The device layer measures. */
typedef struct pr_op_timer {
    void (*begin)(int32_t stage, int32_t op);
    void (*end)(int32_t stage, int32_t op);
} pr_op_timer;

typedef struct pr_stage_code {
    int32_t index;
    int32_t first_layer;
    int32_t n_layers;
    int32_t has_embed;      /* token + position embedding (first stage) */
    int32_t has_head;       /* final LayerNorm, LM head, cross-entropy (last stage) */
    int64_t n_params;       /* floats in the parameter block */
    int64_t act_floats;     /* floats in one activation slot */
    int64_t scratch_floats; /* floats of backward scratch */
    int64_t in_offset;      /* B*T*C input activation inside a slot (not on the first stage) */
    int64_t out_offset;     /* B*T*C output activation inside a slot (not on the last stage) */
    int64_t probs_offset;   /* B*T*V probabilities inside a slot (last stage) */
    int32_t n_tensors;
    const pr_tensor *tensors;
    void (*forward)(const pr_fwd_args *);
    void (*backward)(const pr_bwd_args *);
    void (*adamw)(const pr_adamw_args *);
    int32_t n_ops;                   /* the per-op profile's ops of this stage */
    const pr_op_info *ops;
    const pr_op_timer **op_timer;    /* the stage file's timer pointer, NULL between profiles */
    const pr_optim_rule *optim_rule; /* the stage's rule under muon, lamb, lars, nadamw; NULL under adamw */
    /* The vocabulary split (0 in a program without one): the messages' floats, B*T*C when 0
     * (pr_link_floats); the final LayerNorm; the LM head's rows [vocab_begin, vocab_end) the
     * stage holds (logits at probs_offset); the last stage's log-sum-exp per token. */
    int64_t out_floats, dx_floats;
    int32_t has_lnf;
    int64_t vocab_begin, vocab_end;
    int64_t lse_offset;
    /* A zero-bubble program (zb-h1, zb-h2): the backward's two parts, B (the input's gradient
     * and the products' output gradients, which it keeps in the slot) and W (the weights'
     * gradients from them); backward runs both. NULL in other programs. */
    void (*backward_b)(const pr_bwd_args *);
    void (*backward_w)(const pr_bwd_args *);
} pr_stage_code;

enum pr_lr_decay { PR_DECAY_COSINE, PR_DECAY_LINEAR, PR_DECAY_CONSTANT };
enum pr_on_nan { PR_ON_NAN_STOP, PR_ON_NAN_SKIP };
/* `train { data_order ... }`: the order the training sequences are read in (docs/dsl.md). */
enum pr_data_order { PR_DATA_SEQUENTIAL, PR_DATA_SHUFFLED };

typedef struct pr_program {
    const char *source;      /* the DSL file this was compiled from */
    /* model */
    int32_t layers, width, heads, context, vocab, tied;
    int32_t probs_stride;    /* floats per row of the last stage's probabilities (>= vocab) */
    /* batch: B sequences of T = context tokens per micro-batch */
    int32_t micro;
    /* optimizer and learning-rate schedule, already scaled for the batch */
    int64_t steps;
    double lr;               /* peak */
    double min_lr_ratio;     /* floor of the decay, as a fraction of the peak */
    int64_t warmup_steps;
    int32_t decay;           /* enum pr_lr_decay */
    double beta1, beta2, eps, weight_decay, grad_clip; /* grad_clip 0: off */
    int32_t global_clip;     /* clip by the norm over all stages (synchronous schedules) */
    int32_t post_validation; /* ... checked after the step, which a rollback redoes (executor.c) */
    /* evaluation, checkpoints, data */
    int64_t eval_every, eval_batches, ckpt_every; /* 0: never */
    int64_t ckpt_keep;       /* checkpoints of this run a save keeps, the new one included; 0: 2 */
    uint64_t seed;
    const char *train_data, *val_data, *ckpt_dir;
    /* stages and their schedule */
    int32_t stages;
    const pr_stage_code *stage;
    const paci_table *schedule;
    /* the GPU path, generated when pacic found a CUDA toolkit; NULL without one */
    int32_t bf16_operands;                     /* its products read bf16 copies (precision bf16) */
    const struct pr_cuda_stage *cuda;          /* per stage */
    const struct pr_device *cuda_device;       /* the CUDA device layer (libpacirt_cuda.a) */
    /* a non-finite loss or gradient: stop the run (no checkpoint) or skip that step */
    int32_t on_nan;                            /* enum pr_on_nan */
    int32_t data_order;                        /* enum pr_data_order: shuffled is keyed by seed */
    int32_t optimizer;                         /* enum pr_optimizer: state.bin records it */
    /* data parallelism (`parallel { data D }`): D copies of the pipeline, each reading its own
     * micro-batches, average each stage's gradients at that stage's step; 0 or 1: one */
    int32_t replicas;
    /* `recompute full`: a slot keeps only the stage's input (the first stage: its tokens); one
     * activation workspace runs every forward, and a backward reruns its forward there first */
    int32_t recompute;
    /* `accumulate pairwise`: each backward's gradient is computed alone and a window's are
     * summed as a binary tree (pr_pairwise_buffers), as the replicas' reduction adds them, so
     * under gpipe and 1f1b D replicas of window K give the bits of one pipeline of window D K
     * (D, K powers of two; never under paci or pipedream: docs/dsl.md) */
    int32_t accumulate_pairwise;
    /* `delay_correction dc-asgd` (docs/dsl.md "Delay correction"): a forward's aux in the table
     * is then the delay d its backward's gradient is corrected for (DC-ASGD, Zheng et al.
     * 2017), g + dc_lambda g g (d (W - W_prev)), before it joins the window's sum; not a
     * prediction. dc_lambda 0: the plain backward, PACI's bits */
    int32_t dc_asgd;
    double dc_lambda;
    /* `parallel { compression dgc { ... } }` (runtime/dgc.c, docs/dsl.md): each replica sends
     * the top-k of (its residual + this step's gradient), k = density(t) x n per stage, and
     * keeps the rest; 0: the dense sum. dgc_warmup_steps: the exponential warm-up of the
     * density; dgc_clip: the local clipping threshold before the residual (0: off). */
    double dgc_density;
    int64_t dgc_warmup_steps;
    double dgc_clip;
} pr_program;

/* `accumulate pairwise`: the gradient buffers a stage adds beside its own for window K:
 * a sum of 2^j micro-batches per level held at once (at most floor(log2 K) levels, before
 * the window's last backward merges them), and the one the running backward writes. */
static inline int pr_pairwise_buffers(int64_t K)
{
    int levels = 0;
    while ((K >>= 1) > 0)
        levels++;
    return levels + 1;
}

/* ---- the GPU path (runtime/cuda/, libpacirt_cuda.a): what generated CUDA host code calls -- */

/* One compiled image of a stage's CUDA unit: a cubin for `arch` ("sm_90"), or PTX when arch
 * starts with "compute_" (the driver compiles it for newer GPUs). */
typedef struct pr_cuda_image {
    const char *arch;
    const unsigned char *data;
    int64_t size;
} pr_cuda_image;

/* A stage's CUDA code: its kernels' images and the host launch sequences. The sequences take
 * the same arguments as the CPU code, with every pointer in device memory. */
typedef struct pr_cuda_stage {
    int32_t n_images;
    const pr_cuda_image *images;
    int32_t n_kernels;
    const char *const *kernel_names; /* looked up in the module; launches index this list */
    void (*forward)(const pr_fwd_args *);
    void (*backward)(const pr_bwd_args *);
    void (*adamw)(const pr_adamw_args *);
    /* params_h = bf16(params) over the whole block: after weights change other than by AdamW */
    void (*weight_copy)(const float *params, pr_bf16 *params_h);
    /* delay_correction predict: pr_cuda_optim_predict over the stage's tensors */
    void (*predict)(const pr_optim_rule *rule, const pr_predict_args *);
    /* zero-bubble: the backward's B and W (pr_stage_code's), or NULL */
    void (*backward_b)(const pr_bwd_args *);
    void (*backward_w)(const pr_bwd_args *);
} pr_cuda_stage;

extern const struct pr_device pr_device_cuda;

/* A kernel of every stage's unit that the CUDA layer launches itself (clipping's norm and the
 * non-finite check): pr_sumsq_partials(const float *x, long n, double *partial) with blocks of
 * PR_CUDA_SUMSQ_BLOCK threads writes block b's sum of squares of x (a grid-stride loop) into
 * partial[b]; the host adds the partials in order. */
#define PR_CUDA_SUMSQ_KERNEL "pr_sumsq_partials"
#define PR_CUDA_SUMSQ_BLOCK 256

/* `delay_correction dc-asgd` on the GPU: the kernel of such a program's every unit that the
 * CUDA layer launches as pr_dc_asgd_add (runtime/dc_asgd.c), (sum, g, w, w_prev, n, coef). */
#define PR_CUDA_DC_ASGD_KERNEL "pr_gpu_dc_asgd_add"

/* `compression dgc` (runtime/cuda/dgc.c): kernels of a compressing program's every unit that
 * the CUDA layer launches itself, by these names (compiler/emit_cuda.c writes them): the
 * accumulation, the radix select's histogram and pick, the chunks' counts, their scan, the
 * compaction into a list of 4-byte pairs (runtime/paci_dgc.h), and the sum of a replica's
 * list. A chunk is PR_CUDA_DGC_CHUNK consecutive entries, walked in index order by one thread. */
#define PR_CUDA_DGC_KERNELS(X)                                                               \
    X(accumulate, "pr_gpu_dgc_accumulate") X(histogram, "pr_gpu_dgc_histogram") X(pick, "pr_gpu_dgc_pick") \
    X(count, "pr_gpu_dgc_count") X(scan, "pr_gpu_dgc_scan") X(compact, "pr_gpu_dgc_compact")              \
    X(scatter, "pr_gpu_dgc_scatter")
#define PR_CUDA_DGC_CHUNK 256
/* The selection's state on the device (32-bit words): the threshold's bits found so far,
 * their mask, the entries still wanted (k, then the ties at the threshold to take), the
 * pairs written; then a histogram of 256 bins. */
enum { PR_DGC_PREFIX, PR_DGC_MASK, PR_DGC_WANTED, PR_DGC_WRITTEN, PR_DGC_STATE_WORDS = 8,
       PR_DGC_BINS = 256 };

/* Launches kernel `kernel` of stage's list over `threads` indices in blocks of `block` on
 * the stage's compute stream; args as cuLaunchKernel takes them. */
void pr_cuda_launch(int32_t stage, int32_t kernel, int64_t threads, int32_t block, void **args);
/* The operands of a product on the GPU. */
enum pr_gemm_inputs {
    PR_GEMM_FP32,    /* fp32 operands and arithmetic (CUBLAS_COMPUTE_32F) */
    PR_GEMM_FP32_TC, /* fp32 operands the tensor cores round to bf16 (COMPUTE_32F_FAST_16BF) */
    PR_GEMM_BF16,    /* a and b point at pr_bf16 operands; fp32 accumulation and output */
    PR_GEMM_BF16_OUT, /* a, b and c pr_bf16 (c rounded from the fp32 accumulation); beta 0 */
};

/* pr_gemm on the stage's compute stream through cuBLASLt, fp32 accumulation; a and b hold
 * floats or pr_bf16 as `inputs` (enum pr_gemm_inputs) says, c is fp32 (pr_bf16 for
 * PR_GEMM_BF16_OUT, ldc then in its elements). */
void pr_cuda_gemm(int32_t stage, int32_t inputs, int trans_a, int trans_b, int m, int n, int k,
                  float alpha, const void *a, int lda, const void *b, int ldb, float beta,
                  float *c, int ldc);
/* The same plus `bias` (n floats) added to every row, in cuBLASLt's epilogue. */
void pr_cuda_gemm_bias(int32_t stage, int32_t inputs, int trans_a, int trans_b, int m, int n, int k,
                       float alpha, const void *a, int lda, const void *b, int ldb, float beta,
                       float *c, int ldc, const float *bias);
/* c = (op(a) op(b)) * GELU'(pre), pre of c's shape and ldc (CUBLASLT_EPILOGUE_DGELU); beta 0.
 * Returns 0, having queued nothing, when cuBLASLt has no algorithm for it. */
int pr_cuda_gemm_dgelu(int32_t stage, int32_t inputs, int trans_a, int trans_b, int m, int n, int k,
                       float alpha, const void *a, int lda, const void *b, int ldb, float beta,
                       float *c, int ldc, const float *pre);
/* dst[0..count) = 0, and dst = src, on the stage's compute stream. */
void pr_cuda_zero(int32_t stage, float *dst, int64_t count);
void pr_cuda_copy(int32_t stage, float *dst, const float *src, int64_t count);

/* Defined by the generated code. */
extern const pr_program pr_generated_program;

/* Row-major C[m x n] = alpha * op(A)[m x k] op(B)[k x n] + beta * C (the BLAS behind it is
 * the runtime's business). */
void pr_gemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
             const float *b, int ldb, float beta, float *c, int ldc);
/* The same with beta = 0 and bias[0..n) added to every row of C. */
void pr_gemm_bias(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                  const float *b, int ldb, float beta, float *c, int ldc, const float *bias);
/* x, a rows x cols row-major bf16 matrix of leading dimension ld, as fp32 (exactly) in the
 * calling thread's buffer `slot` (0 or 1), valid until that thread's next call for the slot:
 * an operand of pr_gemm that is kept in bf16 (precision bf16). */
const float *pr_widen_bf16(int slot, const void *x, int rows, int cols, int ld);

/* fn(ctx, i, worker) for every i in [0, n), spread over the calling stage thread (worker 0)
 * and the helpers that share its cores (workers 1, 2, ...); returns when all are done. Each i
 * runs whole on one thread: it must write only its own outputs (pool.c). */
typedef void (*pr_parallel_fn)(void *ctx, int index, int worker);
void pr_parallel_for(int n, pr_parallel_fn fn, void *ctx);
/* The threads pr_parallel_for would use here: 1 on one core, or inside one of its loops. */
int pr_parallel_cores(void);
/* The calling thread's scratch of at least `floats` floats, kept until its next call. */
float *pr_thread_floats(size_t floats);

/* Entry point: main() in runtime/main.c calls it with the generated program. */
int pr_main(int argc, char **argv, const pr_program *prog);
/* The entry point of the program `pacic calibrate-cpu` builds (calibrate.c): measures this
 * machine's CPU rates and writes them to argv[1]. `vector` runs the element-wise kernels pacic
 * compiled into that program once and returns the FLOPs its cost model counts for them. */
int pr_calibrate_main(int argc, char **argv, double (*vector)(void));

#endif
