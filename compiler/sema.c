/* sema.c: the meaning of a .paci file (docs/dsl.md). The keys of every block are written
 * once, as data (name, value shape, range, default, where it goes); a walk over the AST
 * checks each entry against its table and fills Config; cross-checks and derived values
 * follow. Every message points at the span that breaks the rule. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pacic.h"
#include "../runtime/paci_dgc.h"
#include "../runtime/pacirt.h"

typedef struct Sema Sema;

/* The value a key takes, and the type of the Config field it fills. */
typedef enum {
    SHAPE_INT,    /* integer -> int */
    SHAPE_LONG,   /* integer -> long */
    SHAPE_U64,    /* integer -> uint64_t */
    SHAPE_NUMBER, /* number -> double */
    SHAPE_BOOL,   /* true | false -> bool */
    SHAPE_CHOICE, /* one of `choices`; its index is the enum value -> int-sized enum */
    SHAPE_CUSTOM, /* checked and stored by `set` */
    SHAPE_BLOCK,  /* a nested block described by `block` */
} Shape;

typedef struct BlockDef BlockDef;

typedef struct KeyDef {
    const char *name;
    Shape shape;
    double min, max;              /* inclusive range of a number */
    bool min_exclusive;           /* the value must be above min */
    double fallback;              /* default of a number field, set before the walk */
    bool required;
    size_t field;                 /* offsetof(Config, ...) */
    const char *const *choices;   /* SHAPE_CHOICE, NULL-terminated */
    void (*set)(Sema *s, const Entry *e); /* SHAPE_CUSTOM */
    const BlockDef *block;        /* SHAPE_BLOCK */
} KeyDef;

struct BlockDef {
    const char *name;
    const KeyDef *keys;           /* ends with a NULL name */
    const char *const *names;     /* the block's allowed names; NULL: it takes none */
    bool name_required;
    void (*on_name)(Sema *s, const Entry *e); /* before its entries: a preset */
};

/* Where a key was written (or found missing), so cross-checks can point at it and skip
 * what already failed. */
typedef struct Seen {
    const BlockDef *block;
    const KeyDef *key;
    const Entry *entry;           /* NULL when missing */
    bool failed;
} Seen;

enum { MAX_SEEN = 128 };

struct Sema {
    const Source *src;
    Config *cfg;
    bool need_data;
    Seen seen[MAX_SEEN];
    int n_seen;
    const Entry *blocks[8];       /* the top-level block entries, by root key index */
    long global;                  /* `global` as written; 0 when absent */
    bool lr_at_given;
};

static const char *const bool_words[] = {"false", "true", NULL};
static const char *const precision_words[] = {[PREC_FP32] = "fp32", [PREC_BF16] = "bf16", NULL};
static const char *const attention_words[] = {[ATTN_FLASH] = "flash", [ATTN_MATMUL] = "matmul", [ATTN_STORED] = "stored", NULL};
static const char *const on_nan_words[] = {[PR_ON_NAN_STOP] = "stop", [PR_ON_NAN_SKIP] = "skip", NULL};
static const char *const data_order_words[] = {[PR_DATA_SEQUENTIAL] = "sequential", [PR_DATA_SHUFFLED] = "shuffled",
                                               NULL};
static const char *const decay_words[] = {
    [PR_DECAY_COSINE] = "cosine", [PR_DECAY_LINEAR] = "linear", [PR_DECAY_CONSTANT] = "constant",
    NULL};
static const char *const schedule_words[] = {
#define SCHED_WORD(name, text, sync) [PACI_SCHED_##name] = text,
    PACI_SCHEDULES(SCHED_WORD)
#undef SCHED_WORD
    NULL};
static const char *const placement_words[] = {
#define PLACEMENT_WORD(name, text) [PACI_PLACEMENT_##name] = text,
    PACI_PLACEMENTS(PLACEMENT_WORD)
#undef PLACEMENT_WORD
    NULL};
static const char *const scale_words[] = {
    [LR_SCALE_NONE] = "none", [LR_SCALE_LINEAR] = "linear", [LR_SCALE_SQRT] = "sqrt", NULL};

/* GPT-2 presets (docs/dsl.md); "gpt2" alone is a model whose shape the block states. */
typedef struct Preset {
    const char *name;
    int layers, width, heads;
} Preset;
static const Preset presets[] = {
    {"gpt2-small", 12, 768, 12},
    {"gpt2-medium", 24, 1024, 16},
    {"gpt2-large", 36, 1280, 20},
    {"gpt2-xl", 48, 1600, 25},
};
static const char *const model_names[] = {"gpt2", "gpt2-small", "gpt2-medium", "gpt2-large",
                                          "gpt2-xl", NULL};
/* In the order of enum delay_correction (compiler/pacic.h). */
static const char *const delay_correction_words[] = {"none", "predict", "nesterov", "dc-asgd", NULL};
/* In the order of enum recompute (compiler/pacic.h). */
static const char *const recompute_words[] = {"none", "full", NULL};
/* In the order of enum messages (compiler/pacic.h). */
static const char *const messages_words[] = {"fp32", "bf16", NULL};
/* In the order of enum accumulate (compiler/pacic.h). */
static const char *const accumulate_words[] = {"sequential", "pairwise", NULL};
/* In the order of enum pr_optimizer (runtime/pacirt.h). */
static const char *const optimizer_names[] = {"adamw", "muon", "lamb", "lars", "nadamw", "lans", NULL};
static const char *const shape_scale_words[] = {
    [PR_MUON_SCALE_RATIO] = "ratio", [PR_MUON_SCALE_RMS] = "rms", NULL};

_Static_assert(sizeof(enum paci_schedule_kind) == sizeof(int), "choices store an int");
_Static_assert(sizeof(Precision) == sizeof(int), "choices store an int");

static void set_model_name(Sema *s, const Entry *e);
static void set_split(Sema *s, const Entry *e);
static void set_global(Sema *s, const Entry *e);
static void set_data(Sema *s, const Entry *e);
static void set_val(Sema *s, const Entry *e);
static void set_lr(Sema *s, const Entry *e);
static void set_betas(Sema *s, const Entry *e);
static void set_group_betas(Sema *s, const Entry *e);
static void set_optimizer_name(Sema *s, const Entry *e);
static void set_warmup(Sema *s, const Entry *e);
static void set_ckpt_dir(Sema *s, const Entry *e);
static void set_warm_start(Sema *s, const Entry *e);
static void set_calibration(Sema *s, const Entry *e);
static void set_compression_name(Sema *s, const Entry *e);

#define AT(f) offsetof(Config, f)
#define INT_KEY(n, f, lo, hi, def) {.name = n, .shape = SHAPE_INT, .min = lo, .max = hi, .fallback = def, .field = AT(f)}
#define LONG_KEY(n, f, lo, hi, def) {.name = n, .shape = SHAPE_LONG, .min = lo, .max = hi, .fallback = def, .field = AT(f)}
#define NUM_KEY(n, f, lo, hi, def) {.name = n, .shape = SHAPE_NUMBER, .min = lo, .max = hi, .fallback = def, .field = AT(f)}
#define POS_KEY(n, f, def) {.name = n, .shape = SHAPE_NUMBER, .min = 0, .min_exclusive = true, .max = 1e30, .fallback = def, .field = AT(f)}
#define MACHINE_KEY(n, f) {.name = n, .shape = SHAPE_NUMBER, .min = MACHINE_RATE_MIN, .max = MACHINE_RATE_MAX, .field = AT(f)}
#define CHOICE_KEY(n, f, words, def) {.name = n, .shape = SHAPE_CHOICE, .choices = words, .fallback = def, .field = AT(f)}
#define CUSTOM_KEY(n, fn) {.name = n, .shape = SHAPE_CUSTOM, .set = fn}
#define BLOCK_KEY(n, def) {.name = n, .shape = SHAPE_BLOCK, .block = &def}
#define END_KEYS {.name = NULL}

/* 2^64: an integer key below it is read exactly (check_number_exact), 2^64 - 1 the largest. */
#define ANY_U64 0x1p64

static const KeyDef model_keys[] = {
    INT_KEY("layers", layers, 1, 1024, 0),
    INT_KEY("width", width, 1, 65536, 0),
    INT_KEY("heads", heads, 1, 65536, 0),
    INT_KEY("context", context, 1, 65536, 0),
    INT_KEY("vocab", vocab, 2, 1048576, 50257),
    {.name = "tied", .shape = SHAPE_BOOL, .field = AT(tied)},
    END_KEYS,
};
static const KeyDef pipeline_keys[] = {
    INT_KEY("stages", stages, 1, PACI_MAX_STAGES, 1),
    CHOICE_KEY("schedule", schedule, schedule_words, PACI_SCHED_PACI),
    INT_KEY("chunks", chunks, 1, PACI_MAX_STAGES, 0), /* 0: not written, the schedule's */
    CHOICE_KEY("placement", placement, placement_words, PACI_PLACEMENT_LOOP),
    INT_KEY("window", window, 1, 1000000, 0), /* 0: not written, derived */
    CUSTOM_KEY("split", set_split),
    LONG_KEY("vocab_split", vocab_split, 0, 1048576, -1), /* -1: not written, automatic */
    CHOICE_KEY("delay_correction", delay_correction, delay_correction_words, DELAY_NONE),
    NUM_KEY("dc_lambda", dc_lambda, 0, 1e30, -1), /* -1: not written (check_delay_correction) */
    CHOICE_KEY("recompute", recompute, recompute_words, RECOMPUTE_NONE),
    CHOICE_KEY("messages", messages, messages_words, MESSAGES_FP32),
    CUSTOM_KEY("warm_start", set_warm_start),
    END_KEYS,
};
static const KeyDef batch_keys[] = {
    {.name = "micro", .shape = SHAPE_INT, .min = 1, .max = 1000000, .required = true, .field = AT(micro)},
    CUSTOM_KEY("global", set_global),
    CHOICE_KEY("accumulate", accumulate, accumulate_words, ACCUMULATE_SEQUENTIAL),
    END_KEYS,
};
/* Muon's AdamW group; weight_decay -1: the optimizer block's. */
static const KeyDef group_keys[] = {
    {.name = "lr", .shape = SHAPE_NUMBER, .min = 0, .min_exclusive = true, .max = 10, .fallback = 3e-4, .field = AT(group_lr)},
    CUSTOM_KEY("betas", set_group_betas),
    POS_KEY("eps", group_eps, 1e-8),
    NUM_KEY("weight_decay", group_weight_decay, 0, 1e30, -1),
    END_KEYS,
};
static const BlockDef group_block = {"adamw", group_keys, NULL, false, NULL};
static const KeyDef optimizer_keys[] = {
    CUSTOM_KEY("lr", set_lr),
    CUSTOM_KEY("betas", set_betas),
    POS_KEY("eps", eps, 1e-8),
    NUM_KEY("weight_decay", weight_decay, 0, 1e30, 0.1),
    NUM_KEY("clip", grad_clip, 0, 1e30, 1.0),
    {.name = "post_validation", .shape = SHAPE_BOOL, .fallback = 1, .field = AT(post_validation)},
    /* muon and lars only (check_optimizer); momentum -1: the optimizer's default */
    NUM_KEY("momentum", momentum, 0, 0.9999, -1),
    {.name = "nesterov", .shape = SHAPE_BOOL, .fallback = 1, .field = AT(nesterov)},
    INT_KEY("ns_steps", ns_steps, 1, 20, 5),
    CHOICE_KEY("shape_scale", shape_scale, shape_scale_words, PR_MUON_SCALE_RATIO),
    POS_KEY("trust_coefficient", trust_coefficient, 0.001),
    NUM_KEY("momentum_decay", momentum_decay, 0, 1e30, 0.004), /* nadamw only */
    BLOCK_KEY("adamw", group_block),
    END_KEYS,
};
static const KeyDef lr_schedule_keys[] = {
    CUSTOM_KEY("warmup", set_warmup),
    CHOICE_KEY("decay", lr_decay, decay_words, PR_DECAY_COSINE),
    NUM_KEY("floor", min_lr_ratio, 0, 1, 0.1),
    END_KEYS,
};
static const KeyDef eval_keys[] = {
    LONG_KEY("every", eval_every, 0, 1e12, 0),
    LONG_KEY("batches", eval_batches, 1, 1e9, 8),
    END_KEYS,
};
static const KeyDef checkpoint_keys[] = {
    LONG_KEY("every", ckpt_every, 0, 1e12, 0),
    LONG_KEY("keep", ckpt_keep, 1, 1e9, 2),
    CUSTOM_KEY("dir", set_ckpt_dir),
    END_KEYS,
};
static const BlockDef optimizer_block = {"optimizer", optimizer_keys, optimizer_names, false,
                                         set_optimizer_name};
