/* pacic.h: the compiler's one header, one section per phase (file named in each heading).
 *
 *   parse -> check -> plan -> schedule -> verify -> lower -> emit | simulate | explain
 *
 *   model.paci -> [grammar/] AST -> [sema.c] Config -> [plan.c] Plan
 *              -> [schedule.c] paci_table -> [verify.c] VerifyReport
 *              -> [lower.c] Lowered: each stage's layout, tensors, sections and op lists
 *              -> [codegen.c] generated C (and CUDA) -> [build.c] cc + libpacirt -> run
 *              -> [simulate.c] [costs.c] [inspect.c] predictions, --explain, timelines
 *
 * Beside the flow: `pacic tokenize` (tokenize.c) and `pacic plot` (plot.c: run's metrics ->
 * loss curves, drawn with svg.c's pieces as inspect.c's timeline is).
 *
 * Data flows one way: no phase reads a form older than the one before it. What a stage is to
 * the back ends is built once, by lower.c, from the layers below it, and every back end (the
 * emitters, costs.c's GPU cost model, the runtime metadata in program.c) reads that value:
 *
 *   codegen.c       the driver: has the emitters render each file of a lowered program, writes them
 *   emit_c.c        C: a stage's kernels and sections, program.c with the schedule table
 *   emit_cuda.c     CUDA: the device unit (NVRTC: nvrtc.c) and each stage's launches;
 *                   attention_gpu.c: how attention is lowered for the GPU (tiles, WMMA)
 *   emit_common.c   what both emitters write alike: banner, escaping, the op-loop skeleton
 *   lower.c         the lowering pass: one LoweredStage per stage, from the three below
 *   ops.c           how the model is lowered to backend-neutral op lists, and their numbering
 *   layout.c        where each tensor of a stage lives
 *   kernels.c       the kernels the op lists launch, described once for every backend
 */
#ifndef PACIC_H
#define PACIC_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../runtime/paci_schedule.h"

#define PACIC_VERSION "0.1.0"

/* Exit statuses: 0 ok, 1 the user's input is wrong, 2 the compiler is wrong. */
enum { EXIT_USER = 1, EXIT_INTERNAL = 2 };

#define PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#define NORETURN __attribute__((noreturn))

/* ---- util.c: memory, strings, files ------------------------------------------------- */

void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xasprintf(const char *fmt, ...) PRINTF_LIKE(1, 2);
NORETURN void internal_error(const char *file, int line, const char *fmt, ...) PRINTF_LIKE(3, 4);
#define unreachable() internal_error(__FILE__, __LINE__, "unreachable")
#define ICE(...) internal_error(__FILE__, __LINE__, __VA_ARGS__)

/* Reads a whole file; NULL with errno set on failure. For pacic's own files: a file the
 * user names goes through open_input_file or read_input_file. */
char *read_file(const char *path, size_t *len);
/* Limits on the files a user names (docs/dsl.md "Files pacic reads"): a device or a pipe
 * (/dev/zero) would never end, so only regular files are read, and no larger than these. */
#define DSL_FILE_LIMIT ((size_t)16 << 20)
#define CALIBRATION_FILE_LIMIT ((size_t)1 << 20)
#define PROFILE_FILE_LIMIT ((size_t)64 << 20)
#define METRICS_FILE_LIMIT ((size_t)1 << 30)
/* A machine's rates and sizes (hardware keys, a CPU calibration's lines): FLOP/s, bytes/s and
 * bytes in [1, 1e30], seconds of latency at most 1e30, so that every time the cost model
 * works out (a step's FLOPs over a rate, up to ~1e40 s) stays finite: no nan in --explain. */
#define MACHINE_RATE_MIN 1.0
#define MACHINE_RATE_MAX 1e30
/* A regular file of at most `limit` bytes opened for reading: its descriptor, or -1 with
 * `why` saying what is wrong ("not a regular file", the size against the limit, strerror). */
int open_input_file(const char *path, size_t limit, char *why, size_t why_size);
/* Such a file read whole and NUL-terminated (*len its length, when len is not NULL). */
char *read_input_file(const char *path, size_t limit, size_t *len, char *why, size_t why_size);

/* A growable text buffer with printf-checked appends (used by every emitter). */
typedef struct StrBuf {
    char *data;
    size_t len, cap;
    int indent; /* emit_line() indents by this many levels of four spaces */
} StrBuf;

void sb_printf(StrBuf *sb, const char *fmt, ...) PRINTF_LIKE(2, 3);
void sb_vprintf(StrBuf *sb, const char *fmt, va_list ap) PRINTF_LIKE(2, 0);
void sb_puts(StrBuf *sb, const char *s);
void emit_line(StrBuf *sb, const char *fmt, ...) PRINTF_LIKE(2, 3); /* indented, adds \n */
void emit_open(StrBuf *sb, const char *fmt, ...) PRINTF_LIKE(2, 3); /* line ending "{", indent++ */
void emit_close(StrBuf *sb, const char *text); /* indent--, line "}" + text */
void sb_free(StrBuf *sb);
/* Splits a top-level comma-separated list (parameters or arguments; none nests commas) into
 * items of up to 127 characters; returns how many. */
int split_list(const char *text, char items[][128], int max);
/* Writes atomically: a temporary file beside `path`, fsync, rename. 0 on success. */
int write_file_atomic(const char *path, const void *data, size_t len);

/* ---- diag.c: the one error printer -------------------------------------------------- */

/* A byte range [begin, end) in a source. Line and column are computed only when printed. */
typedef struct Span {
    int begin, end;
} Span;

typedef struct Source {
    const char *path;
    const char *text;
    size_t len;
} Source;

typedef enum { DIAG_ERROR, DIAG_WARNING, DIAG_NOTE } DiagLevel;

/* Prints `path:line:col: level: message`, the source line and a ^~~~ underline of the span.
 * A span with begin < 0 (SPAN_FILE) is about the whole file: `path: level: message` only.
 * All diagnostics go to the stream set by diag_set_stream (stderr by default). */
#define SPAN_FILE ((Span){-1, -1})
void diag_at(const Source *src, Span span, DiagLevel level, const char *fmt, ...) PRINTF_LIKE(4, 5);
#define error_at(src, span, ...) diag_at(src, span, DIAG_ERROR, __VA_ARGS__)
#define warning_at(src, span, ...) diag_at(src, span, DIAG_WARNING, __VA_ARGS__)
#define note_at(src, span, ...) diag_at(src, span, DIAG_NOTE, __VA_ARGS__)
/* An error about the whole input or a value with no place in it (e.g. a command-line flag). */
void diag_plain(DiagLevel level, const char *fmt, ...) PRINTF_LIKE(2, 3);
void diag_set_stream(FILE *f);
int diag_error_count(void);
void diag_reset(void);
/* 1-based line and column of a byte offset. */
void diag_line_col(const Source *src, int offset, int *line, int *col);
/* The same for positions asked in rising order; start from a zeroed cursor. */
typedef struct {
    int offset, line, line_start;
} LineCursor;
void line_cursor_find(LineCursor *cursor, const Source *src, int offset, int *line, int *col);
/* The closest of `candidates` (NULL-terminated) to `word` within a small edit distance. */
const char *did_you_mean(const char *word, const char *const *candidates);

/* ---- ast.c (built by grammar/parser.y): the syntax tree, with spans --------------------- */

typedef enum {
    VAL_NUMBER,  /* 3e-4, 1_000 */
    VAL_PERCENT, /* 1% */
    VAL_STRING,  /* "file.bin" */
    VAL_WORD,    /* paci, sqrt, at */
    VAL_LIST,    /* [1, 2, 3] */
} ValueKind;

typedef struct Value {
    ValueKind kind;
    Span span;
    double number;       /* VAL_NUMBER, VAL_PERCENT */
    bool is_integer;     /* VAL_NUMBER: whole as written (`1_000`, `-2`, `1e4`; not `1.00000000000000000001e19`) */
    bool past_u64;       /* is_integer, and 2^64 or more in magnitude */
    uint64_t magnitude;  /* is_integer, not past_u64: the exact |value|, which `number` rounds above 2^53 */
    char *text;          /* VAL_STRING (unescaped), VAL_WORD; the spelling for numbers */
    struct Value **items;/* VAL_LIST */
    int n_items;
} Value;

typedef struct Block Block;

/* `key value value ...` ending at a newline or ';', or `key [name] { ... }`. */
typedef struct Entry {
    char *key;
    Span key_span;
    Span span;           /* the whole entry */
    Value **values;
    int n_values;
    Block *block;        /* non-NULL for a nested block */
} Entry;

struct Block {
    char *name;          /* optional word after the key: `model gpt2 {`; NULL if none */
    Span name_span;
    Span open_span;      /* the '{' */
    Entry **entries;
    int n_entries;
};

/* A file is a block with no braces: its entries are the top-level blocks. */
typedef struct Ast {
    Block *root;
} Ast;

/* Builders called by the grammar's actions; each takes the span it covers and owns what
 * it is given (strings, values, entries, blocks). */
Value *ast_number(Span span, const char *spelling, double number, bool is_integer, bool past_u64,
                  uint64_t magnitude);
