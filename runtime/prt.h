/* prt.h: the runtime library's internal header (not installed; generated code sees only
 * pacirt.h). One section per file of runtime/. Functions that can fail on the user's input
 * return 0 on success and -1 with a one-line message in `err` (PR_ERR_LEN bytes) that names
 * the file and the problem; pr_main prints it as `run: error: MESSAGE` and exits 1.
 */
#ifndef PRT_H
#define PRT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "pacirt.h"
#include "paci_dgc.h"

#define PR_ERR_LEN 512
#define PR_PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))

/* ---- util.c: errors, memory, clocks -------------------------------------------------- */

/* Writes the message into err and returns -1, so error paths read `return pr_fail(...)`. */
int pr_fail(char *err, const char *fmt, ...) PR_PRINTF_LIKE(2, 3);
/* A bug in the runtime or the generated code: prints and exits 2. */
__attribute__((noreturn)) void pr_internal(const char *fmt, ...) PR_PRINTF_LIKE(1, 2);
void *pr_alloc(size_t bytes);  /* zeroed, 64-byte aligned; exits on out of memory */
/* All of data to fd (retrying short writes and EINTR); a failure names path. */
int pr_write_all(int fd, const void *data, size_t bytes, const char *path, char *err);
/* A folder's entries (new files, renames) on disk; a file system that cannot sync folders
 * (EINVAL) is not an error. */
int pr_fsync_dir(const char *path, char *err);
/* An output file the run writes later (`what`: "trace"), opened for writing now and left as it
 * was; -1 with err (the path and the system's reason, or that it is a folder). */
int pr_probe_output(const char *path, const char *what, char *err);
/* A file the user names, opened to read: only a regular file (a device or a pipe, /dev/zero,
 * would never end; opening does not wait on a pipe); NULL with "PATH: cannot open WHAT: why"
 * or "PATH: not a regular file (a folder)" (or what else it is) in err. */
FILE *pr_open_regular(const char *path, const char *what, char *err);
/* The whole of a regular file of at most LIMIT bytes, NUL-terminated (its length in *len), or
 * NULL with err naming the path and what is wrong; WHAT names the file in messages. */
char *pr_read_regular(const char *path, const char *what, size_t limit, size_t *len, char *err);
double pr_now(void);           /* monotonic seconds */
/* A stopped process (SIGSTOP, Ctrl-Z) that continues finds every wait's deadline passed,
 * though its peers were stopped too. pr_watch_stops counts the continues (SIGCONT); a deadline
 * takes pr_continues() when it is made, and where a wait on it times out, pr_stopped_since
 * says whether the process was continued since (then the wait starts again, with its seen
 * count updated). The count is the deadline's, not the wait's: a stop between the making of
 * a deadline and a wait on it (between two chunks of one message) must count too. */
void pr_watch_stops(void);
unsigned pr_continues(void);
int pr_stopped_since(unsigned *seen);
/* A socket wait's deadline: `at` in pr_now() seconds (0: none), the `span` it starts again
 * with after a stop, the continues seen when it was made. Made by pr_deadline_in (seconds
 * from now; <= 0: none) or pr_deadline_at (an absolute time, perhaps passed already). */
typedef struct pr_deadline {
    double at, span;
    unsigned continues;
} pr_deadline;
pr_deadline pr_deadline_in(double seconds);
pr_deadline pr_deadline_at(double at);
double pr_thread_cpu(void);    /* CPU seconds consumed by the calling thread */

/* splitmix64: the one deterministic generator (init and sampling). */
typedef struct pr_rng {
    uint64_t state;
} pr_rng;
uint64_t pr_rng_next(pr_rng *r);
double pr_rng_uniform(pr_rng *r); /* [0, 1) */
double pr_rng_normal(pr_rng *r);  /* N(0, 1) */

/* ---- gemm.c: BLAS ---------------------------------------------------------------------- */

/* Cores per stage thread for its products and loops: max(1, cores / stages); cores <= 0
 * means all online. */
int pr_blas_threads(int cores, int stages);
/* The blocks pr_gemm cuts an m x n x k product into on `cores` cores (1: whole). */
int pr_gemm_blocks(int m, int n, int k, int cores);
void pr_pool_set_cores(int cores); /* the cores of each stage thread's pr_parallel_for */
const char *pr_blas_better_kernels(const char *user_coretype, const char *library_core, const char *cpu_core);
void pr_blas_choose_kernels(char **argv);
const char *pr_blas_kernels(void);
void pr_blas_kernels_note(int quiet);

/* ---- data.c: token files (llm.c format) ------------------------------------------------ */

#define PR_TOKENS_MAGIC 20240520
#define PR_TOKENS_VERSION 1

typedef struct pr_tokens {
    const char *path;
    uint16_t *tokens;
    int64_t count;
    /* the training file under `data_order shuffled`: each epoch reads the sequences in a
     * permutation keyed by (order_seed, epoch); 0: in the file's order (validation always) */
    int shuffled;
    uint64_t order_seed;
} pr_tokens;

/* Loads and checks a token file: header, declared count vs size, every token < vocab, and
 * at least B*T+1 tokens (one micro-batch). */
int pr_tokens_load(pr_tokens *d, const char *path, int32_t vocab, int64_t B, int64_t T, char *err);
void pr_tokens_free(pr_tokens *d);
/* Micro-batch g: sequence b is number i = g*B + b of the run, which reads chunk i mod chunks
 * (each T+1 tokens starting at a multiple of T), or under d->shuffled the chunk epoch
 * i / chunks's permutation puts at position i mod chunks. Depends only on g, whatever the
 * schedule, p, replicas or resume. */
void pr_tokens_batch(const pr_tokens *d, int64_t g, int64_t B, int64_t T, int32_t *inputs,
                     int32_t *targets);
/* The shuffled order's permutation of [0, n): a keyed bijection computed per position, so
 * any sequence of any epoch is found without building the epoch's order. */
int64_t pr_shuffled_position(uint64_t key, int64_t n, int64_t i);

/* ---- transport.c: bounded FIFO per directed link, in-process or over a socket ---------- */

typedef struct pr_channel {
    pthread_mutex_t mu;
    pthread_cond_t not_full, not_empty;
    int capacity, head, count;
    int64_t floats;  /* per message */
    float *buffers;  /* capacity x floats */
    int64_t *mbs;    /* micro-batch of each buffered message */
    double timeout;  /* seconds a blocked send or receive waits; 0: forever */
    int fd;          /* >= 0: the link leaves the process over this TCP socket */
    int in_flight;   /* socket messages sent and not yet acknowledged */
} pr_channel;

/* PR_LINK_ERROR: a native transport failed (its words are in the caller's err). */
enum { PR_LINK_OK = 0, PR_LINK_TIMEOUT = -1, PR_LINK_CLOSED = -2, PR_LINK_ERROR = -3 };

void pr_channel_init(pr_channel *c, int capacity, int64_t floats);
void pr_channel_destroy(pr_channel *c);
/* Copies data into a free buffer, blocking while all `capacity` are full. */
void pr_channel_send(pr_channel *c, int64_t mb, const float *data);
/* Copies the oldest message into data, blocking while none; returns its micro-batch. */
int64_t pr_channel_recv(pr_channel *c, float *data);
/* The same, returning PR_LINK_TIMEOUT after c->timeout seconds of waiting, PR_LINK_CLOSED
 * when the peer process has gone; the caller names the stages. */