static const BlockDef lr_schedule_block = {"lr_schedule", lr_schedule_keys, NULL, false, NULL};
static const BlockDef eval_block = {"eval", eval_keys, NULL, false, NULL};
static const BlockDef checkpoint_block = {"checkpoint", checkpoint_keys, NULL, false, NULL};
static const KeyDef train_keys[] = {
    CUSTOM_KEY("data", set_data),
    CUSTOM_KEY("val", set_val),
    /* the schedule table counts steps in int32 (paci_table.total_steps) */
    {.name = "steps", .shape = SHAPE_LONG, .min = 1, .max = INT32_MAX, .required = true, .field = AT(steps)},
    {.name = "seed", .shape = SHAPE_U64, .min = 0, .max = ANY_U64, .fallback = 1337, .field = AT(seed)},
    CHOICE_KEY("data_order", data_order, data_order_words, PR_DATA_SEQUENTIAL),
    CHOICE_KEY("precision", precision, precision_words, PREC_FP32),
    CHOICE_KEY("attention", attention, attention_words, ATTN_FLASH),
    CHOICE_KEY("on_nan", on_nan, on_nan_words, PR_ON_NAN_STOP),
    BLOCK_KEY("optimizer", optimizer_block),
    BLOCK_KEY("lr_schedule", lr_schedule_block),
    BLOCK_KEY("eval", eval_block),
    BLOCK_KEY("checkpoint", checkpoint_block),
    END_KEYS,
};
/* Every number 0 (latency -1) until derive_hardware fills what the block leaves out: for a GPU
 * an H100 SXM's, for a CPU this machine's (machine.c). */
static const KeyDef hardware_keys[] = {
    MACHINE_KEY("flops", device_flops),
    MACHINE_KEY("bandwidth", link_bandwidth),
    NUM_KEY("latency", link_latency, 0, MACHINE_RATE_MAX, -1),
    MACHINE_KEY("memory", device_memory),
    MACHINE_KEY("memory_bandwidth", memory_bandwidth),
    MACHINE_KEY("network_bandwidth", network_bandwidth),
    /* hardware cpu only (check_hardware) */
    INT_KEY("cores", cpu_cores, 1, 1 << 20, 0),
    MACHINE_KEY("vector_flops", vector_flops),
    CUSTOM_KEY("calibration", set_calibration),
    END_KEYS,
};
/* In the order of enum machine (compiler/pacic.h). */
static const char *const machine_names[] = {"gpu", "cpu", NULL};
/* `compression dgc { ... }` inside parallel: Deep Gradient Compression of the replicas'
 * exchange (docs/dsl.md); it needs D > 1 (check_compression). */
static const KeyDef compression_keys[] = {
    {.name = "density", .shape = SHAPE_NUMBER, .min = 0, .min_exclusive = true, .max = 1, .required = true,
     .field = AT(dgc_density)},
    LONG_KEY("warmup_steps", dgc_warmup_steps, 0, 1e12, 0),
    NUM_KEY("clip", dgc_clip, 0, 1e30, 0),
    END_KEYS,
};
/* In the order of enum compression after COMPRESSION_NONE (compiler/pacic.h). */
static const char *const compression_names[] = {"dgc", NULL};
static const BlockDef compression_block = {"compression", compression_keys, compression_names, true,
                                           set_compression_name};
/* D copies of the whole pipeline; stages x D <= MAX_WORLD_SIZE is checked in check_parallel. */
static const KeyDef parallel_keys[] = {
    INT_KEY("data", replicas, 1, 1024, 1),
    BLOCK_KEY("compression", compression_block),
    END_KEYS,
};
static const BlockDef model_block = {"model", model_keys, model_names, true, set_model_name};
static const BlockDef pipeline_block = {"pipeline", pipeline_keys, NULL, false, NULL};
static const BlockDef batch_block = {"batch", batch_keys, NULL, false, NULL};
static const BlockDef train_block = {"train", train_keys, NULL, false, NULL};
static const BlockDef hardware_block = {"hardware", hardware_keys, machine_names, false, NULL};
static const BlockDef parallel_block = {"parallel", parallel_keys, NULL, false, NULL};

/* The top level holds blocks only; model, batch and train are required. */
static const KeyDef root_keys[] = {
    {.name = "model", .shape = SHAPE_BLOCK, .block = &model_block, .required = true},
    BLOCK_KEY("pipeline", pipeline_block),
    {.name = "batch", .shape = SHAPE_BLOCK, .block = &batch_block, .required = true},
    {.name = "train", .shape = SHAPE_BLOCK, .block = &train_block, .required = true},
    BLOCK_KEY("hardware", hardware_block),
    BLOCK_KEY("parallel", parallel_block), /* last: span_of's root indices stay */
    END_KEYS,
};
static const BlockDef root_block = {"file", root_keys, NULL, false, NULL};

static const BlockDef *const all_blocks[] = {
    &model_block, &pipeline_block, &batch_block, &train_block, &optimizer_block,
    &lr_schedule_block, &eval_block, &checkpoint_block, &hardware_block, &group_block,
    &parallel_block, &compression_block, NULL,
};

/* ---- helpers ------------------------------------------------------------------------ */

static void *field_of(Config *cfg, size_t offset)
{
    return (char *)cfg + offset;
}

static Seen *record(Sema *s, const BlockDef *block, const KeyDef *key, const Entry *entry)
{
    if (s->n_seen == MAX_SEEN)
        ICE("more keys than MAX_SEEN");
    Seen *seen = &s->seen[s->n_seen++];
    *seen = (Seen){.block = block, .key = key, .entry = entry};
    return seen;
}

static Seen *find_seen(Sema *s, const char *block, const char *key)
{
    for (int i = 0; i < s->n_seen; i++)
        if (strcmp(s->seen[i].block->name, block) == 0 && strcmp(s->seen[i].key->name, key) == 0)
            return &s->seen[i];
    return NULL;
}

/* The entry where `block`/`key` was written, or NULL. */
static const Entry *written(Sema *s, const char *block, const char *key)
{
    Seen *seen = find_seen(s, block, key);
    return seen ? seen->entry : NULL;
}

/* A key is usable by a cross-check unless its own check failed. */
static bool usable(Sema *s, const char *block, const char *key)
{
    Seen *seen = find_seen(s, block, key);
    return !seen || !seen->failed;
}

static void mark_failed(Sema *s, const Entry *e)
{
    for (int i = 0; i < s->n_seen; i++)
        if (s->seen[i].entry == e)
            s->seen[i].failed = true;
}

static Span values_span(const Entry *e)
{
    if (e->n_values == 0)
        return e->key_span;
    return (Span){e->values[0]->span.begin, e->values[e->n_values - 1]->span.end};
}

static const char *kind_phrase(const Value *v)
{
    switch (v->kind) {
    case VAL_NUMBER: return "a number";
    case VAL_PERCENT: return "a percentage";
    case VAL_STRING: return "a string";
    case VAL_WORD: return "a word";
    case VAL_LIST: return "a list";
    }
    unreachable();
}

/* `count` values exactly; otherwise an error at the missing or the extra ones. */
static bool expect_count(Sema *s, const Entry *e, int count, const char *what)
{
    if (e->n_values == count)
        return true;
    if (e->n_values < count) {
        Span at = e->n_values ? values_span(e) : e->key_span;
        error_at(s->src, at, "'%s' needs %s", e->key, what);
    } else {
        Span extra = {e->values[count]->span.begin, e->values[e->n_values - 1]->span.end};
        error_at(s->src, extra, "'%s' takes %s; remove the extra value%s", e->key, what,
                 e->n_values - count > 1 ? "s" : "");
    }
    return false;
}

/* Writes the range a check holds a value to, for its message: "in 1..1024", "in (0, 1]",
 * "in [1, 1e+30]"; an integer bound of 2^64 or more is 2^64 - 1. */
static void describe_range(char *buf, size_t size, double min, double max, bool min_exclusive, bool integer)
{
    if (integer)
        snprintf(buf, size, "in %.0f..%llu", min, max >= 0x1p64 ? UINT64_MAX : (unsigned long long)max);
    else
        snprintf(buf, size, "in %s%g, %g]", min_exclusive ? "(" : "[", min, max);
}

/* A number in range; with `integer`, also whole (`1e4` and `4.0` are whole, `4.5` not) and
 * checked on its exact digits (a double would pass 2^53 + 1 as 2^53), *whole its value. */
static bool check_number_exact(Sema *s, const char *key, const Value *v, double min, double max,
                               bool min_exclusive, bool integer, double *out, uint64_t *whole)
{
    if (v->kind != VAL_NUMBER) {
        error_at(s->src, v->span, "'%s' must be %s, not %s", key,
                 integer ? "an integer" : "a number", kind_phrase(v));
        return false;
    }
    if (integer && !v->is_integer) {
        error_at(s->src, v->span, "'%s' must be an integer, not %s", key, v->text);
        return false;
    }
    bool in_range;
    if (integer) { // every integer key has min >= 0
        bool negative = v->number < 0 && (v->past_u64 || v->magnitude > 0);
        bool above = !negative && (v->past_u64 || (max < 0x1p64 && v->magnitude > (uint64_t)max));
        in_range = !negative && !above && v->magnitude >= (uint64_t)min;
    } else {
        in_range = !(v->number < min || v->number > max || (min_exclusive && v->number == min));
    }
    if (!in_range) {
        char range[64];
        describe_range(range, sizeof range, min, max, min_exclusive, integer);
        error_at(s->src, v->span, "'%s' %s is out of range: it must be %s", key, v->text, range);
        return false;
    }
    *out = v->number;
    if (whole)
        *whole = v->magnitude;
    return true;
}

static bool check_number(Sema *s, const char *key, const Value *v, double min, double max,
                         bool min_exclusive, bool integer, double *out)
{
    return check_number_exact(s, key, v, min, max, min_exclusive, integer, out, NULL);
}

/* One word out of `choices`; returns its index or -1 after an error with a suggestion. */
static int check_choice(Sema *s, const char *what, const Value *v, const char *const *choices)
{
    StrBuf list = {0};
    for (int i = 0; choices[i]; i++)
        sb_printf(&list, "%s%s", i ? ", " : "", choices[i]);
    int found = -1;
    if (v->kind == VAL_WORD) {
        for (int i = 0; choices[i]; i++)
            if (strcmp(v->text, choices[i]) == 0)
                found = i;
        if (found < 0) {
            const char *guess = did_you_mean(v->text, choices);
            if (guess)
                error_at(s->src, v->span, "unknown %s '%s'; did you mean '%s'?", what, v->text, guess);
            else
                error_at(s->src, v->span, "unknown %s '%s' (expected one of: %s)", what, v->text,
                         list.data);
        }
    } else {
        error_at(s->src, v->span, "%s must be one of %s, not %s", what, list.data, kind_phrase(v));
    }
    sb_free(&list);
    return found;
}

