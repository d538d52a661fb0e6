/* toy_model.h: a tiny differentiable stand-in for generated stage code, run over the
 * compiler's own schedule tables, for the runtime's tests.
 *
 * The model has GPT-2's full tensor table (so checkpoints and the layout check see the real
 * shape) but computes with a few tensors only: embedding wte+wpe; per layer
 * x' = x + tanh(x * ln1w + ln1b) channel-wise; head h = x * lnfw + lnfb, logits = h lm_head^T
 * (through pr_gemm), softmax cross-entropy. The rest get zero gradients.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline_config.h"
#include "prt.h"

#define TOY_L 4
#define TOY_C 4
#define TOY_T 4
#define TOY_V 16
#define TOY_B 2
#define TOY_BT (TOY_B * TOY_T)
#define TOY_BTC (TOY_BT * TOY_C)
#define TOY_MAX_TENSORS (2 + 12 * TOY_L + 3)

typedef struct toy_stage {
    pr_tensor tensors[TOY_MAX_TENSORS];
    int64_t off[PR_CKPT_COUNT]; /* offset of the first layer's (or only) tensor of each kind */
    int64_t layer_stride;       /* floats per layer in the block */
} toy_stage;

static toy_stage toy_stages[PACI_MAX_STAGES];
static pr_stage_code toy_codes[PACI_MAX_STAGES];

static void toy_forward(int s, const pr_fwd_args *a)
{
    const pr_stage_code *sc = &toy_codes[s];
    const toy_stage *ts = &toy_stages[s];
    const float *p = a->params;
    float *x = a->acts;
    if (sc->has_embed)
        for (int i = 0; i < TOY_BT; i++)
            for (int c = 0; c < TOY_C; c++)
                x[i * TOY_C + c] = p[ts->off[PR_CKPT_WTE] + a->tokens[i] * TOY_C + c] +
                                   p[ts->off[PR_CKPT_WPE] + (i % TOY_T) * TOY_C + c];
    for (int l = 0; l < sc->n_layers; l++) {
        const float *w = p + ts->off[PR_CKPT_LN1W] + l * ts->layer_stride;
        const float *b = p + ts->off[PR_CKPT_LN1B] + l * ts->layer_stride;
        float *in = x + l * TOY_BTC, *out = in + TOY_BTC;
        for (int i = 0; i < TOY_BTC; i++)
            out[i] = in[i] + tanhf(in[i] * w[i % TOY_C] + b[i % TOY_C]);
    }
    if (!sc->has_head)
        return;
    const float *xl = x + sc->n_layers * TOY_BTC;
    float h[TOY_BTC];
    for (int i = 0; i < TOY_BTC; i++)
        h[i] = xl[i] * p[ts->off[PR_CKPT_LNFW] + i % TOY_C] + p[ts->off[PR_CKPT_LNFB] + i % TOY_C];
    float *probs = x + sc->probs_offset;
    pr_gemm(0, 1, TOY_BT, TOY_V, TOY_C, 1.0f, h, TOY_C, p + ts->off[PR_CKPT_LM_HEAD], TOY_C, 0.0f,
            probs, TOY_V);
    for (int i = 0; i < TOY_BT; i++) {
        float *row = probs + i * TOY_V, max = row[0], sum = 0.0f;
        for (int v = 1; v < TOY_V; v++)
            max = row[v] > max ? row[v] : max;
        for (int v = 0; v < TOY_V; v++)
            sum += row[v] = expf(row[v] - max);
        for (int v = 0; v < TOY_V; v++)
            row[v] /= sum;
        a->losses[i] = -logf(row[a->targets[i]]);
    }
}

