/* paci_schedule.h: the static schedule table, defined once.
 *
 * The compiler (compiler/schedule.c) writes it, the verifier and simulator read it, the
 * code generator serialises it into the generated program, and the runtime executes it.
 * Nobody downstream of the compiler re-derives an order, a slot or a peer.
 *
 * Shape. Training is cut into segments at every drain boundary (evaluation, checkpoint,
 * end of training); inside a segment no stage waits for a global barrier. Every segment
 * of the same length runs the same *program*. A program holds, per device, a prologue, a
 * body that repeats `body_reps` times (one optimizer step's worth of micro-batches per
 * repetition) and an epilogue. Micro-batch numbers in an instruction are relative to the
 * segment; inside the body they are relative to the repetition, which advances them by
 * `window` micro-batches each time:
 *
 *     mb(instr in prologue/epilogue) = segment_first_mb + instr.mb
 *     mb(instr in body, repetition r) = segment_first_mb + instr.mb + r * window
 *
 * Slots follow the micro-batch: activation slot = (mb within the segment) mod slots[s], and
 * PipeDream's stash slot of weight version v (optimizer steps done in the segment) is
 * v mod stash[s]. A body repetition therefore rotates them: in repetition r the activation
 * slot is (slot + r * window) mod slots[s] and a stash slot j-1 (aux = j > 0) becomes
 * (j - 1 + r) mod stash[s]. paci_body_instr() applies this rule; use it, never re-derive it.
 *
 * Stages and devices. The model is cut into `stages` (virtual) stages in layer order; each
 * runs on one device (stage_device). Without chunks a device holds one stage and its number
 * is the stage's. With chunks (interleaved 1F1B, ZB-V) a device holds `chunks` of them and
 * one list runs them all, each instruction naming its stage: RECV_ACT and SEND_GRAD of stage
 * s talk to stage s-1, SEND_ACT and RECV_GRAD to stage s+1, wherever those run (the same
 * device is a local hand-over). Slots, stashes, weights and optimizer state are per stage.
 */
#ifndef PACI_SCHEDULE_H
#define PACI_SCHEDULE_H

#include <stdint.h>

/* Instruction kinds, listed once. Order is the on-disk encoding: append only. */
#define PACI_OPS(X)                                                                      \
    X(RECV_ACT, "recv_act")   /* receive mb's activation from stage s-1 into slot */      \
    X(FWD, "fwd")             /* forward of mb; saves activations; aux = delay predicted */\
    X(SEND_ACT, "send_act")   /* send slot's output activation to stage s+1 */            \
    X(RECV_GRAD, "recv_grad") /* receive d(output) of mb from stage s+1 */                \
    X(BWD, "bwd")             /* backward of mb from slot; aux = weight version used */   \
    X(SEND_GRAD, "send_grad") /* send d(input) of mb to stage s-1 */                      \
    X(STEP, "step")           /* optimizer step; aux = stash slot to save into first */    \
    X(BWD_B, "bwd_b")         /* the input-gradient part of mb's backward (zero-bubble):   \
                                 d(input) for the stage before, and the gradients of the   \
                                 weight products' outputs, kept in the slot for its W */   \
    X(BWD_W, "bwd_w")         /* the weight-gradient part of mb's backward, after its B and \
                                 before the step; frees mb's slot */

enum paci_op {
#define PACI_OP_ENUM(name, text) PACI_OP_##name,
    PACI_OPS(PACI_OP_ENUM)
#undef PACI_OP_ENUM
    PACI_OP_COUNT
};

/* Schedule kinds, listed once. */
#define PACI_SCHEDULES(X)                                                              \
    X(GPIPE, "gpipe", 1)         /* all forwards, all backwards, flush, step */         \
    X(ONEF1B, "1f1b", 1)         /* 1F1B with a flush before every step */              \
    X(PIPEDREAM, "pipedream", 0) /* async 1F1B, weight stashing */                      \
    X(PACI, "paci", 0)           /* async 1F1B, no flush, local window accumulation */  \
    X(ZBH1, "zb-h1", 1)          /* zero bubble: B and W apart, at 1F1B's peak slots */ \
    X(ZBH2, "zb-h2", 1)          /* zero bubble with up to 2p - 1 slots a stage */     \
    X(INTERLEAVED, "interleaved", 1) /* 1F1B over v chunks a device (loop placement) */ \
    X(ZBV, "zb-v", 1)            /* zero bubble over 2 chunks a device, V placement */

enum paci_schedule_kind {
#define PACI_SCHED_ENUM(name, text, sync) PACI_SCHED_##name,
    PACI_SCHEDULES(PACI_SCHED_ENUM)
#undef PACI_SCHED_ENUM
    PACI_SCHED_COUNT
};

/* Whether a schedule flushes before every step (nothing stale): 1, or 0 for the asynchronous. */
static inline int paci_schedule_sync(int32_t kind)
{
    static const int sync[] = {
#define PACI_SCHED_SYNC(name, text, is_sync) is_sync,
        PACI_SCHEDULES(PACI_SCHED_SYNC)
#undef PACI_SCHED_SYNC
    };
    return kind >= 0 && kind < PACI_SCHED_COUNT && sync[kind];
}

