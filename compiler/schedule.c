/* schedule.c: the generators (gpipe, 1f1b, pipedream, paci, zb-h1, zb-h2) and their
 * compression into the table of runtime/paci_schedule.h.
 *
 * A generator first fixes the order of each stage's computations (forwards, backwards,
 * optimizer steps) for one segment; the communication around them follows from the
 * stage's position alone: RECV_ACT right before a forward and SEND_ACT right after it
 * (except at the pipeline's ends), RECV_GRAD right before a backward and SEND_GRAD right
 * after it. Slots follow the micro-batch (mb mod slots), stash slots the weight version.
 *
 * With chunks (interleaved, zb-v) a device holds several stages: its order names the stage
 * of every computation, the communication follows from that stage's position, and the
 * device runs one list (a hand-over between two stages of one device is a send and a
 * receive on that device). See order_interleaved and order_zero_bubble_v.
 *
 * Channel capacity: every link buffers one message per direction. The property tests
 * verify every schedule over p in 1..16 and K in 1..64 with that capacity, and 1 is the
 * smallest a blocking send can have (0 would be a rendezvous the runtime does not do).
 */
#include <stdlib.h>
#include <string.h>

#include "pacic.h"

enum { CHANNEL_CAPACITY = 1 };

static const char *const op_names[] = {
#define OP_NAME(name, text) text,
    PACI_OPS(OP_NAME)
#undef OP_NAME
};

static const struct {
    const char *name;
    bool sync;
} schedule_info[] = {
#define SCHED_INFO(name, text, sync) {text, sync},
    PACI_SCHEDULES(SCHED_INFO)
#undef SCHED_INFO
};

/* Names come from the X-macro lists, so an added op or schedule needs no edit here. */
const char *paci_op_name(int op)
{
    return op >= 0 && op < PACI_OP_COUNT ? op_names[op] : "?";
}

const char *paci_schedule_name(int kind)
{
    return kind >= 0 && kind < PACI_SCHED_COUNT ? schedule_info[kind].name : "?";
}

int paci_schedule_from_name(const char *name)
{
    for (int k = 0; k < PACI_SCHED_COUNT; k++)
        if (strcmp(schedule_info[k].name, name) == 0)
            return k;
    return -1;
}

bool paci_schedule_is_sync(int kind)
{
    return kind >= 0 && kind < PACI_SCHED_COUNT && schedule_info[kind].sync;
}