int pr_channel_send_timed(pr_channel *c, int64_t mb, const float *data);
int pr_channel_recv_timed(pr_channel *c, float *data, int64_t *mb);
/* In-process only, for a sender that puts the data elsewhere (a device link): waits (timed)
 * until a send would not block. And for its receiver: waits (timed) for the oldest message's
 * micro-batch without taking it; pr_channel_pop then frees its place. */
int pr_channel_wait_room(pr_channel *c);
int pr_channel_peek_timed(pr_channel *c, int64_t *mb);
void pr_channel_pop(pr_channel *c);
/* In-process only: the messages the channel holds now. */
int pr_channel_held(pr_channel *c);
/* Makes the channel one end of a link to another process (it closes fd when destroyed). */
void pr_channel_attach_socket(pr_channel *c, int fd);

/* ---- links.c: the links between neighbouring stages, as the instructions use them -------- */

/* The pair (i, i+1) has two directed links: act[i] carries activations i -> i+1, grad[i]
 * carries gradients i+1 -> i. A native transport gives each directed link a communicator of
 * its own with two ranks, the sender 0 and the receiver 1, so the link's messages are that
 * communicator's messages in order. The order of the kinds is the layout of the id exchange. */
enum { PR_LINK_ACT = 0, PR_LINK_GRAD = 1, PR_LINK_KINDS };

typedef struct pr_link_use {
    int kind;                 /* PR_LINK_ACT or PR_LINK_GRAD */
    int index;                /* the pair (index, index + 1) */
    int sending;              /* 1: the stage sends on the link, 0: it receives */
    int peer;                 /* the stage at the other end */
    int self_rank, peer_rank; /* in the link's communicator: sender 0, receiver 1 */
} pr_link_use;

/* The floats of one message on link `kind` of the pair (index, index + 1): B*T*C, but
 * between the last two stages of a vocabulary split their own (pr_stage_code.out_floats,
 * dx_floats). */
int64_t pr_link_floats(const pr_program *prog, int kind, int index);
/* The largest message of any link of prog. */
int64_t pr_link_floats_max(const pr_program *prog);

/* The link that op (RECV_ACT, SEND_ACT, RECV_GRAD, SEND_GRAD) of `stage` uses, of a pipeline
 * of `stages`; -1 for other ops and for a peer outside the pipeline. */
int pr_link_of(int op, int stage, int stages, pr_link_use *out);
/* Messages link (index, index + 1) buffers before a send blocks (links.c). */
int pr_link_capacity(const paci_table *tab, int index);
/* Whether the link between stages on GPUs gpu_lo and gpu_hi needs the native transport:
 * always between processes (world > 1), else only when the two GPUs differ (stages sharing
 * a GPU keep an in-process link: a device link on the GPU, below). */
int pr_link_native(int world, int gpu_lo, int gpu_hi);

struct pr_channel;
struct pr_device;
/* A device link: an in-process link between stages whose memory the host cannot read (the
 * GPU's, with no native transport between them). The message moves device to device through
 * a ring of `capacity` buffers in the sender's memory; the host channel carries only the
 * micro-batch numbers, and events order the copies (links.c). */
typedef struct pr_dev_link {
    float *ring;           /* NULL: the link is not a device link */
    size_t floats;         /* per message */
    int capacity, sender, receiver;
    void **sent, **drained; /* per ring buffer: recorded by the sender's / receiver's stream */
    int64_t sends, receives;
} pr_dev_link;
void pr_dev_link_open(pr_dev_link *l, const struct pr_device *dev, int sender, int receiver,
                      int capacity, size_t floats);
void pr_dev_link_close(pr_dev_link *l, const struct pr_device *dev);
/* The channel's contract (timeouts as pr_channel_*_timed), the data device to device. */
int pr_dev_link_send(pr_dev_link *l, const struct pr_device *dev, struct pr_channel *c, int64_t mb,
                     const float *src);
int pr_dev_link_recv(pr_dev_link *l, const struct pr_device *dev, struct pr_channel *c, float *dst,
                     int64_t *mb);

/* ---- device.c: where a stage's state lives and its code runs (cpu | cuda) -------------- */

struct pr_run;
struct pr_bootstrap;
struct pr_dgc_buffers;

/* A device's native transport between stages (CUDA: NCCL, runtime/cuda/nccl_transport.c).
 * It carries the links marked in run->native; the others stay in-process (device links or
 * host channels). Sends
 * and receives keep the channel's contract: a send returns once the message is taken from
 * `src` and blocks only while `channel_capacity` earlier messages on the link are
 * unreceived; a receive blocks until the next message is in `dst`. Both wait at most the
 * peer timeout, then return PR_LINK_TIMEOUT (PR_LINK_ERROR with err on a transport error). */
typedef struct pr_link_ops {
    const char *name;
    /* One process: carries the links between stages on different GPUs. 0 also when it
     * carries none (library missing: a notice, and the host channels carry them). */
    int (*open_local)(struct pr_run *run, char *err);
    /* One process per stage: this rank's links, set up through the bootstrap's line. */
    int (*open_ranks)(struct pr_run *run, struct pr_bootstrap *b, char *err);
    int (*send)(struct pr_run *run, int stage, const pr_link_use *u, int64_t mb, const float *src,
                char *err);
    int (*recv)(struct pr_run *run, int stage, const pr_link_use *u, float *dst, int64_t *mb,
                char *err);
    void (*close)(struct pr_run *run);
    /* Replicas (one process per stage and replica): sums the n floats at grads (device
     * memory) and the n_values doubles at values (host) over the stage's replicas, in place
     * on every replica; the peer timeout and errors as for send and receive. NULL: the
     * transport has no reduction. */
    int (*reduce)(struct pr_run *run, int stage, float *grads, size_t n, double *values,
                  int n_values, char *err);
    /* Replicas, overlapped with the backward: starts the sum of the n floats at grads (a range
     * of the stage's gradients the window's last backward has finished) after the work queued
     * so far, and returns without waiting; the step's `reduce`, called with n = 0, then sums
     * the values and waits for every started range. NULL: the step sums the whole block. */
    int (*reduce_start)(struct pr_run *run, int stage, float *grads, size_t n, char *err);
    /* Replicas under compression dgc: every replica's `words` 32-bit words at slots + replica
     * x words (device memory, its pairs) into every replica's slots, in place, in replica
     * order (an allgather), and the n_values doubles at values summed as `reduce` does; the
     * peer timeout and errors as for send and receive. NULL: the transport cannot. */
    int (*gather)(struct pr_run *run, int stage, uint32_t *slots, size_t words, double *values,
                  int n_values, char *err);
} pr_link_ops;

/* The parts of a zero-bubble backward (pr_device.backward_part). */
enum { PR_BACKWARD_B, PR_BACKWARD_W };

/* A device layer. The executor reaches stage memory and stage code only through this table,
 * so one executor drives the CPU and the GPU, and a transport moves a stage's buffers with
 * download/upload (or natively, when it knows the device). Every call names the stage: the
 * layer keeps per-stage state (CUDA: device, context, compute and communication streams).
 * Every call is ordered after the stage's earlier work and before its later work. download
 * and sumsq return with their results; the others may return before the device has done
 * them (CUDA queues them on the stage's stream; the source of an upload may be reused at
 * once). Work of two stages is ordered only by `follow`, a link or a host wait. */