Value *ast_percent(Span span, const char *spelling, double number);
Value *ast_string(Span span, char *unescaped);
Value *ast_word(Span span, char *word);
Value *ast_list(Span open);
void ast_list_add(Value *list, Value *item, Span close_or_item);
Entry *ast_entry(char *key, Span key_span);
void ast_entry_add_value(Entry *entry, Value *value);
void ast_entry_set_block(Entry *entry, char *name, Span name_span, Block *block, Span close);
Block *ast_block(Span open);
void ast_block_add(Block *block, Entry *entry);
void ast_value_free(Value *value);
void ast_entry_free(Entry *entry);
void ast_block_free(Block *block);

/* Blocks nest at most this deep; deeper input is an error, not a stack overflow. */
enum { AST_MAX_NESTING = 16 };

/* Parses src; on syntax errors prints them and returns NULL. */
Ast *parse_source(const Source *src);
void ast_free(Ast *ast);
void ast_dump(FILE *out, const Source *src, const Ast *ast);
/* Prints every token with its span (--dump tokens). */
void lex_dump(FILE *out, const Source *src);

/* ---- sema.c: every check; AST -> Config --------------------------------------------- */

typedef enum { LR_SCALE_NONE, LR_SCALE_LINEAR, LR_SCALE_SQRT } LrScale;
typedef enum { PREC_FP32, PREC_BF16 } Precision;
/* How attention runs: an online softmax over each query row's keys that never stores T x T
 * scores; per-head matrix products over a T x T workspace (BLAS-friendly on the CPU), the
 * backward recomputing the probabilities; or the same products keeping them (stored). */
typedef enum { ATTN_FLASH, ATTN_MATMUL, ATTN_STORED } AttentionImpl;

/* What --explain prices on (machine.c); order = the hardware block's names. */
enum machine { MACHINE_GPU, MACHINE_CPU };

/* Validated numbers only: nothing downstream interprets a string of the DSL. */
/* `pipeline { delay_correction ... }` (docs/dsl.md); order = the DSL's word list. */
enum delay_correction { DELAY_NONE, DELAY_PREDICT, DELAY_NESTEROV, DELAY_DC_ASGD };
/* `pipeline { recompute ... }` (docs/dsl.md); order = the DSL's word list. */
enum recompute { RECOMPUTE_NONE, RECOMPUTE_FULL };
/* `pipeline { messages ... }`: what the residual-stream messages between stages carry. */
enum messages { MESSAGES_FP32, MESSAGES_BF16 };
/* `batch { accumulate ... }` (docs/dsl.md); order = the DSL's word list. */
enum accumulate { ACCUMULATE_SEQUENTIAL, ACCUMULATE_PAIRWISE };
/* `parallel { compression NAME { ... } }` (docs/dsl.md); order = the DSL's block names after none. */
enum compression { COMPRESSION_NONE, COMPRESSION_DGC };

typedef struct Config {
    const Source *src;
    /* model: a GPT-2 decoder */
    int layers, width, heads, context, vocab;
    bool tied;              /* LM head shares the token embedding (one stage only) */
    /* pipeline */
    int stages;             /* S: the model's (virtual) stages in layer order, devices x chunks; the DSL's
                               `stages p` is the devices, and sema multiplies it by `chunks v` */
    int chunks;             /* v: stages a device holds (interleaved, zb-v); 0 or 1: one */
    int placement;          /* enum paci_placement: which stages a device holds (paci_placed_stage) */
    enum paci_schedule_kind schedule;
    int window;             /* K: micro-batches per optimizer step, every schedule */
    int *split_units;       /* units per stage, four a layer: its att piece (LayerNorm 1, qkv, attention), its proj piece, its LayerNorm 2 and fc
                               product, its GELU and MLP projection (length stages; `split [3.5, 2.25]`
                               is 10 and 7; plan.c's UNITS_PER_LAYER), NULL = automatic */
    long vocab_split;       /* `vocab_split N`: the LM head's rows [0, N) and the final LayerNorm on the
                               stage before the last, rows [N, V) alone on the last; 0: the head whole
                               on the last stage; -1: not written (automatic) */
    int delay_correction;   /* enum delay_correction: what the forwards of async schedules run on */
    double dc_lambda;       /* `dc_lambda`: DC-ASGD's lambda under delay_correction dc-asgd; -1: not written */
    int recompute;          /* enum recompute: full keeps a slot's input only, the backward reruns the forward */
    int messages;           /* enum messages: bf16 sends the residual stream and its gradient in bf16 */
    int warm_schedule;      /* `warm_start SCHEDULE N`: a synchronous schedule for the first N steps */
    long warm_steps;        /* N; 0: no warm start */
    /* parallel: `parallel { data D }`, D copies of the whole pipeline averaging gradients */
    int replicas;           /* D >= 1; a Config built by hand may leave 0 (config_replicas) */
    /* `compression dgc { ... }` inside parallel: Deep Gradient Compression of the replicas'
     * exchange (Lin et al. 2018; runtime/dgc.c); COMPRESSION_NONE: the dense sum */
    int compression;        /* enum compression */
    double dgc_density;     /* the final share of each stage's gradients a replica sends, (0, 1] */
    long dgc_warmup_steps;  /* steps over which the density falls exponentially to it; 0: none */
    double dgc_clip;        /* local clipping threshold C (a replica clips at C / sqrt(D)); 0: off */
    /* batch */
    int micro;              /* sequences per micro-batch */
    long global_batch;      /* sequences per optimizer step = micro * window * replicas */
    int accumulate;         /* enum accumulate: pairwise sums a window's gradients as a binary tree */
    /* training */
    char *train_data, *val_data; /* resolved against the DSL file's folder; may be NULL */
    long steps;
    double lr_base;         /* as written ... */
    long lr_base_batch;     /* ... for this global batch */
    LrScale lr_scale;
    double lr;              /* peak lr for global_batch, derived by the scale rule */
    double beta1, beta2, eps, weight_decay, grad_clip;
    /* optimizer post-validation (docs/dsl.md): a synchronous program's stages step without
     * waiting for the global norm, and roll back and redo the rare step it clips or skips */
    bool post_validation;
    /* the optimizer's name (enum pr_optimizer) and the keys only some optimizers take
     * (docs/dsl.md); adamw uses the line above only */
    int optimizer;
    double momentum;          /* muon, lars; < 0: not written (muon 0.95, lars 0.9) */
    bool nesterov;            /* muon */
    int ns_steps;             /* muon: Newton-Schulz iterations */
    int shape_scale;          /* muon: enum pr_muon_scale */
    double trust_coefficient; /* lars: eta */
    double momentum_decay;    /* nadamw: psi of NAdam's momentum schedule */
    /* muon's inner `adamw` block: embeddings, head, biases and LayerNorm */
    double group_lr, group_beta1, group_beta2, group_eps, group_weight_decay;
    long warmup_steps;
    int lr_decay;           /* enum pr_lr_decay in runtime/pacirt.h */
    double min_lr_ratio;
    long eval_every, eval_batches, ckpt_every;
    long ckpt_keep;         /* checkpoints of this run a save keeps, the new one included */
    char *ckpt_dir;         /* as written: relative to the folder `run` runs in */
    uint64_t seed;
    Precision precision;
    AttentionImpl attention;
    int on_nan;             /* enum pr_on_nan: a non-finite loss or gradient stops or skips */
    int data_order;         /* enum pr_data_order: the training sequences in file order or shuffled by seed */
    /* hardware the cost model assumes: `hardware [gpu] { ... }` a GPU per stage, `hardware cpu
     * { ... }` and no hardware block this machine's CPU, a thread per stage (machine.c) */
    int machine;            /* enum machine */
    double device_flops;    /* FLOP/s per device for the chosen precision (a CPU: one thread's sgemm) */
    double link_bandwidth;  /* bytes/s between neighbouring stages */
    double link_latency;    /* seconds per message */
    double device_memory;   /* bytes per device */
    double memory_bandwidth;/* bytes/s between a device and its memory (HBM) */
    double network_bandwidth;/* bytes/s per device between nodes: the replicas' allreduce */
    int cpu_cores;          /* `hardware cpu { cores N }`; 0: not written */
    double vector_flops;    /* `hardware cpu { vector_flops F }`; 0: not written */
    char *cpu_calibration;  /* `hardware cpu { calibration "FILE" }`, resolved; NULL: the default file */
    /* a CPU's rates: as priced (its calibration file, read by sema where one is found, under
     * what the block writes; machine_cpu_resolve completes them), and as written (0: not) */
    struct CpuRates *cpu, *cpu_given;
    /* where things were written, for checks made by later phases */
    Span span_model, span_stages, span_window, span_micro, span_split, span_memory, span_vocab_split;
    /* set by main, not the DSL: generate the GPU path (NVRTC and libpacirt_cuda.a found) */
    bool cuda;
    /* set by main from --balance: measured costs that replace the cost model's (cost_stage) */
    const struct MeasuredCosts *measured;
    /* set by main from the verifier (max_drift): per stage, the most optimizer steps a
     * micro-batch's forward and backward straddle; `delay_correction nesterov` reads it */
    int stage_delay[PACI_MAX_STAGES];
} Config;