/* Joins a folder and a relative path; absolute paths and the current folder stay as given. */
static char *resolve_path(const Sema *s, const char *path)
{
    const char *slash = strrchr(s->src->path, '/');
    if (path[0] == '/' || !slash)
        return xstrdup(path);
    return xasprintf("%.*s/%s", (int)(slash - s->src->path), s->src->path, path);
}

/* ---- custom keys -------------------------------------------------------------------- */

/* `model NAME`: a preset fills layers, width and heads; keys in the block override it. */
static void set_model_name(Sema *s, const Entry *e)
{
    Config *cfg = s->cfg;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (strcmp(e->block->name, presets[i].name) == 0) {
            cfg->layers = presets[i].layers;
            cfg->width = presets[i].width;
            cfg->heads = presets[i].heads;
            cfg->context = 1024;
        }
    }
}

/* Units as layers: a unit is a layer's piece, four a layer (plan.c), so 4 is 1, 6 is 1.5 and
 * 7 is 1.75. */
double split_units_layers(int units)
{
    return units / 4.0;
}

/* Stage i's entry of the split as written: the layers between its boundaries. */
static double split_entry_layers(const Config *cfg, int i)
{
    int start = 0;
    for (int k = 0; k < i; k++)
        start += cfg->split_units[k];
    return split_units_layers(start + cfg->split_units[i]) - split_units_layers(start);
}

/* `split [n0, n1, ...]`: layers per stage, where each stage boundary falls at a layer's start,
 * after its attention kernel (.25: the next stage starting with its projection), at its middle
 * (.5: after its attention half, the next stage starting with its MLP) or after its fc product
 * (.75: the next stage starting with its GELU); so `split [3.75, 2.25]` is layers 0..2 and
 * layer 3 up to its fc product, then layer 3's GELU and layers 4 and 5. A stage that starts
 * inside a layer holds the rest of it. Stored in units (a layer's pieces, four a layer, a
 * quarter layer each), checked against stages and layers later.
 * A 0 is allowed only at either end: an embedding-only first stage or a head-only last stage. */
static void set_split(Sema *s, const Entry *e)
{
    if (!expect_count(s, e, 1, "one list of layers per stage, e.g. [3, 3, 2]"))
        goto fail;
    const Value *list = e->values[0];
    if (list->kind != VAL_LIST) {
        error_at(s->src, list->span, "'split' must be a list of layers per stage, e.g. [3, 3, 2], not %s",
                 kind_phrase(list));
        goto fail;
    }
    if (list->n_items == 0 || list->n_items > PACI_MAX_STAGES) {
        error_at(s->src, list->span, "'split' needs one entry per stage (1..%d entries), not %d",
                 PACI_MAX_STAGES, list->n_items);
        goto fail;
    }
    int *split = xcalloc((size_t)list->n_items, sizeof *split);
    long quarters = 0; /* where the stage starts, in quarter layers */
    for (int i = 0; i < list->n_items; i++) {
        const Value *item = list->items[i];
        double n;
        /* 0 layers: the first stage then holds only the embedding, the last only the head;
         * under vocab_split the one before the last may hold only the head's first rows
         * (check_pipeline, which sees vocab_split) */
        bool end = i == 0 || i >= list->n_items - 2;
        if (item->kind == VAL_NUMBER && item->number == 0 && !end) {
            error_at(s->src, item->span, "stage %d of 'split' has 0 layers; only the first stage (embedding "
                     "only) or the last (LM head only) may hold none", i);
            free(split);
            goto fail;
        }
        if (!check_number(s, "split", item, 0, 1024, false, false, &n)) {
            free(split);
            goto fail;
        }
        long stop = quarters + (long)(4 * n);
        if (4 * n != floor(4 * n)) {
            error_at(s->src, item->span, "'split' puts a stage boundary at %g layers, inside layer %ld: a boundary "
                     "falls between layers, after a layer's attention kernel (.25: the next stage starts with its "
                     "projection), at its middle (.5: after its attention half) or after its fc product (.75: the "
                     "next stage starts with its GELU)", (double)quarters / 4 + n, (long)floor((double)quarters / 4 + n));
            free(split);
            goto fail;
        }
        if (quarters % 4 == 2 && stop == quarters + 1) {
            error_at(s->src, item->span, "stage %d of 'split' would hold only layer %ld's LayerNorm 2 and fc "
                     "product (from .5 to .75): a stage holds at least one more piece", i, quarters / 4);
            free(split);
            goto fail;
        }
        if (quarters % 4 == 1 && stop > quarters && stop < quarters + 3) {
            error_at(s->src, item->span, "stage %d of 'split' starts at layer %ld's attention projection (.25) and "
                     "ends inside that layer (at %g): a stage that starts inside a layer holds the rest of it",
                     i, quarters / 4, (double)stop / 4);
            free(split);
            goto fail;
        }
        split[i] = (int)(stop - quarters);
        quarters = stop;
    }
    free(s->cfg->split_units);
    s->cfg->split_units = split;
    s->cfg->span_split = list->span;
    return;
fail:
    mark_failed(s, e);
}

static void set_global(Sema *s, const Entry *e)
{
    double n;
    if (!expect_count(s, e, 1, "one value") ||
        !check_number(s, "global", e->values[0], 1, 1e12, false, true, &n)) {
        mark_failed(s, e);
        return;
    }
    s->global = (long)n;
}

/* `warm_start SCHEDULE N`: the first N optimizer steps under a synchronous schedule, then the
 * file's (check_warm_start). */
static void set_warm_start(Sema *s, const Entry *e)
{
    double n;
    if (!expect_count(s, e, 2, "a synchronous schedule and a number of steps, e.g. 'warm_start 1f1b 64'")) {
        mark_failed(s, e);
        return;
    }
    int kind = check_choice(s, "warm_start schedule", e->values[0], schedule_words);
    if (kind < 0 || !check_number(s, "warm_start", e->values[1], 1, INT32_MAX, false, true, &n)) {
        mark_failed(s, e);
        return;
    }
    if (!paci_schedule_is_sync(kind)) {
        error_at(s->src, e->values[0]->span, "warm_start runs a synchronous schedule (gpipe, 1f1b, zb-h1 or zb-h2), "
                 "not %s: the point is steps on which nothing is stale", schedule_words[kind]);
        mark_failed(s, e);
        return;
    }
    if (schedule_has_chunks(kind)) {
        error_at(s->src, e->values[0]->span, "warm_start runs a schedule with one stage a device (gpipe, 1f1b, "
                 "zb-h1 or zb-h2), not %s: the schedule after it, paci, holds one stage a device, and the "
                 "two must cut the model alike", schedule_words[kind]);
        mark_failed(s, e);
        return;
    }
    s->cfg->warm_schedule = kind;
    s->cfg->warm_steps = (long)n;
}

static bool string_value(Sema *s, const Entry *e, const char *what, const char **out)
{
    if (!expect_count(s, e, 1, what))
        return false;
    if (e->values[0]->kind != VAL_STRING) {
        error_at(s->src, e->values[0]->span, "'%s' must be a string in quotes, not %s", e->key,
                 kind_phrase(e->values[0]));
        return false;
    }
    *out = e->values[0]->text;
    return true;
}

/* A data file is resolved against the .paci file's folder and must be readable. */
static void set_data_path(Sema *s, const Entry *e, char **field, const char *what)
{
    const char *path;
    if (!string_value(s, e, "one file name in quotes", &path)) {
        mark_failed(s, e);
        return;
    }
    free(*field);
    *field = resolve_path(s, path);
    if (access(*field, R_OK) != 0) {
        const char *reason = strerror(errno);
        DiagLevel level = s->need_data ? DIAG_ERROR : DIAG_WARNING;
        if (strcmp(*field, path) == 0)
            diag_at(s->src, e->values[0]->span, level, "cannot read %s '%s': %s", what, path, reason);
        else
            diag_at(s->src, e->values[0]->span, level, "cannot read %s '%s' (resolved to '%s'): %s",
                    what, path, *field, reason);
    }
}

static void set_data(Sema *s, const Entry *e)
{
    set_data_path(s, e, &s->cfg->train_data, "training data");
}

static void set_val(Sema *s, const Entry *e)
{
    set_data_path(s, e, &s->cfg->val_data, "validation data");
}

/* The checkpoint folder is relative to where `run` runs, so it is kept as written. */
static void set_ckpt_dir(Sema *s, const Entry *e)
{
    const char *path;
    if (!string_value(s, e, "one folder name in quotes", &path)) {
        mark_failed(s, e);
        return;
    }
    if (!path[0]) {
        error_at(s->src, e->values[0]->span, "'dir' must not be empty");
        mark_failed(s, e);
        return;
    }
    free(s->cfg->ckpt_dir);
    s->cfg->ckpt_dir = xstrdup(path);
}

/* `lr NUMBER [at BATCH [scale none|linear|sqrt]]`. */
static void set_lr(Sema *s, const Entry *e)
{
    Config *cfg = s->cfg;
    double value;
    if (e->n_values == 0) {
        error_at(s->src, e->key_span, "'lr' needs a number, e.g. 'lr 3e-4 at 256 scale sqrt'");
        goto fail;
    }
    if (!check_number(s, "lr", e->values[0], 0, 10, true, false, &value))
        goto fail;
    cfg->lr_base = value;
    bool scale_given = false;
    int i = 1;
    while (i < e->n_values) {
        const Value *word = e->values[i];
        if (word->kind != VAL_WORD || (strcmp(word->text, "at") && strcmp(word->text, "scale"))) {
            error_at(s->src, word->span, "expected 'at BATCH' or 'scale RULE' after the lr, not %s",
                     word->kind == VAL_WORD ? word->text : kind_phrase(word));
            goto fail;
        }
        if (i + 1 == e->n_values) {
            error_at(s->src, word->span, "'%s' needs a value after it", word->text);
            goto fail;
        }
        const Value *arg = e->values[i + 1];
        if (strcmp(word->text, "at") == 0) {
            if (!check_number(s, "lr ... at", arg, 1, 1e12, false, true, &value))
                goto fail;
            cfg->lr_base_batch = (long)value;
            s->lr_at_given = true;
        } else {
            int rule = check_choice(s, "lr scale rule", arg, scale_words);
            if (rule < 0)
                goto fail;
            cfg->lr_scale = (LrScale)rule;
            scale_given = true;
        }
        i += 2;
    }
    if (scale_given && !s->lr_at_given && cfg->lr_scale != LR_SCALE_NONE) {
        error_at(s->src, values_span(e),
                 "'scale' needs 'at BATCH', the global batch the lr was tuned for");
        goto fail;
    }
    if (s->lr_at_given && !scale_given)
        cfg->lr_scale = LR_SCALE_SQRT;
    return;
fail:
    mark_failed(s, e);
}

/* `betas B1 B2` into beta[0..1]. */
static bool parse_betas(Sema *s, const Entry *e, double beta[2])
{
    if (!expect_count(s, e, 2, "two numbers, e.g. 'betas 0.9 0.95'")) {
        mark_failed(s, e);
        return false;
    }
    for (int i = 0; i < 2; i++) {
        /* [0, 1): a beta of 1 would never forget; the range is checked here for the ')' */
        const Value *v = e->values[i];
        bool outside = v->kind == VAL_NUMBER && !(v->number >= 0 && v->number < 1);
        if (outside)
            error_at(s->src, v->span, "'betas' %s is out of range: it must be in [0, 1)", v->text);
        if (outside || !check_number(s, "betas", v, 0, 1, false, false, &beta[i])) {
            mark_failed(s, e);
            return false;
        }
    }
    return true;
}

static void set_betas(Sema *s, const Entry *e)
{
    double beta[2];
    if (parse_betas(s, e, beta)) {
        s->cfg->beta1 = beta[0];
        s->cfg->beta2 = beta[1];
    }
}