/* aux for FWD: 0 = live weights; d > 0 = run on the weights predicted d optimizer steps ahead
 * (`delay_correction predict`): d is this stage's steps between the forward and the backward
 * of mb, so the same in every body repetition.
 * aux for BWD: 0 = live weights, j > 0 = stash slot j-1 (PipeDream).
 * aux for STEP: 0 = nothing to stash, j > 0 = copy the live weights into stash slot j-1
 * before updating them (PipeDream). Other ops: aux = 0.
 * BWD_B and BWD_W (zb-h1, zb-h2) name the slot as BWD does; the slot lives from the RECV_ACT
 * (or FWD) to the BWD_W, which reads the activations and what the BWD_B kept there. */
typedef struct paci_instr {
    uint8_t op;    /* enum paci_op */
    uint8_t stage; /* the (virtual) stage it runs on: its device's own stage without chunks;
                    * with chunks a device's list holds the instructions of each stage it holds */
    uint16_t slot; /* activation slot of that stage (FWD, BWD, sends, receives); 0 for STEP */
    int32_t aux;
    int64_t mb;    /* micro-batch, relative (see the header comment); -1 for STEP. 64 bits: an
                    * epilogue's number is about steps x window, which passes 2^31 */
} paci_instr;

/* At most this many activation slots per stage (gpipe keeps `window` of them). */
#define PACI_MAX_SLOTS UINT16_MAX

/* The fields fill the struct: no padding, so instructions compare bytewise (memcmp). */
_Static_assert(sizeof(paci_instr) == 16, "paci_instr has padding");

/* Placements of virtual stages on devices (`pipeline { chunks v; placement ... }`), listed
 * once; order is the on-disk encoding: append only. With p devices and v chunks the model is
 * cut into S = p v stages in layer order; chunk c of device d is stage
 *   loop: c p + d                                  (Megatron's interleaved 1F1B)
 *   v:    c p + d for even c, c p + (p - 1 - d) for odd c   (ZB-V: down the devices, back up) */
#define PACI_PLACEMENTS(X)  \
    X(LOOP, "loop")         \
    X(V, "v")

enum paci_placement {
#define PACI_PLACEMENT_ENUM(name, text) PACI_PLACEMENT_##name,
    PACI_PLACEMENTS(PACI_PLACEMENT_ENUM)
#undef PACI_PLACEMENT_ENUM
    PACI_PLACEMENT_COUNT
};

/* The stage chunk c of device d holds (see PACI_PLACEMENTS). */
static inline int32_t paci_placed_stage(int32_t placement, int32_t devices, int32_t d, int32_t c)
{
    return placement == PACI_PLACEMENT_V && c % 2 == 1 ? c * devices + (devices - 1 - d) : c * devices + d;
}

/* One device's instructions in a program (every stage it holds, interleaved). */
typedef struct paci_stage_program {
    int32_t prologue; /* index of the first prologue instruction in paci_table.instrs */
    int32_t n_prologue;
    int32_t body;
    int32_t n_body;
    int32_t epilogue;
    int32_t n_epilogue;
} paci_stage_program;

#define PACI_MAX_STAGES 64
/* A full segment, a shorter last one, and under a warm start the warm schedule's full and
 * shorter segments and the segment that starts at its end */
#define PACI_MAX_PROGRAMS 6

typedef struct paci_program {
    int32_t schedule;  /* enum paci_schedule_kind it runs: the table's, or its warm start's */
    int32_t steps;     /* optimizer steps in a segment run by this program */
    int32_t body_reps; /* repetitions of every device's body */
    paci_stage_program device[PACI_MAX_STAGES]; /* [devices]: each device's list */
} paci_program;

typedef struct paci_table {
    int32_t schedule;          /* enum paci_schedule_kind */
    int32_t stages;            /* S: (virtual) stages, devices x chunks, in layer order */
    int32_t devices;           /* p: devices (a thread, process or GPU each); S without chunks */
    int32_t chunks;            /* v: stages per device, 1 without chunks */
    int32_t placement;         /* enum paci_placement (loop without chunks) */
    int32_t stage_device[PACI_MAX_STAGES]; /* the device each stage runs on (paci_placed_stage) */
    int32_t window;            /* micro-batches per optimizer step, every schedule */
    int32_t total_steps;
    int32_t segment_steps;     /* segments end at every multiple of it, and at warm_steps */
    int32_t warm_steps;        /* steps [0, warm_steps) run warm_schedule (a warm start); 0: none */
    int32_t warm_schedule;     /* enum paci_schedule_kind, synchronous */
    int32_t channel_capacity;  /* messages a link buffers before send blocks */
    int32_t slots[PACI_MAX_STAGES]; /* activation slots per (virtual) stage */
    int32_t stash[PACI_MAX_STAGES]; /* stashed weight copies per (virtual) stage (PipeDream) */
    int32_t n_programs;        /* one per distinct (schedule, length) of the segments */
    paci_program program[PACI_MAX_PROGRAMS];
    int32_t n_instrs;
    const paci_instr *instrs;
} paci_table;