static void toy_backward(int s, const pr_bwd_args *a)
{
    const pr_stage_code *sc = &toy_codes[s];
    const toy_stage *ts = &toy_stages[s];
    const float *p = a->params;
    float *g = a->grads;
    const float *x = a->acts;
    float dx[TOY_BTC];
    if (sc->has_head) {
        const float *xl = x + sc->n_layers * TOY_BTC;
        float h[TOY_BTC], dlogits[TOY_BT * TOY_V], dh[TOY_BTC];
        const float *probs = x + sc->probs_offset;
        for (int i = 0; i < TOY_BTC; i++)
            h[i] = xl[i] * p[ts->off[PR_CKPT_LNFW] + i % TOY_C] + p[ts->off[PR_CKPT_LNFB] + i % TOY_C];
        for (int i = 0; i < TOY_BT; i++)
            for (int v = 0; v < TOY_V; v++)
                dlogits[i * TOY_V + v] = (probs[i * TOY_V + v] - (v == a->targets[i])) *
                                         a->loss_scale / TOY_BT;
        pr_gemm(1, 0, TOY_V, TOY_C, TOY_BT, 1.0f, dlogits, TOY_V, h, TOY_C, 1.0f,
                g + ts->off[PR_CKPT_LM_HEAD], TOY_C);
        pr_gemm(0, 0, TOY_BT, TOY_C, TOY_V, 1.0f, dlogits, TOY_V, p + ts->off[PR_CKPT_LM_HEAD], TOY_C,
                0.0f, dh, TOY_C);
        for (int i = 0; i < TOY_BTC; i++) {
            g[ts->off[PR_CKPT_LNFW] + i % TOY_C] += dh[i] * xl[i];
            g[ts->off[PR_CKPT_LNFB] + i % TOY_C] += dh[i];
            dx[i] = dh[i] * p[ts->off[PR_CKPT_LNFW] + i % TOY_C];
        }
    } else {
        memcpy(dx, a->dx_out, sizeof dx);
    }
    for (int l = sc->n_layers - 1; l >= 0; l--) {
        int64_t wo = ts->off[PR_CKPT_LN1W] + l * ts->layer_stride;
        int64_t bo = ts->off[PR_CKPT_LN1B] + l * ts->layer_stride;
        const float *in = x + l * TOY_BTC;
        for (int i = 0; i < TOY_BTC; i++) {
            float y = tanhf(in[i] * p[wo + i % TOY_C] + p[bo + i % TOY_C]);
            float da = dx[i] * (1.0f - y * y);
            g[wo + i % TOY_C] += da * in[i];
            g[bo + i % TOY_C] += da;
            dx[i] += da * p[wo + i % TOY_C];
        }
    }
    if (sc->has_embed) {
        for (int i = 0; i < TOY_BT; i++)
            for (int c = 0; c < TOY_C; c++) {
                g[ts->off[PR_CKPT_WTE] + a->tokens[i] * TOY_C + c] += dx[i * TOY_C + c];
                g[ts->off[PR_CKPT_WPE] + (i % TOY_T) * TOY_C + c] += dx[i * TOY_C + c];
            }
    } else {
        memcpy(a->dx_in, dx, sizeof dx);
    }
}

static void toy_adamw(int s, const pr_adamw_args *a)
{
    const pr_stage_code *sc = &toy_codes[s];
    double b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
    float c1 = (float)(1.0 - pow(b1, (double)a->t)), c2 = (float)(1.0 - pow(b2, (double)a->t));
    for (int k = 0; k < sc->n_tensors; k++) {
        const pr_tensor *t = &sc->tensors[k];
        for (int64_t i = t->offset; i < t->offset + t->size; i++) {
            float g = a->grads[i] * a->grad_scale;
            a->m[i] = (float)b1 * a->m[i] + (float)(1 - b1) * g;
            a->v[i] = (float)b2 * a->v[i] + (float)(1 - b2) * g * g;
            float update = (a->m[i] / c1) / (sqrtf(a->v[i] / c2) + (float)eps);
            a->params[i] -= a->lr * (update + (t->decay ? (float)wd * a->params[i] : 0.0f));
        }
    }
}

#define TOY_TRAMPOLINES(S)                                                                 \
    static void toy_fwd##S(const pr_fwd_args *a) { toy_forward(S, a); }                    \
    static void toy_bwd##S(const pr_bwd_args *a) { toy_backward(S, a); }                   \
    static void toy_adamw##S(const pr_adamw_args *a) { toy_adamw(S, a); }