static void set_group_betas(Sema *s, const Entry *e)
{
    double beta[2];
    if (parse_betas(s, e, beta)) {
        s->cfg->group_beta1 = beta[0];
        s->cfg->group_beta2 = beta[1];
    }
}

/* `optimizer NAME`: the name is checked against optimizer_names before this runs. */
static void set_optimizer_name(Sema *s, const Entry *e)
{
    for (int i = 0; optimizer_names[i]; i++)
        if (strcmp(e->block->name, optimizer_names[i]) == 0)
            s->cfg->optimizer = i;
}

/* `compression NAME`: the name is checked against compression_names before this runs. */
static void set_compression_name(Sema *s, const Entry *e)
{
    for (int i = 0; compression_names[i]; i++)
        if (strcmp(e->block->name, compression_names[i]) == 0)
            s->cfg->compression = COMPRESSION_DGC + i;
}

/* `warmup 200` steps or `warmup 1%` of the steps; a percentage is stored negated until the
 * steps are known (see derive_schedule). */
static void set_warmup(Sema *s, const Entry *e)
{
    double n;
    if (!expect_count(s, e, 1, "one value: steps, or a percentage of the steps like 1%")) {
        mark_failed(s, e);
        return;
    }
    const Value *v = e->values[0];
    if (v->kind == VAL_PERCENT) {
        if (v->number < 0 || v->number > 100) {
            error_at(s->src, v->span, "'warmup' %s is out of range: it must be in 0%%..100%%", v->text);
            mark_failed(s, e);
            return;
        }
        s->cfg->warmup_steps = -1;
        return;
    }
    if (!check_number(s, "warmup", v, 0, 1e12, false, true, &n)) {
        mark_failed(s, e);
        return;
    }
    s->cfg->warmup_steps = (long)n;
}

/* ---- the walk ----------------------------------------------------------------------- */

static void check_block(Sema *s, const BlockDef *def, const Block *block);

/* Where a key that is not in `def` belongs, if anywhere. */
static const BlockDef *home_of(const char *key, const BlockDef *def)
{
    for (int b = 0; all_blocks[b]; b++) {
        if (all_blocks[b] == def)
            continue;
        for (const KeyDef *k = all_blocks[b]->keys; k->name; k++)
            if (strcmp(k->name, key) == 0)
                return all_blocks[b];
    }
    return NULL;
}

static void unknown_key(Sema *s, const BlockDef *def, const Entry *e)
{
    const char *names[32];
    int n = 0;
    for (const KeyDef *k = def->keys; k->name && n < 31; k++)
        names[n++] = k->name;
    names[n] = NULL;
    const char *guess = did_you_mean(e->key, names);
    const BlockDef *home = home_of(e->key, def);
    if (def == &root_block) {
        if (guess)
            error_at(s->src, e->key_span, "unknown block '%s'; did you mean '%s'?", e->key, guess);
        else if (home)
            error_at(s->src, e->key_span, "'%s' is a key of the '%s' block, not a block", e->key,
                     home->name);
        else
            error_at(s->src, e->key_span, "unknown block '%s' (blocks: model, pipeline, batch, train, hardware, parallel)",
                     e->key);
    } else if (guess) {
        error_at(s->src, e->key_span, "unknown key '%s' in '%s'; did you mean '%s'?", e->key,
                 def->name, guess);
    } else if (home) {
        error_at(s->src, e->key_span, "unknown key '%s' in '%s'; it belongs in '%s'", e->key,
                 def->name, home->name);
    } else {
        error_at(s->src, e->key_span, "unknown key '%s' in '%s'", e->key, def->name);
    }
}

/* Checks a plain key's values and stores them in its Config field. */
static void check_plain_key(Sema *s, const KeyDef *k, const Entry *e)
{
    void *field = field_of(s->cfg, k->field);
    bool integer = k->shape == SHAPE_INT || k->shape == SHAPE_LONG || k->shape == SHAPE_U64;
    if (k->shape == SHAPE_BOOL || k->shape == SHAPE_CHOICE) {
        if (!expect_count(s, e, 1, "one value")) {
            mark_failed(s, e);
            return;
        }
        const Value *v = e->values[0];
        if (k->shape == SHAPE_BOOL && (v->kind != VAL_WORD || (strcmp(v->text, "true") && strcmp(v->text, "false")))) {
            error_at(s->src, v->span, "'%s' must be true or false, not %s", e->key,
                     v->kind == VAL_WORD ? v->text : kind_phrase(v));
            mark_failed(s, e);
            return;
        }
        int index = check_choice(s, e->key, v, k->shape == SHAPE_BOOL ? bool_words : k->choices);
        if (index < 0) {
            mark_failed(s, e);
            return;
        }
        if (k->shape == SHAPE_BOOL)
            *(bool *)field = index == 1;
        else
            *(int *)field = index;
        return;
    }
    double n;
    uint64_t whole = 0;
    if (!expect_count(s, e, 1, "one value") ||
        !check_number_exact(s, e->key, e->values[0], k->min, k->max, k->min_exclusive, integer, &n, &whole)) {
        mark_failed(s, e);
        return;
    }
    switch (k->shape) {
    case SHAPE_INT: *(int *)field = (int)n; break;
    case SHAPE_LONG: *(long *)field = (long)n; break;
    case SHAPE_U64: *(uint64_t *)field = whole; break;
    case SHAPE_NUMBER: *(double *)field = n; break;
    default: unreachable();
    }
}

/* A nested block: its name (if it takes one), then its entries. */
static void check_nested(Sema *s, const KeyDef *k, const Entry *e)
{
    const BlockDef *def = k->block;
    const Block *b = e->block;
    if (!b) {
        error_at(s->src, e->key_span, "'%s' is a block: write '%s%s { ... }'", e->key, e->key,
                 def->names ? " NAME" : "");
        mark_failed(s, e);
        return;
    }
    if (b->name && !def->names) {
        error_at(s->src, b->name_span, "the '%s' block takes no name", e->key);
    } else if (b->name && check_choice(s, def->name, &(Value){.kind = VAL_WORD, .span = b->name_span, .text = b->name},
                                       def->names) < 0) {
        mark_failed(s, e);
        return;
    } else if (!b->name && def->name_required) {
        StrBuf list = {0};
        for (int i = 0; def->names[i]; i++)
            sb_printf(&list, "%s%s", i ? ", " : "", def->names[i]);
        error_at(s->src, b->open_span, "'%s' needs a name before '{': one of %s", e->key, list.data);
        sb_free(&list);
        mark_failed(s, e);
        return;
    }
    if (b->name && def->on_name)
        def->on_name(s, e);
    check_block(s, def, b);
}

/* Every entry of `block` against `def`: unknown and duplicate keys, then each value; then
 * the required keys that are missing, reported at the block's name or '{'. */
static void check_block(Sema *s, const BlockDef *def, const Block *block)
{
    for (int i = 0; i < block->n_entries; i++) {
        const Entry *e = block->entries[i];
        const KeyDef *k = def->keys;
        while (k->name && strcmp(k->name, e->key) != 0)
            k++;
        if (!k->name) {
            unknown_key(s, def, e);
            continue;
        }
        Seen *before = find_seen(s, def->name, k->name);
        if (before && before->entry) {
            error_at(s->src, e->key_span, "duplicate '%s' in '%s'", e->key, def->name);
            note_at(s->src, before->entry->key_span, "first written here");
            continue;
        }
        record(s, def, k, e);
        if (k->shape == SHAPE_BLOCK) {
            check_nested(s, k, e);
        } else if (e->block) {
            error_at(s->src, e->block->open_span, "'%s' takes a value, not a block", e->key);
            mark_failed(s, e);
        } else if (k->shape == SHAPE_CUSTOM) {
            k->set(s, e);
        } else {
            check_plain_key(s, k, e);
        }
    }
    for (const KeyDef *k = def->keys; k->name; k++) {
        if (!k->required || find_seen(s, def->name, k->name))
            continue;
        if (k->shape == SHAPE_BLOCK) {
            error_at(s->src, SPAN_FILE, "no '%s' block; it is required", k->name);
        } else {
            Span at = block->name ? block->name_span : block->open_span;
            error_at(s->src, at, "'%s' block needs '%s'", def->name, k->name);
        }
        record(s, def, k, NULL)->failed = true;
    }
}

/* ---- defaults, cross-checks and derived values ----------------------------------------- */

/* Every number key's fallback, before the walk overwrites what the file states. */
static void set_defaults(Config *cfg)
{
    for (int b = 0; all_blocks[b]; b++) {
        for (const KeyDef *k = all_blocks[b]->keys; k->name; k++) {
            void *field = field_of(cfg, k->field);
            switch (k->shape) {
            case SHAPE_INT:
            case SHAPE_CHOICE: *(int *)field = (int)k->fallback; break;
            case SHAPE_LONG: *(long *)field = (long)k->fallback; break;
            case SHAPE_U64: *(uint64_t *)field = (uint64_t)k->fallback; break;
            case SHAPE_NUMBER: *(double *)field = k->fallback; break;
            case SHAPE_BOOL: *(bool *)field = k->fallback != 0; break;
            case SHAPE_CUSTOM:
            case SHAPE_BLOCK: break;
            }
        }
    }
    cfg->lr_base = 3e-4;
    cfg->lr_scale = LR_SCALE_NONE;
    cfg->beta1 = cfg->group_beta1 = 0.9;
    cfg->beta2 = cfg->group_beta2 = 0.95;
    cfg->warmup_steps = -1; /* 1% of the steps */
    cfg->ckpt_dir = xstrdup("checkpoints");
}

/* The model's shape: a gpt2 without preset states layers, width, heads and context; heads
 * must divide width. */
static void check_model(Sema *s)
{
    Config *cfg = s->cfg;
    const Entry *model = s->blocks[0];
    if (!model || !model->block || !usable(s, "file", "model"))
        return;
    /* the first four model keys are the shape: a preset or the block must state them */
    for (const KeyDef *k = model_keys; k < model_keys + 4; k++) {
        if (find_seen(s, "model", k->name) || *(int *)field_of(cfg, k->field) != 0)
            continue;
        error_at(s->src, model->block->name_span,
                 "model '%s' needs '%s' (or use a preset: gpt2-small, gpt2-medium, gpt2-large, gpt2-xl)",
                 model->block->name, k->name);
        record(s, &model_block, k, NULL)->failed = true;
    }
    if (usable(s, "model", "heads") && usable(s, "model", "width") && cfg->width % cfg->heads != 0) {
        const Entry *heads = written(s, "model", "heads");
        Span at = heads ? heads->values[0]->span : model->block->name_span;
        error_at(s->src, at, "heads %d does not divide the width %d", cfg->heads, cfg->width);
    }
}

/* "layer 7" or "layers 7..9" (layers count from 0). */
static void layer_range(char *buf, size_t size, int first, int last)
{
    if (first == last)
        snprintf(buf, size, "layer %d", first);
    else
        snprintf(buf, size, "layers %d..%d", first, last);
}

/* Units [first, last] in words: "layers 3..5" when whole, else by their pieces. */
static void unit_range(char *buf, size_t size, int first, int last)
{
    static const char *const piece[] = {"attention", "attention projection", "LayerNorm 2 and fc product",
                                        "GELU and MLP projection"};
    if (first % 4 == 0 && last % 4 == 3)
        layer_range(buf, size, first / 4, last / 4);
    else if (first % 4 == 2 && last == first + 1)
        snprintf(buf, size, "layer %d's MLP half", first / 4);
    else if (first % 4 == 0 && last == first + 1)
        snprintf(buf, size, "layer %d's attention half", first / 4);
    else if (first == last)
        snprintf(buf, size, "layer %d's %s", first / 4, piece[first % 4]);
    else
        snprintf(buf, size, "layer %d's %s to layer %d's %s", first / 4, piece[first % 4], last / 4, piece[last % 4]);
}

