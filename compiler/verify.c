/* verify.c: runs every program of the table on all devices at once, each device its one list
 * in order, with blocking receives and sends into channels of the table's capacity (one per
 * direction between stages s and s+1, a hand-over on one device included), exactly as the
 * runtime will, and checks the schedule's invariants: every instruction on the device its
 * stage is placed on, no deadlock, each micro-batch's forward and backward exactly once per
 * stage in causal order, a window's backwards (B's, W's) in micro-batch order per stage, slots
 * never reused while live and as many as planned, stash slots holding the version a backward
 * needs, and the weight-version drift.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "pacic.h"

/* A bounded FIFO of micro-batch numbers: one direction of one link. */
typedef struct Channel {
    int64_t *mbs;
    int capacity, head, count;
} Channel;

/* A device's list and where it is in it. */
typedef struct DeviceRun {
    paci_instr *list;
    long n, pc;
} DeviceRun;

/* What a stage holds, wherever it runs. */
typedef struct StageRun {
    long version;          /* optimizer steps done in this segment */
    long backwards_since_step;
    int live_slots;
    int64_t *slot_owner;   /* mb holding each slot, -1 free */
    int32_t *stash_version;/* version saved in each stash slot, -1 empty */
    /* per micro-batch of the segment */
    uint8_t *fwd_count, *bwd_count, *act_received, *grad_received;
    uint8_t *w_count, *grad_sent; /* zero-bubble: the W of mb ran; its gradient went (or stage 0) */
    long ws_since_step;
    int32_t *fwd_version;
    int32_t *fwd_delay;    /* the forward's predicted delay (its aux): 0, or the drift it meets */
    int64_t work_mb;       /* recompute full: the mb whose forward the one workspace holds, -1 none */
} StageRun;

typedef struct Verifier {
    const paci_table *t;
    const Plan *plan;
    VerifyReport *rep;
    int prog;
    long reps;  /* body repetitions simulated */
    long steps; /* optimizer steps of the simulated segment */
    long mbs;
    StageRun st[PACI_MAX_STAGES];
    DeviceRun dev[PACI_MAX_STAGES];
    Channel act[PACI_MAX_STAGES];  /* act[s]: stage s -> s+1 */
    Channel grad[PACI_MAX_STAGES]; /* grad[s]: stage s+1 -> s */
    long drifted[PACI_MAX_STAGES];
} Verifier;

/* Records the first violation; later ones are consequences of it. */
static bool fail(Verifier *v, const char *fmt, ...) PRINTF_LIKE(2, 3);
static bool fail(Verifier *v, const char *fmt, ...)
{
    if (v->rep->ok) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(v->rep->error, sizeof v->rep->error, fmt, ap);
        va_end(ap);
        v->rep->ok = false;
    }
    return false;
}

static const char *instr_text(paci_instr in, char *buf, size_t size)
{
    if (in.op == PACI_OP_STEP)
        snprintf(buf, size, "step");
    else
        snprintf(buf, size, "%s mb %lld slot %d", paci_op_name(in.op), (long long)in.mb, in.slot);
    return buf;
}

enum Progress { RAN, BLOCKED, BROKEN };