typedef struct pr_device {
    const char *name;      /* "cpu", "cuda" */
    int host_memory;       /* 1: stage pointers are host memory, usable without staging */
    /* GPUs visible; 0 with the reason in err when there are none (or no driver). */
    int (*probe)(char *err);
    /* Prepares stage s before any other call for it. */
    int (*open_stage)(const pr_program *prog, int stage, char *err);
    /* Every stage's bytes against the free memory of its device; names the stage short. */
    int (*check_memory)(const pr_program *prog, const int64_t *stage_bytes, char *err);
    void *(*alloc)(int stage, size_t bytes); /* zeroed; exits naming the stage on failure */
    void (*release)(int stage, void *p);
    void (*upload)(int stage, void *dst, const void *src, size_t bytes);
    void (*download)(int stage, void *dst, const void *src, size_t bytes);
    void (*copy)(int stage, void *dst, const void *src, size_t bytes);
    void (*zero)(int stage, void *dst, size_t bytes);
    /* sums[i] = the sum of squares of the n tensors at base + tensors[i].offset, in double. */
    void (*sumsq)(int stage, const float *base, const pr_tensor *tensors, int n, double *sums);
    /* The noise scale's sum of squares of x[0..size) without a wait (NULL: sumsq is free of
     * waits, the CPU): sumsq_hold queues it; the stage's next sumsq of all its tensors brings
     * it back in its own download; sumsq_held then gives it once (0: none came). */
    void (*sumsq_hold)(int stage, const float *x, int64_t size);
    int (*sumsq_held)(int stage, double *sum);
    void (*forward)(const pr_program *prog, int stage, const pr_fwd_args *args);
    void (*backward)(const pr_program *prog, int stage, const pr_bwd_args *args);
    /* a zero-bubble program's backward in its parts: part PR_BACKWARD_B or PR_BACKWARD_W */
    void (*backward_part)(const pr_program *prog, int stage, int part, const pr_bwd_args *args);
    void (*adamw)(const pr_program *prog, int stage, const pr_adamw_args *args);
    /* delay_correction predict: the stage's predicted weights under `rule` (pr_predict_args) */
    void (*predict)(const pr_program *prog, int stage, const pr_optim_rule *rule, const pr_predict_args *args);
    /* delay_correction dc-asgd: pr_dc_asgd_add on the stage's memory; NULL: not on this device */
    void (*dc_asgd_add)(int stage, float *sum, const float *g, const float *w, const float *w_prev, int64_t n,
                        float coef);
    void (*close_stage)(int stage);
    /* One process per stage: every stage of this process goes on GPU `gpu` (the local
     * rank); -1 with err when there is no such GPU. NULL: nothing to choose. */
    int (*pin)(int gpu, char *err);
    const pr_link_ops *links; /* the native transport, NULL: in-process channels only */
    const pr_op_timer *op_timer; /* per-op timing for run --profile-out */
    /* params_h = bf16(params) over stage's whole block: a device whose products read bf16
     * copies of the weights (the GPU under bf16); NULL: it reads the fp32 weights */
    void (*weight_copy)(const pr_program *prog, int stage, const float *params, pr_bf16 *params_h);
    /* Optional (NULL on a device that does each call before returning, the CPU): */
    /* the stage's later work waits for the work `other` has queued so far */
    void (*follow)(int stage, int other);
    /* returns once the stage's queued work is done (ends of segments, measured runs) */
    void (*finish)(int stage);
    /* device links (links.c): events recorded on and waited for by a stage's stream */
    void *(*event_create)(int stage);
    void (*event_destroy)(int stage, void *event);
    void (*event_record)(int stage, void *event);
    void (*event_wait)(int stage, void *event);
    /* compression dgc on the device (NULL on the CPU, whose replicas run dgc.c on host
     * memory). dgc_open: b's residual (and velocity, under momentum correction) in the
     * stage's memory, zero, and its pairs for D replicas: b->index holds D slots of
     * paci_dgc_list_words(n, k) words at a step's k. dgc_compress: pr_dgc_compress on the
     * device, its list into slot `replica`; returns the slots. dgc_sum: grads = the D slots
     * decoded and summed in replica order (pr_dgc_sum). */
    int (*dgc_open)(const pr_program *prog, int stage, struct pr_dgc_buffers *b, int D, char *err);
    uint32_t *(*dgc_compress)(int stage, struct pr_dgc_buffers *b, const float *grads, int64_t k, float scale,
                              float mu, int replica);
    void (*dgc_sum)(int stage, float *grads, const uint32_t *slots, int64_t k);
    void (*dgc_undo)(int stage, struct pr_dgc_buffers *b); /* pr_dgc_undo on the device */
    void (*dgc_close)(int stage, struct pr_dgc_buffers *b);
} pr_device;

extern const pr_device pr_device_cpu;

/* The device for `requested` ("cpu", "cuda" or NULL: cuda when the program has the GPU path
 * and a GPU answers, else cpu with a one-line notice saying what runs there, `work`
 * ("training", "sampling"; NULL: quiet)). -1 with err when cuda was asked for and cannot be
 * had, or the name is unknown. */
int pr_device_select(const pr_program *prog, const char *requested, const char *work,
                     const pr_device **out, char *err);

/* ---- profile.c: per-op times of the generated code (run --profile-out) ----------------- */

/* What each op of a stage took: calls and seconds, added by the device's timer on the
 * stage's own thread and the helpers of its parallel loops (read after the stage threads are
 * joined). */
typedef struct pr_op_stats {
    int32_t n_ops;
    int64_t *calls;
    double *seconds;
} pr_op_stats;

extern pr_op_stats pr_op_stats_of[PACI_MAX_STAGES];
void pr_op_stats_open(int stage, int32_t n_ops);
void pr_op_stats_close(int stage);
/* One call of op `op` that took `seconds`; an op outside the stage's list is a bug. */
void pr_op_stats_add(int stage, int32_t op, double seconds);
/* Monotonic clock around each op: ops run on the stage's thread, one at a time. */
extern const pr_op_timer pr_cpu_op_timer;

/* ---- optim_rules.c: what the CPU and GPU steps of muon, lamb, lars and nadamw share ---- */

/* Keller Jordan's quintic Newton-Schulz coefficients (a, b, c): X <- aX + (bA + cA^2)X, on X
 * divided by its Frobenius norm plus PR_NS_NORM_EPS. */
#define PR_NS_A 3.4445f
#define PR_NS_B (-4.7750f)
#define PR_NS_C 2.0315f
#define PR_NS_NORM_EPS 1e-7
/* Floats of one layer's slice of a per-layer tensor kind (enum pr_ckpt_tensor); 0 outside
 * the blocks (embeddings, final LayerNorm, head): the whole tensor is one slice. */
int64_t pr_optim_layer_floats(int32_t kind, int64_t C);
/* Whether Muon orthogonalises a kind, and one matrix's shape (qkv: a C x C block). */
bool pr_optim_muon_shape(int32_t kind, int64_t C, int64_t *rows, int64_t *cols);
/* NAdamW's scalars for step t (1-based) at learning rate lr on a tensor with decay wd (0 for
 * the undecayed ones): with mu_i = beta1 (1 - 0.5 * 0.96^(i psi)) and P_t = mu_1 ... mu_t,
 * the update is  W = keep W - (coef_g g + coef_m m) / (sqrt(v / c2) + eps)  where
 * keep = 1 - lr wd, coef_g = lr (1 - mu_t) / (1 - P_t), coef_m = lr mu_{t+1} / (1 - P_t mu_{t+1}),
 * c2 = 1 - beta2^t. P_t is a product in double in the order i = 1..t, so it depends on t only
 * and a resumed run gets the same bits. */
typedef struct pr_nadam_scalars {
    float keep, coef_g, coef_m, c2;
} pr_nadam_scalars;
pr_nadam_scalars pr_nadam_scalars_at(const pr_optim_rule *rule, int64_t t, float lr, float wd);
/* Adam's bias corrections c1 = 1 - beta1^t, c2 = 1 - beta2^t of the rule's betas, computed as the
 * generated AdamW computes them (in double, then float): every Adam-type step and prediction,
 * on the CPU and the GPU, takes them from here. */