/* Stage s's beta1: cfg's, or under `delay_correction nesterov` (arXiv 2505.01099's
 * adaptive momentum) beta1 + d_s (0.99 - beta1) / p with d_s = cfg->stage_delay[s]. */
double stage_beta1(const Config *cfg, int s);

/* Ranks of one job, stages x replicas, at most (sema's check; docs/dsl.md). */
enum { MAX_WORLD_SIZE = 4096 };

/* Stages a device holds (v), and the devices (p = S / v): a Config built by hand may leave
 * chunks 0, one stage a device. */
static inline int config_chunks(const Config *cfg)
{
    return cfg->chunks > 1 ? cfg->chunks : 1;
}
static inline int config_devices(const Config *cfg)
{
    return cfg->stages / config_chunks(cfg);
}
/* The schedules that run a backward as B and W: zb-h1, zb-h2 and zb-v. */
static inline bool schedule_splits_backward(int kind)
{
    return kind == PACI_SCHED_ZBH1 || kind == PACI_SCHED_ZBH2 || kind == PACI_SCHED_ZBV;
}
/* The schedules whose devices hold several stages (chunks): interleaved and zb-v. */
static inline bool schedule_has_chunks(int kind)
{
    return kind == PACI_SCHED_INTERLEAVED || kind == PACI_SCHED_ZBV;
}
/* A zero-bubble schedule (zb-h1, zb-h2, zb-v) runs every backward as B and W (ops.c's *_bwd_b
 * and *_bwd_w lists), and a slot keeps what W needs from B (layout.c's W entries); so does a
 * file whose warm start runs one. */
static inline bool config_splits_backward(const Config *cfg)
{
    return schedule_splits_backward(cfg->schedule) ||
           (cfg->warm_steps > 0 && schedule_splits_backward(cfg->warm_schedule));
}
/* LAMB, LARS and LANS take norms of whole tensors (a layer's slice of the per-layer ones): the
 * trust ratio, and LANS's normalised gradient. */
bool optimizer_takes_tensor_norms(int optimizer); /* sema.c */
/* zb-h2 runs its own order (2p - 1 micro-batches in flight) only where the window holds
 * them; below that it runs zb-h1's (schedule.c's order_zero_bubble). */
static inline bool zero_bubble_h2_order(int kind, int stages, int window)
{
    return kind == PACI_SCHED_ZBH2 && window >= 2 * stages - 1;
}
/* What in cfg a zero-bubble schedule does not go with (sema says why), or NULL. */
static inline const char *zero_bubble_excluded(const Config *cfg)
{
    return cfg->recompute == RECOMPUTE_FULL         ? "recompute full"
           : cfg->accumulate == ACCUMULATE_PAIRWISE ? "accumulate pairwise"
                                                    : NULL;
}

/* The data-parallel replicas D of cfg: 0 (not set) counts as one pipeline. */
static inline int config_replicas(const Config *cfg)
{
    return cfg->replicas > 1 ? cfg->replicas : 1;
}
/* Synchronous steps clipping by the global norm are post-validated (docs/dsl.md): the key on,
 * one pipeline (replicas keep the barrier). */
static inline bool config_post_validates(const Config *cfg)
{
    return cfg->post_validation && config_replicas(cfg) <= 1;
}

/* cfg as it would be under schedule `kind` on the same devices (--explain's comparison): the
 * chunks and placement that schedule takes (the file's chunks for interleaved where it has
 * some, else 2), S = p v stages split automatically where the count changes. NULL, or what
 * the file does not fit under that schedule (out is then unusable). */
const char *config_with_schedule(const Config *cfg, int kind, Config *out);
/* Checks ast and fills cfg; prints every error found; returns false if any. When
 * `need_data` is false (inspection only), missing data files are warnings. */
bool sema_check(const Source *src, const Ast *ast, bool need_data, Config *cfg);
void config_free(Config *cfg);
void config_dump(FILE *out, const Config *cfg);
/* A count of split units (four a layer) in layers: 6 is 1.5, 7 is 1.75. */
double split_units_layers(int units);

/* ---- plan.c: sizes, FLOPs, partition, memory ---------------------------------------- */

/* A stage holds a contiguous run of a layer's pieces: its attention half, itself two pieces:
 * LayerNorm 1, qkv and attention, then the projection and its residual; then its MLP half,
 * itself two pieces: LayerNorm 2 and the fc product, then GELU, the MLP projection and its
 * residual. Whole layers are
 * [first_layer, first_layer + n_layers); a stage may also start with the MLP half of layer
 * first_layer - 1 (lead_mlp) or with its GELU piece alone (lead_gelu), and end with the
 * attention half of layer first_layer + n_layers (tail_attn), or with that and the layer's
 * LayerNorm 2 and fc product (tail_attn and tail_fc). */
typedef struct StagePlan {
    int first_layer, n_layers;
    bool lead_mlp, tail_attn;
    bool lead_gelu, tail_fc;
    /* a cut after a layer's attention kernel: the stage before ends with that layer's att piece
     * alone (tail_atty, not tail_attn), the stage after starts with its proj piece and the rest
     * of that layer (lead_proj and lead_mlp) */
    bool lead_proj, tail_atty;
    bool has_embed, has_head;  /* has_head: the last stage, which computes the losses */
    /* The final LayerNorm, and the LM head's rows [vocab_begin, vocab_end) (untied; the tied
     * head reads wte's rows). A plain last stage holds both and every row. With the vocabulary
     * split (Plan.vocab_split) the stage before the last holds the LayerNorm and rows [0, N),
     * the last rows [N, V) and no layer. */
    bool has_lnf;
    long vocab_begin, vocab_end;
    long params;            /* parameters held by the stage */
    double fwd_flops;       /* per micro-batch */
    double bwd_flops;
    double w_flops;         /* of bwd_flops, the weight gradients' (a zero-bubble W's share) */
    double late_flops;      /* of bwd_flops, the late section's: after the gradient has gone back */
    long msg_bytes;         /* one activation (or gradient) message to the neighbour */
    long act_bytes;         /* one activation slot */
    long keep_bytes;        /* what a slot keeps with recompute full: the input (0 on the first stage) */
    bool recompute;         /* recompute full on a stage with more than one slot (plan.c) */
    long scratch_floats;    /* the backward's scratch block (stage_layout's S_ entries) */
    int slots;              /* activation slots the schedule needs */
    int stash;              /* stashed weight copies (PipeDream) */
    /* memory by kind, bytes, for the chosen precision; mem_work: the scratch block, the
     * runtime's input and gradient buffers at the stage's edges (2 x B T C floats) and each
     * slot's token ids, targets and losses */
    long mem_weights, mem_grads, mem_optim, mem_acts, mem_stash, mem_work, mem_total;
} StagePlan;

typedef struct Plan {
    int stages;             /* S, in layer order */
    int devices, chunks;    /* p and v: S = p v; device d holds stage_device's stages */
    int placement;          /* enum paci_placement */
    int stage_device[PACI_MAX_STAGES];
    long vocab_split;       /* N > 0: the head's rows split at N over the last two stages; 0: not */
    bool recompute;         /* recompute full: stages that recompute hold slots x keep_bytes + act_bytes */
    long total_params;
    StagePlan stage[PACI_MAX_STAGES];
} Plan;

/* Partitions layers (manual split or balanced) and sizes memory; false + errors if the
 * plan does not fit the device memory. */
bool plan_build(const Config *cfg, Plan *plan);
/* The stage before the last under a vocabulary split: final LayerNorm and the head's first
 * rows; it sends the LayerNorm's output and each token's partial log-sum-exp. */
static inline bool stage_head_front(const StagePlan *sp)
{
    return sp->has_lnf && !sp->has_head;
}
/* The last stage under a vocabulary split: the head's other rows and the losses. */
static inline bool stage_head_back(const StagePlan *sp)
{
    return sp->has_head && !sp->has_lnf;
}
/* Floats of one residual-stream message: B T C, or under messages bf16 that many bf16 values
 * (half the floats, rounded up). */
static inline long residual_message_floats(const Config *cfg)
{
    long n = (long)cfg->micro * cfg->context * cfg->width;
    return cfg->messages == MESSAGES_BF16 ? (n + 1) / 2 : n;
}
/* The message across a cut after a layer's fc product: the residual stream (resid2, B T C
 * values padded to 64, as layout.c pads an entry) and from message_dfc_offset the fc product's
 * output (4 B T C); fc_message_floats in all, under messages bf16 that many bf16 values (half
 * the floats). Its gradient, back, alike. */
static inline long message_dfc_offset(const Config *cfg)
{
    long n = (long)cfg->micro * cfg->context * cfg->width;
    return (n + 63) / 64 * 64;
}
/* Whether the attention's output is kept in bf16 (layout.c: under bf16 with flash attention). */
static inline bool atty_stored_bf16(const Config *cfg)
{
    return cfg->precision == PREC_BF16 && cfg->attention == ATTN_FLASH;
}
/* The message across a cut after a layer's attention kernel: the residual stream (the layer's
 * input x, padded as resid2 above) and from message_dfc_offset the attention's output (B T C);
 * its gradient, back, d x's residual share and d atty. In bf16 under messages bf16. */