TOY_TRAMPOLINES(0)
TOY_TRAMPOLINES(1)
TOY_TRAMPOLINES(2)
TOY_TRAMPOLINES(3)
static void (*const toy_fwds[4])(const pr_fwd_args *) = {toy_fwd0, toy_fwd1, toy_fwd2, toy_fwd3};
static void (*const toy_bwds[4])(const pr_bwd_args *) = {toy_bwd0, toy_bwd1, toy_bwd2, toy_bwd3};
static void (*const toy_adamws[4])(const pr_adamw_args *) = {toy_adamw0, toy_adamw1, toy_adamw2,
                                                             toy_adamw3};

static void toy_add_tensor(pr_stage_code *sc, toy_stage *ts, int kind, int64_t ckpt_offset,
                           int64_t size)
{
    static const char *const names[] = {
#define TOY_NAME(name, text) text,
        PR_CKPT_TENSORS(TOY_NAME)
#undef TOY_NAME
    };
    pr_tensor *t = &ts->tensors[sc->n_tensors++];
    int is_matrix = kind == PR_CKPT_WTE || kind == PR_CKPT_WPE || kind == PR_CKPT_QKVW ||
                    kind == PR_CKPT_ATTPROJW || kind == PR_CKPT_FCW || kind == PR_CKPT_FCPROJW ||
                    kind == PR_CKPT_LM_HEAD;
    *t = (pr_tensor){names[kind], kind, ckpt_offset, sc->n_params, size, is_matrix, 0};
    sc->n_params += size;
}

/* Layers are split as evenly as possible over p stages, earlier stages taking the extra. */
static void toy_build_stages(int p)
{
    int64_t sizes[PR_CKPT_COUNT];
    pr_program shape = {.layers = TOY_L, .width = TOY_C, .context = TOY_T, .vocab = TOY_V};
    pr_ckpt_sizes(&shape, sizes);
    int first = 0;
    for (int s = 0; s < p; s++) {
        pr_stage_code *sc = &toy_codes[s];
        toy_stage *ts = &toy_stages[s];
        memset(sc, 0, sizeof *sc);
        memset(ts, 0, sizeof *ts);
        int n = TOY_L / p + (s < TOY_L % p);
        *sc = (pr_stage_code){.index = s, .first_layer = first, .n_layers = n,
                              .has_embed = s == 0, .has_head = s == p - 1};
        if (sc->has_embed) {
            ts->off[PR_CKPT_WTE] = sc->n_params;
            toy_add_tensor(sc, ts, PR_CKPT_WTE, 0, sizes[PR_CKPT_WTE]);
            ts->off[PR_CKPT_WPE] = sc->n_params;
            toy_add_tensor(sc, ts, PR_CKPT_WPE, 0, sizes[PR_CKPT_WPE]);
        }
        int64_t layer_start = sc->n_params;
        for (int l = first; l < first + n; l++)
            for (int k = PR_CKPT_LN1W; k <= PR_CKPT_FCPROJB; k++) {
                if (l == first)
                    ts->off[k] = sc->n_params;
                int64_t per_layer = sizes[k] / TOY_L;
                toy_add_tensor(sc, ts, k, l * per_layer, per_layer);
            }
        ts->layer_stride = n > 0 ? (sc->n_params - layer_start) / n : 0;
        if (sc->has_head) {
            for (int k = PR_CKPT_LNFW; k <= PR_CKPT_LM_HEAD; k++) {
                ts->off[k] = sc->n_params;
                toy_add_tensor(sc, ts, k, 0, sizes[k]);
            }
        }
        sc->tensors = ts->tensors;
        sc->act_floats = (int64_t)(n + 1) * TOY_BTC + (sc->has_head ? TOY_BT * TOY_V : 0);
        sc->scratch_floats = TOY_BTC;
        sc->in_offset = 0;
        sc->out_offset = (int64_t)n * TOY_BTC;
        sc->probs_offset = (int64_t)(n + 1) * TOY_BTC;
        sc->forward = toy_fwds[s];
        sc->backward = toy_bwds[s];
        sc->adamw = toy_adamws[s];
        first += n;
    }
}

/* ---- schedule tables: the compiler's own ------------------------------------------- */