/* The stage count against the layers (the first stage may hold only the embedding and the
 * last only the head: p <= layers + 2) and a tied head (one stage); false when it is not usable. */
static bool check_stage_count(Sema *s, const Entry *stages, bool stages_ok, bool layers_ok)
{
    Config *cfg = s->cfg;
    char count[96]; /* the stages as the file makes them */
    if (config_chunks(cfg) > 1)
        snprintf(count, sizeof count, "stages %d x chunks %d = %d stages", config_devices(cfg), config_chunks(cfg),
                 cfg->stages);
    else
        snprintf(count, sizeof count, "stages %d", cfg->stages);
    if (stages_ok && layers_ok && cfg->layers > 0 && cfg->stages > cfg->layers + 2) {
        error_at(s->src, stages ? stages->values[0]->span : SPAN_FILE,
                 "%s is more than the model's %d layers + 2: every stage but an embedding-only "
                 "first and a head-only last needs at least one layer",
                 count, cfg->layers);
        stages_ok = false;
    }
    const Entry *tied = written(s, "model", "tied");
    if (cfg->tied && stages_ok && cfg->stages > 1) {
        error_at(s->src, tied->values[0]->span,
                 "'tied true' needs stages 1: with %s%s the embedding and the LM head sit on different stages",
                 count + strlen("stages "), config_chunks(cfg) > 1 ? "" : " stages");
        if (stages)
            note_at(s->src, stages->values[0]->span, "stages set here");
    }
    return stages_ok;
}

/* The window: written, or derived from the global batch (global = micro x window x data), or
 * the stage count; then the global batch it makes. */
static void check_window(Sema *s, const Entry *window, const Entry *global)
{
    Config *cfg = s->cfg;
    bool micro_ok = usable(s, "batch", "micro");
    /* D replicas each run micro x window sequences per step; D = 1 keeps the messages that
     * do not mention data parallelism */
    int replicas = cfg->replicas;
    const Entry *data = written(s, "parallel", "data");
    if (global && usable(s, "batch", "global") && micro_ok && usable(s, "parallel", "data")) {
        long per_window = (long)cfg->micro * replicas; /* sequences per micro-batch slot of the window, all replicas */
        if (window && usable(s, "pipeline", "window")) {
            long product = per_window * cfg->window;
            if (s->global != product && replicas == 1) {
                error_at(s->src, global->values[0]->span,
                         "global %ld is not micro x window = %d x %d = %ld",
                         s->global, cfg->micro, cfg->window, product);
                note_at(s->src, window->values[0]->span, "window set here");
            } else if (s->global != product) {
                error_at(s->src, global->values[0]->span,
                         "global %ld is not micro x window x data = %d x %d x %d = %ld",
                         s->global, cfg->micro, cfg->window, replicas, product);
                note_at(s->src, window->values[0]->span, "window set here");
                note_at(s->src, data->values[0]->span, "data-parallel replicas set here");
            }
        } else if (!window) {
            if (s->global % per_window != 0 && replicas == 1)
                error_at(s->src, global->values[0]->span,
                         "global %ld is not divisible by micro %d: the window would not be whole",
                         s->global, cfg->micro);
            else if (s->global % per_window != 0)
                error_at(s->src, global->values[0]->span,
                         "global %ld is not divisible by micro x data = %d x %d = %ld: the window would "
                         "not be whole", s->global, cfg->micro, replicas, per_window);
            else if (s->global / per_window > 1000000 && replicas == 1)
                error_at(s->src, global->values[0]->span,
                         "global %ld / micro %d gives a window above 1000000", s->global, cfg->micro);
            else if (s->global / per_window > 1000000)
                error_at(s->src, global->values[0]->span,
                         "global %ld / (micro %d x data %d) gives a window above 1000000", s->global,
                         cfg->micro, replicas);
            else
                cfg->window = (int)(s->global / per_window);
        }
    }
    if (cfg->window == 0)
        cfg->window = config_devices(cfg);
    cfg->global_batch = (long)cfg->micro * cfg->window * replicas;
    if (cfg->schedule == PACI_SCHED_GPIPE && cfg->window > PACI_MAX_SLOTS && usable(s, "pipeline", "schedule")) {
        Span at = window ? window->values[0]->span : global ? global->values[0]->span : SPAN_FILE;
        error_at(s->src, at, "gpipe keeps an activation slot per micro-batch of the window: window %d is "
                 "above the %d slots the schedule table numbers (16 bits)", cfg->window, PACI_MAX_SLOTS);
    }

}

/* 'split': one entry per stage, covering the model's half layers exactly; false (and no
 * split kept) when it is not. */
static bool check_split(Sema *s, const Entry *split, bool stages_ok, bool layers_ok)
{
    Config *cfg = s->cfg;
    bool split_ok = false;
    if (split && cfg->split_units && stages_ok) {
        const Value *list = split->values[0];
        int sum = 0, units = 4 * cfg->layers;
        for (int i = 0; i < list->n_items; i++)
            sum += cfg->split_units[i];
        if (list->n_items != cfg->stages && config_chunks(cfg) > 1) {
            error_at(s->src, list->span, "'split' has %d entr%s but there are %d stages (stages %d x chunks %d), "
                     "one entry each in layer order", list->n_items, list->n_items == 1 ? "y" : "ies",
                     cfg->stages, config_devices(cfg), config_chunks(cfg));
        } else if (list->n_items != cfg->stages) {
            error_at(s->src, list->span, "'split' has %d entr%s but there %s %d stage%s", list->n_items,
                     list->n_items == 1 ? "y" : "ies", cfg->stages == 1 ? "is" : "are", cfg->stages,
                     cfg->stages == 1 ? "" : "s");
        } else if (layers_ok && cfg->layers > 0) {
            split_ok = sum == units;
            char range[128];
            if (sum != units)
                unit_range(range, sizeof range, sum < units ? sum : units, (sum < units ? units : sum) - 1);
            if (sum < units)
                error_at(s->src, list->span,
                         "'split' covers %g of the model's %d layers: %s would be in no stage",
                         split_units_layers(sum), cfg->layers, range);
            else if (sum > units)
                error_at(s->src, list->span,
                         "'split' assigns %g layers but the model has %d: %s would not exist",
                         split_units_layers(sum), cfg->layers, range);
        }
    }
    if (!split_ok) {
        free(cfg->split_units);
        cfg->split_units = NULL;
    }

    return split_ok;
}

/* vocab_split N: rows [0, N) of the head with the final LayerNorm on stage p-2, the rest alone
 * on the last stage; and a split whose stage p-2 holds no layer needs it. */
static void check_vocab_split(Sema *s, const Entry *split, bool split_ok, bool stages_ok)
{
    Config *cfg = s->cfg;
    const Entry *vocab_split = written(s, "pipeline", "vocab_split");
    if (split_ok && cfg->stages >= 3 && cfg->split_units[cfg->stages - 2] == 0 && cfg->vocab_split <= 0) {
        error_at(s->src, split->values[0]->items[cfg->stages - 2]->span,
                 "stage %d of 'split' has 0 layers; only the first stage (embedding only) or the last (LM head "
                 "only) may hold none, or under vocab_split the one before the last (the head's first rows)",
                 cfg->stages - 2);
        free(cfg->split_units);
        cfg->split_units = NULL;
        split_ok = false;
    }
    if (vocab_split && usable(s, "pipeline", "vocab_split") && cfg->vocab_split > 0) {
        Span at = vocab_split->values[0]->span;
        if (usable(s, "model", "vocab") && cfg->vocab_split >= cfg->vocab)
            error_at(s->src, at, "vocab_split %ld leaves the last stage no row of the LM head: it must be "
                     "below the vocabulary's %d rows (0: no split)", cfg->vocab_split, cfg->vocab);
        else if (stages_ok && cfg->stages < 2)
            error_at(s->src, at, "vocab_split %ld divides the LM head between the last two stages, but "
                     "there is one stage", cfg->vocab_split);
        else if (cfg->tied)
            error_at(s->src, at, "vocab_split needs an untied head: a tied head reads the embedding's rows");
        else if (optimizer_takes_tensor_norms(cfg->optimizer))
            error_at(s->src, at, "vocab_split does not go with %s: its %s the whole head's norm%s, and each part of "
                     "a divided head would take its own", optimizer_names[cfg->optimizer],
                     cfg->optimizer == PR_OPT_LANS ? "gradient normalisation and trust ratios take" : "trust ratio is",
                     cfg->optimizer == PR_OPT_LANS ? "s" : "");
        else if (split_ok && cfg->split_units[cfg->stages - 1] != 0)
            error_at(s->src, split->values[0]->span, "'split' gives the last stage %g layer%s, but under "
                     "vocab_split it holds only rows of the LM head: its entry must be 0",
                     split_entry_layers(cfg, cfg->stages - 1), split_entry_layers(cfg, cfg->stages - 1) == 1 ? "" : "s");
    }

}

/* PACI with a window below p - 1: stage 0's micro-batches cross more than one update. */
static void warn_paci_window(Sema *s, const Entry *window, const Entry *global)
{
    Config *cfg = s->cfg;
    int p = cfg->stages;
    if (cfg->schedule == PACI_SCHED_PACI && p > 1 && cfg->window < p - 1) {
        int crossings = (p - 1 + cfg->window - 1) / cfg->window;
        Span at = window ? window->values[0]->span : global ? global->values[0]->span : SPAN_FILE;
        warning_at(s->src, at,
                   "window %d is below stages - 1 = %d: stage 0 crosses ceil((p-1)/K) = %d optimizer "
                   "updates between a micro-batch's forward and backward; window >= p-1 bounds it to 1",
                   cfg->window, p - 1, crossings);
    }
}

/* Chunks and placement: interleaved holds v >= 2 stages a device (2 unless written) in the loop
 * placement, zb-v exactly 2 in the V placement, every other schedule one (docs/dsl.md "chunks");
 * then cfg->stages becomes S = p v, the stages the model is cut into. False when the stage
 * count is not usable. */