void pr_adam_corrections(const pr_optim_rule *rule, int64_t t, float *c1, float *c2);
/* Muon's shape scaling of the orthogonalised update of a rows x cols matrix (rule->shape_scale). */
float pr_muon_shape_scale(const pr_optim_rule *rule, int64_t rows, int64_t cols);
/* LAMB's trust ratio ||w|| / ||direction||, 1 when either norm is 0 or the slice takes no decay. */
float pr_lamb_trust_ratio(int decay, double w_norm, double d_norm);

/* ---- optim.c: learning rate and clipping ----------------------------------------------- */

/* lr of optimizer step t (1-based): linear warmup to the peak over warmup_steps, then the
 * decay to min_lr_ratio * peak, reached at t = steps. */
double pr_lr(const pr_program *prog, int64_t t);
/* The same over a schedule of another length and warmup (a resumed run's, pr_run.lr_steps). */
double pr_lr_over(const pr_program *prog, int64_t steps, int64_t warmup, int64_t t);
/* Sum of squares of x[0..n), in double, element order. */
double pr_sumsq(const float *x, int64_t n);
/* Folds per-tensor sums in the given order, then sqrt. */
double pr_fold_norm(const double *sums, int64_t n);
/* The gradient scale for a norm: clip/norm when norm > clip > 0, else 1. */
float pr_clip_scale(double norm, double clip);

/* ---- noise_scale.c: the gradient noise scale, online (docs/run.md) ------------------- */

/* Moving averages of one stage's (or the sum of stages') |G|^2 and tr(Sigma) estimates;
 * weight = 1 - decay^n, the bias both share (a sum of stages holds corrected values, weight 1). */
typedef struct pr_noise_ema {
    double g2, trace, weight;
    int64_t n;
} pr_noise_ema;

/* The smoothing the runtime uses: about the last 100 steps (one step's |G|^2 estimate is
 * often of the order of |G|^2 itself where the batch is well below B_simple). */
#define PR_NOISE_DECAY 0.99
/* The two batch sizes, in sequences, of a run of micro-batches of `micro` sequences, `window`
 * of them a step, `replicas` pipelines: a replica's first micro-batch of the window against
 * the step's gradient, every replica's window. 0 when they are equal (nothing to estimate). */
int pr_noise_batches(int64_t micro, int64_t window, int64_t replicas, double *b_small, double *b_big);
/* The unbiased estimates of |G|^2 and tr(Sigma) from the squared norms of mean gradients at
 * batch sizes b_small < b_big. */
void pr_noise_estimates(double small_sq, double b_small, double big_sq, double b_big, double *g2, double *trace);
void pr_noise_ema_add(pr_noise_ema *e, double g2, double trace, double decay);
/* Adds part's bias-corrected averages into total (start total at zero): the stages' sum. */
void pr_noise_ema_sum(pr_noise_ema *total, const pr_noise_ema *part);
/* B_simple = tr(Sigma) / |G|^2 from the averages; NaN before a positive |G|^2 average. */
double pr_noise_scale(const pr_noise_ema *e);

/* ---- dgc.c: Deep Gradient Compression of the replicas' exchange ----------------------- */

/* One replica's compression state for one stage of n parameters (its own, never synced). */
typedef struct pr_dgc_buffers {
    float *residual;    /* what it has not sent yet: the error feedback, or the accumulated velocity */
    float *velocity;    /* momentum correction's local velocity u (LARS), else NULL */
    uint32_t *scratch;  /* n: the selection's keys */
    uint32_t *index;    /* this step's pairs' indices, ascending (the selection's) */
    uint32_t *list;     /* this step's pairs as sent (paci_dgc.h): paci_dgc_list_words(n, k) words */
    int64_t k;          /* pairs this step */
    float *residual_before; /* the residual and velocity as this step found them, put back */
    float *velocity_before; /* if the step is skipped (pr_dgc_undo; NULL without velocity) */
} pr_dgc_buffers;

/* The density of step t (from 1): the exponential warm-up, then prog->dgc_density. */
double pr_dgc_density(const pr_program *prog, int64_t t);
/* Pairs a stage of n parameters sends at step t: max(1, ceil(density(t) n)), at most n. */
int64_t pr_dgc_count(const pr_program *prog, int64_t t, int64_t n);
/* Whether the optimizer is momentum SGD (LARS), whose velocity is corrected and masked. */
int pr_dgc_momentum_correction(const pr_program *prog);
/* The k entries of x[0..n) largest in magnitude, ties to the lower index, into index[0..k)
 * in ascending order (scratch: n keys); returns k (n when k >= n). */
int64_t pr_dgc_select(const float *x, int64_t n, int64_t k, uint32_t *scratch, uint32_t *index);
/* Local clipping: min(1, (clip / sqrt(D)) / ||grad||), 1 without `clip`. */
float pr_dgc_clip_scale(const pr_program *prog, int D, const float *grad, int64_t n);
/* A sent value as bf16 (to nearest even; a finite value too large for bf16 saturates at its
 * largest, so that the value less its bf16 stays a float). */
uint16_t pr_dgc_round(float v);
/* One replica's side: keeps the residual and velocity as they were (for pr_dgc_undo),
 * accumulates scale * grad (through the velocity with momentum mu when b->velocity), selects
 * k, writes them into b->list (the values rounded to bf16 when k < n) and leaves in the
 * residual what was not sent (the rounding error; zero where all of it was, or where the
 * value is not finite) and zero in the velocity. Returns the pairs. */
int64_t pr_dgc_compress(pr_dgc_buffers *b, const float *grad, int64_t n, int64_t k, float scale, float mu);
/* out[0..n) = the D replicas' lists decoded and summed in replica order (0's as they are,
 * then added). */
void pr_dgc_sum(float *out, int64_t n, const pr_dgc_buffers *const *from, int D);
/* A list of k pairs from another process against what pr_dgc_compress writes (block counts
 * running up to k, offsets ascending in each block and below its size, so pr_dgc_sum stays
 * inside out[0..n) and writes each index once): 0, or -1 with the first fault in why. */
int pr_dgc_check_list(const uint32_t *list, int64_t n, int64_t k, char *why, size_t len);
/* A skipped step (on_nan skip) undone: the residual and velocity as pr_dgc_compress found
 * them, so the pairs it sent stay to be sent later and the step's own gradient is dropped,
 * as a dense skipped step drops it (docs/dsl.md "Gradient compression"). */
void pr_dgc_undo(pr_dgc_buffers *b, int64_t n);
void pr_dgc_alloc(pr_dgc_buffers *b, int64_t n, int velocity);
void pr_dgc_free(pr_dgc_buffers *b);
/* The step under momentum correction: the stage's rule with momentum 0 (CPU). */
void pr_dgc_step(const pr_program *prog, const pr_stage_code *sc, const pr_adamw_args *args);

/* ---- dc_asgd.c: `delay_correction dc-asgd` ---------------------------------------------- */

/* sum += g + coef g g (W - W_prev), elementwise: DC-ASGD's corrected gradient joins the
 * window's sum (coef = lambda d K D for a backward's gradient g, already divided by K D). */
void pr_dc_asgd_add(float *sum, const float *g, const float *w, const float *w_prev, int64_t n, float coef);

/* ---- layout.c: the checkpoint (llm.c) layout and its mapping onto stages --------------- */