static inline long atty_message_floats(const Config *cfg)
{
    long values = message_dfc_offset(cfg) + (long)cfg->micro * cfg->context * cfg->width;
    return cfg->messages == MESSAGES_BF16 ? (values + 1) / 2 : values;
}
static inline long fc_message_floats(const Config *cfg)
{
    long values = message_dfc_offset(cfg) + 4L * cfg->micro * cfg->context * cfg->width;
    return cfg->messages == MESSAGES_BF16 ? (values + 1) / 2 : values;
}
/* Under messages bf16, whether the stage receives the residual stream as a bf16 message (every
 * stage but the first and the vocabulary split's last), and whether it sends one (every stage
 * but the last and the split's stage before it); its forward widens the one and narrows the
 * other, and its backward the gradients alike. */
static inline bool receives_residual(const Config *cfg, const StagePlan *sp)
{
    return cfg->messages == MESSAGES_BF16 && !sp->has_embed && !stage_head_back(sp);
}
static inline bool sends_residual(const Config *cfg, const StagePlan *sp)
{
    return cfg->messages == MESSAGES_BF16 && !sp->has_head && !stage_head_front(sp);
}
/* The piece a stage's backward ends with, where the stage sends a gradient back and the
 * backward is one instruction (not a zero-bubble program's B and W, `split_backward`): that
 * piece's backward runs down to the gradient, which the runtime sends at once, and then the
 * weight gradients of its first product, which nothing before the send needs (the late
 * section; a whole layer and a proj piece also leave the fc product's of the MLP half before
 * them). None on the first stage, on a stage of the head alone (a split's last) or of an att
 * piece alone. */
typedef enum { LATE_NONE, LATE_BLOCK, LATE_ATTN, LATE_MLP, LATE_GELU, LATE_PROJ } LatePiece;
static inline LatePiece stage_late_piece(const StagePlan *sp, bool split_backward)
{
    if (sp->has_embed || split_backward)
        return LATE_NONE;
    return sp->lead_gelu ? LATE_GELU : sp->lead_proj ? LATE_PROJ : sp->lead_mlp ? LATE_MLP
                         : sp->n_layers > 0 ? LATE_BLOCK : sp->tail_attn ? LATE_ATTN : LATE_NONE;
}
/* What a stage holds, as --explain prints it: "3-5", "0-2+emb", "23-23+head", "emb", "head";
 * under a vocabulary split "21-23+hA" (the final LayerNorm and the head's first rows) and "headB";
 * a half layer by its letter, a (attention) or b (MLP): "2b-5a" is layer 2's MLP, layers 3
 * and 4, and layer 5's attention; a cut after the fc product by f (a stage ends there) and g
 * (the next starts with the GELU): "5g-8f" is layer 5 from its GELU on, layers 6 and 7, and
 * layer 8 up to its fc product. */
void stage_layers_label(const StagePlan *sp, char *out, size_t size);
/* The ranges of a stage's gradients in the order its backward finishes them (the head's,
 * the trailing fc piece's, the trailing attention half's, each layer's from the last, the
 * leading MLP half's or GELU piece's, the embeddings'), with the backward FLOPs that finish
 * each: what the GPU backward reports to the replicas' overlapped allreduce. Fills out (room
 * for n_layers + 5) and returns the count. */
typedef struct GradRange {
    double params, bwd_flops;
} GradRange;
int stage_grad_ranges(const Config *cfg, const StagePlan *sp, GradRange *out);
/* The layers a stage holds, a half layer counted by its share of a layer's FLOPs. */
double stage_layer_count(const Config *cfg, const StagePlan *sp);
/* One stage's predicted seconds by its FLOPs: a micro-batch's forward and backward, and an
 * AdamW step (simulate.c's base model, which --profile and --balance replace; the partitioner
 * balances by costs.c's kernel model instead). With cfg->measured, from the measured costs of
 * each part of the model (what the partitioner then balances by). */
void cost_stage(const Config *cfg, const StagePlan *sp, double *fwd, double *bwd, double *step);
/* The floats of the vocabulary split's messages between the last two stages: forward, the
 * final LayerNorm's output (as its activation is stored) padded to 64, then each token's
 * log-sum-exp over the front's rows and its target's logit there (0 if not there);
 * backward, d(LayerNorm output) padded to 64, then each token's log-sum-exp. */
double head_message_floats(const Config *cfg, bool backward);
/* The same plan without the memory check or any message (for comparisons). */
void plan_layout(const Config *cfg, Plan *plan);
/* The largest mem_total over the stages, and its stage. */
long plan_peak_memory(const Plan *plan, int *stage);
/* What device d holds: the sum of its stages' mem_total (one stage's without chunks). */
long plan_device_memory(const Plan *plan, int device);
/* The largest of those, and its device. */
long plan_peak_device_memory(const Plan *plan, int *device);
void plan_dump(FILE *out, const Config *cfg, const Plan *plan);

/* ---- schedule.c: generators -> per-stage instruction lists --------------------------- */

/* Builds the table for cfg (programs for the segment lengths the run needs, compressed
 * into prologue / body x reps / epilogue). Owns instrs; free with schedule_free. */
paci_table *schedule_build(const Config *cfg, const Plan *plan);
void schedule_free(paci_table *t);
/* The flat instruction list of `device` in program `prog`, mb absolute within the segment.
 * Returns the count; *out is malloc'ed. */
long schedule_expand(const paci_table *t, int prog, int device, paci_instr **out);
const char *paci_op_name(int op);
const char *paci_schedule_name(int kind);
int paci_schedule_from_name(const char *name); /* -1 if unknown */
bool paci_schedule_is_sync(int kind);
/* Steps between drains: gcd of the non-zero eval/checkpoint intervals, capped at the run. */
long schedule_segment_steps(const Config *cfg);
/* How S stages sit on p devices: v chunks each, placed as paci_placed_stage says. */
typedef struct PipeShape {
    int stages, devices, chunks, placement;
} PipeShape;
/* cfg's shape, and the one of a schedule without chunks over `stages` stages. */
PipeShape config_shape(const Config *cfg);
PipeShape unchunked_shape(int stages);
/* The device stage s runs on. */
int shape_device(const PipeShape *shape, int stage);
/* Activation slots and PipeDream stash copies stage s needs when segments hold at most
 * `segment_steps` steps (plan.c sizes memory with these; the generator must agree). The first
 * for a schedule without chunks; the second for any. */
int schedule_slots(int kind, int stages, int stage, int window, long segment_steps);
int schedule_shape_slots(int kind, const PipeShape *shape, int stage, int window, long segment_steps);
int schedule_stash(int kind, int stages, int stage, int window, long segment_steps);
/* What the table of cfg holds at stage s: the most of its programs (a warm start's included). */
int schedule_table_slots(const Config *cfg, int stage);
int schedule_table_stash(const Config *cfg, int stage);

/* One segment of `steps` optimizer steps as the generator writes it: flat per-device lists
 * (count, instrs), mb relative to the segment; slots and stash per stage. schedule_build
 * compresses exactly these. */
typedef struct SegmentLists {
    int stages, devices;
    long count[PACI_MAX_STAGES];
    paci_instr *instrs[PACI_MAX_STAGES];
    int slots[PACI_MAX_STAGES], stash[PACI_MAX_STAGES];
} SegmentLists;
/* Without chunks (one stage a device), and over any shape. */
void schedule_generate(int kind, int stages, int window, long steps, const int32_t *slots, SegmentLists *out);
void schedule_generate_shape(int kind, const PipeShape *shape, int window, long steps, const int32_t *slots,
                             SegmentLists *out);
void segment_lists_free(SegmentLists *sl);

/* ---- verify.c: blocking simulation; deadlock, slots, drift ---------------------------- */

typedef struct VerifyReport {
    bool ok;
    char error[512];        /* first violated invariant, when !ok */
    int peak_slots[PACI_MAX_STAGES];
    int max_drift[PACI_MAX_STAGES];      /* optimizer updates between fwd and bwd of one mb */
    double drift_share[PACI_MAX_STAGES]; /* micro-batches whose bwd crossed an update */
    int effective_drift[PACI_MAX_STAGES];/* weight version the bwd used vs the fwd's (stash) */
} VerifyReport;

bool verify_schedule(const paci_table *t, const Plan *plan, VerifyReport *rep);
/* ceil((p-s-1)/K) for PACI, 0 for the synchronous schedules. */
int drift_bound(const paci_table *t, int stage);

/* ---- simulate.c: cost model and event simulation ------------------------------------- */

typedef struct SimEvent {
    int stage, op;          /* op: enum paci_op, or SIM_OP_ALLREDUCE */
    long mb;
    double start, end;      /* seconds */
} SimEvent;

/* A simulated event that is no instruction of the table: stage s's gradient allreduce among
 * its D replicas, just before its optimizer step (D > 1 only). */
enum { SIM_OP_ALLREDUCE = PACI_OP_COUNT };