static bool check_chunks_of(Sema *s, bool stages_ok)
{
    Config *cfg = s->cfg;
    const Entry *chunks = written(s, "pipeline", "chunks");
    const Entry *placement = written(s, "pipeline", "placement");
    bool chunks_ok = usable(s, "pipeline", "chunks"), placement_ok = usable(s, "pipeline", "placement");
    const char *name = schedule_words[cfg->schedule];
    int v = cfg->chunks;
    if (!usable(s, "pipeline", "schedule"))
        return false;
    if (!schedule_has_chunks(cfg->schedule)) {
        if (chunks && chunks_ok && v > 1) {
            if (cfg->schedule == PACI_SCHED_PACI)
                error_at(s->src, chunks->values[0]->span, "chunks %d goes with schedule interleaved or zb-v; paci "
                         "runs one stage a device: chunks would shrink no bubble (it has none), and over %d "
                         "stages stage s's drift bound ceil((S - s - 1)/K) grows, with twice the messages "
                         "(docs/dsl.md \"chunks\")",
                         v, stages_ok ? v * cfg->stages : v);
            else
                error_at(s->src, chunks->values[0]->span, "chunks %d goes with schedule interleaved or zb-v; %s "
                         "runs one stage a device (use chunks 1, or one of those schedules)", v, name);
            return false;
        }
        if (placement && placement_ok && cfg->placement != PACI_PLACEMENT_LOOP) {
            error_at(s->src, placement->values[0]->span, "placement %s places chunks: it goes with schedule zb-v, "
                     "not %s, which runs one stage a device", placement_words[cfg->placement], name);
            return false;
        }
        cfg->chunks = 1;
        cfg->placement = PACI_PLACEMENT_LOOP;
        return stages_ok;
    }
    if (!chunks_ok)
        return false;
    bool zbv = cfg->schedule == PACI_SCHED_ZBV;
    if (!chunks)
        v = cfg->chunks = 2;
    if (zbv && v != 2) {
        error_at(s->src, chunks->values[0]->span, "zb-v holds 2 chunks a device (one down the devices, one back "
                 "up: a V), not %d (leave chunks out, or write chunks 2)", v);
        return false;
    }
    if (!zbv && v < 2) {
        error_at(s->src, chunks->values[0]->span, "interleaved needs at least 2 chunks a device; with 1 it is "
                 "1F1B (use schedule 1f1b, or chunks 2 or more)");
        return false;
    }
    if (!placement)
        cfg->placement = zbv ? PACI_PLACEMENT_V : PACI_PLACEMENT_LOOP;
    else if (!placement_ok)
        return false;
    else if (zbv && cfg->placement != PACI_PLACEMENT_V) {
        error_at(s->src, placement->values[0]->span, "zb-v runs its chunks in the V placement (device d holds "
                 "stages d and 2p - 1 - d): leave placement out, or write placement v");
        return false;
    } else if (!zbv && cfg->placement != PACI_PLACEMENT_LOOP) {
        error_at(s->src, placement->values[0]->span, "interleaved runs Megatron's loop placement (device d "
                 "holds stages d, p + d, 2p + d, ...): leave placement out, or write placement loop");
        return false;
    }
    if (!stages_ok)
        return false;
    const Entry *stages = written(s, "pipeline", "stages");
    if ((long)cfg->stages * v > PACI_MAX_STAGES) {
        error_at(s->src, chunks ? chunks->values[0]->span : stages ? stages->values[0]->span : SPAN_FILE,
                 "stages %d x chunks %d = %d stages is more than the %d a schedule table holds", cfg->stages, v,
                 cfg->stages * v, PACI_MAX_STAGES);
        return false;
    }
    const Entry *vocab_split = written(s, "pipeline", "vocab_split");
    if (vocab_split && usable(s, "pipeline", "vocab_split") && cfg->vocab_split > 0) {
        error_at(s->src, vocab_split->values[0]->span, "vocab_split does not go with chunks yet: %s's head is a "
                 "chunk of its own device (vocab_split 0, or leave it out)", name);
        return false;
    }
    cfg->vocab_split = 0; /* no automatic vocabulary split over chunks */
    cfg->stages *= v;
    return true;
}

static bool check_chunks(Sema *s, bool stages_ok)
{
    if (check_chunks_of(s, stages_ok))
        return true;
    s->cfg->chunks = 1; /* cfg->stages stays as written: one stage a device for the checks after */
    return false;
}

/* Interleaved runs micro-batches through a device's chunks in groups of p (Megatron's order):
 * the window must be a whole number of groups. */
static void check_chunked_window(Sema *s, const Entry *window, const Entry *global)
{
    Config *cfg = s->cfg;
    int p = config_devices(cfg);
    if (cfg->schedule != PACI_SCHED_INTERLEAVED || config_chunks(cfg) < 2 || cfg->window % p == 0)
        return;
    Span at = window ? window->values[0]->span : global ? global->values[0]->span : SPAN_FILE;
    int below = cfg->window / p * p, above = below + p;
    if (below > 0)
        error_at(s->src, at, "interleaved runs the window's micro-batches through each chunk in groups of stages = %d "
                 "(Megatron's order): window %d is not a multiple of %d (window %d or %d would be)", p, cfg->window, p,
                 below, above);
    else
        error_at(s->src, at, "interleaved runs the window's micro-batches through each chunk in groups of stages = %d "
                 "(Megatron's order): window %d is not a multiple of %d (window %d would be)", p, cfg->window, p,
                 above);
}

/* Stages, window, global batch and split agree with each other and with the model. */
static void check_pipeline(Sema *s)
{
    const Entry *stages = written(s, "pipeline", "stages");
    const Entry *window = written(s, "pipeline", "window");
    const Entry *global = written(s, "batch", "global");
    bool layers_ok = usable(s, "model", "layers") && usable(s, "file", "model");
    bool stages_ok = check_chunks(s, usable(s, "pipeline", "stages"));
    stages_ok = check_stage_count(s, stages, stages_ok, layers_ok);
    check_window(s, window, global);
    if (stages_ok)
        check_chunked_window(s, window, global);
    const Entry *split = written(s, "pipeline", "split");
    bool split_ok = check_split(s, split, stages_ok, layers_ok);
    check_vocab_split(s, split, split_ok, stages_ok);
    warn_paci_window(s, window, global);
}

/* Every rank runs one stage of one replica: stages x data ranks in all, at most
 * MAX_WORLD_SIZE. */
static void check_parallel(Sema *s)
{
    Config *cfg = s->cfg;
    const Entry *data = written(s, "parallel", "data");
    if (!data || !usable(s, "parallel", "data") || !usable(s, "pipeline", "stages"))
        return;
    int p = config_devices(cfg);
    long world = (long)p * cfg->replicas;
    if (world <= MAX_WORLD_SIZE)
        return;
    error_at(s->src, data->values[0]->span,
             "data %d x stages %d = %ld ranks (one GPU each) is above the limit of %d ranks in one job; "
             "data %d fits these stages", cfg->replicas, p, world, MAX_WORLD_SIZE, MAX_WORLD_SIZE / p);
    const Entry *stages = written(s, "pipeline", "stages");
    if (stages)
        note_at(s->src, stages->values[0]->span, "stages set here");
}

/* A dgc warm-up of at least the run's steps never reaches its density: the whole run sends
 * more than asked (density 0.25 at its first step), which nothing else would say. */
static void check_dgc_warmup(Sema *s)
{
    const Config *cfg = s->cfg;
    const Entry *warmup = written(s, "compression", "warmup_steps");
    if (!warmup || !usable(s, "compression", "warmup_steps") || !usable(s, "compression", "density") ||
        !written(s, "train", "steps") || !usable(s, "train", "steps") || cfg->dgc_warmup_steps < cfg->steps)
        return;
    double last = paci_dgc_density(cfg->dgc_density, cfg->dgc_warmup_steps, cfg->steps);
    if (last > cfg->dgc_density) // density 1 has nothing to warm up
        warning_at(s->src, warmup->values[0]->span,
                   "warmup_steps %ld is not shorter than the %ld training steps: the density never reaches %g; "
                   "it falls from %.3g at step 1 to %.3g at the last step", cfg->dgc_warmup_steps, cfg->steps,
                   cfg->dgc_density, paci_dgc_density(cfg->dgc_density, cfg->dgc_warmup_steps, 1), last);
}

/* compression compresses the replicas' exchange: it needs replicas to exchange (data D > 1),
 * and it sums the replicas' pairs in replica order, not as accumulate pairwise's tree. */
static void check_compression(Sema *s)
{
    Config *cfg = s->cfg;
    const Entry *e = written(s, "parallel", "compression");
    if (!e || cfg->compression == COMPRESSION_NONE || !usable(s, "parallel", "compression") ||
        !usable(s, "parallel", "data"))
        return;
    if (config_replicas(cfg) < 2) {
        const Entry *data = written(s, "parallel", "data");
        error_at(s->src, e->key_span, "compression %s compresses the gradient exchange between data-parallel "
                 "replicas, and data %d has none to exchange: write 'data D' with D > 1 in this 'parallel' "
                 "block, or drop the compression", compression_names[cfg->compression - COMPRESSION_DGC],
                 config_replicas(cfg));
        if (data)
            note_at(s->src, data->values[0]->span, "data set here");
        return;
    }
    const Entry *acc = written(s, "batch", "accumulate");
    if (acc && cfg->accumulate == ACCUMULATE_PAIRWISE)
        error_at(s->src, acc->values[0]->span, "accumulate pairwise sums the replicas as a binary tree, and "
                 "compression %s sums their sparse values in replica order: use one of them",
                 compression_names[cfg->compression - COMPRESSION_DGC]);
    check_dgc_warmup(s);
}

/* accumulate pairwise with replicas: one pipeline of window D x K adds its micro-batches as the
 * D replicas do only when that tree splits into theirs, so when D and K are powers of two; and
 * only a synchronous schedule runs them on the same weights (each replica of an asynchronous
 * one keeps window K's weight delays). */
static void check_accumulate(Sema *s)
{
    Config *cfg = s->cfg;
    const Entry *e = written(s, "batch", "accumulate");
    int D = config_replicas(cfg), K = cfg->window;
    if (!e || cfg->accumulate != ACCUMULATE_PAIRWISE || !usable(s, "batch", "accumulate") || D < 2 || K < 1)
        return;
    if (!paci_schedule_is_sync(cfg->schedule)) {
        warning_at(s->src, e->values[0]->span,
                   "accumulate pairwise with data %d under %s: the run is reproducible, but it never gives "
                   "the bits of one pipeline of window %ld: each replica keeps window %d's weight delays "
                   "(only gpipe and 1f1b run a step's micro-batches on one set of weights)", D,
                   paci_schedule_name(cfg->schedule), (long)D * K, K);
        return;
    }
    if ((K & (K - 1)) == 0 && (D & (D - 1)) == 0)
        return;
    warning_at(s->src, e->values[0]->span,
               "accumulate pairwise with data %d x window %d: the run is reproducible, but it gives the bits "
               "of one pipeline of window %ld only when data and window are both powers of two", D, K,
               (long)D * K);
}

/* One micro-batch's activations, micro x context x width values, within the generated code's
 * 32-bit int arithmetic: its shape constants are C enums, and BT * C, B * NH * T and the row
 * counts the matrix products take (BLAS's int) are all products of at most these three. */
static void check_extents(Sema *s)
{
    Config *cfg = s->cfg;
    const Entry *micro = written(s, "batch", "micro");
    if (!micro || !usable(s, "batch", "micro") || !usable(s, "model", "context") ||
        !usable(s, "model", "width") || cfg->context <= 0 || cfg->width <= 0)
        return;
    long values = (long)cfg->micro * cfg->context * cfg->width;
    if (values <= INT32_MAX)
        return;
    long most_micro = (long)INT32_MAX / ((long)cfg->context * cfg->width);
    char *hint = most_micro > 0 ? xasprintf("micro %ld fits", most_micro)
                                : xstrdup("no micro fits this context and width");
    error_at(s->src, micro->values[0]->span,
             "micro %d x context %d x width %d = %ld values in one activation tensor, above %d "
             "(2^31 - 1): the generated code indexes tensors with 32-bit integers; %s",
             cfg->micro, cfg->context, cfg->width, values, INT32_MAX, hint);
    free(hint);
}

bool optimizer_takes_tensor_norms(int optimizer)
{
    return optimizer == PR_OPT_LAMB || optimizer == PR_OPT_LARS || optimizer == PR_OPT_LANS;
}

/* Learning rate by the scale rule, warmup from a percentage, and warnings on steps. */
/* Each optimizer takes only its own keys (docs/dsl.md); the defaults that depend on the
 * optimizer are set here, before the learning rate is scaled. */