/* Floats of each checkpoint tensor for prog's shape (LM_HEAD 0 when tied). */
void pr_ckpt_sizes(const pr_program *prog, int64_t sizes[PR_CKPT_COUNT]);
/* Offsets of each tensor in a flat buffer holding them in enum order; returns the total. */
int64_t pr_ckpt_offsets(const pr_program *prog, int64_t offsets[PR_CKPT_COUNT]);
/* Checks every stage's tensor table covers the checkpoint layout exactly once. */
int pr_check_layout(const pr_program *prog, char *err);
/* Seeded, partition-independent parameters in the flat layout. */
void pr_init_params(const pr_program *prog, float *flat);

/* ---- executor.c: arenas, stage threads, one segment ------------------------------------ */

/* Claims the right to end the process from a stage thread: exit() must run once, so a
 * second stage failing at the same time waits, silent, for the first one's exit. */
void pr_claim_exit(void);
/* A placement's DSL word (enum paci_placement), "?" outside the list. */
const char *pr_placement_name(int placement);

typedef struct pr_trace_event {
    uint8_t op;
    int64_t mb;
    double start, end; /* seconds since the run began */
} pr_trace_event;

/* Optimizer post-validation (executor.c, "post-validation"; docs/dsl.md): a synchronous stage
 * steps as if nothing clipped or skipped and checks the global norm before its next step. */
typedef struct pr_post_validation {
    int64_t pending;             /* the step (from 1) taken on trust and not yet checked; 0: none */
    int skipped[2];              /* by the parity of t: the stage skipped step t + 1 itself (its own
                                  * loss or sums not finite); published with the sums */
    double loss, lr;             /* its loss sum and lr, for its report once checked */
    double noise_small;          /* its window's noise-scale measurement, taken at the check */
    int noise_state;
    /* what a rollback restores, on the device: params, m, v and grads as the step found them
     * (4 n floats), and the bf16 weights where the stage has them */
    float *kept;
    pr_bf16 *kept_h;
    int64_t kept_bytes;
    /* the instructions run since the step (op, slot, mb), which a rollback runs again */
    paci_instr *done;
    int64_t *done_mb;
    int32_t n_done, cap_done;
    int64_t published;           /* steps whose per-tensor sums the stage has published (run->pv_mu) */
    pthread_t exchange;          /* one process per stage: the allgather of the pending step's sums */
    int64_t checked;             /* steps taken on trust and checked */
    /* the last step clipped or was not finite, so the next one waits for the norm as without
     * post-validation (a run of clipped steps rolls back once); waited: steps taken so */
    int wait_next;
    int64_t waited;
    int64_t rolled_clip, rolled_skip; /* steps rolled back (their window run again) because the
                                       * norm clipped / a gradient was not finite */
} pr_post_validation;

typedef struct pr_stage_rt {
    int index;
    const pr_stage_code *code;
    float *arena;
    float *params, *grads, *m, *v, *slots, *stash, *scratch, *grad_in, *grad_out;
    /* the bf16 copies of params and of each stash slot when the device's products read them
     * (pr_device.weight_copy and the program's bf16_operands), else NULL */
    pr_bf16 *params_h, *stash_h;
    /* `delay_correction predict`: the weights a forward with aux d > 0 runs on (one extra
     * copy of params), rewritten before each such forward; NULL when no forward predicts */
    float *predicted;
    pr_bf16 *predicted_h;                /* its bf16 copy, where the products read one */
    int64_t predicted_t, predicted_d;    /* the step count and delay `predicted` holds (t > 0) */
    /* `delay_correction dc-asgd` with lambda != 0 on a stage whose table has a delayed forward:
     * the weights before the stage's last step (copied at each step), and the buffer a
     * delayed backward's gradient is computed in before its correction joins the sum; else NULL */
    float *dc_prev, *dc_grad;
    /* the activation slot forwards and backwards run in: slots' own with recompute none (slot
     * 0 for evaluation), else one workspace while the slots keep slot_floats of input each;
     * work_mb: the micro-batch whose forward the workspace holds, for its SEND_ACT; recompute:
     * whether this stage recomputes (`recompute full` and more than one slot) */
    float *work;
    int64_t slot_floats, work_mb;
    int recompute;
    int32_t *slot_tokens, *slot_targets; /* per slot, B*T each */
    float *slot_losses;                  /* per slot, B*T (last stage) */
    /* the same in device memory (aliases of the above on a host-memory device), and a
     * host buffer of one B*T*C message for moving device buffers through a channel */
    int32_t *dev_tokens, *dev_targets;
    float *dev_losses, *staging;
    int64_t *slot_mb;                    /* micro-batch held by each slot, -1 if none */
    int64_t *slot_fwd_step;              /* the stage's step count at that slot's FWD */
    int32_t *slot_fwd_delay;             /* that FWD's aux: the table's delay d of its backward */
    int64_t grad_in_mb, grad_out_mb;
    int send_early;                      /* the running BWD's SEND_GRAD comes next: dx_ready sends it */
    int64_t grad_sent_mb;                /* the micro-batch whose gradient went from inside its BWD, -1 */
    int64_t t;                           /* optimizer steps this stage has taken */
    double step_loss_sum;                /* the step's loss sum over the replicas (last stage) */
    int64_t pending_w;                   /* zero-bubble B's whose W has not run yet */
    double *tensor_sumsq[2];             /* per tensor, double-buffered by step parity */
    /* measurements (published under run->stats_mu) */
    double busy[PACI_OP_COUNT];
    double cpu[PACI_OP_COUNT];           /* thread CPU seconds per op: the study's replay input */
    int64_t ops[PACI_OP_COUNT];          /* instructions executed per op */
    int64_t arena_bytes;                 /* bytes allocated for this stage's state */
    int64_t drift_max, drift_effective_max, drifting, backwards;
    pr_trace_event *trace;
    int64_t n_trace, cap_trace;
    /* the cut of the running segment (see pr_run_segment): micro-batches from cut_from*K,
     * steps after cut_from up to cut_stop (PR_NO_STOP until one is known); steps_met: the
     * number of the last STEP instruction met (from the segment's first step) */
    int64_t cut_from, cut_stop, steps_met;
    /* replicas: backwards since the stage's last step, and the gradient floats whose
     * allreduce the window's last backward has started (pr_replicas_ready) */
    int64_t window_backwards, reduce_started;
    /* the noise scale (noise_scale.c): noise_small, the squared norm of the window's first
     * micro-batch's gradients as the backward left them (noise_small_state 1; 0 before it,
     * -1 when the replicas' reduction had already begun on them); noise, this stage's
     * averages, and noise_at[i] what they were after step noise_at_step[i], the last two
     * steps by parity (published under run->stats_mu) */
    double noise_small;
    int noise_small_state;
    pr_noise_ema noise, noise_at[2];
    int64_t noise_at_step[2];
    /* `accumulate pairwise`: acc_level[j], the sum of 2^j of the window's micro-batches, or
     * NULL; acc_free, the buffers not in use (the next backward takes one); acc_count, the
     * window's backwards so far. NULL acc_level: the backward adds to grads in place. */
    float **acc_level, **acc_free;
    int acc_n_free;
    int64_t acc_count;
    /* replicas: what this replica put into the stage's exchange (bytes, counted where they are
     * written) and the exchanges; `compression dgc`: its residual, velocity and pairs */
    int64_t exchange_bytes, exchanges;
    pr_dgc_buffers dgc;
    pr_post_validation pv;
} pr_stage_rt;