typedef struct CostModel {
    double fwd[PACI_MAX_STAGES], bwd[PACI_MAX_STAGES], step[PACI_MAX_STAGES]; /* seconds */
    double msg[PACI_MAX_STAGES]; /* seconds to move one message from stage s to s+1 */
    double allreduce[PACI_MAX_STAGES]; /* seconds the step waits for the replicas' allreduce (its part
                                        * the last backward does not hide); 0: D = 1 */
    double w[PACI_MAX_STAGES];   /* of bwd, a zero-bubble W's seconds (B takes the rest) */
    double late[PACI_MAX_STAGES]; /* of bwd, the seconds after the gradient for the stage before
                                   * has gone, where SEND_GRAD follows BWD (stage_late_piece) */
    double w_measured[PACI_MAX_STAGES]; /* a profile's W seconds (its stage line's `w`); 0: none,
                                         * w is then the W products' share of bwd's FLOPs */
    bool step_barrier;           /* every stage's k-th step waits for all stages' (clipping by
                                  * the global norm: a synchronous schedule with clip, p > 1,
                                  * without post-validation, or with data > 1) */
} CostModel;

/* Stage sp's gradient allreduce among cfg's D replicas, once per optimizer step: its fp32
 * gradients (4 bytes a parameter), what a ring allreduce sends (and receives) per rank,
 * 2 (D-1)/D of them, and that over network_bandwidth (no latency term). All 0 when D = 1. */
typedef struct Allreduce {
    double bytes, ring_bytes, seconds;
} Allreduce;
Allreduce stage_allreduce(const Config *cfg, const StagePlan *sp);
/* What of that allreduce the step waits for on GPUs, where each range of gradients starts its
 * allreduce once the window's last backward (bwd seconds) has finished it: the tail left
 * after the backward. */
double allreduce_exposed(const Config *cfg, const StagePlan *sp, double bwd);
/* Sets cm->allreduce from cm->bwd: each stage's exposed allreduce (0 when D = 1); and the
 * zero-bubble W's share of each backward (w) and the step barrier, which follow from bwd too. */
void cost_model_allreduce(const Config *cfg, const Plan *plan, CostModel *cm);

typedef struct SimResult {
    int stages, devices;    /* the table's; each event names its stage, which runs on stage_device */
    int stage_device[PACI_MAX_STAGES];
    double makespan;        /* seconds for the simulated steps */
    double step_time;       /* seconds per optimizer step (steady state) */
    double busy[PACI_MAX_STAGES]; /* fraction of makespan each device computes (a stage without chunks) */
    double bubble;          /* 1 - mean busy fraction */
    double tokens_per_s;
    long steps;             /* optimizer steps simulated */
    double steady_busy[PACI_MAX_STAGES]; /* busy fraction between a device's middle steps */
    SimEvent *events;       /* every instruction with its times; n_events long */
    long n_events;
} SimResult;

void cost_model_from_plan(const Config *cfg, const Plan *plan, CostModel *cm);

/* What each part of the model cost in a profiled run (`run --profile-out`, version 2),
 * seconds: a layer's, the embedding's and the head's forward and backward per micro-batch
 * (the per-op times of their sections), and AdamW per parameter (the stages' step times
 * over the model's parameters). Independent of the split the profile was measured with. */
typedef struct MeasuredCosts {
    double layer_fwd, layer_bwd, embed_fwd, embed_bwd, head_fwd, head_bwd;
    double step_per_param;
} MeasuredCosts;

/* Reads them from a version 2 profile of a program with plan's stage count; false and a
 * message naming the file if it cannot (no per-op times for a part of the model). */
bool measured_costs_load(const char *path, const Plan *plan, MeasuredCosts *mc);
/* Replaces costs with measured ones; false + message on a bad file. */
bool cost_model_load_profile(const char *path, const Plan *plan, CostModel *cm);

/* One `op` line of a version 2 profile: op `index` of stage's generated code. */
typedef struct ProfileOp {
    int stage, index;
    char *section, *name, *what;
    long calls;
    double total, mean;   /* seconds: over all calls, per call */
} ProfileOp;

/* The per-op part of a profile (run --profile-out), for --explain. */
typedef struct OpProfile {
    int version;          /* of the file's format: 1 when it has no version line */
    double compute[PACI_MAX_STAGES]; /* wall seconds in fwd, bwd and step; < 0: not given */
    ProfileOp *ops;
    int n_ops;
} OpProfile;

/* cost_model_load_profile that also returns the op lines in *ops (free with
 * op_profile_free); on a bad file nothing changes. */
bool profile_load(const char *path, const Plan *plan, CostModel *cm, OpProfile *ops);
void op_profile_free(OpProfile *ops);
/* The steady state SimResult's bubble is measured over: 1-based steps first..last (the whole
 * run when it is too short to have one). */
void sim_steady_steps(const SimResult *res, long *first, long *last);

/* What the views print of one simulation (inspect.c): the costs' name, the steady-state steps
 * its bubble is measured over, and the steps and seconds drawn. */
typedef struct SimView {
    const SimResult *sim;
    const char *model;          /* "GPU cost model", "costs measured in FILE", ... */
    int stages;                 /* the devices: a row each (a stage each without chunks) */
    long run_steps;             /* the file's */
    long steady_first, steady_last;
    long first, last;           /* 1-based steps drawn */
    double from, to;            /* their seconds */
    bool fill_drain;            /* a run of just the steps drawn: its fill and drain are in them */
    const CostModel *cm;        /* the costs simulated; NULL where they are the cost model's, op by op
                                 * (then each schedule --explain compares is priced by it too) */
} SimView;
/* show_steps steady-state steps from the steady state's start; 0: the whole run, fill and drain. */
SimView sim_view(const Config *cfg, const SimResult *sim, const char *model, long show_steps);
/* The one way a bubble is said: "bubble 4.6% (steady state: steps 10-24 of 32 simulated, GPU
 * cost model)", or for --fill-drain "idle 26.0% of a 3-step run, its fill and drain included
 * (GPU cost model)". */
void sim_bubble_phrase(const SimView *v, char *buf, size_t size);

/* Simulates `steps` optimizer steps (0: the whole run) of the table. */
void simulate(const Config *cfg, const paci_table *t, const CostModel *cm, long steps, SimResult *res);
/* Unit costs: a device's forward 1, backward 2 (its W 1 where the schedule splits it), each of
 * its v chunks 1/v of them: the schedules' own bubble, free of any measurement. */
void cost_model_unit(const Config *cfg, int stages, CostModel *cm);
void sim_result_free(SimResult *res);

/* ---- costs.c: the GPU cost model, kernel by kernel ------------------------------------ */

typedef enum { BOUND_COMPUTE, BOUND_MEMORY, BOUND_LAUNCH, BOUND_FOLDED } CostBound;
enum { COST_GEMM, COST_ATTENTION, COST_OTHER, COST_KINDS };

/* One op of a stage as the GPU runs it, numbered as run --profile-out numbers it. */
typedef struct OpCost {
    int index;              /* in the stage's generated op table (pr_stage_S_ops) */
    const char *section, *name; /* e.g. "block_forward", "gemm" or the kernel the GPU launches */
    const char *table_name; /* the op's name in pr_stage_S_ops and the profile (the CPU kernel's) */
    char *what;             /* the op's comment */
    bool forward;
    double launches;        /* per run of its section: loop extents multiply */
    double calls_per_step;  /* launches per optimizer step on the stage */
    double flops, bytes, seconds; /* per launch; seconds by the roofline */
    CostBound bound;
    bool known;             /* false: no cost entry for its kernel (counted as free) */
    bool attention;         /* priced as FlashAttention */
    const char *note;       /* where the model is not the kernel as it stands */
} OpCost;

typedef struct StageCosts {
    OpCost *ops;
    int n_ops, unknown;
    double fwd, bwd;        /* seconds per micro-batch */
    double step;            /* seconds per optimizer step (AdamW) */
    double by_kind[COST_KINDS]; /* fwd + bwd seconds by kind of op */
} StageCosts;

typedef struct GpuCosts {
    int stages, unknown;
    StageCosts stage[PACI_MAX_STAGES];
} GpuCosts;

typedef struct Lowered Lowered; /* lower.c, below: the program lowered stage by stage */

typedef struct GpuPrediction {
    double step_time, tokens_per_s, bubble;
    double model_flops;     /* per optimizer step, as MFU counts them */
    double mfu;             /* model_flops / (step_time x stages x flops) */
} GpuPrediction;

void gpu_costs_build(const Config *cfg, const Lowered *low, GpuCosts *gc);
void gpu_costs_free(GpuCosts *gc);
/* One stage priced by this model as gpu_costs_build prices it lowered (the partitioner's
 * price): seconds of a micro-batch's forward and backward (with recompute full's rerun) and
 * of an optimizer step. ops: model_ops_build's for cfg. */
typedef struct ModelOps ModelOps;
void stage_kernel_costs(const Config *cfg, const ModelOps *ops, const StagePlan *sp, double *fwd, double *bwd,
                        double *step);
/* The FLOPs (and bytes) the cost model counts for one launch of the kernel `name` over n
 * indices at cfg's shapes (fp32). */