static void check_optimizer(Sema *s)
{
    static const char *const keys_of[] = {
        [PR_OPT_ADAMW] = " lr betas eps weight_decay clip post_validation ",
        [PR_OPT_MUON] = " lr momentum nesterov ns_steps shape_scale weight_decay clip post_validation adamw ",
        [PR_OPT_LAMB] = " lr betas eps weight_decay clip post_validation ",
        [PR_OPT_LARS] = " lr momentum trust_coefficient eps weight_decay clip post_validation ",
        [PR_OPT_NADAMW] = " lr betas eps weight_decay momentum_decay clip post_validation ",
        [PR_OPT_LANS] = " lr betas eps weight_decay clip post_validation ",
    };
    Config *cfg = s->cfg;
    const char *name = optimizer_names[cfg->optimizer];
    for (int i = 0; i < s->n_seen; i++) {
        const Seen *seen = &s->seen[i];
        if (seen->block != &optimizer_block || !seen->entry)
            continue;
        char word[64];
        snprintf(word, sizeof word, " %s ", seen->key->name);
        if (!strstr(keys_of[cfg->optimizer], word)) {
            bool group_key = cfg->optimizer == PR_OPT_MUON && strstr(" betas eps ", word);
            error_at(s->src, seen->entry->key_span, "'%s' is not a key of optimizer %s (its keys:%s)%s",
                     seen->key->name, name, keys_of[cfg->optimizer],
                     group_key ? "; the AdamW group's goes in its 'adamw { ... }' block" : "");
            s->seen[i].failed = true;
        }
    }
    if (cfg->momentum < 0)
        cfg->momentum = cfg->optimizer == PR_OPT_MUON ? 0.95 : 0.9;
    if (cfg->group_weight_decay < 0)
        cfg->group_weight_decay = cfg->weight_decay;
    if (cfg->optimizer == PR_OPT_MUON && !written(s, "optimizer", "lr"))
        cfg->lr_base = 0.02;
}

/* The zero-bubble schedules' B and W are built for slots that keep every activation (recompute
 * full keeps only the input, which W cannot read) and one gradient buffer a stage (accumulate
 * pairwise gives each backward its own, which B and W would both have to find). */
static void check_zero_bubble(Sema *s)
{
    Config *cfg = s->cfg;
    if (!config_splits_backward(cfg) || !usable(s, "pipeline", "schedule"))
        return;
    bool warm = !schedule_splits_backward(cfg->schedule); // its warm start splits
    const char *name = paci_schedule_name(warm ? cfg->warm_schedule : (int)cfg->schedule);
    const Entry *e;
    if (!zero_bubble_excluded(cfg))
        return;
    if (cfg->recompute == RECOMPUTE_FULL && (e = written(s, "pipeline", "recompute")))
        error_at(s->src, e->values[0]->span, "recompute full does not go with %s: a W reads the activations of its "
                 "micro-batch, which a recomputing slot does not keep (use recompute none)", name);
    if (cfg->accumulate == ACCUMULATE_PAIRWISE && (e = written(s, "batch", "accumulate")))
        error_at(s->src, e->values[0]->span, "accumulate pairwise does not go with %s: a micro-batch's gradient "
                 "comes from its B and its W at different times, into one buffer (use accumulate sequential)", name);
}

/* `dc_lambda` is DC-ASGD's lambda: written without `delay_correction dc-asgd` it would do
 * nothing, and dc-asgd has no default for it (docs/dsl.md "Delay correction"). */
static void check_dc_lambda(Sema *s)
{
    Config *cfg = s->cfg;
    const Entry *lambda = written(s, "pipeline", "dc_lambda");
    const Entry *mode = written(s, "pipeline", "delay_correction");
    if (!usable(s, "pipeline", "delay_correction") || (lambda && !usable(s, "pipeline", "dc_lambda")))
        return;
    if (lambda && cfg->delay_correction != DELAY_DC_ASGD)
        error_at(s->src, lambda->key_span, "dc_lambda is DC-ASGD's lambda and goes with delay_correction dc-asgd, "
                 "not %s (remove dc_lambda, or write delay_correction dc-asgd)",
                 delay_correction_words[cfg->delay_correction]);
    else if (!lambda && cfg->delay_correction == DELAY_DC_ASGD)
        error_at(s->src, mode->values[0]->span, "delay_correction dc-asgd needs dc_lambda, DC-ASGD's lambda, in "
                 "the pipeline block (dc_lambda 0 trains as plain PACI, bit for bit)");
}

/* DC-ASGD corrects the gradient of a backward whose stage stepped since its forward: it needs
 * PACI's delays, a backward that differentiates at the live weights (not PipeDream's stash,
 * not a recomputing slot's rerun) and, for now, the CPU runtime (checked there). */
static void check_dc_asgd(Sema *s, Span at)
{
    Config *cfg = s->cfg;
    if (paci_schedule_is_sync(cfg->schedule)) {
        warning_at(s->src, at, "delay_correction dc-asgd does nothing under the synchronous schedule %s: "
                   "no backward comes after an optimizer step of its stage", paci_schedule_name(cfg->schedule));
        cfg->delay_correction = DELAY_NONE;
    } else if (cfg->schedule == PACI_SCHED_PIPEDREAM) {
        error_at(s->src, at, "delay_correction dc-asgd is not implemented for pipedream: its backward runs on "
                 "the forward's stashed weights, toward which the correction would have to be taken; use "
                 "schedule paci");
    } else if (cfg->recompute == RECOMPUTE_FULL && usable(s, "pipeline", "recompute")) {
        error_at(s->src, at, "delay_correction dc-asgd does not go with recompute full: a recomputing stage "
                 "reruns each forward on the live weights before its backward, so its gradients have no "
                 "delay to correct (use recompute none)");
    }
}

/* Weight prediction needs the forward-to-backward delay of an asynchronous schedule without
 * weight stashing (paci), and an optimizer whose update direction the runtime predicts along; the Nesterov correction NAdamW and a
 * delay, so an asynchronous schedule (docs/dsl.md "delay_correction"). */
static void check_delay_correction(Sema *s)
{
    Config *cfg = s->cfg;
    const Entry *e = written(s, "pipeline", "delay_correction");
    check_dc_lambda(s);
    if (!e || cfg->delay_correction == DELAY_NONE || !usable(s, "pipeline", "delay_correction"))
        return;
    Span at = e->values[0]->span;
    if (cfg->delay_correction == DELAY_DC_ASGD) {
        check_dc_asgd(s, at);
        return;
    }
    if (cfg->delay_correction == DELAY_NESTEROV) {
        if (cfg->optimizer != PR_OPT_NADAMW)
            error_at(s->src, at, "delay_correction nesterov raises NAdamW's beta1 with each stage's delay; "
                     "it needs optimizer nadamw, not %s (or delay_correction none)",
                     optimizer_names[cfg->optimizer]);
        else if (paci_schedule_is_sync(cfg->schedule))
            error_at(s->src, at, "delay_correction nesterov needs an asynchronous schedule (paci or pipedream): "
                     "under %s a micro-batch's forward and backward straddle no optimizer step "
                     "(use delay_correction none)", paci_schedule_name(cfg->schedule));
        return;
    }
    if (paci_schedule_is_sync(cfg->schedule)) {
        warning_at(s->src, at, "delay_correction predict does nothing under the synchronous schedule %s: "
                   "every forward already sees the weights its backward sees", paci_schedule_name(cfg->schedule));
        cfg->delay_correction = DELAY_NONE;
    } else if (cfg->schedule == PACI_SCHED_PIPEDREAM) {
        error_at(s->src, at, "delay_correction predict is not implemented for pipedream: its backward runs "
                 "on the forward's stashed weights, so a predicted forward would not match it; use schedule paci");
    } else if (cfg->optimizer == PR_OPT_LARS) {
        error_at(s->src, at, "delay_correction predict extrapolates along the optimizer's update direction; "
                 "lars's step length comes from the next gradient's norm (its trust ratio ||w|| / ||g||), "
                 "which a forward does not have: use adamw, muon, lamb, nadamw or lans, or delay_correction none");
    }
}

/* A warm start goes before PACI, within the run, and without the delay-aware momentum (whose
 * beta1 the compiler fixes per stage from PACI's delays, for every step). */
static void check_warm_start(Sema *s)
{
    Config *cfg = s->cfg;
    const Entry *e = written(s, "pipeline", "warm_start");
    if (!e || !usable(s, "pipeline", "warm_start"))
        return;
    if (cfg->schedule != PACI_SCHED_PACI && usable(s, "pipeline", "schedule"))
        error_at(s->src, e->key_span, "warm_start goes with schedule paci (its first steps synchronous, then "
                 "PACI's), not %s (remove warm_start, or use schedule paci)", paci_schedule_name(cfg->schedule));
    else if (usable(s, "train", "steps") && written(s, "train", "steps") && cfg->warm_steps >= cfg->steps)
        error_at(s->src, e->values[1]->span, "warm_start %ld covers the whole run of %ld steps: that is schedule %s "
                 "(use fewer warm steps, or schedule %s)", cfg->warm_steps, cfg->steps,
                 paci_schedule_name(cfg->warm_schedule), paci_schedule_name(cfg->warm_schedule));
    else if (cfg->delay_correction == DELAY_NESTEROV && usable(s, "pipeline", "delay_correction"))
        error_at(s->src, e->key_span, "warm_start does not go with delay_correction nesterov yet: its beta1 is "
                 "raised for PACI's delays on every step, the warm ones too (use delay_correction predict or none)");
    else
        return;
    mark_failed(s, e);
    cfg->warm_steps = 0;
}

const char *config_with_schedule(const Config *cfg, int kind, Config *out)
{
    static char why[160];
    int p = config_devices(cfg);
    int v = kind == PACI_SCHED_INTERLEAVED && cfg->schedule == PACI_SCHED_INTERLEAVED ? config_chunks(cfg)
            : schedule_has_chunks(kind)                                             ? 2
                                                                                    : 1;
    *out = *cfg;
    out->schedule = kind;
    out->chunks = v;
    out->placement = kind == PACI_SCHED_ZBV ? PACI_PLACEMENT_V : PACI_PLACEMENT_LOOP;
    out->stages = p * v;
    if (kind != (int)cfg->schedule) /* a warm start belongs to the file's paci */
        out->warm_steps = 0;
    if (out->stages != cfg->stages) {
        out->split_units = NULL; /* the file's split has a stage count of its own */
        out->vocab_split = v > 1 ? 0 : -1;
    }
    if (v > 1 && cfg->vocab_split > 0)
        snprintf(why, sizeof why, "vocab_split does not go with chunks");
    else if (v > 1 && cfg->tied)
        snprintf(why, sizeof why, "a tied head needs one stage");
    else if (out->stages > PACI_MAX_STAGES)
        snprintf(why, sizeof why, "%d x %d stages is above %d", p, v, PACI_MAX_STAGES);
    else if (out->stages > cfg->layers + 2)
        snprintf(why, sizeof why, "%d stages for %d layers", out->stages, cfg->layers);
    else if (kind == PACI_SCHED_INTERLEAVED && cfg->window % p != 0)
        snprintf(why, sizeof why, "window %d is not a multiple of p = %d", cfg->window, p);
    else
        return NULL;
    return why;
}

double stage_beta1(const Config *cfg, int s)
{
    if (cfg->delay_correction != DELAY_NESTEROV)
        return cfg->beta1;
    return cfg->beta1 + (double)cfg->stage_delay[s] * (0.99 - cfg->beta1) / (double)cfg->stages;
}

static void derive_training(Sema *s)
{
    Config *cfg = s->cfg;
    if (!s->lr_at_given)
        cfg->lr_base_batch = cfg->global_batch;
    double ratio = cfg->lr_base_batch > 0 ? (double)cfg->global_batch / (double)cfg->lr_base_batch : 1;
    switch (cfg->lr_scale) {
    case LR_SCALE_NONE: cfg->lr = cfg->lr_base; break;
    case LR_SCALE_LINEAR: cfg->lr = cfg->lr_base * ratio; break;
    case LR_SCALE_SQRT: cfg->lr = cfg->lr_base * sqrt(ratio); break;
    }
    const Entry *warmup = written(s, "lr_schedule", "warmup");
    if (cfg->warmup_steps < 0) {
        double percent = warmup && usable(s, "lr_schedule", "warmup") ? warmup->values[0]->number : 1;
        long steps = lround(percent / 100 * (double)cfg->steps);
        cfg->warmup_steps = percent > 0 && steps < 1 ? 1 : steps;
    }
    if (!usable(s, "train", "steps") || !written(s, "train", "steps"))
        return;
    if (warmup && usable(s, "lr_schedule", "warmup") && cfg->warmup_steps > cfg->steps)
        warning_at(s->src, warmup->values[0]->span,
                   "warmup %ld steps is longer than the %ld training steps: the lr never reaches its peak",
                   cfg->warmup_steps, cfg->steps);
    static const struct {
        const char *block;
        size_t field;
        const char *what;
    } intervals[] = {
        {"eval", AT(eval_every), "validation runs only at the end"},
        {"checkpoint", AT(ckpt_every), "a checkpoint is written only at the end"},
    };
    for (size_t i = 0; i < 2; i++) {
        const Entry *every = written(s, intervals[i].block, "every");
        long value = *(long *)field_of(cfg, intervals[i].field);
        if (every && usable(s, intervals[i].block, "every") && value > cfg->steps)
            warning_at(s->src, every->values[0]->span, "%s every %ld is more than the %ld steps: %s",
                       intervals[i].block, value, cfg->steps, intervals[i].what);
    }
}