/* The instruction `in` of a device's body as executed in body repetition `rep`, with mb
 * still relative to the segment (see the header comment); slots rotate in in.stage's count. */
static inline paci_instr paci_body_instr(const paci_table *t, paci_instr in, int32_t rep)
{
    int32_t stage = in.stage;
    if (in.op != PACI_OP_STEP) {
        in.mb += (int64_t)rep * t->window;
        in.slot = (uint16_t)(((int64_t)in.slot + (int64_t)rep * t->window) % t->slots[stage]);
    }
    if (in.aux > 0 && in.op != PACI_OP_FWD)
        in.aux = (int32_t)(((int64_t)in.aux - 1 + rep) % t->stash[stage] + 1);
    return in;
}

/* Segments: [k S, (k+1) S) for S = segment_steps, the one holding warm_steps cut there
 * (a warm start drains the pipeline once, at its end), the last cut at total_steps. */
static inline int32_t paci_segments(const paci_table *t)
{
    int32_t n = (int32_t)(((int64_t)t->total_steps + t->segment_steps - 1) / t->segment_steps);
    return n + (t->warm_steps > 0 && t->warm_steps % t->segment_steps != 0);
}

static inline int64_t paci_segment_first_step(const paci_table *t, int32_t seg)
{
    int32_t cut = t->warm_steps / t->segment_steps; /* the segment the warm start's end cuts */
    if (t->warm_steps > 0 && t->warm_steps % t->segment_steps != 0 && seg > cut)
        return seg == cut + 1 ? t->warm_steps : (int64_t)(seg - 1) * t->segment_steps;
    return (int64_t)seg * t->segment_steps;
}

static inline int64_t paci_segment_end(const paci_table *t, int32_t seg)
{
    return seg + 1 < paci_segments(t) ? paci_segment_first_step(t, seg + 1) : t->total_steps;
}

/* The segment that holds step `step` (0-based). */
static inline int32_t paci_segment_of_step(const paci_table *t, int64_t step)
{
    int32_t seg = (int32_t)(step / t->segment_steps);
    return seg + (t->warm_steps > 0 && t->warm_steps % t->segment_steps != 0 && step >= t->warm_steps);
}

/* The schedule segment `seg` runs: the warm start's before warm_steps. */
static inline int32_t paci_segment_schedule(const paci_table *t, int32_t seg)
{
    return paci_segment_first_step(t, seg) < t->warm_steps ? t->warm_schedule : t->schedule;
}

/* Runs of consecutive segments that share a schedule and a length, so that whoever needs every
 * segment's program (the compiler, the verifier, the runtime's start-up) looks at a handful
 * of segments, never at all of them: a run of steps costs nothing to compile. A run starts at
 * segment 0, at the last segment, and around the warm start's end (its last segment and the
 * two after it); between these starts every segment is a full one of the same schedule. Two
 * neighbouring runs may still share a program. */
#define PACI_MAX_SEGMENT_RUNS 5

typedef struct paci_segment_run {
    int32_t first; /* its first segment */
    int32_t count; /* segments in the run, at least 1 */
} paci_segment_run;

static inline int32_t paci_segment_runs(const paci_table *t, paci_segment_run run[PACI_MAX_SEGMENT_RUNS])
{
    int32_t n = paci_segments(t), starts[PACI_MAX_SEGMENT_RUNS], k = 0;
    int32_t w = t->warm_steps > 0 ? paci_segment_of_step(t, (int64_t)t->warm_steps - 1) : 0; /* its last */
    int32_t cand[PACI_MAX_SEGMENT_RUNS] = {0, w, t->warm_steps > 0 ? w + 1 : 0, t->warm_steps > 0 ? w + 2 : 0, n - 1};
    for (int32_t i = 0; i < PACI_MAX_SEGMENT_RUNS; i++) { /* sorted, once each, within [0, n) */
        int32_t c = cand[i], j = k;
        if (c < 0 || c >= n)
            continue;
        while (j > 0 && starts[j - 1] > c)
            j--;
        if (j > 0 && starts[j - 1] == c)
            continue;
        for (int32_t m = k; m > j; m--)
            starts[m] = starts[m - 1];
        starts[j] = c;
        k++;
    }
    for (int32_t i = 0; i < k; i++)
        run[i] = (paci_segment_run){starts[i], (i + 1 < k ? starts[i + 1] : n) - starts[i]};
    return k;
}

/* The program that runs segment `seg` (0-based); NULL only in a broken table. */
static inline const paci_program *paci_segment_program(const paci_table *t, int32_t seg)
{
    int32_t kind = paci_segment_schedule(t, seg);
    int64_t steps = paci_segment_end(t, seg) - paci_segment_first_step(t, seg);
    for (int32_t p = 0; p < t->n_programs; p++)
        if (t->program[p].schedule == kind && t->program[p].steps == steps)
            return &t->program[p];
    return (const paci_program *)0;
}

#endif