double kernel_counted_flops(const Config *cfg, const char *name, double n, double *bytes);
/* Whether the model has a cost entry for the kernel named `name`. */
bool gpu_cost_has_kernel(const char *name);
/* The per-stage times of gc, with the links' costs of cost_model_from_plan. */
void cost_model_from_gpu_costs(const Config *cfg, const Plan *plan, const GpuCosts *gc, CostModel *cm);
/* Simulates `steps` steps of the table with gc's times. */
GpuPrediction gpu_costs_predict(const Config *cfg, const Plan *plan, const paci_table *t, const GpuCosts *gc,
                                long steps);
/* The --explain section, and --emit costs (with a profile's measured means beside, or NULL). */
void gpu_costs_explain(FILE *out, const Config *cfg, const Plan *plan, const GpuCosts *gc, const GpuPrediction *p,
                       bool priced_above);
void gpu_costs_emit(FILE *out, const Config *cfg, const GpuCosts *gc, const GpuPrediction *p, const OpProfile *prof);

/* ---- inspect.c: explain, listing, timeline, svg, trace ------------------------------- */

void inspect_explain(FILE *out, const Config *cfg, const Plan *plan, const paci_table *t,
                     const VerifyReport *rep, const SimView *view);
void inspect_listing(FILE *out, const Config *cfg, const paci_table *t);
void inspect_timeline(FILE *out, const Config *cfg, const SimView *view);
void inspect_svg(FILE *out, const Config *cfg, const SimView *view);
void inspect_trace(FILE *out, const Config *cfg, const SimResult *sim);
/* The most expensive ops of each stage in a profile with op lines, with their share of the
 * stage's measured compute time (--explain --profile). */
void inspect_op_profile(FILE *out, const Plan *plan, const OpProfile *ops, const char *path);

/* ---- svg.c: what the pictures share (inspect.c's timeline, plot.c's curves) -------------- */

/* Tableau 10's colours in its order (svg_colors[SVG_BLUE] ...); plot.c gives runs them in turn. */
enum SvgColor { SVG_BLUE, SVG_ORANGE, SVG_RED, SVG_TEAL, SVG_GREEN, SVG_YELLOW, SVG_PURPLE, SVG_PINK,
                SVG_BROWN, SVG_GREY, SVG_COLORS };
extern const char *const svg_colors[SVG_COLORS];
/* <svg> of that size on a white background; its children are indented one level. */
void svg_open(StrBuf *sb, int width, int height);
void svg_close(StrBuf *sb);
/* A line "<fmt...>" opening an element whose children are indented one level more. */
void svg_element_open(StrBuf *sb, const char *fmt, ...) PRINTF_LIKE(2, 3);
void svg_element_close(StrBuf *sb, const char *name); /* "</name>" */
void svg_escaped(StrBuf *sb, const char *text);      /* text as XML character data */
/* At most max ticks at round numbers (1, 2 or 5 times a power of ten) in [lo, hi]; how many. */
int svg_ticks(double lo, double hi, double *ticks, int max);

/* ---- kernels.c: fused kernels, described once for every backend ---------------------- */

/* One fused kernel: a body run once per index of a 1-D iteration space. The body is written
 * in the common subset of C and CUDA C: shape constants (B, T, C, NH, HS, V, BT), float
 * math (expf, logf, sqrtf, tanhf, fmaxf), ATOMIC_ADD(ptr, value) for accumulation that
 * several indices may do at once, RESTRICT on pointers that alias nothing else, UNROLL
 * before a loop over a local array of constant size (CUDA unrolls it fully).
 *
 * A row kernel (lanes 32) walks its row with ROW_LOOP(i, from, to) and combines what the
 * loop gathered with ROW_SUM(x) / ROW_MAX(x); what one index writes once is under
 * `if (LEAD)`. In C these are a plain loop, the value itself and 1; on the GPU a warp of
 * 32 lanes takes the row, the loop strides by lane (adjacent lanes, adjacent elements) and
 * the combinations are warp shuffles. */
typedef struct KernelDesc {
    const char *name;
    const char *doc;    /* one line: what it computes */
    const char *params; /* parameter list, the same text in C and CUDA */
    const char *index;  /* the loop variable */
    const char *extent; /* its extent: a shape constant expression or an int parameter */
    int lanes;          /* GPU threads per index: 0 or 1, or 32 (a warp: a row kernel); for a
                           block kernel, threads per block */
    const char *body;   /* statements for one index, '\n'-separated, indented by 4 per level */
    /* A block kernel (GPU only, never rendered as C): `blocks` blocks of `lanes` threads run
     * `body` as CUDA with threadIdx, blockIdx, __shared__ and __syncthreads; index and
     * extent are unused. Such a kernel stands in for a CPU one (Op.gpu_kernel). */
    const char *blocks;
    const char *gpu_form; /* the GPU-only kernel the GPU launches instead, with the same arguments,
                             where its tiles fit (attention_gpu.c), or NULL */
    int tiled;          /* a GPU-only tiled kernel (TILED_FORWARD or TILED_BACKWARD: which tiling of
                           attention_gpu.c): index is the block, the body uses threadIdx.x */
} KernelDesc;

enum { TILED_NONE, TILED_FORWARD, TILED_BACKWARD };

extern const KernelDesc kernel_descs[];
extern const int kernel_desc_count;
/* The description named `name`; an internal error if there is none. */
const KernelDesc *kernel_find(const char *name);

/* ---- attention_gpu.c: how attention is lowered for the GPU ------------------------------- */

/* The CPU's attention kernels (kernels.c) are replaced on the GPU by tiled tensor-core ones
 * where a tiling fits the head size; this section is the one place that decides it. */

/* A tiling of the GPU attention: blocks of `warps` warps (16 rows each), the other side's rows
 * streamed in tiles of n; {0, 0} where none fits a block's static shared memory. */
typedef struct AttentionGpuTiling {
    int warps, n;
} AttentionGpuTiling;

AttentionGpuTiling attention_gpu_tiling(const Config *cfg, bool backward);
/* Whether the tiled kernels fit cfg's head size (else the GPU runs the row kernels). */
bool attention_gpu_fits(const Config *cfg);
/* The name of the kernel the GPU launches in place of k: k->gpu_form where it fits, else NULL. */
const char *attention_gpu_kernel(const Config *cfg, const KernelDesc *k);
/* A tiled kernel's grid: blocks, and threads per block. */
long attention_gpu_blocks(const Config *cfg, const KernelDesc *k);
int attention_gpu_block_threads(const Config *cfg, const KernelDesc *k);
/* The tiling constants and device functions the tiled kernels call (nothing where they do not fit). */
void emit_attention_gpu_device(StrBuf *sb, const Config *cfg);

/* ---- layout.c: where each tensor of a stage lives ----------------------------------- */

/* Every entry of a block starts on this many floats (256 bytes). */
enum { LAYOUT_ALIGN_FLOATS = 64 };

/* A named range of floats in one of a stage's blocks; the name becomes a constant. */
typedef struct LayoutEntry {
    const char *name;
    long offset, size;
    const char *doc;
} LayoutEntry;

typedef struct Layout {
    LayoutEntry entry[24];
    int n;
    long total;
} Layout;

/* Where everything of a stage lives. Per-layer blocks repeat n_layers times after the
 * stage block's LAYERS entry. */
typedef struct StageLayout {
    /* A layer's block is its attention half's block and then its MLP half's (at P_MLP, A_MLP);
     * P_* and A_* are offsets inside their half's block. */
    /* A layer's four pieces (plan.c's units): LayerNorm 1, the qkv product and attention (the
     * att piece); the attention projection and its residual (the proj piece; the attention
     * half is the first two, the proj piece's at P_PROJ, A_PROJ); LayerNorm 2 and the fc
     * product; GELU, the MLP projection and its residual (the MLP half is the last two). */
    Layout att_params;   /* P_*: LayerNorm 1's and the qkv product's */
    Layout proj_params;  /* P_*: the attention projection's */
    Layout fc_params;    /* P_*: LayerNorm 2's and the fc product's */
    Layout gelu_params;  /* P_*: the MLP projection's */
    Layout att_acts;     /* A_*: the att piece's saved activations but its output */
    Layout proj_acts;    /* A_*: the attention's output A_ATTY (the att piece writes it, the proj piece
                            reads it), then the half's output A_RESID2 */
    Layout fc_acts;      /* A_*: the fc piece's, starting with its output A_FC_PRE (so that resid2 and it
                            are one message after a cut there) */
    Layout gelu_acts;    /* A_*: the GELU piece's; its output A_RESID3 */
    long layer_params, layer_acts; /* floats of a whole layer's blocks */
    Layout params;       /* PARAM_*: embedding, layers, final LN and head */
    Layout acts;         /* ACT_*: input, layers, head */
    Layout scratch;      /* S_*: backward scratch */
    long in_offset, out_offset, probs_offset; /* out: the last layer's output (the head's input) */
    long msg_offset;     /* the forward message it sends: out_offset, or the split's front's ACT_LNF */
    long lse_offset;     /* the split's last stage: ACT_XENT_LSE, which the sampler reads */
    long out_floats;     /* the forward message it sends: B T C, or the split's (head_message_floats) */
    long dx_floats;      /* the backward message it sends: B T C, or the split's */
} StageLayout;