/* The tables are the ones `pacic` writes: compiler/schedule.c's generators, compressed into
 * prologue / body x reps / epilogue, with the production channel capacity; the verifier's
 * simulation of each (compiler/verify.c) gives the slots and drift the executor must meet. */
enum toy_kind { TOY_GPIPE = PACI_SCHED_GPIPE, TOY_1F1B = PACI_SCHED_ONEF1B, TOY_PACI = PACI_SCHED_PACI };

typedef struct toy_table {
    paci_table t;
    const paci_instr *owned; /* t's instructions, freed by the next build into this table */
    VerifyReport report;     /* verify_schedule's: peak slots, max drift, drift share */
    long micro_batches;      /* in the whole run, the denominator of report.drift_share */
} toy_table;

/* The DSL's `delay_correction` the next toy_build_table compiles with (enum delay_correction). */
static int toy_delay_correction = DELAY_NONE;
/* The chunks a device the next toy_build_table compiles with: its p stages are then p / chunks
 * devices of that many (interleaved: loop placement, zb-v: V); 0 or 1: none. */
static int toy_chunks = 0;

/* The table for `total` steps of `kind` at p stages and window K, draining every `segment`
 * steps (a checkpoint interval, as the DSL's `checkpoint { every }` makes one); aborts if
 * the verifier rejects it. */
static void toy_build_table(toy_table *tt, enum toy_kind kind, int p, int K, int total,
                            int segment)
{
    free((void *)tt->owned);
    Config cfg = pipeline_config((int)kind, p, K, total, TOY_L);
    cfg.ckpt_every = segment;
    if (toy_chunks > 1) {
        cfg.chunks = toy_chunks;
        cfg.placement = (int)kind == PACI_SCHED_ZBV ? PACI_PLACEMENT_V : PACI_PLACEMENT_LOOP;
    }
    cfg.delay_correction = toy_delay_correction;
    Plan plan;
    plan_layout(&cfg, &plan);
    paci_table *t = schedule_build(&cfg, &plan);
    if (t->segment_steps != (segment < total ? segment : total))
        abort();
    tt->t = *t;
    tt->owned = t->instrs;
    free(t);
    if (!verify_schedule(&tt->t, &plan, &tt->report))
        abort();
    tt->micro_batches = (long)total * K;
}

/* A program for the toy model over table t. */
static pr_program toy_program(const paci_table *t, int steps)
{
    return (pr_program){.source = "toy.paci", .layers = TOY_L, .width = TOY_C, .heads = 1,
                        .context = TOY_T, .vocab = TOY_V, .probs_stride = TOY_V, .tied = 0, .micro = TOY_B,
                        .steps = steps, .lr = 1e-2, .min_lr_ratio = 0.1, .warmup_steps = 2,
                        .decay = PR_DECAY_COSINE, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                        .weight_decay = 0.1, .grad_clip = 1e-3,
                        .global_clip = t->schedule != PACI_SCHED_PACI, .eval_batches = 2,
                        .seed = 1337, .stages = t->stages, .stage = toy_codes, .schedule = t};
}

/* Writes an llm.c token file of n tokens (a repeating pattern plus noise) to path. */
static void toy_write_tokens(const char *path, int64_t n, uint64_t seed)
{
    int32_t header[256] = {PR_TOKENS_MAGIC, PR_TOKENS_VERSION, (int32_t)n};
    FILE *f = fopen(path, "wb");
    fwrite(header, 4, 256, f);
    pr_rng rng = {seed};
    for (int64_t i = 0; i < n; i++) {
        uint16_t tok = (uint16_t)((i % 5 == 4) ? (int64_t)(pr_rng_next(&rng) % TOY_V) : (i * 3) % TOY_V);
        fwrite(&tok, 2, 1, f);
    }
    fclose(f);
}

/* The toy token file the runtime tests train on: `path` is a mkstemp template, filled in
 * (inline: not every includer uses it). */
static inline void toy_token_file(char *path)
{
    int fd = mkstemp(path);
    if (fd < 0) {
        perror(path);
        abort();
    }
    close(fd);
    toy_write_tokens(path, 997, 42);
}