static long gcd_long(long a, long b)
{
    while (b) {
        long r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* A segment ends at every drain: gcd of the non-zero eval and checkpoint intervals,
 * capped at the run; the whole run when neither is set. */
long schedule_segment_steps(const Config *cfg)
{
    long total = cfg->steps > 0 ? cfg->steps : 1;
    long d = 0;
    if (cfg->eval_every > 0)
        d = cfg->eval_every;
    if (cfg->ckpt_every > 0)
        d = d ? gcd_long(d, cfg->ckpt_every) : cfg->ckpt_every;
    if (d == 0 || d > total)
        d = total;
    return d;
}

static long min_long(long a, long b)
{
    return a < b ? a : b;
}

PipeShape unchunked_shape(int stages)
{
    return (PipeShape){.stages = stages, .devices = stages, .chunks = 1, .placement = PACI_PLACEMENT_LOOP};
}

PipeShape config_shape(const Config *cfg)
{
    PipeShape shape = unchunked_shape(cfg->stages);
    if (schedule_has_chunks(cfg->schedule) != (config_chunks(cfg) > 1))
        ICE("schedule %s with %d chunks", paci_schedule_name(cfg->schedule), config_chunks(cfg));
    shape.chunks = config_chunks(cfg);
    shape.devices = config_devices(cfg);
    shape.placement = shape.chunks > 1 ? cfg->placement : PACI_PLACEMENT_LOOP;
    return shape;
}

int shape_device(const PipeShape *shape, int stage)
{
    for (int d = 0; d < shape->devices; d++)
        for (int c = 0; c < shape->chunks; c++)
            if (paci_placed_stage(shape->placement, shape->devices, d, c) == stage)
                return d;
    ICE("stage %d is on no device of %d x %d", stage, shape->devices, shape->chunks);
}

static long zero_bubble_slots(int kind, int stages, int stage, int window);
static long chunked_slots(int kind, const PipeShape *shape, int stage, int window);

/* In flight at stage s: the window for gpipe; p-s for 1F1B-style schedules, capped by
 * the micro-batches of one step (1f1b flushes) or of one segment (async ones); for the
 * zero-bubble schedules and those with chunks what their order holds at most. */
int schedule_shape_slots(int kind, const PipeShape *shape, int stage, int window, long segment_steps)
{
    long depth = shape->stages - stage;
    switch (kind) {
    case PACI_SCHED_GPIPE:
        return window;
    case PACI_SCHED_ONEF1B:
        return (int)min_long(depth, window);
    case PACI_SCHED_PIPEDREAM:
    case PACI_SCHED_PACI:
        return (int)min_long(depth, segment_steps * window);
    case PACI_SCHED_ZBH1:
    case PACI_SCHED_ZBH2:
        return (int)zero_bubble_slots(kind, shape->stages, stage, window);
    case PACI_SCHED_INTERLEAVED:
    case PACI_SCHED_ZBV:
        return (int)chunked_slots(kind, shape, stage, window);
    }
    unreachable();
}

int schedule_slots(int kind, int stages, int stage, int window, long segment_steps)
{
    PipeShape shape = unchunked_shape(stages);
    return schedule_shape_slots(kind, &shape, stage, window, segment_steps);
}

/* ---- compute order ------------------------------------------------------------------ */

typedef struct Compute {
    uint8_t op;    /* FWD, BWD, STEP; BWD_B and BWD_W in the zero-bubble orders */
    uint8_t stage; /* the stage it runs on: the device's own, or one of its chunks' */
    int64_t mb;
} Compute;

typedef struct ComputeList {
    Compute *items;
    long n, cap;
} ComputeList;

static void push_compute(ComputeList *cl, int op, long mb)
{
    if (cl->n == cl->cap) {
        cl->cap = cl->cap ? cl->cap * 2 : 256;
        cl->items = xrealloc(cl->items, (size_t)cl->cap * sizeof *cl->items);
    }
    cl->items[cl->n++] = (Compute){(uint8_t)op, 0, mb};
}

/* A computation of a given stage (the orders with chunks). */
static void push_staged(ComputeList *cl, int stage, int op, long mb)
{
    push_compute(cl, op, mb);
    cl->items[cl->n - 1].stage = (uint8_t)stage;
}

/* A backward completing a window of K is followed by the stage's optimizer step. */
static void push_backward(ComputeList *cl, long mb, int window)
{
    push_compute(cl, PACI_OP_BWD, mb);
    if ((mb + 1) % window == 0)
        push_compute(cl, PACI_OP_STEP, -1);
}

/* GPipe: all K forwards of a step, then all K backwards in increasing order, step. */
static void order_gpipe(ComputeList *cl, int window, long steps)
{
    for (long j = 0; j < steps; j++) {
        long first = j * window;
        for (long i = 0; i < window; i++)
            push_compute(cl, PACI_OP_FWD, first + i);
        for (long i = 0; i < window; i++)
            push_backward(cl, first + i, window);
    }
}

/* 1F1B over the micro-batches [first, first+count): warm-up of min(w, count) forwards,
 * then forward/backward pairs, then the remaining backwards. */
static void order_one_f_one_b(ComputeList *cl, long first, long count, long w, int window)
{
    long warmup = min_long(w, count);
    for (long i = 0; i < warmup; i++)
        push_compute(cl, PACI_OP_FWD, first + i);
    for (long i = 0; i < count - warmup; i++) {
        push_compute(cl, PACI_OP_FWD, first + warmup + i);
        push_backward(cl, first + i, window);
    }
    for (long i = count - warmup; i < count; i++)
        push_backward(cl, first + i, window);
}

/* The zero-bubble schedules (Qi et al., "Zero Bubble Pipeline Parallelism", 2024): each
 * backward is split into B, the gradient of the stage's input, on the pipeline's critical
 * path, and W, its weights' gradients, which no other stage waits for. Stage s of p runs, in
 * each window, the paper's handcrafted order: `warm` forwards, then for each micro-batch its
 * B, the W of the micro-batch `defer` places behind, and the next forward; then the W's
 * left, and its step. zb-h1: warm = p - s, defer = s, so every stage holds at most p
 * micro-batches between a forward and its W (1F1B's peak), and at F = B = W = 1 a step idles
 * p - 1 units (1F1B's 3(p - 1)): B's run back to back down the pipeline while the deferred
 * W's fill the tail. zb-h2: warm = 2(p - s) - 1, defer = 2s, 2p - 1 micro-batches, and no
 * idle unit; it needs K >= 2p - 1, and a smaller window runs zb-h1's order (zb-h2's capped
 * warm-up idles as much at unit costs and more at real ones). A stage's next window starts
 * after its own step: synchronous, each micro-batch on the weights of the steps before its
 * window. The order does not depend on the model; its times, measured or predicted, are the
 * simulator's. */
static void order_zero_bubble(ComputeList *cl, int kind, int stages, int stage, int window, long steps)
{
    bool h2 = zero_bubble_h2_order(kind, stages, window);
    long warm = min_long(h2 ? 2L * (stages - stage) - 1 : stages - stage, window);
    long defer = h2 ? 2L * stage : stage;
    for (long j = 0; j < steps; j++) {
        long first = j * window, f = 0, b = 0, w = 0;
        while (f < warm)
            push_compute(cl, PACI_OP_FWD, first + f++);
        while (b < window) {
            push_compute(cl, PACI_OP_BWD_B, first + b++);
            if (b - w > defer)
                push_compute(cl, PACI_OP_BWD_W, first + w++);
            if (f < window)
                push_compute(cl, PACI_OP_FWD, first + f++);
        }
        while (w < window)
            push_compute(cl, PACI_OP_BWD_W, first + w++);
        push_compute(cl, PACI_OP_STEP, -1);
    }
}

/* The most micro-batches stage s holds between a forward and its W in its zero-bubble order
 * (every window's order is the same, and holds none at its step). */
static long zero_bubble_slots(int kind, int stages, int stage, int window)
{
    ComputeList order = {0};
    order_zero_bubble(&order, kind, stages, stage, window, 1);
    long held = 0, most = 0;
    for (long i = 0; i < order.n; i++) {
        held += order.items[i].op == PACI_OP_FWD ? 1 : order.items[i].op == PACI_OP_BWD_W ? -1 : 0;
        most = held > most ? held : most;
    }
    free(order.items);
    return most;
}

/* Device d's k-th forward (or backward) of a window in Megatron's interleaved order: the
 * micro-batch (relative to the window) and the chunk (backwards run the chunks from the last). */
static long interleaved_mb(long k, long p, long v)
{
    return (k / (p * v)) * p + k % p;
}

static int interleaved_stage(const PipeShape *shape, int device, long k, bool backward)
{
    long p = shape->devices, v = shape->chunks, chunk = (k / p) % v;
    return paci_placed_stage(shape->placement, (int)p, device, (int)(backward ? v - 1 - chunk : chunk));
}

/* Interleaved 1F1B (Narayanan et al., SC'21; Megatron-LM's order). Device d of p holds v
 * chunks (stage c p + d of chunk c, loop placement). Per window of K micro-batches (K a
 * multiple of p), the device runs K v forwards and K v backwards: its k-th forward is of chunk
 * (k / p) mod v and micro-batch (k / (p v)) p + k mod p, so micro-batches go through its
 * chunks in groups of p; its k-th backward runs the chunks from the last, micro-batches in the
 * same groups. It starts with 2(p - d - 1) + (v - 1) p forwards (all of them when that is
 * more), then alternates a forward and a backward, then the backwards left; then each of its
 * stages steps. A flush ends each window: synchronous. At unit costs the fill and drain take
 * (p - 1)/v of a stage's time, not 1F1B's p - 1: the bubble divides by v. */
static void order_interleaved(ComputeList *cl, const PipeShape *shape, int device, int window, long steps)
{
    long p = shape->devices, v = shape->chunks, total = window * v;
    long warm = min_long(2 * (p - device - 1) + (v - 1) * p, total);
    for (long j = 0; j < steps; j++) {
        long first = j * window, f = 0, b = 0;
        for (; f < warm; f++)
            push_staged(cl, interleaved_stage(shape, device, f, false), PACI_OP_FWD, first + interleaved_mb(f, p, v));
        for (; f < total; f++, b++) {
            push_staged(cl, interleaved_stage(shape, device, f, false), PACI_OP_FWD, first + interleaved_mb(f, p, v));
            push_staged(cl, interleaved_stage(shape, device, b, true), PACI_OP_BWD, first + interleaved_mb(b, p, v));
        }
        for (; b < total; b++)
            push_staged(cl, interleaved_stage(shape, device, b, true), PACI_OP_BWD, first + interleaved_mb(b, p, v));
        for (int c = 0; c < v; c++)
            push_staged(cl, paci_placed_stage(shape->placement, (int)p, device, c), PACI_OP_STEP, -1);
    }
}

/* One window of a ZB-V device: its two stages (chunk 0 down, chunk 1 up) and how many
 * forwards, B's and W's of each it has run. */
typedef struct VeeWindow {
    ComputeList *cl;
    int stage[2];
    long first, window;
    long f[2], b[2], w[2];
} VeeWindow;

/* The next forward, B or W of chunk c, when one can run: chunk 0's forwards up to the window,
 * chunk 1's up to chunk 0's (the micro-batch comes back up), chunk 1's B's after its forwards,
 * chunk 0's after chunk 1's (the gradient goes back down), each W after its B. */
static void vee_forward(VeeWindow *o, int c)
{
    if (o->f[c] < (c == 0 ? o->window : o->f[0]))
        push_staged(o->cl, o->stage[c], PACI_OP_FWD, o->first + o->f[c]++);
}

static void vee_b(VeeWindow *o, int c)
{
    if (o->b[c] < (c == 1 ? o->f[1] : o->b[1]))
        push_staged(o->cl, o->stage[c], PACI_OP_BWD_B, o->first + o->b[c]++);
}

static void vee_w(VeeWindow *o, int c)
{
    if (o->w[c] < o->b[c])
        push_staged(o->cl, o->stage[c], PACI_OP_BWD_W, o->first + o->w[c]++);
}

/* ZB-V (Qi et al., "Pipeline Parallelism with Controllable Memory", 2024, the V-shaped zero
 * bubble schedule). Device d of p holds stage d (chunk 0, going down the devices) and stage
 * 2p - 1 - d (chunk 1, coming back up), so device 0 holds the embedding and the head. Each
 * backward runs as B and W. Per window of K micro-batches, writing F0, B0, W0 for chunk 0's
 * and F1, B1, W1 for chunk 1's, each for the next micro-batch in turn:
 *   1. 2(p - d) - 1 F0: chunk 0's pipeline fills;
 *   2. d times F1 F0: chunk 1 starts as the micro-batches come back up;
 *   3. p - d times F1 B1 W1: the first backwards, which start at the head (device 0's chunk 1);
 *   4. while forwards are left: B0 W0 F0 F1 B1 W1, F0 only while chunk 0 has one left (B0 W0
 *      first: a slot is freed before the next is taken, so the device's two stages together
 *      hold at most 2p chunk activations, p stages' worth: 1F1B's peak);
 *   5. d times B0 B1, then p - d times B0 W0: the backwards left, W's deferred into the drain;
 *   6. the W's left, chunk 1's then chunk 0's; then both stages step.
 * Every count is capped by what is left to run, so any window runs (the pipeline idles more
 * when K < 2p - 1: at K = p a sixth of 1F1B's idle time). At F = B = W and K >= 2p - 1 the
 * steady state idles nowhere. Synchronous: each stage steps after its window's W's, and its
 * next window's forwards come after that step. */
static void order_zero_bubble_v(ComputeList *cl, const PipeShape *shape, int device, int window, long steps)
{
    long p = shape->devices, d = device;
    for (long j = 0; j < steps; j++) {
        VeeWindow o = {.cl = cl, .first = j * window, .window = window};
        for (int c = 0; c < 2; c++)
            o.stage[c] = paci_placed_stage(shape->placement, (int)p, device, c);
        for (long i = 0; i < 2 * (p - d) - 1; i++)
            vee_forward(&o, 0);
        for (long i = 0; i < d; i++) {
            vee_forward(&o, 1);
            vee_forward(&o, 0);
        }
        for (long i = 0; i < p - d; i++) {
            vee_forward(&o, 1);
            vee_b(&o, 1);
            vee_w(&o, 1);
        }
        while (o.f[1] < window) {
            vee_b(&o, 0);
            vee_w(&o, 0);
            vee_forward(&o, 0);
            vee_forward(&o, 1);
            vee_b(&o, 1);
            vee_w(&o, 1);
        }
        for (long i = 0; i < d; i++) {
            vee_b(&o, 0);
            vee_b(&o, 1);
        }
        while (o.b[1] < window)
            vee_b(&o, 1);
        for (long i = 0; i < p - d; i++) {
            vee_b(&o, 0);
            vee_w(&o, 0);
        }
        while (o.b[0] < window)
            vee_b(&o, 0);
        while (o.w[1] < window)
            vee_w(&o, 1);
        while (o.w[0] < window)
            vee_w(&o, 0);
        push_staged(cl, o.stage[0], PACI_OP_STEP, -1);
        push_staged(cl, o.stage[1], PACI_OP_STEP, -1);
    }
}

/* The most micro-batches stage s holds between a forward and its backward (or W) in its
 * device's order (every window's order is the same, and holds none at its step). */
static long chunked_slots(int kind, const PipeShape *shape, int stage, int window)
{
    ComputeList order = {0};
    int device = shape_device(shape, stage);
    if (kind == PACI_SCHED_INTERLEAVED)
        order_interleaved(&order, shape, device, window, 1);
    else
        order_zero_bubble_v(&order, shape, device, window, 1);
    int frees = kind == PACI_SCHED_ZBV ? PACI_OP_BWD_W : PACI_OP_BWD;
    long held = 0, most = 0;
    for (long i = 0; i < order.n; i++) {
        if (order.items[i].stage != stage)
            continue;
        held += order.items[i].op == PACI_OP_FWD ? 1 : order.items[i].op == frees ? -1 : 0;
        most = held > most ? held : most;
    }
    free(order.items);
    return most > 0 ? most : 1; /* a broken order is the verifier's to report, not a division by 0 */
}

static void build_order(ComputeList *cl, int kind, int stages, int stage, int window, long steps);

/* Device `device`'s order; without chunks it runs the stage of its number. */
static void build_device_order(ComputeList *cl, int kind, const PipeShape *shape, int device, int window, long steps)
{
    if (kind == PACI_SCHED_INTERLEAVED) {
        order_interleaved(cl, shape, device, window, steps);
        return;
    }
    if (kind == PACI_SCHED_ZBV) {
        order_zero_bubble_v(cl, shape, device, window, steps);
        return;
    }
    build_order(cl, kind, shape->stages, device, window, steps);
    for (long i = 0; i < cl->n; i++)
        cl->items[i].stage = (uint8_t)device;
}

static void build_order(ComputeList *cl, int kind, int stages, int stage, int window, long steps)
{
    long w = stages - stage - 1;
    switch (kind) {
    case PACI_SCHED_GPIPE:
        order_gpipe(cl, window, steps);
        return;
    case PACI_SCHED_ONEF1B: /* a flush per step: 1F1B inside each window */
        for (long j = 0; j < steps; j++)
            order_one_f_one_b(cl, j * window, window, w, window);
        return;
    case PACI_SCHED_PIPEDREAM: /* no flush: one 1F1B over the whole segment */
    case PACI_SCHED_PACI:
        order_one_f_one_b(cl, 0, steps * window, w, window);
        return;
    case PACI_SCHED_ZBH1:
    case PACI_SCHED_ZBH2:
        order_zero_bubble(cl, kind, stages, stage, window, steps);
        return;
    case PACI_SCHED_INTERLEAVED:
    case PACI_SCHED_ZBV:
        break; /* build_device_order's */
    }
    unreachable();
}

/* ---- flat lists --------------------------------------------------------------------- */

typedef struct InstrList {
    paci_instr *items;
    long n, cap;
} InstrList;

static void push_instr(InstrList *il, int stage, int op, int slot, int aux, long mb)
{
    if (il->n == il->cap) {
        il->cap = il->cap ? il->cap * 2 : 1024;
        il->items = xrealloc(il->items, (size_t)il->cap * sizeof *il->items);
    }
    il->items[il->n++] = (paci_instr){.op = (uint8_t)op, .stage = (uint8_t)stage, .slot = (uint16_t)slot,
                                      .aux = (int32_t)aux, .mb = mb};
}

/* The distinct older weight versions in-flight micro-batches need right after a step:
 * the stash copies this order requires (forwards and steps are monotone, so the versions
 * in flight are consecutive). */
static int stash_needed(const ComputeList *cl, long mbs)
{
    int32_t *fwd_version = xmalloc((size_t)mbs * sizeof *fwd_version);
    long version = 0, oldest_in_flight = 0; /* backwards run in increasing mb order */
    long forwards = 0;
    int most = 0;
    for (long i = 0; i < cl->n; i++) {
        Compute c = cl->items[i];
        if (c.op == PACI_OP_FWD) {
            fwd_version[c.mb] = (int32_t)version;
            forwards = c.mb + 1;
        } else if (c.op == PACI_OP_BWD) {
            oldest_in_flight = c.mb + 1;
        } else {
            version++;
            if (oldest_in_flight < forwards && version - fwd_version[oldest_in_flight] > most)
                most = (int)(version - fwd_version[oldest_in_flight]);
        }
    }
    free(fwd_version);
    return most;
}

/* Adds the communication around each computation (by its stage's place in the pipeline) and
 * fills slots and stash slots. Stash copies (PipeDream) come only without chunks, where every
 * computation of the list is of one stage. */
static void lower_order(const ComputeList *cl, int stages, const int *slots, const int *stash_of, long mbs,
                        InstrList *out)
{
    int stash = cl->n ? stash_of[cl->items[0].stage] : 0;
    int32_t *fwd_version = stash ? xmalloc((size_t)mbs * sizeof *fwd_version) : NULL;
    long version = 0, oldest_in_flight = 0, forwards = 0;
    for (long i = 0; i < cl->n; i++) {
        Compute c = cl->items[i];
        int stage = c.stage;
        bool first = stage == 0, last = stage == stages - 1;
        int slot = (int)(c.mb % (slots[stage] ? slots[stage] : 1));
        if (c.op == PACI_OP_FWD) {
            if (!first)
                push_instr(out, stage, PACI_OP_RECV_ACT, slot, 0, c.mb);
            push_instr(out, stage, PACI_OP_FWD, slot, 0, c.mb);
            if (!last)
                push_instr(out, stage, PACI_OP_SEND_ACT, slot, 0, c.mb);
            if (stash)
                fwd_version[c.mb] = (int32_t)version;
            forwards = c.mb + 1;
        } else if (c.op == PACI_OP_BWD || c.op == PACI_OP_BWD_B) {
            int aux = 0;
            if (stash && fwd_version[c.mb] != version)
                aux = (int)(fwd_version[c.mb] % stash) + 1;
            if (!last)
                push_instr(out, stage, PACI_OP_RECV_GRAD, slot, 0, c.mb);
            push_instr(out, stage, c.op, slot, aux, c.mb);
            if (!first)
                push_instr(out, stage, PACI_OP_SEND_GRAD, slot, 0, c.mb);
            oldest_in_flight = c.mb + 1;
        } else if (c.op == PACI_OP_BWD_W) {
            push_instr(out, stage, PACI_OP_BWD_W, slot, 0, c.mb);
        } else {
            /* Stash the version being retired if a forward in flight ran on it. */
            int aux = 0;
            if (stash && forwards > oldest_in_flight && fwd_version[forwards - 1] == version)
                aux = (int)(version % stash) + 1;
            push_instr(out, stage, PACI_OP_STEP, 0, aux, -1);
            version++;
        }
    }
    free(fwd_version);
}

/* Steps generated for a segment: fill and drain span at most ceil((p-1)/K) + 1 <= p steps
 * each, so 4(p+2) steps leave a steady state of at least 2p+4 repetitions, longer than any
 * periodic run inside fill or drain; slots (min(p-s, steps*K)) and stash counts are reached
 * there too. Longer segments only repeat the body more often (see schedule_build). */
static long generated_steps(int stages, long steps)
{
    return min_long(steps, 4L * (stages + 2));
}

/* PipeDream keeps one weight copy per older version an in-flight micro-batch still needs.
 * In a long segment p-s-1 backwards separate a forward from its backward and cross at most
 * ceil((p-s-1)/K) steps; a short segment may need fewer, so the count comes from the
 * stage's actual order (linear in the segment, no instructions built). */
int schedule_stash(int kind, int stages, int stage, int window, long segment_steps)
{
    if (kind != PACI_SCHED_PIPEDREAM)
        return 0;
    ComputeList order = {0};
    long steps = generated_steps(stages, segment_steps); /* the pattern repeats beyond */
    build_order(&order, kind, stages, stage, window, steps);
    int stash = stash_needed(&order, steps * window);
    free(order.items);
    return stash;
}

/* Generates one segment of `steps` steps: every device's flat instruction list. Slots are
 * numbered mod `slots[s]` when given (a table's, which holds every program's), else mod the
 * schedule's own count. */
void schedule_generate_shape(int kind, const PipeShape *shape, int window, long steps, const int32_t *slots,
                             SegmentLists *out)
{
    *out = (SegmentLists){.stages = shape->stages, .devices = shape->devices};
    long mbs = steps * window;
    for (int s = 0; s < shape->stages; s++)
        out->slots[s] = slots ? slots[s] : schedule_shape_slots(kind, shape, s, window, steps);
    for (int d = 0; d < shape->devices; d++) {
        ComputeList order = {0};
        build_device_order(&order, kind, shape, d, window, steps);
        if (kind == PACI_SCHED_PIPEDREAM) /* without chunks: device d runs stage d */
            out->stash[d] = stash_needed(&order, mbs);
        InstrList list = {0};
        lower_order(&order, shape->stages, out->slots, out->stash, mbs, &list);
        out->instrs[d] = list.items;
        out->count[d] = list.n;
        free(order.items);
    }
}

void schedule_generate(int kind, int stages, int window, long steps, const int32_t *slots, SegmentLists *out)
{
    PipeShape shape = unchunked_shape(stages);
    schedule_generate_shape(kind, &shape, window, steps, slots, out);
}

void segment_lists_free(SegmentLists *sl)
{
    for (int d = 0; d < sl->devices; d++)
        free(sl->instrs[d]);
    *sl = (SegmentLists){0};
}

/* ---- compression -------------------------------------------------------------------- */

static bool instr_equal(paci_instr a, paci_instr b)
{
    return a.op == b.op && a.stage == b.stage && a.slot == b.slot && a.aux == b.aux && a.mb == b.mb;
}

/* Instructions a device runs per optimizer step: for each of its stages, K micro-batches'
 * worth plus the step (a zero-bubble schedule runs a backward as B and W). */
static long step_length(const paci_table *t, int kind, int device)
{
    bool split = schedule_splits_backward(kind);
    long length = 0;
    for (int s = 0; s < t->stages; s++) {
        if (t->stage_device[s] != device)
            continue;
        long per_mb = 2 + split + 2 * (s > 0) + 2 * (s < t->stages - 1);
        length += per_mb * t->window + 1;
    }
    return length;
}

/* The longest stretch of `list` that is one step's instructions repeated (each repetition
 * shifted as paci_body_instr says): its start and how many repetitions it holds. */
static void find_body(const paci_table *t, const paci_instr *list, long n,
                      long period, long *start, long *reps)
{
    long best_start = 0, best_len = -1, run_start = 0;
    for (long i = 0; i + period <= n; i++) {
        bool match = i + period < n &&
                     instr_equal(list[i + period], paci_body_instr(t, list[i], 1));
        if (!match) {
            /* [run_start, i) matched: the body repeats floor(len/period)+1 times there. */
            if (i - run_start > best_len) {
                best_len = i - run_start;
                best_start = run_start;
            }
            run_start = i + 1;
        }
    }
    *start = best_start;
    *reps = best_len < 0 ? 0 : best_len / period + 1;
}

typedef struct TableBuilder {
    paci_table *t;
    InstrList all;
} TableBuilder;

static int32_t append_range(TableBuilder *tb, const paci_instr *src, long n)
{
    int32_t at = (int32_t)tb->all.n;
    for (long i = 0; i < n; i++)
        push_instr(&tb->all, src[i].stage, src[i].op, src[i].slot, src[i].aux, src[i].mb);
    return at;
}

/* Compresses a segment into prologue / body x reps / epilogue, with one repetition count
 * for all devices (the smallest device's longest periodic run). */
static void compress_program(TableBuilder *tb, const SegmentLists *sl, long steps, paci_program *prog)
{
    paci_table *t = tb->t;
    long start[PACI_MAX_STAGES], reps = -1;
    for (int d = 0; d < sl->devices; d++) {
        long device_reps;
        find_body(t, sl->instrs[d], sl->count[d], step_length(t, prog->schedule, d), &start[d], &device_reps);
        if (reps < 0 || device_reps < reps)
            reps = device_reps;
    }
    if (reps < 2)
        reps = 0; /* a body that runs once is no shorter than writing it out */
    prog->steps = (int32_t)steps;
    prog->body_reps = (int32_t)reps;
    for (int d = 0; d < sl->devices; d++) {
        long period = step_length(t, prog->schedule, d);
        long n_pro = reps ? start[d] : sl->count[d];
        long n_body = reps ? period : 0;
        long epi = n_pro + n_body * reps;
        paci_stage_program *sp = &prog->device[d];
        sp->prologue = append_range(tb, sl->instrs[d], n_pro);
        sp->n_prologue = (int32_t)n_pro;
        sp->body = append_range(tb, sl->instrs[d] + n_pro, n_body);
        sp->n_body = (int32_t)n_body;
        sp->epilogue = append_range(tb, sl->instrs[d] + epi, sl->count[d] - epi);
        sp->n_epilogue = (int32_t)(sl->count[d] - epi);
    }
}

/* Stretches a program compressed from `gen` steps to `steps`: the extra steps are extra body
 * repetitions, and the epilogue moves by as many repetitions (paci_body_instr's shift). */
static void extend_program(TableBuilder *tb, int devices, long gen, long steps, paci_program *prog)
{
    long extra = steps - gen;
    prog->steps = (int32_t)steps;
    prog->body_reps += (int32_t)extra;
    for (int d = 0; d < devices; d++) {
        paci_stage_program *sp = &prog->device[d];
        paci_instr *epi = tb->all.items + sp->epilogue;
        for (long i = 0; i < sp->n_epilogue; i++)
            epi[i] = paci_body_instr(tb->t, epi[i], (int32_t)extra);
    }
}

/* `delay_correction predict`: each forward's aux becomes d, the optimizer steps its stage
 * takes between that forward and the micro-batch's backward, read off the stage's own list. */
static void mark_forward_delays(SegmentLists *sl)
{
    for (int s = 0; s < sl->devices; s++) { /* paci has no chunks: device s runs stage s */
        paci_instr *list = sl->instrs[s];
        long mbs = 0;
        for (long i = 0; i < sl->count[s]; i++)
            if (list[i].op == PACI_OP_FWD && list[i].mb + 1 > mbs)
                mbs = list[i].mb + 1;
        long *fwd_at = xmalloc((size_t)(mbs ? mbs : 1) * sizeof *fwd_at);
        long *steps_at = xmalloc((size_t)(mbs ? mbs : 1) * sizeof *steps_at);
        long steps = 0;
        for (long i = 0; i < sl->count[s]; i++) {
            if (list[i].op == PACI_OP_STEP) {
                steps++;
            } else if (list[i].op == PACI_OP_FWD) {
                fwd_at[list[i].mb] = i;
                steps_at[list[i].mb] = steps;
            } else if (list[i].op == PACI_OP_BWD) {
                list[fwd_at[list[i].mb]].aux = (int32_t)(steps - steps_at[list[i].mb]);
            }
        }
        free(fwd_at);
        free(steps_at);
    }
}

/* The steps of the warm start (`warm_start SCHEDULE N`), capped at the run; 0 without one. */
static long warm_steps(const Config *cfg)
{
    return cfg->warm_steps > 0 && cfg->warm_steps < cfg->steps ? cfg->warm_steps : 0;
}

/* Slots and stash copies of stage s in the table: the most any of its programs needs. A warm
 * start's segments are at most min(segment, N) steps long. */
int schedule_table_slots(const Config *cfg, int stage)
{
    long segment = schedule_segment_steps(cfg), warm = warm_steps(cfg);
    PipeShape shape = config_shape(cfg);
    int slots = schedule_shape_slots(cfg->schedule, &shape, stage, cfg->window, segment);
    if (warm > 0) {
        int w = schedule_slots(cfg->warm_schedule, cfg->stages, stage, cfg->window, min_long(segment, warm));
        slots = w > slots ? w : slots;
    }
    return slots;
}

int schedule_table_stash(const Config *cfg, int stage)
{
    return schedule_stash(cfg->schedule, cfg->stages, stage, cfg->window, schedule_segment_steps(cfg));
}

/* One program: `steps` steps of schedule `kind`, generated for at most generated_steps() steps
 * and then extended to its length. */
static void build_program(TableBuilder *tb, const Config *cfg, int kind, long steps, paci_program *prog)
{
    paci_table *t = tb->t;
    long gen = generated_steps(cfg->stages, steps), mark = tb->all.n;
    bool predict = cfg->delay_correction == DELAY_PREDICT && kind == PACI_SCHED_PACI;
    PipeShape shape = config_shape(cfg);
    SegmentLists sl;
    prog->schedule = kind;
    schedule_generate_shape(kind, &shape, cfg->window, gen, t->slots, &sl);
    if (predict)
        mark_forward_delays(&sl);
    compress_program(tb, &sl, gen, prog);
    segment_lists_free(&sl);
    if (gen < steps && prog->body_reps < 2) {
        /* No body to repeat (not expected past generated_steps): generate it all. */
        tb->all.n = mark;
        schedule_generate_shape(kind, &shape, cfg->window, steps, t->slots, &sl);
        if (predict)
            mark_forward_delays(&sl);
        compress_program(tb, &sl, steps, prog);
        segment_lists_free(&sl);
    } else if (gen < steps) {
        extend_program(tb, shape.devices, gen, steps, prog);
    }
}

/* Builds the table: a program for each distinct (schedule, length) among the segments (full
 * ones, a shorter last one, and under a warm start its own and the one its end cuts). */
paci_table *schedule_build(const Config *cfg, const Plan *plan)
{
    paci_table *t = xcalloc(1, sizeof *t);
    long total = cfg->steps > 0 ? cfg->steps : 1;
    t->schedule = cfg->schedule;
    PipeShape shape = config_shape(cfg);
    t->stages = shape.stages;
    t->devices = shape.devices;
    t->chunks = shape.chunks;
    t->placement = shape.placement;
    for (int s = 0; s < t->stages; s++)
        t->stage_device[s] = shape_device(&shape, s);
    t->window = cfg->window;
    t->total_steps = (int32_t)total;
    t->segment_steps = (int32_t)schedule_segment_steps(cfg);
    t->warm_steps = (int32_t)warm_steps(cfg);
    t->warm_schedule = t->warm_steps > 0 ? cfg->warm_schedule : (int)cfg->schedule;
    t->channel_capacity = CHANNEL_CAPACITY;
    for (int s = 0; s < cfg->stages; s++) {
        t->slots[s] = schedule_table_slots(cfg, s);
        t->stash[s] = schedule_table_stash(cfg, s);
    }
    TableBuilder tb = {.t = t};
    paci_segment_run runs[PACI_MAX_SEGMENT_RUNS];
    int32_t n_runs = paci_segment_runs(t, runs);
    for (int32_t r = 0; r < n_runs; r++) { /* in segment order: a program's number is where it first runs */
        int32_t seg = runs[r].first;
        if (paci_segment_program(t, seg))
            continue;
        if (t->n_programs == PACI_MAX_PROGRAMS)
            ICE("more than %d programs", PACI_MAX_PROGRAMS);
        long steps = paci_segment_end(t, seg) - paci_segment_first_step(t, seg);
        build_program(&tb, cfg, paci_segment_schedule(t, seg), steps, &t->program[t->n_programs++]);
    }
    (void)plan; /* slots and stash are checked against the plan by verify_schedule */
    t->n_instrs = (int32_t)tb.all.n;
    t->instrs = tb.all.items;
    return t;
}

void schedule_free(paci_table *t)
{
    if (!t)
        return;
    free((void *)t->instrs);
    free(t);
}

/* Expands prologue, body x reps (shifted per repetition) and epilogue into one list. */
long schedule_expand(const paci_table *t, int prog, int device, paci_instr **out)
{
    const paci_program *pg = &t->program[prog];
    const paci_stage_program *sp = &pg->device[device];
    long n = sp->n_prologue + (long)sp->n_body * pg->body_reps + sp->n_epilogue;
    paci_instr *list = xmalloc((size_t)n * sizeof *list);
    long k = 0;
    for (long i = 0; i < sp->n_prologue; i++)
        list[k++] = t->instrs[sp->prologue + i];
    for (long r = 0; r < pg->body_reps; r++)
        for (long i = 0; i < sp->n_body; i++)
            list[k++] = paci_body_instr(t, t->instrs[sp->body + i], (int32_t)r);
    for (long i = 0; i < sp->n_epilogue; i++)
        list[k++] = t->instrs[sp->epilogue + i];
    *out = list;
    return n;
}