/* One parameter tensor of a stage, as the runtime's tensor table states it. */
typedef struct TensorInfo {
    char name[32];       /* e.g. "h3.qkvw" */
    const char *ckpt_tensor; /* enumerator of pr_ckpt_tensor (runtime/pacirt.h), e.g. "PR_CKPT_QKVW" */
    long ckpt_offset, offset, size;
    bool decay;
    const char *init;    /* enumerator of pr_init, e.g. "PR_INIT_NORMAL" */
} TensorInfo;

/* Floats per row of the logits and probabilities: the vocabulary rounded up to 64, so that
 * every row starts on 256 bytes (128 in bf16), as the GPU's products want. */
static inline long vocab_stride(const Config *cfg)
{
    return (cfg->vocab + 63L) / 64 * 64;
}
void stage_layout(const Config *cfg, const StagePlan *sp, StageLayout *lay);
long layout_offset(const Layout *l, const char *name); /* internal error if absent */
/* The stage's tensors in parameter-block order (*out malloc'ed); returns the count. */
int stage_tensors(const Config *cfg, const StagePlan *sp, const StageLayout *lay, TensorInfo **out);

/* ---- ops.c: the model lowered to backend-neutral op lists ---------------------------- */

/* Backend-neutral operations. Arguments are pointer expressions over the section's named
 * bases and the generated offset constants, valid C and CUDA host code alike. */
typedef enum {
    OP_KERNEL, /* launch `kernel` over its iteration space with `args` */
    OP_GEMM,   /* pr_gemm(args): row-major, cblas-like; with `bias`, pr_gemm_bias */
    OP_ZERO,   /* args: "dst, count" floats */
    OP_COPY,   /* args: "dst, src, count" floats */
    OP_LOOP,   /* args: "var, extent": the ops up to the matching OP_END run for var in
                  [0, extent), in order; the ops' arguments may use var (an int) */
    OP_END,    /* closes the innermost OP_LOOP */
} OpKind;

/* What the op after an OP_GEMM does to its product, which the GPU may fuse into cuBLASLt's
 * epilogue under bf16 (emit_cuda.c); the CPU runs the two ops as they are. */
typedef enum OpEpilogue {
    EPI_NONE,
    EPI_DGELU, /* the next op scales the product by GELU' of epilogue_arg (the pre-activation) */
} OpEpilogue;

typedef struct Op {
    OpKind kind;
    const KernelDesc *kernel; /* OP_KERNEL */
    char *args;
    char *bias;               /* OP_GEMM: a vector added to every row of the product (the
                                 GPU fuses it into cuBLASLt's epilogue), or NULL */
    OpEpilogue epilogue;      /* OP_GEMM */
    char *epilogue_arg;
    char *operands_h;         /* OP_GEMM: "a_h, b_h", bf16 copies of its a and b that the GPU
                                 reads instead under bf16; NULL: it reads a and b */
    bool out_h;               /* OP_GEMM: under bf16 the GPU writes c in bf16 (cuBLASLt's output
                                 type), beta 0 */
    bool parallel;            /* OP_LOOP: this loop and the one right inside it (the matmul
                                 attention's (b, h)) run their iterations in parallel on the CPU:
                                 each writes its own outputs, and its T x T workspaces are the
                                 thread's own (emit_c.c) */
    bool causal;              /* OP_GEMM: a product of the matmul attention whose T x T operand
                                 (probabilities or d scores) is zero above the diagonal, or whose
                                 T x T result (scores, d probabilities) is read only up to it;
                                 the CPU runs it as causal_gemm_nn, _tn or _nt, which skip the
                                 blocks above the diagonal */
    /* The GPU's form of the op, where it differs (same position, so the profile numbers
     * agree): gpu_args replace args (a product's, or gpu_kernel's), gpu_kernel replaces
     * kernel, and gpu_skip leaves nothing to do (an earlier GPU op did it). */
    const KernelDesc *gpu_kernel;
    char *gpu_args;
    char *gpu_operands_h;     /* OP_GEMM with gpu_args: operands_h for them */
    bool gpu_skip;
    char *comment;            /* what this step computes, for the generated code */
} Op;

typedef struct OpList {
    Op *ops;
    int n, cap;
} OpList;

/* The op lists of the sections a stage is made of; every stage uses the same lists, so a
 * layer computes bitwise the same whichever stage holds it. */
typedef struct ModelOps {
    OpList embed_fwd, block_fwd, head_fwd; /* forward, in this order */
    OpList head_bwd, block_bwd, embed_bwd; /* backward, in this order */
    /* a layer's halves alone, for a stage that starts with an MLP half or ends with an
     * attention half; a whole layer runs block_fwd, which fuses the residual between them
     * into LayerNorm 2 (to the same bits) */
    OpList attn_fwd, mlp_fwd, mlp_bwd, attn_bwd;
    /* a layer cut after its fc product: the fc piece (LayerNorm 2, the fc product) that ends a
     * stage after its attention half, the GELU piece (GELU, the projection, the residual) that
     * starts the next */
    OpList fc_fwd, fc_bwd, gelu_fwd, gelu_bwd, fc_bwd_b, fc_bwd_w, gelu_bwd_b, gelu_bwd_w;
    /* the head divided by vocabulary rows over the last two stages (Plan.vocab_split): the
     * front's (final LayerNorm and the first rows) and the back's (the other rows, the loss) */
    OpList head_front_fwd, head_front_bwd, head_back_fwd, head_back_bwd;
    /* zero-bubble (config_splits_backward; else empty): each backward list as B and W */
    OpList head_bwd_b, head_bwd_w, block_bwd_b, block_bwd_w, attn_bwd_b, attn_bwd_w, mlp_bwd_b, mlp_bwd_w;
    OpList head_front_bwd_b, head_front_bwd_w, head_back_bwd_b, head_back_bwd_w, embed_bwd_b, embed_bwd_w;
    /* a stage's first piece where it sends a gradient back (stage_late_piece; else empty): its
     * backward down to that gradient, and the weight gradients it leaves until the send */
    OpList block_bwd_down, block_bwd_late, attn_bwd_down, attn_bwd_late, mlp_bwd_down, mlp_bwd_late;
    OpList gelu_bwd_down, gelu_bwd_late;
    /* a layer cut after its attention kernel: the att piece (LayerNorm 1, qkv, attention) that
     * ends a stage, the proj piece (the projection, the residual) that starts the next; their
     * zero-bubble parts, and the proj piece's down and late parts (stage_late_piece) */
    OpList att_fwd, proj_fwd, att_bwd, proj_bwd, att_bwd_b, att_bwd_w, proj_bwd_b, proj_bwd_w;
    OpList proj_bwd_down, proj_bwd_late;
} ModelOps;

void model_ops_build(const Config *cfg, ModelOps *ops);
void model_ops_free(ModelOps *ops);

/* A section of a stage, in the order the generated code numbers the ops for the per-op
 * profile: embed_forward, mlp_forward, block_forward, attn_forward, head_forward,
 * head_backward, attn_backward, block_backward, mlp_backward, embed_backward (those the
 * stage has), then the optimizer step, one op with no op list. */
typedef struct StageSection {
    const char *name;
    const OpList *ops;      /* NULL for the optimizer step ("adamw") */
    int runs;               /* per micro-batch: 1, or the stage's layers for a block section */
    bool forward;
    const char *doc;        /* what its generated function computes */
    const char *params;     /* that function's parameters: the bases its ops' arguments name */
    const char *weights_h;  /* the parameter of the weights' bf16 copy the GPU's function also
                               takes under bf16 (after the first), or NULL */
    const char *prelude;    /* declarations its ops name beside the parameters, one a line, or NULL */
    const char *prelude_h;  /* and those that name the bf16 copy (the GPU's, under bf16) */
} StageSection;

enum { MAX_STAGE_SECTIONS = 24 };
int stage_sections(const StagePlan *sp, const ModelOps *ops, StageSection out[MAX_STAGE_SECTIONS]);
/* Ops that do work (not OP_LOOP, OP_END): the ones the per-op profile numbers and times. */
bool op_is_timed(const Op *op);
/* An op's name in the profile: its kernel, or gemm, zero, copy. */
const char *op_profile_name(const Op *op);
int section_timed_ops(const StageSection *section);

/* ---- lower.c: each stage lowered once, the value every back end reads ------------------ */

/* A stage as the back ends see it. Built by lower_build and read-only after. */
typedef struct LoweredStage {
    int index;
    const StagePlan *plan;
    StageLayout layout;     /* its blocks: parameters, activations, scratch; its messages' sizes */
    TensorInfo *tensors;    /* its parameter tensors, in parameter-block order */
    int n_tensors;
    StageSection sections[MAX_STAGE_SECTIONS]; /* in the per-op profile's order, over ops below */
    int n_sections;
    int n_ops;              /* its timed ops: the length of pr_stage_S_ops */
} LoweredStage;

/* A program lowered: the model's op lists (every stage's sections point into them, so a
 * Lowered is never copied) and each stage. */