/* fail() for an instruction that cannot run. */
static enum Progress broken(Verifier *v, const char *fmt, ...) PRINTF_LIKE(2, 3);
static enum Progress broken(Verifier *v, const char *fmt, ...)
{
    char msg[sizeof v->rep->error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fail(v, "%s", msg);
    return BROKEN;
}

/* Checks the slot of an instruction against what the stage holds there. */
static bool slot_holds(Verifier *v, int s, paci_instr in)
{
    StageRun *sr = &v->st[s];
    if (in.slot >= v->t->slots[s])
        return fail(v, "stage %d: %s mb %lld uses slot %d of %d", s, paci_op_name(in.op), (long long)in.mb,
                    in.slot, v->t->slots[s]);
    if (sr->slot_owner[in.slot] != in.mb)
        return fail(v, "stage %d: %s mb %lld finds slot %d holding mb %lld", s, paci_op_name(in.op),
                    (long long)in.mb, in.slot, (long long)sr->slot_owner[in.slot]);
    return true;
}

static bool slot_take(Verifier *v, int s, paci_instr in)
{
    StageRun *sr = &v->st[s];
    if (in.slot >= v->t->slots[s])
        return fail(v, "stage %d: %s mb %lld uses slot %d of %d", s, paci_op_name(in.op), (long long)in.mb,
                    in.slot, v->t->slots[s]);
    if (sr->slot_owner[in.slot] >= 0)
        return fail(v, "stage %d: %s mb %lld reuses slot %d while mb %lld still lives there", s,
                    paci_op_name(in.op), (long long)in.mb, in.slot, (long long)sr->slot_owner[in.slot]);
    sr->slot_owner[in.slot] = in.mb;
    if (++sr->live_slots > v->rep->peak_slots[s])
        v->rep->peak_slots[s] = sr->live_slots;
    return true;
}

static void slot_release(Verifier *v, int s, paci_instr in)
{
    v->st[s].slot_owner[in.slot] = -1;
    v->st[s].live_slots--;
}

static enum Progress send(Verifier *v, Channel *c, int s, paci_instr in, bool exists)
{
    if (!exists)
        return broken(v, "stage %d: %s has no neighbour to send to", s, paci_op_name(in.op));
    if (!slot_holds(v, s, in))
        return BROKEN;
    if (c->count == c->capacity)
        return BLOCKED;
    c->mbs[(c->head + c->count++) % c->capacity] = in.mb;
    return RAN;
}

static enum Progress receive(Verifier *v, Channel *c, int s, paci_instr in, bool exists, const char *what)
{
    if (!exists)
        return broken(v, "stage %d: %s has no neighbour to receive from", s, paci_op_name(in.op));
    if (c->count == 0)
        return BLOCKED;
    int64_t got = c->mbs[c->head];
    if (got != in.mb)
        return broken(v, "stage %d expects the %s of mb %lld but its link delivers mb %lld", s, what,
                    (long long)in.mb, (long long)got);
    c->head = (c->head + 1) % c->capacity;
    c->count--;
    return RAN;
}

static bool mb_in_range(Verifier *v, int s, paci_instr in)
{
    if (in.mb < 0 || in.mb >= v->mbs)
        return fail(v, "stage %d: %s names mb %lld outside the segment's %ld", s,
                    paci_op_name(in.op), (long long)in.mb, v->mbs);
    return true;
}

/* The schedule the simulated program runs: the table's, or its warm start's. */
static int program_kind(const Verifier *v)
{
    return v->t->program[v->prog].schedule;
}

/* A zero-bubble program runs each backward as B and W; the slot lives until the later of its
 * W and the send of its gradient. */
static bool splits(const Verifier *v)
{
    return schedule_splits_backward(program_kind(v));
}

/* The gradients of a window add up in micro-batch order, as one stage adds them: the next
 * backward (or B, or W) after `done` of this window must be mb version * K + done. A float
 * sum's bits depend on its order (accumulate pairwise groups by position), so another order
 * trains to other bits than one stage. */
static enum Progress in_window_order(Verifier *v, int s, paci_instr in, const char *what, long done)
{
    int64_t first = (int64_t)v->st[s].version * v->t->window, due = first + done;
    if (in.mb == due)
        return RAN;
    return broken(v, "stage %d runs the %s of mb %lld where mb %lld is due: a window's gradients add up in "
                  "micro-batch order (mbs %lld..%lld in turn), as one stage adds them; another order changes "
                  "the sum's bits", s, what, (long long)in.mb, (long long)due, (long long)first,
                  (long long)(first + v->t->window - 1));
}

/* BWD_W: after mb's B, once, in window order, before the step; the slot goes once the gradient
 * has gone too. */
static enum Progress weight_gradient(Verifier *v, int s, paci_instr in)
{
    StageRun *sr = &v->st[s];
    if (!splits(v))
        return broken(v, "stage %d: a %s program runs no W (mb %lld)", s, paci_schedule_name(program_kind(v)),
                      (long long)in.mb);
    if (!sr->bwd_count[in.mb])
        return broken(v, "stage %d runs the W of mb %lld before its B", s, (long long)in.mb);
    if (sr->w_count[in.mb]++)
        return broken(v, "stage %d runs the W of mb %lld twice", s, (long long)in.mb);
    if (in_window_order(v, s, in, "W", sr->ws_since_step) == BROKEN)
        return BROKEN;
    if (!slot_holds(v, s, in))
        return BROKEN;
    sr->ws_since_step++;
    if (s == 0 || sr->grad_sent[in.mb])
        slot_release(v, s, in);
    return RAN;
}

/* BWD, or a zero-bubble program's BWD_B: after the forward and the gradient, once, in window
 * order (a B adds the LayerNorms' gradients); the drift it meets (none in a warm start), the
 * stash it reads. */
static enum Progress backward(Verifier *v, int s, paci_instr in)
{
    const paci_table *t = v->t;
    StageRun *sr = &v->st[s];
    bool first = s == 0, last = s == t->stages - 1;
    if ((in.op == PACI_OP_BWD_B) != splits(v))
        return broken(v, "stage %d: a %s program runs %s (mb %lld)", s, paci_schedule_name(program_kind(v)),
                      paci_op_name(in.op), (long long)in.mb);
    if (!sr->fwd_count[in.mb])
        return broken(v, "stage %d runs the backward of mb %lld before its forward", s, (long long)in.mb);
    if (sr->bwd_count[in.mb]++)
        return broken(v, "stage %d runs the backward of mb %lld twice", s, (long long)in.mb);
    if (in_window_order(v, s, in, splits(v) ? "B" : "backward", sr->backwards_since_step) == BROKEN)
        return BROKEN;
    if (!last && !sr->grad_received[in.mb])
        return broken(v, "stage %d runs the backward of mb %lld before receiving its gradient", s, (long long)in.mb);
    if (!slot_holds(v, s, in))
        return BROKEN;
    long drift = sr->version - sr->fwd_version[in.mb];
    if (sr->fwd_delay[in.mb] != 0 && sr->fwd_delay[in.mb] != drift)
        return broken(v, "stage %d: the forward of mb %lld predicts %d optimizer steps ahead, but its "
                      "backward comes %ld steps later", s, (long long)in.mb, sr->fwd_delay[in.mb], drift);
    if (drift > 0 && program_kind(v) != t->schedule) // a warm start is synchronous
        return broken(v, "stage %d: the warm start's %s crosses %ld optimizer steps between the forward "
                      "and the backward of mb %lld", s, paci_schedule_name(program_kind(v)), drift,
                      (long long)in.mb);
    if (drift > v->rep->max_drift[s])
        v->rep->max_drift[s] = (int)drift;
    if (drift > 0)
        v->drifted[s]++;
    long used = sr->version;
    if (in.aux) {
        if (in.aux > t->stash[s] || sr->stash_version[in.aux - 1] < 0)
            return broken(v, "stage %d: backward of mb %lld reads stash slot %d, which holds nothing", s, (long long)in.mb, in.aux - 1);
        used = sr->stash_version[in.aux - 1];
    }
    // recompute full reruns the forward on the weights the backward uses
    long effective = v->plan->stage[s].recompute ? 0 : labs(used - sr->fwd_version[in.mb]);
    sr->work_mb = -1;
    if (effective > v->rep->effective_drift[s])
        v->rep->effective_drift[s] = (int)effective;
    if (first && in.op == PACI_OP_BWD)
        slot_release(v, s, in);
    sr->backwards_since_step++;
    return RAN;
}

/* Runs the next instruction of device d if its message or buffer space is there. */
static enum Progress step_device(Verifier *v, int d)
{
    const paci_table *t = v->t;
    DeviceRun *dr = &v->dev[d];
    paci_instr in = dr->list[dr->pc];
    int s = in.stage;
    if (s >= t->stages)
        return broken(v, "device %d: #%ld names stage %d of %d", d, dr->pc, s, t->stages);
    if (t->stage_device[s] != d)
        return broken(v, "device %d runs %s mb %lld of stage %d, which is placed on device %d", d,
                      paci_op_name(in.op), (long long)in.mb, s, t->stage_device[s]);
    StageRun *sr = &v->st[s];
    bool first = s == 0, last = s == t->stages - 1;
    enum Progress pr = RAN;
    if (in.op != PACI_OP_STEP && !mb_in_range(v, s, in))
        return BROKEN;
    if (in.aux && in.op != PACI_OP_STEP && in.op != PACI_OP_BWD && in.op != PACI_OP_FWD)
        return broken(v, "stage %d: %s mb %lld carries aux %d", s, paci_op_name(in.op), (long long)in.mb, in.aux);
    switch (in.op) {
    case PACI_OP_RECV_ACT:
        pr = receive(v, first ? NULL : &v->act[s - 1], s, in, !first, "activation");
        if (pr == RAN && !slot_take(v, s, in))
            return BROKEN;
        if (pr == RAN)
            sr->act_received[in.mb] = 1;
        break;
    case PACI_OP_FWD:
        if (sr->fwd_count[in.mb]++)
            return broken(v, "stage %d runs the forward of mb %lld twice", s, (long long)in.mb);
        if (!first) {
            if (!sr->act_received[in.mb])
                return broken(v, "stage %d runs the forward of mb %lld before receiving its activation", s, (long long)in.mb);
            if (!slot_holds(v, s, in))
                return BROKEN;
        } else if (!slot_take(v, s, in)) {
            return BROKEN;
        }
        sr->fwd_version[in.mb] = (int32_t)sr->version;
        sr->fwd_delay[in.mb] = in.aux;
        sr->work_mb = in.mb;
        break;
    case PACI_OP_SEND_ACT:
        // recompute full sends from the workspace: no other forward or backward in between
        if (v->plan->stage[s].recompute && sr->work_mb != in.mb)
            return broken(v, "stage %d sends the activation of mb %lld after its workspace was reused "
                          "(recompute full needs each send before the stage's next forward or backward)",
                          s, (long long)in.mb);
        pr = send(v, last ? NULL : &v->act[s], s, in, !last);
        break;
    case PACI_OP_RECV_GRAD:
        if (!slot_holds(v, s, in))
            return BROKEN;
        pr = receive(v, last ? NULL : &v->grad[s], s, in, !last, "gradient");
        if (pr == RAN)
            sr->grad_received[in.mb] = 1;
        break;
    case PACI_OP_BWD_W:
        if ((pr = weight_gradient(v, s, in)) == BROKEN)
            return BROKEN;
        break;
    case PACI_OP_BWD_B:
    case PACI_OP_BWD:
        if ((pr = backward(v, s, in)) == BROKEN)
            return BROKEN;
        break;
    case PACI_OP_SEND_GRAD:
        pr = send(v, first ? NULL : &v->grad[s - 1], s, in, !first);
        if (pr == RAN) {
            if (!sr->bwd_count[in.mb])
                return broken(v, "stage %d sends the gradient of mb %lld before its backward", s, (long long)in.mb);
            sr->grad_sent[in.mb] = 1;
            if (!splits(v) || sr->w_count[in.mb])
                slot_release(v, s, in);
        }
        break;
    case PACI_OP_STEP:
        if (sr->backwards_since_step != t->window)
            return broken(v, "stage %d steps after %ld backwards instead of the window's %d", s,
                        sr->backwards_since_step, t->window);
        if (splits(v) && sr->ws_since_step != t->window)
            return broken(v, "stage %d steps after %ld W's instead of the window's %d", s, sr->ws_since_step,
                          t->window);
        sr->ws_since_step = 0;
        if (in.aux) {
            if (in.aux > t->stash[s])
                return broken(v, "stage %d: step stashes into slot %d of %d", s, in.aux - 1, t->stash[s]);
            sr->stash_version[in.aux - 1] = (int32_t)sr->version;
        }
        sr->backwards_since_step = 0;
        sr->version++;
        break;
    default:
        return broken(v, "stage %d: unknown op %d", s, in.op);
    }
    if (pr == RAN)
        dr->pc++;
    return pr;
}

/* The instruction moved by `rep` body repetitions, rep of either sign (paci_body_instr's
 * rule with the remainders taken non-negative). */
static paci_instr shift_instr(const paci_table *t, paci_instr in, long rep)
{
    int s = in.stage < t->stages ? in.stage : 0; /* step_device refuses a stage out of range */
    if (in.op != PACI_OP_STEP) {
        long slots = t->slots[s];
        in.mb += rep * t->window;
        in.slot = (uint16_t)((((long)in.slot + rep * t->window) % slots + slots) % slots);
    }
    if (in.aux > 0 && in.op != PACI_OP_FWD) {
        long stash = t->stash[s];
        in.aux = (int32_t)((((long)in.aux - 1 + rep) % stash + stash) % stash + 1);
    }
    return in;
}

/* Device d's list with v->reps body repetitions: the epilogue moves back by the ones left out. */
static long expand_simulated(Verifier *v, int d, paci_instr **out)
{
    const paci_program *pg = &v->t->program[v->prog];
    const paci_stage_program *sp = &pg->device[d];
    long cut = pg->body_reps - v->reps;
    if (cut == 0)
        return schedule_expand(v->t, v->prog, d, out);
    long n = sp->n_prologue + (long)sp->n_body * v->reps + sp->n_epilogue;
    paci_instr *list = xmalloc((size_t)n * sizeof *list);
    long k = 0;
    for (long i = 0; i < sp->n_prologue; i++)
        list[k++] = v->t->instrs[sp->prologue + i];
    for (long r = 0; r < v->reps; r++)
        for (long i = 0; i < sp->n_body; i++)
            list[k++] = shift_instr(v->t, v->t->instrs[sp->body + i], r);
    for (long i = 0; i < sp->n_epilogue; i++)
        list[k++] = shift_instr(v->t, v->t->instrs[sp->epilogue + i], -cut);
    *out = list;
    return n;
}

static void stage_init(Verifier *v, int s)
{
    StageRun *sr = &v->st[s];
    sr->slot_owner = xmalloc((size_t)v->t->slots[s] * sizeof *sr->slot_owner);
    memset(sr->slot_owner, 0xff, (size_t)v->t->slots[s] * sizeof *sr->slot_owner);
    int stash = v->t->stash[s] > 0 ? v->t->stash[s] : 1;
    sr->stash_version = xmalloc((size_t)stash * sizeof *sr->stash_version);
    memset(sr->stash_version, 0xff, (size_t)stash * sizeof *sr->stash_version);
    sr->fwd_count = xcalloc((size_t)v->mbs, 1);
    sr->bwd_count = xcalloc((size_t)v->mbs, 1);
    sr->act_received = xcalloc((size_t)v->mbs, 1);
    sr->grad_received = xcalloc((size_t)v->mbs, 1);
    sr->w_count = xcalloc((size_t)v->mbs, 1);
    sr->grad_sent = xcalloc((size_t)v->mbs, 1);
    sr->fwd_version = xcalloc((size_t)v->mbs, sizeof *sr->fwd_version);
    sr->fwd_delay = xcalloc((size_t)v->mbs, sizeof *sr->fwd_delay);
    sr->work_mb = -1;
    for (Channel *c = &v->act[s]; c; c = c == &v->act[s] ? &v->grad[s] : NULL) {
        c->capacity = v->t->channel_capacity;
        c->mbs = xmalloc((size_t)c->capacity * sizeof *c->mbs);
    }
}

static void stage_free(StageRun *sr, Channel *act, Channel *grad)
{
    free(sr->slot_owner);
    free(sr->stash_version);
    free(sr->fwd_count);
    free(sr->bwd_count);
    free(sr->act_received);
    free(sr->grad_received);
    free(sr->w_count);
    free(sr->grad_sent);
    free(sr->fwd_version);
    free(sr->fwd_delay);
    free(act->mbs);
    free(grad->mbs);
}

/* Reports the instruction every unfinished device is stuck on (with chunks, and its stage). */
static void report_deadlock(Verifier *v)
{
    char msg[sizeof v->rep->error];
    int len = snprintf(msg, sizeof msg, "deadlock in program %d:", v->prog);
    for (int d = 0; d < v->t->devices && len < (int)sizeof msg; d++) {
        DeviceRun *dr = &v->dev[d];
        char text[64];
        if (dr->pc >= dr->n)
            continue;
        paci_instr in = dr->list[dr->pc];
        if (v->t->chunks > 1)
            len += snprintf(msg + len, sizeof msg - (size_t)len, " device %d waits at #%ld (stage %d %s);", d,
                            dr->pc, in.stage, instr_text(in, text, sizeof text));
        else
            len += snprintf(msg + len, sizeof msg - (size_t)len, " stage %d waits at #%ld (%s);", d, dr->pc,
                            instr_text(in, text, sizeof text));
    }
    fail(v, "%s", msg);
}

/* Checks what must hold once every stage has finished the segment. */
static void check_complete(Verifier *v)
{
    const paci_table *t = v->t;
    for (int s = 0; s < t->stages && v->rep->ok; s++) {
        StageRun *sr = &v->st[s];
        for (long mb = 0; mb < v->mbs; mb++)
            if (sr->fwd_count[mb] != 1 || sr->bwd_count[mb] != 1 || sr->w_count[mb] != splits(v)) {
                fail(v, "stage %d runs mb %ld's forward %d, backward %d and W %d times (once each expected%s)",
                     s, mb, sr->fwd_count[mb], sr->bwd_count[mb], sr->w_count[mb],
                     splits(v) ? "" : ", no W");
                return;
            }
        if (sr->version != v->steps)
            fail(v, "stage %d takes %ld optimizer steps in a segment of %ld", s, sr->version,
                 v->steps);
        else if (sr->live_slots != 0)
            fail(v, "stage %d ends the segment with %d live slots", s, sr->live_slots);
        else if (v->act[s].count || v->grad[s].count)
            fail(v, "the link after stage %d ends the segment holding messages", s);
    }
}

/* Simulates program `prog` with `reps` of its body repetitions (and that many fewer steps). */
static void simulate_program(Verifier *v, int prog, long reps)
{
    const paci_table *t = v->t;
    v->prog = prog;
    v->reps = reps;
    v->steps = t->program[prog].steps - (t->program[prog].body_reps - reps);
    v->mbs = v->steps * t->window;
    memset(v->st, 0, sizeof v->st);
    memset(v->act, 0, sizeof v->act);
    memset(v->grad, 0, sizeof v->grad);
    memset(v->dev, 0, sizeof v->dev);
    for (int s = 0; s < t->stages; s++)
        stage_init(v, s);
    for (int d = 0; d < t->devices; d++)
        v->dev[d].n = expand_simulated(v, d, &v->dev[d].list);
    for (bool progress = true; progress && v->rep->ok;) {
        progress = false;
        for (int d = 0; d < t->devices && v->rep->ok; d++) {
            DeviceRun *dr = &v->dev[d];
            enum Progress pr = RAN;
            while (dr->pc < dr->n && (pr = step_device(v, d)) == RAN && v->rep->ok)
                progress = true;
        }
    }
    bool finished = true;
    for (int d = 0; d < t->devices; d++)
        finished = finished && v->dev[d].pc == v->dev[d].n;
    if (v->rep->ok && !finished)
        report_deadlock(v);
    if (v->rep->ok)
        check_complete(v);
    for (int s = 0; s < t->stages; s++)
        stage_free(&v->st[s], &v->act[s], &v->grad[s]);
    for (int d = 0; d < t->devices; d++)
        free(v->dev[d].list);
}

/* The table's shape: S = p v stages, each on the device its placement gives it. */
static void check_placement(Verifier *v)
{
    const paci_table *t = v->t;
    if (t->devices < 1 || t->chunks < 1 || (long)t->devices * t->chunks != t->stages ||
        t->stages > PACI_MAX_STAGES || t->placement < 0 || t->placement >= PACI_PLACEMENT_COUNT) {
        fail(v, "the table holds %d stages on %d devices x %d chunks (placement %d)", t->stages, t->devices,
             t->chunks, t->placement);
        return;
    }
    for (int d = 0; d < t->devices; d++)
        for (int c = 0; c < t->chunks; c++) {
            int s = paci_placed_stage(t->placement, t->devices, d, c);
            if (t->stage_device[s] != d) {
                fail(v, "stage %d runs on device %d, but the placement puts it on device %d", s,
                     t->stage_device[s], d);
                return;
            }
        }
    if (t->chunks > 1 && !schedule_has_chunks(t->schedule))
        fail(v, "%s runs one stage a device, but the table has %d chunks", paci_schedule_name(t->schedule),
             t->chunks);
}

/* Simulates at most 2(p+2)+1 body repetitions: a stage's slots, versions and stash depend on
 * the micro-batches of the last ceil((p-1)/K)+1 <= p steps only and a message crosses the
 * pipeline within p repetitions, so from then on each repetition replays the previous one
 * shifted; the extrema are reached, and the drifted count grows by the same amount per
 * repetition, which the last simulated one measures. */
static void verify_program(Verifier *v, int prog)
{
    const paci_table *t = v->t;
    long reps = t->program[prog].body_reps, cap = 2L * (t->stages + 2);
    if (reps <= cap + 1) {
        simulate_program(v, prog, reps);
        return;
    }
    long before[PACI_MAX_STAGES], once[PACI_MAX_STAGES];
    memcpy(before, v->drifted, sizeof before);
    simulate_program(v, prog, cap);
    for (int s = 0; s < t->stages; s++)
        once[s] = v->drifted[s] - before[s];
    memcpy(v->drifted, before, sizeof before);
    if (v->rep->ok)
        simulate_program(v, prog, cap + 1);
    for (int s = 0; s < t->stages; s++) {
        long per_rep = v->drifted[s] - before[s] - once[s];
        v->drifted[s] += per_rep * (reps - cap - 1);
    }
}

/* ceil((p-s-1)/K) for PACI: the updates a stage crosses between a forward and its backward. */
int drift_bound(const paci_table *t, int stage)
{
    if (t->schedule != PACI_SCHED_PACI)
        return 0;
    int w = t->stages - stage - 1;
    return (w + t->window - 1) / t->window;
}

bool verify_schedule(const paci_table *t, const Plan *plan, VerifyReport *rep)
{
    *rep = (VerifyReport){.ok = true};
    Verifier v = {.t = t, .plan = plan, .rep = rep};
    if (t->channel_capacity < 1)
        fail(&v, "channel capacity %d: a send could never complete", t->channel_capacity);
    check_placement(&v);
    for (int s = 0; s < t->stages && rep->ok; s++) {
        if (plan->stage[s].slots != t->slots[s])
            fail(&v, "stage %d: the plan sizes %d activation slots, the schedule has %d", s,
                 plan->stage[s].slots, t->slots[s]);
        else if (plan->stage[s].stash != t->stash[s])
            fail(&v, "stage %d: the plan sizes %d stash copies, the schedule keeps %d", s,
                 plan->stage[s].stash, t->stash[s]);
    }
    if (t->warm_steps > 0 && (!paci_schedule_is_sync(t->warm_schedule) || t->warm_steps >= t->total_steps))
        fail(&v, "the warm start runs %s for %d steps of %d: a synchronous schedule for part of the run expected",
             paci_schedule_name(t->warm_schedule), t->warm_steps, t->total_steps);
    long uses[PACI_MAX_PROGRAMS] = {0}; /* segments each program runs */
    paci_segment_run runs[PACI_MAX_SEGMENT_RUNS];
    int32_t n_runs = paci_segment_runs(t, runs);
    for (int32_t r = 0; r < n_runs && rep->ok; r++) { /* a run's segments share its first one's program */
        int32_t seg = runs[r].first;
        const paci_program *pg = paci_segment_program(t, seg);
        if (!pg)
            fail(&v, "segment %d (steps [%lld, %lld) under %s) has no program", seg,
                 (long long)paci_segment_first_step(t, seg), (long long)paci_segment_end(t, seg),
                 paci_schedule_name(paci_segment_schedule(t, seg)));
        else
            uses[pg - t->program] += runs[r].count;
    }
    long mbs_total = 0, drifted[PACI_MAX_STAGES] = {0};
    for (int prog = 0; prog < t->n_programs && rep->ok; prog++) {
        verify_program(&v, prog);
        for (int s = 0; s < t->stages; s++) // the whole run's share: each program as often as it runs
            drifted[s] += v.drifted[s] * uses[prog];
        memset(v.drifted, 0, sizeof v.drifted);
        mbs_total += (long)t->program[prog].steps * t->window * uses[prog];
    }
    for (int s = 0; s < t->stages && rep->ok; s++) {
        if (rep->peak_slots[s] != t->slots[s])
            fail(&v, "stage %d uses at most %d activation slots, the plan sizes %d", s,
                 rep->peak_slots[s], t->slots[s]);
        else if (rep->max_drift[s] > drift_bound(t, s) && t->schedule != PACI_SCHED_PIPEDREAM)
            fail(&v, "stage %d crosses %d optimizer updates between a forward and its backward; "
                 "the bound is %d", s, rep->max_drift[s], drift_bound(t, s));
        else if (t->schedule != PACI_SCHED_PACI && rep->effective_drift[s] != 0)
            fail(&v, "stage %d: a backward uses weights %d versions away from its forward's", s,
                 rep->effective_drift[s]);
        rep->drift_share[s] = mbs_total ? (double)drifted[s] / (double)mbs_total : 0.0;
    }
    return rep->ok;
}