typedef struct pr_options {
    int resume, quiet, threads, trace, no_checkpoint;
    int overwrite;          /* --overwrite: replace the checkpoint folder's other checkpoints */
    int blas_threads;       /* --blas-threads: cores per stage; 0: threads / stages */
    const char *init_path, *data, *val, *ckpt_dir, *metrics_path, *trace_path;
    const char *profile_out; /* measured per-stage costs, in `pacic --profile` format */
    char *const *argv;       /* the command line, said to a run refused the checkpoint folder */
    const char *export_dir;  /* --export hf DIR: write the weights as a Hugging Face folder */
    int64_t steps;  /* stop after this many steps (<= the schedule's total) */
    int64_t sample; /* tokens to print; 0 = train */
    const char *tokenizer_path; /* --tokenizer: llm.c's tokenizer file, to print --sample as text */
    const char *bpe_dir;        /* --bpe: GPT-2's vocab.json and merges.txt, to encode --prompt and decode */
    /* --sample's draw: --temperature (0: the most likely token), --top-k (0: the whole
     * vocabulary), --seed (not given: one from the clock, said), --prompt (text to continue) */
    double temperature;
    int64_t top_k;
    struct pr_seed { uint64_t value; int given; } seed;
    const char *prompt;
    const char *sample_only, *resume_only; /* the first flag given that needs --sample, --resume */
    int reschedule;         /* --reschedule: a resume takes the program's lr schedule */
    const char *device; /* --device: "cpu", "cuda", NULL = choose */
    double peer_timeout;    /* --peer-timeout: seconds a link waits for its peer; 0: forever */
    /* one process per stage (world > 1): this process runs stage `rank` only, and `boot`
     * is its line to rank 0 (gradient-norm sums, checkpoint gathers) */
    int rank, world;
    int local_rank;         /* the launcher's local rank: the GPU of this process */
    struct pr_bootstrap *boot;
    double connect_timeout; /* --connect-timeout: seconds to find rank 0 and the neighbours */
    int master_port;        /* --master-port; 0: MASTER_PORT or the default */
} pr_options;

typedef struct pr_run {
    const pr_program *prog;
    const pr_device *dev;             /* where the stages' arenas live and code runs */
    const paci_table *tab;
    pr_options opt;
    int p;                            /* (virtual) stages */
    int devices;                      /* device threads (processes, GPUs): p without chunks */
    int64_t B, T, C, K, V;
    pr_stage_rt stage[PACI_MAX_STAGES];
    pr_channel act[PACI_MAX_STAGES];  /* act[s]: stage s -> s+1 */
    pr_channel grad[PACI_MAX_STAGES]; /* grad[s]: stage s+1 -> s */
    /* native[kind][i]: the link is carried by dev->links instead of the channel */
    uint8_t native[PR_LINK_KINDS][PACI_MAX_STAGES];
    pr_dev_link dev_link[PR_LINK_KINDS][PACI_MAX_STAGES]; /* links.c: [kind][i], if not native */
    const pr_link_ops *links;         /* set once the native transport carries a link */
    pr_tokens train, val;
    int64_t step;                     /* optimizer steps done (all stages, at a drain) */
    int async_segment;                /* the segment running is asynchronous in a table with a
                                         warm start: no global clipping norm in it */
    char run_id[64];                  /* checkpoint.c: whose checkpoints a save may prune */
    char resumed_from[4400];          /* the checkpoint loaded ("dir/step_N"), or "" */
    /* the lr schedule's length and warmup in steps: the program's, or those the run started
     * with, which a resumed checkpoint recorded (lr_recorded) and keeps unless --reschedule */
    int64_t lr_steps, lr_warmup;
    int lr_recorded;
    /* The last stage's loss per global step (the sum of its micro-batch mean losses), from
     * the step's first forward there to its update: a ring of step_loss_len entries, entry
     * i holding step step_loss_step[i] (executor.c, add_step_loss). */
    double *step_loss;
    int64_t *step_loss_step;
    int64_t step_loss_len;
    float *probs_host;                /* pr_forward_all's result on a device without host memory */
    /* the global clipping norm a device computed at its first step of a window, over every
     * stage, and the step count (before the update) it is for; [device], its thread's own */
    double device_norm[PACI_MAX_STAGES];
    int64_t device_norm_t[PACI_MAX_STAGES];
    pthread_barrier_t barrier;        /* the norm's: one wait per device thread and step */
    pthread_mutex_t stats_mu;
    uint8_t barrier_made, stats_mu_made; /* made by pr_run_init, so pr_run_free may destroy them */
    /* post-validation: a stage publishes its sums of a step under pv_mu and wakes the stages
     * waiting on pv_cv to check it */
    pthread_mutex_t pv_mu;
    pthread_cond_t pv_cv;
    uint8_t pv_made;
    double start_time, train_time;    /* train_time: seconds inside segments, this process */
    int64_t steps_this_process;
    /* called by the last stage after each step (logging); may be NULL */
    /* grad_norm: the norm clipping used at the last stage's step (executor.c, grad_norm) */
    void (*on_step)(struct pr_run *run, int64_t step, double loss, double lr, double grad_norm);
    void *user;
    int64_t stop_at;                  /* pr_train: end the next segment after this step, or PR_NO_STOP */
    /* data parallelism (replicas.c): this pipeline is replica `replica` of `replicas`; in one
     * process replica 0 owns the others (replica_runs[r], [0] itself) and what they share */
    int replica, replicas;
    struct pr_run **replica_runs;
    struct pr_replicas *shared;
    const struct pr_replica_ops *replica_ops; /* set by pr_replicas_open when D > 1; else NULL */
    int stop_seen;                    /* stage 0: a replica saw a stop signal at the last step */
    /* one process per stage and replica: sockets of the stage's reduction group (replica 0:
     * reduce_fd[r] leads to replica r; others: reduce_fd[0] leads to replica 0), -1 unused */
    int *reduce_fd;
    float *reduce_buffer;             /* replica 0: one replica's gradients as they arrive */
    /* compression dgc over TCP: the other replicas' pair lists of the step (the list words
     * only, room for reduce_pairs_room words each); rank 0, for a checkpoint: every rank's
     * residuals (and velocities), gathered in rank order, as dgc.bin holds them */
    pr_dgc_buffers *reduce_pairs;
    int64_t reduce_pairs_room;
    float *dgc_gathered;
} pr_run;

/* Validates program and table, lays out arenas and channels. Parameters are zero. */
int pr_run_init(pr_run *run, const pr_program *prog, const pr_options *opt, char *err);
void pr_run_free(pr_run *run);
/* Runs segment seg (all stage threads, joined at the end); run->step advances. */
void pr_run_segment(pr_run *run, int32_t seg);
/* The gradient noise scale B_simple in sequences (noise_scale.c): the sum of every stage's
 * moving averages. For the metrics line of `step` (the last stage's, at its step): with one
 * stage its own after that step; synchronous stages' after step - 1, which every stage has
 * taken by then, so the line has the same value in every run; asynchronous stages' each after
 * its latest step. step < 0: every stage's latest (a drained run's). One process per stage:
 * the other stages' come with the step's exchange of the clipping sums (exchange_sums) or the
 * gather at a segment's end (pr_gather_noise); an asynchronous line has none. 0 where the run
 * does not estimate it or a stage has no average for that step; else 1 with *b_simple (NaN
 * while the |G|^2 average is not > 0). */