typedef struct Lowered {
    const Plan *plan;       /* the plan it lowered */
    ModelOps ops;
    int stages;
    LoweredStage stage[PACI_MAX_STAGES];
} Lowered;

/* Lowers every stage of plan; an internal error unless each stage's blocks are the sizes
 * plan.c counted (its memory figures and errors rest on them). */
void lower_build(const Config *cfg, const Plan *plan, Lowered *low);
void lower_free(Lowered *low);

/* ---- emit_common.c: what every emitter writes alike --------------------------------- */

/* A section's prelude (and under weights_h its bf16 one), a line each. */
void emit_section_prelude(StrBuf *sb, const StageSection *section, bool weights_h);
/* The banner every generated file starts with. */
void emit_banner(StrBuf *sb, const Config *cfg, const char *what);
/* s as a C string literal that is safe in C, CUDA C++ and comments (NULL: NULL). */
void emit_c_string(StrBuf *sb, const char *s);
/* A "{" on a line of its own (function bodies, initialisers), indenting what follows. */
void emit_open_block(StrBuf *sb);
/* The shape constants every generated unit names: B, T, C, NH, HS, V, VP, BT. */
void emit_shape_constants(StrBuf *sb, const Config *cfg);
/* A description's statements, one line at a time, at the current indentation. */
void emit_kernel_body(StrBuf *sb, const KernelDesc *k);
/* A section's parameter list, with the weights' bf16 copy where `weights_h` (malloc'ed). */
char *section_params(const StageSection *section, bool weights_h);
/* OP_LOOP's "var, extent" as an opening for-loop; the same on the host of every backend. */
void emit_op_loop(StrBuf *sb, const char *args);
/* Renders an OP_LOOP or OP_END (alike on every backend) and returns true; false for an op that
 * does work, which the backend renders between emit_op_begin and emit_op_end. */
bool emit_loop_op(StrBuf *sb, const Op *op);
/* The per-op profile's hooks around op `index` of `section`. */
void emit_op_begin(StrBuf *sb, const char *section, int index);
void emit_op_end(StrBuf *sb, const char *section, int index);
/* A backend's rendering of op i of l, numbered `index` among the section's timed ops; returns
 * how many ops it rendered (1, or more where it fused the next into it). */
typedef int (*EmitOpFn)(StrBuf *sb, const OpList *l, int i, const char *section, int index, const void *ctx);
/* Every op of a section in order, numbered as the per-op profile numbers them. */
void emit_section_ops(StrBuf *sb, const OpList *l, const char *section, EmitOpFn emit_op, const void *ctx);

/* ---- emit_c.c: a stage and the program as plain C ------------------------------------ */

void emit_c_stage(StrBuf *sb, const Config *cfg, const Lowered *low, int stage);
void emit_c_program(StrBuf *sb, const Config *cfg, const Lowered *low, const paci_table *t);

/* ---- nvrtc.c, emit_cuda.c: the GPU path ----------------------------------------------- */

/* One compiled image of a CUDA unit: a cubin for "sm_XY", PTX for "compute_XY". */
typedef struct CudaImage {
    const char *arch;
    unsigned char *data;
    size_t size;
    char *log;          /* NVRTC's log, with ptxas's resource report for a cubin */
} CudaImage;

/* Architectures every unit is compiled for, into *archs: by default sm_80 and sm_90 cubins,
 * then compute_90 PTX for newer GPUs; $PACIC_CUDA_ARCHS ("sm_90", "sm_90,compute_90") names
 * others (the GPU check compiles only its device's). A bad value exits with an error. */
int cuda_arch_list(const char *const **archs);

/* NVRTC loads (dlopen; $PACIC_NO_CUDA set to anything turns the GPU path off). */
bool cuda_nvrtc_available(void);
/* Compiles `source` (cached by content, arch and NVRTC version); false with img->log. */
bool cuda_compile(const char *source, const char *unit_name, const char *arch, bool fast_math, CudaImage *img);
void cuda_image_free(CudaImage *img);
/* Appends "kernel arch registers / spills" lines from the log; returns kernels that spill. */
int cuda_resource_report(StrBuf *out, const CudaImage *img);
/* The device code of one stage as a CUDA translation unit for NVRTC (emit_cuda.c). */
void emit_cuda_stage(StrBuf *sb, const Config *cfg, const Lowered *low, int stage);
/* The host half of stage s's GPU path, appended to its C file after emit_c_stage: the same
 * op lists as launches (pr_cuda_launch, pr_cuda_gemm) on the stage's stream. */
void emit_cuda_host(StrBuf *sb, const Config *cfg, const Lowered *low, int stage);
/* cuda_images.c: the images as byte arrays and the kernel names they hold. */
void emit_cuda_images(StrBuf *sb, const Config *cfg, const CudaImage *images, int n);

/* ---- codegen.c: the driver that writes the generated sources -------------------------- */

/* Writes the generated sources for cfg into dir (stage_N.c, program.c; on the GPU path
 * stages.cu, cuda_images.c, cuda_resources.txt). */
bool codegen_write(const Config *cfg, const Lowered *low, const paci_table *t, const char *dir);

/* The program pacic calibrate-cpu builds (machine.c): the element-wise kernels as generated
 * code has them, timed by runtime/calibrate.c with the rest (emit_c.c). */
void emit_calibration_program(StrBuf *sb);

/* ---- build.c: compile generated sources and link the runtime ------------------------ */

/* Finds the runtime (next to the executable, or $PACIC_HOME), compiles dir's sources and
 * links `out`. */
bool build_executable(const char *argv0, const char *dir, const char *out);
/* The runtime found from argv0 has the GPU path: lib/pacic/libpacirt_cuda.a and the link
 * flags it needs (lib/pacic/cuda_ldflags, one line, written by the Makefile). */
bool runtime_has_cuda(const char *argv0);

/* ---- machine.c: the machine --explain prices on, and `pacic calibrate-cpu` --------------- */

/* A CPU's rates, as `pacic calibrate-cpu` measures them (runtime/calibrate.c writes the file)
 * and `hardware cpu { ... }` may state them: one thread's sgemm FLOP/s at square sizes, its
 * FLOP/s in the element-wise kernels and its copy bandwidth, and a message between two stage
 * threads. */
enum { CPU_GEMM_SIZES = 8 };
typedef struct CpuRates {
    char name[160];         /* the CPU's model name */
    char source[600];       /* where the rates come from, for --explain's first line */
    int cores;
    double memory;          /* bytes of RAM */
    int n_gemm;
    double gemm_size[CPU_GEMM_SIZES], gemm_flops[CPU_GEMM_SIZES]; /* rising sizes */
    double vector_flops, memory_bandwidth, latency, bandwidth;
    bool measured;          /* read from a calibration file (false: built-in guesses) */
} CpuRates;

/* Where the CPU's rates are kept when the file names none: $PACIC_CPU_CALIBRATION, else
 * $XDG_CACHE_HOME/pacic/cpu.txt, else ~/.cache/pacic/cpu.txt. Malloc'ed. */
char *cpu_calibration_default_path(void);
/* Reads a calibration file; false and a reason in err. */
bool cpu_rates_load(const char *path, CpuRates *r, char *err, size_t err_size);
/* Built-in guesses for a CPU nobody measured (a recent x86 core). */
void cpu_rates_guess(CpuRates *r);
/* Builds the calibration program against the runtime found from argv0, runs it, and leaves
 * its file at path; false with a message printed. */
bool cpu_calibrate(const char *argv0, const char *path, bool quiet);
/* `pacic calibrate-cpu [-o FILE]`. */
int calibrate_main(int argc, char **argv, const char *argv0);
/* Sema's part: cfg->cpu and cfg->cpu_given from the block's keys and the calibration file
 * (the one it names, else the default one where it exists); false + message on a bad file. */
bool machine_cpu_config(Config *cfg, const char **error);
/* Before pricing a CPU program whose rates were never measured: measures this machine now
 * (keeping the file at the default path for next time; with a note on stderr), else takes the
 * guesses; the rates the block writes stay on top. */
void machine_cpu_resolve(Config *cfg, const char *argv0);
/* A CpuRates with the rates of `given` (those above 0) over r's. */
void cpu_rates_apply(CpuRates *r, const CpuRates *given);
/* One sgemm of m x n x k on one thread of r: its seconds by the measured sizes' rates
 * (interpolated in the logarithm of the product's cube-root size). */
double cpu_gemm_seconds(const CpuRates *r, double m, double n, double k);
/* BLAS threads each stage gets (run's default: the cores over the stages, at least 1), and
 * the share of a core each stage thread has (below 1 when there are more stages than cores). */
int cpu_blas_threads(const Config *cfg);
double cpu_core_share(const Config *cfg);
/* --explain's first line: the machine it prices on. */
void machine_explain(FILE *out, const Config *cfg);

/* ---- tokenize.c: text -> llm.c token files (byte-level, vocabulary 256) -------------- */

int tokenize_main(int argc, char **argv);

/* ---- plot.c: run --metrics files -> an SVG of their loss curves ----------------------- */

int plot_main(int argc, char **argv); /* `pacic plot ...`: argv[0] is "plot"; 0 or EXIT_USER */

#endif