/* Spans later phases point at; a value not written points at its block, else the file. */
static Span span_of(Sema *s, const char *block, const char *key, int root_index)
{
    const Entry *e = written(s, block, key);
    if (e && e->n_values > 0)
        return e->values[0]->span;
    const Entry *b = s->blocks[root_index];
    return b ? b->key_span : SPAN_FILE;
}

/* `hardware cpu { calibration "FILE" }`: a file pacic calibrate-cpu wrote, against the DSL's folder. */
static void set_calibration(Sema *s, const Entry *e)
{
    const char *path;
    if (!string_value(s, e, "one file name in quotes", &path)) {
        mark_failed(s, e);
        return;
    }
    free(s->cfg->cpu_calibration);
    s->cfg->cpu_calibration = resolve_path(s, path);
}

/* The machine: no hardware block is this machine's CPU, `hardware cpu` a CPU too, `hardware`
 * and `hardware gpu` a GPU per stage; what the block leaves out is an H100 SXM's (dense
 * FLOP/s by precision, 80 GB, HBM3's 3.35 TB/s, NVLink's 450 GB/s and 5 us, one 200 Gb/s
 * InfiniBand HDR port per GPU), or the CPU's as machine.c finds them. */
static void derive_hardware(Sema *s)
{
    Config *cfg = s->cfg;
    const Entry *hw = s->blocks[4];
    cfg->machine = !hw || (hw->block && hw->block->name && strcmp(hw->block->name, "cpu") == 0) ? MACHINE_CPU
                                                                                                  : MACHINE_GPU;
    if (cfg->machine == MACHINE_GPU) {
        static const char *const cpu_only[] = {"cores", "vector_flops", "calibration"};
        for (size_t i = 0; i < sizeof cpu_only / sizeof *cpu_only; i++) {
            const Entry *e = written(s, "hardware", cpu_only[i]);
            if (e)
                error_at(s->src, e->key_span, "'%s' is a CPU's rate: write `hardware cpu { ... }` (this block "
                         "describes a GPU)", cpu_only[i]);
        }
        if (cfg->device_flops == 0)
            cfg->device_flops = cfg->precision == PREC_BF16 ? 989e12 : 494e12;
        if (cfg->link_bandwidth == 0)
            cfg->link_bandwidth = 450e9;
        if (cfg->link_latency < 0)
            cfg->link_latency = 5e-6;
        if (cfg->device_memory == 0)
            cfg->device_memory = 80e9;
        if (cfg->memory_bandwidth == 0)
            cfg->memory_bandwidth = 3.35e12;
        if (cfg->network_bandwidth == 0)
            cfg->network_bandwidth = 25e9;
        return;
    }
    const char *error = NULL;
    if (!machine_cpu_config(cfg, &error)) {
        const Entry *e = written(s, "hardware", "calibration");
        if (e && e->n_values > 0)
            error_at(s->src, e->values[0]->span, "%s", error);
        else
            diag_plain(DIAG_ERROR, "%s", error);
    }
}

bool sema_check(const Source *src, const Ast *ast, bool need_data, Config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->src = src;
    set_defaults(cfg);
    Sema *s = xcalloc(1, sizeof *s);
    s->src = src;
    s->cfg = cfg;
    s->need_data = need_data;
    int errors_before = diag_error_count();

    for (int i = 0; i < ast->root->n_entries; i++) {
        const Entry *e = ast->root->entries[i];
        for (int r = 0; root_keys[r].name; r++)
            if (strcmp(root_keys[r].name, e->key) == 0 && !s->blocks[r])
                s->blocks[r] = e;
    }
    check_block(s, &root_block, ast->root);
    check_model(s);
    check_pipeline(s);
    check_parallel(s);
    check_compression(s);
    check_accumulate(s);
    check_zero_bubble(s);
    check_extents(s);
    check_optimizer(s);
    check_delay_correction(s);
    check_warm_start(s);
    derive_training(s);
    derive_hardware(s);

    cfg->span_model = s->blocks[0] ? (s->blocks[0]->block && s->blocks[0]->block->name
                                          ? s->blocks[0]->block->name_span
                                          : s->blocks[0]->key_span)
                                   : SPAN_FILE;
    cfg->span_stages = span_of(s, "pipeline", "stages", 1);
    cfg->span_window = written(s, "pipeline", "window") ? span_of(s, "pipeline", "window", 1)
                       : written(s, "batch", "global") ? span_of(s, "batch", "global", 2)
                                                       : cfg->span_stages;
    cfg->span_micro = span_of(s, "batch", "micro", 2);
    if (!cfg->split_units)
        cfg->span_split = cfg->span_stages;
    cfg->span_memory = span_of(s, "hardware", "memory", 4);
    cfg->span_vocab_split = span_of(s, "pipeline", "vocab_split", 1);
    free(s);
    return diag_error_count() == errors_before;
}

void config_free(Config *cfg)
{
    free(cfg->cpu);
    free(cfg->cpu_given);
    free(cfg->cpu_calibration);
    free(cfg->split_units);
    free(cfg->train_data);
    free(cfg->val_data);
    free(cfg->ckpt_dir);
    memset(cfg, 0, sizeof *cfg);
}

static void dump_span(FILE *out, const Config *cfg, const char *name, Span span)
{
    if (span.begin < 0) {
        fprintf(out, "  %-16s (not written)\n", name);
        return;
    }
    int line, col;
    diag_line_col(cfg->src, span.begin, &line, &col);
    fprintf(out, "  %-16s %d:%d\n", name, line, col);
}

/* Every field, one a line, grouped as in the DSL (--dump config). */
void config_dump(FILE *out, const Config *cfg)
{
    fprintf(out, "model\n  layers %d\n  width %d\n  heads %d\n  context %d\n  vocab %d\n  tied %s\n",
            cfg->layers, cfg->width, cfg->heads, cfg->context, cfg->vocab, cfg->tied ? "true" : "false");
    fprintf(out, "pipeline\n  stages %d\n  schedule %s\n", config_devices(cfg), schedule_words[cfg->schedule]);
    if (config_chunks(cfg) > 1) /* only when set: older dumps stay as they were */
        fprintf(out, "  chunks %d (%d stages)\n  placement %s\n", config_chunks(cfg), cfg->stages,
                placement_words[cfg->placement]);
    fprintf(out, "  window %d\n  split ", cfg->window);
    if (cfg->split_units) {
        for (int i = 0; i < cfg->stages; i++)
            fprintf(out, "%s%g", i ? " " : "[", split_entry_layers(cfg, i));
        fprintf(out, "]\n");
    } else {
        fprintf(out, "automatic\n");
    }
    if (cfg->recompute != RECOMPUTE_NONE) /* only when set: older dumps stay as they were */
        fprintf(out, "  recompute %s\n", recompute_words[cfg->recompute]);
    if (cfg->delay_correction == DELAY_DC_ASGD)
        fprintf(out, "  delay_correction dc-asgd\n  dc_lambda %g\n", cfg->dc_lambda);
    if (cfg->messages != MESSAGES_FP32)
        fprintf(out, "  messages %s\n", messages_words[cfg->messages]);
    if (cfg->vocab_split >= 0)
        fprintf(out, "  vocab_split %ld\n", cfg->vocab_split);
    fprintf(out, "parallel\n  data %d\n", config_replicas(cfg));
    if (cfg->compression == COMPRESSION_DGC) /* only when set: older dumps stay as they were */
        fprintf(out, "  compression dgc\n    density %g\n    warmup_steps %ld\n    clip %g\n", cfg->dgc_density,
                cfg->dgc_warmup_steps, cfg->dgc_clip);
    fprintf(out, "batch\n  micro %d\n  global %ld\n", cfg->micro, cfg->global_batch);
    if (cfg->accumulate != ACCUMULATE_SEQUENTIAL) /* only when set: older dumps stay as they were */
        fprintf(out, "  accumulate %s\n", accumulate_words[cfg->accumulate]);
    fprintf(out, "train\n  data %s\n  val %s\n  steps %ld\n  seed %llu\n  precision %s\n  attention %s\n",
            cfg->train_data ? cfg->train_data : "(none)", cfg->val_data ? cfg->val_data : "(none)",
            cfg->steps, (unsigned long long)cfg->seed, precision_words[cfg->precision],
            attention_words[cfg->attention]);
    if (cfg->data_order != PR_DATA_SEQUENTIAL) /* only when set: older dumps stay as they were */
        fprintf(out, "  data_order %s\n", data_order_words[cfg->data_order]);
    fprintf(out, "  lr %g (base %g at global batch %ld, scale %s)\n", cfg->lr, cfg->lr_base,
            cfg->lr_base_batch, scale_words[cfg->lr_scale]);
    fprintf(out, "  betas %g %g\n  eps %g\n  weight_decay %g\n  clip %g\n", cfg->beta1, cfg->beta2,
            cfg->eps, cfg->weight_decay, cfg->grad_clip);
    if (cfg->optimizer == PR_OPT_NADAMW)
        fprintf(out, "  optimizer nadamw: momentum_decay %g, delay_correction %s\n", cfg->momentum_decay,
                delay_correction_words[cfg->delay_correction]);
    else if (cfg->optimizer != PR_OPT_ADAMW)
        fprintf(out, "  optimizer %s: momentum %g, nesterov %s, ns_steps %d, shape_scale %s, "
                "trust_coefficient %g; adamw group lr %g, betas %g %g, eps %g, weight_decay %g\n",
                optimizer_names[cfg->optimizer], cfg->momentum, cfg->nesterov ? "true" : "false",
                cfg->ns_steps, shape_scale_words[cfg->shape_scale], cfg->trust_coefficient,
                cfg->group_lr, cfg->group_beta1, cfg->group_beta2, cfg->group_eps,
                cfg->group_weight_decay);
    fprintf(out, "  warmup %ld steps\n  decay %s\n  floor %g\n", cfg->warmup_steps,
            decay_words[cfg->lr_decay], cfg->min_lr_ratio);
    fprintf(out, "  eval every %ld, %ld batches\n  checkpoint every %ld in %s, keep %ld\n", cfg->eval_every,
            cfg->eval_batches, cfg->ckpt_every, cfg->ckpt_dir, cfg->ckpt_keep);
    fprintf(out, "hardware\n  flops %g\n  bandwidth %g\n  latency %g\n  memory %g\n  memory_bandwidth %g\n"
                 "  network_bandwidth %g\n",
            cfg->device_flops, cfg->link_bandwidth, cfg->link_latency, cfg->device_memory, cfg->memory_bandwidth,
            cfg->network_bandwidth);
    fprintf(out, "spans\n");
    dump_span(out, cfg, "model", cfg->span_model);
    dump_span(out, cfg, "stages", cfg->span_stages);
    dump_span(out, cfg, "window", cfg->span_window);
    dump_span(out, cfg, "micro", cfg->span_micro);
    dump_span(out, cfg, "split", cfg->span_split);
    dump_span(out, cfg, "memory", cfg->span_memory);
}