int pr_run_noise_scale(pr_run *run, int64_t step, double *b_simple);
/* Whether the run estimates the noise scale at all (docs/run.md, where it is absent). */
int pr_run_noise_estimated(const pr_run *run);
/* Stage s's averages as a checkpoint of step run->step recorded them: a resume continues them. */
void pr_run_noise_restore(pr_run *run, int s, const pr_noise_ema *e);
/* Early stops. A segment ends after step run->stop_at when that is set, or, once a stop
 * was requested (SIGINT/SIGTERM), after the optimizer step stage 0 is feeding: stage 0
 * stops issuing forwards there and every stage drains what is in flight, so the state
 * is that of the uninterrupted run after that step. pr_run_segment also starts mid-way
 * when run->step is inside the segment (resume after an early stop). */
#define PR_NO_STOP INT64_MAX
void pr_request_stop(int signal_number); /* async-signal-safe */
int pr_stop_signal(void);                /* the signal that asked for the stop, or 0 */
/* Mean loss of eval_batches micro-batches of `d`, forward through all stages (slot 0). */
double pr_eval(pr_run *run, const pr_tokens *d, int64_t batches);
/* Full-model forward of B*T tokens; returns the last stage's probabilities, B*T rows of
 * prog->probs_stride floats (the first vocab of each are the row's). */
const float *pr_forward_all(pr_run *run, const int32_t *tokens);
/* Stage s's weights changed other than by its AdamW (initialised, loaded, received): the
 * bf16 copy its products read is made again, where it has one. */
void pr_weights_changed(pr_run *run, int s);
/* Flat checkpoint layout <-> stage arenas, for params (which 0), m (1) or v (2). */
void pr_gather(const pr_run *run, int which, float *flat);
void pr_scatter(pr_run *run, int which, const float *flat);

/* ---- replicas.c: data parallelism, D copies of the pipeline ---------------------------- */

#define PR_MAX_REPLICAS 1024

/* Replica 0 of a one-process run (run->replicas > 1) makes the other D - 1 pipelines and what
 * they share: every stage's reduction group and the training data. Only the CPU, whose
 * stages keep nothing per stage outside their arenas, runs replicas in one process. */
/* With D > 1 (in one process or one per stage and replica) it sets run->replica_ops, through
 * which alone the executor reaches the replicas. */
int pr_replicas_open(pr_run *run, char *err);
/* Replica 0's weights, moments and step counts to every other replica (after init or load). */
void pr_replicas_sync(pr_run *run);
/* The argument of replica_ops->ready: the run and stage whose backward reports its ranges. */
typedef struct pr_ready_ctx {
    pr_run *run;
    pr_stage_rt *st;
} pr_ready_ctx;
/* What the executor asks of data parallelism (replicas.c's; NULL for one pipeline). */
typedef struct pr_replica_ops {
    /* Stage st's side of its step's reduction: every replica's gradients summed in replica
     * order (the same bits on every replica and every transport), then each replica holds the
     * sum. The last stage's loss sums add in replica order into *loss; *stop is whether any
     * replica had seen a stop signal. A replica that does not come within the peer timeout is
     * named and the process exits. */
    void (*reduce)(pr_run *run, pr_stage_rt *st, double *loss, int *stop);
    /* Overlap: whether the backward about to run on stage st completes its window and the
     * transport can start the reduction range by range (reduce_start); then the executor
     * passes `ready`, with a pr_ready_ctx, as the backward's grads_ready. */
    int (*overlaps)(const pr_run *run, const pr_stage_rt *st);
    void (*ready)(void *ctx, int64_t offset, int64_t count);
    /* on_nan skip dropped stage st's step after its reduction (every replica drops it: they
     * judge the same sum): what the reduction kept for later steps goes back to where the
     * step found it (compression dgc: the residual and velocity, on every transport). */
    void (*skip)(pr_run *run, pr_stage_rt *st);
    /* From pr_run_free: the other pipelines, the groups, the reduction sockets. */
    void (*close)(pr_run *run);
} pr_replica_ops;
/* The training micro-batch that local micro-batch mb of this replica reads: replica r takes
 * window positions [r*K, (r+1)*K) of the global window of D*K micro-batches, so D replicas
 * of window K read what one pipeline of window D*K reads, in the same order. */
static inline int64_t pr_replica_batch(const pr_run *run, int64_t mb)
{
    int64_t D = run->replicas > 1 ? run->replicas : 1;
    return (mb / run->K) * run->K * D + (int64_t)run->replica * run->K + mb % run->K;
}

/* ---- checkpoint.c: model.bin (llm.c), state.bin, atomic directories -------------------- */

#define PR_MODEL_MAGIC 20240326
#define PR_MODEL_VERSION 3
#define PR_STATE_MAGIC 0x50414349 /* "PACI" */
#define PR_STATE_VERSION 1

/* Creates the checkpoint folder and its missing parents; run calls it before training, so a
 * folder that cannot be made fails at once, not at the first save hours later. */
int pr_ckpt_prepare(const char *ckpt_dir, char *err);
/* Before a training run reads or writes its checkpoint folder: makes it, takes its lock (held
 * to the process's exit; argv is said to a second run, which is refused), writes and removes a
 * probe file and refuses a folder without room for one checkpoint. A resume from a folder
 * that does not exist claims nothing (loading says there is no checkpoint). -1 with err. */
int pr_ckpt_claim(const pr_run *run, const char *dir, char *const *argv, char *err);
/* A run that fails before step 1 (bad data, --init, room) while it holds the folder's lock:
 * removes the folder its claim made, and the lock file in it, so it leaves nothing behind. A
 * run the lock refused removes nothing: the folder is the holder's. */
void pr_ckpt_unclaim(void);
/* A new run's id (time, process, random), which its checkpoints' run.txt carry: a save prunes
 * only checkpoints of its own run. A resume takes the id of the checkpoint it loads. */
void pr_ckpt_new_run(pr_run *run);
/* Before training: refuses (-1, err naming the folder, what it holds and the ways on) where a
 * fresh run would replace checkpoints in the folder, or a resumed one checkpoints of steps
 * after its own; never under --overwrite. */
int pr_ckpt_guard(const pr_run *run, const char *dir, char *err);
/* Writes ckpt_dir/step_NNNNNNNN/ (via a .tmp directory), then points `latest` at it and
 * keeps it and the previous one of this run's (other runs' only go under --overwrite). */
int pr_ckpt_save(pr_run *run, const char *ckpt_dir, char *err);
/* Loads the checkpoint `latest` names (or the newest complete one, when a kill left no
 * `latest`); sets run->step, run->run_id and run->resumed_from. 1 if there is none. */
int pr_ckpt_load_latest(pr_run *run, const char *ckpt_dir, char *err);
/* Loads llm.c GPT-2 weights (version 3, padded vocab) into the stages; lm_head = wte, unless
 * the file is one of our checkpoints of an untied model, whose head is in state.bin beside it. */
int pr_load_llmc(pr_run *run, const char *path, char *err);

/* ---- hf.c: Hugging Face GPT-2 folders (config.json, model.safetensors) ---------------- */

/* Writes the run's weights to DIR (missing or empty) through DIR.tmp-PID and a rename. */
int pr_export_hf(pr_run *run, const char *dir, char *err);
/* --init: an HF folder, a .safetensors file, else an llm.c checkpoint (pr_load_llmc). */
int pr_load_init(pr_run *run, const char *path, char *err);

/* ---- run.c: flags, the training loop, logging, sampling, trace ------------------------- */

/* Trains from run->step to opt.steps: segments, evaluation and checkpoints at drains. */
int pr_train(pr_run *run, char *err);
int pr_write_trace(const pr_run *run, const char *path, char *err);

/* ---- launch.c: rank, world and local rank from the launcher's environment -------------- */

/* Who started the process, in precedence order (see launch.c). */
enum pr_launcher { PR_LAUNCH_SINGLE, PR_LAUNCH_TORCHRUN, PR_LAUNCH_OPEN_MPI, PR_LAUNCH_SLURM,
                   PR_LAUNCH_COUNT };

#define PR_DEFAULT_MASTER_PORT 29500 /* torchrun's default */
#define PR_HOST_LEN 256

typedef struct pr_launch {
    int launcher;                  /* enum pr_launcher */
    int rank, world, local_rank;   /* world 1: this process runs every stage */
    char master_addr[PR_HOST_LEN]; /* rank 0's host when world > 1 */
    const char *addr_from;         /* the variable it came from */
    int master_port;               /* --master-port, else MASTER_PORT, else the default */
    int mpi;                       /* MPI was started (pr_mpi()->start) */
} pr_launch;

/* From a NULL-terminated "NAME=value" array (environ); port_flag > 0 overrides MASTER_PORT.
 * world > 1 must equal stages x replicas (rank = replica * stages + stage). Errors name the
 * variable. */
int pr_launch_parse(const char *const *env, int stages, int replicas, int port_flag, pr_launch *l,
                    char *err);
const char *pr_launcher_name(int launcher);
const char *pr_env_get(const char *const *env, const char *name);
/* First host of a Slurm node list ("gpu[07-09],cpu1" -> "gpu07"); -1 if malformed. */
int pr_slurm_first_host(const char *list, char *host, size_t size);

/* ---- bootstrap.c: rank 0 hands every rank an opaque id over TCP, and keeps the line ------ */

#define PR_BOOT_ID_BYTES 128          /* sizeof(ncclUniqueId) */
#define PR_MAX_RANKS 4096             /* processes of one run: stages x replicas */
#define PR_DEFAULT_CONNECT_TIMEOUT 120 /* seconds */

/* MPI, in `run` only when pacic linked libpacirt_mpi.a (runtime/mpi/): pr_mpi() is then
 * its table, else NULL. start runs MPI_Init and, unless MASTER_ADDR was given, sets rank
 * 0's host from an MPI broadcast; allgather replaces the TCP star's. */
typedef struct pr_mpi_ops {
    const char *name;
    int (*start)(pr_launch *l, char *err);
    int (*allgather)(const void *mine, size_t bytes, void *all, char *err);
    void (*finish)(void);
} pr_mpi_ops;
const pr_mpi_ops *pr_mpi(void);

typedef struct pr_bootstrap {
    int rank, world;
    const pr_mpi_ops *mpi; /* set: the collectives go through MPI */
    unsigned char id[PR_BOOT_ID_BYTES]; /* rank 0's blob, the same on every rank afterwards */
    /* every rank's IPv4 address (network order) as rank 0 saw it, and the port it listens
     * on: for its neighbours' links while the run starts, then for blame.c's questions;
     * rank 0's own address is the one the others reached */
    uint32_t addr[PR_MAX_RANKS];
    uint16_t port[PR_MAX_RANKS];
    /* the bootstrap connections, kept open for small collectives: on rank 0, fd[r] leads
     * to rank r (fd[0] = -1); on rank r > 0, fd[0] leads to rank 0 */
    int fd[PR_MAX_RANKS];
    double timeout; /* seconds a collective waits for a peer */
    int stages;     /* set by pr_launch_join: with replicas, messages name a rank's stage and replica */
} pr_bootstrap;

/* Rank 0 listens on l->master_port and waits until every other rank has connected, then
 * sends each the id (b->id, filled by the caller on rank 0) and the address table; other
 * ranks connect to l->master_addr, retrying until the deadline. listen_port is this rank's
 * neighbour port to publish (0: none). On a timeout rank 0 names the missing ranks and
 * tells the connected ones why it gave up. */
int pr_bootstrap_tcp(const pr_launch *l, double timeout_s, uint16_t listen_port, pr_bootstrap *b,
                     char *err);
void pr_bootstrap_close(pr_bootstrap *b);
/* Every rank contributes `bytes` and receives all ranks' contributions in rank order.
 * The collectives wait b->timeout seconds for a peer; err says which peer failed and how. */
int pr_bootstrap_allgather(pr_bootstrap *b, const void *mine, size_t bytes, void *all, char *err);
/* Rank r > 0 sends `bytes` from `data`; rank 0 receives them into dst[r] (dst[0] unused). */
int pr_bootstrap_gather(pr_bootstrap *b, const void *data, size_t bytes, void *const *dst,
                        const size_t *dst_bytes, char *err);

/* Socket helpers shared with the TCP transport. One deadline may serve several calls (the
 * parts of one message): a wait that starts again after a stop moves it for the rest. */
int pr_sock_listen(uint16_t port, int backlog, uint16_t *bound, char *err);
int pr_sock_connect(uint32_t addr, uint16_t port, pr_deadline *deadline, char *err);
int pr_sock_resolve(const char *host, uint32_t *addr, char *err);
/* 0 when all bytes moved; -1 with errno (ETIMEDOUT at the deadline, EPIPE on a closed peer). */
int pr_sock_read(int fd, void *buf, size_t bytes, pr_deadline *deadline);
int pr_sock_write(int fd, const void *buf, size_t bytes, pr_deadline *deadline);

/* ---- launch.c (continued): one process per stage --------------------------------------- */

/* world > 1: bootstraps with rank 0 and links this stage's channels to its neighbours'
 * processes over TCP (the same replica's ranks on either side), and, with replicas, each
 * stage's replica r > 0 to its replica 0 for the gradient reduction; sets run->opt.boot = b. */
int pr_launch_join(pr_run *run, const pr_launch *l, double connect_timeout, pr_bootstrap *b,
                   char *err);
/* Brings every stage's parameters (and AdamW moments when with_moments) to rank 0; with
 * with_moments under compression dgc also every rank's residuals (run->dgc_gathered). */
int pr_gather_stages(pr_run *run, int with_moments, char *err);
/* One process per stage, p > 1, where the run estimates the noise scale: every rank takes
 * replica 0's stages' noise-scale averages after the drain at run->step (32 bytes a rank, at
 * each segment's end), for the summary (rank p - 1) and the checkpoint (rank 0). */
int pr_gather_noise(pr_run *run, char *err);

/* ---- blame.c: which rank a stuck multi-process run is stuck on ------------------------- */

/* What a process waits for; arg is the micro-batch or the step (from 1) the text names. */
enum pr_wait_kind { PR_WAIT_RECV_ACT, PR_WAIT_RECV_GRAD, PR_WAIT_SEND, PR_WAIT_REDUCE, PR_WAIT_NORM,
                    PR_WAIT_GATHER };
/* world > 1, after the links are up: a thread answers other ranks' questions on `listener`
 * (the port b->port[b->rank] this rank announced) about what this process waits for. */
int pr_blame_start(const pr_bootstrap *b, int stages, int listener, char *err);
/* Around every blocking wait on other ranks (no-ops in a one-process run): the edge others
 * follow. A failed wait leaves it in place for pr_blame. */
void pr_wait_begin(int kind, int64_t arg, const int *ranks, int n);
void pr_wait_end(void);
/* A collective over the bootstrap star: rank r > 0 waits for rank 0, rank 0 for the others. */
void pr_wait_collective(int kind, int64_t arg);
/* After this process's wait failed: "; the run is stuck on rank R (...): why (the waits that
 * lead there)", the rank found by following the waits from the ones this process waited
 * for (or the one another rank found and told it), told to every other rank; "" in a
 * one-process run. For the end of a failure's last line. */
void pr_blame(char *out, size_t size);

#endif
