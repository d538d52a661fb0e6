/* simulate.c: the cost model and an event simulation of the instruction lists.
 *
 * Costs (each stage's, priced by plan.c's cost_stage): a forward or backward takes its FLOPs
 * over the device rate; an optimizer step
 * streams the stage's AdamW state through memory once (read weight, gradient and two
 * moments, write weight and moments, zero the gradient: 32 bytes per parameter, 34 with
 * bf16's working copy) at the hardware block's memory_bandwidth; a message takes the
 * link latency plus its bytes over the link bandwidth and does not occupy the sender's
 * compute (a copy engine moves it). With `parallel { data D }`, D > 1, each optimizer step
 * waits first for the stage's gradient allreduce among its replicas (stage_allreduce: a ring
 * over network_bandwidth): the part that the window's last backward does not hide
 * (allreduce_exposed; the GPU runtime starts each range's allreduce as the backward finishes
 * it), simulated as an event of its own and not counted as busy. costs.c has a finer model, kernel by kernel, that
 * --explain prints beside this one. Channels behave as in verification and in the
 * runtime: a send blocks while the link holds channel_capacity messages not yet received,
 * a receive blocks until its message has arrived. Segments end with a drain: the next
 * starts when every stage is done.
 *
 * Profile files (cost_model_load_profile) replace the predicted costs with measured ones:
 *
 *     # comments and blank lines are ignored
 *     stage 0 fwd 0.0123 bwd 0.0250 step 0.0010   # seconds per instruction on stage 0
 *     stage 1 fwd 0.0123 bwd 0.0250 step 0.0010 w 0.0090   # of bwd, a zero-bubble W's
 *     link 0 0.0004                               # seconds per message from stage 0 to 1
 *
 * Each `stage` line names all three costs, and may add W's (without it, a zero-bubble
 * schedule's W takes its products' share of the backward's FLOPs); stages or links not
 * mentioned keep the model's.
 * That is version 1 of the format. Version 2 (what `run --profile-out` writes) starts with
 * a `version 2` line, which version 1 readers reject at once, and adds per-op times:
 *
 *     version 2                                   # first line that is not a comment
 *     compute 0 3.25          # wall seconds stage 0 spent in its fwd, bwd and step instructions
 *     op 0 1 block_forward gemm calls 240 total 0.512 mean 0.00213 "qkv = ln1 qkvw^T"
 *
 * An `op` line is op 1 of stage 0's generated code (its number in pr_stage_0_ops): its
 * section, kernel (or gemm, zero, copy, adamw), how often it ran, its seconds in all and per
 * call, and its comment in double quotes. The cost model keeps using the stage and link
 * lines; the op lines feed --explain. A version above 2 is an error, not a guess.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pacic.h"

Allreduce stage_allreduce(const Config *cfg, const StagePlan *sp)
{
    int d = config_replicas(cfg);
    if (d == 1)
        return (Allreduce){0};
    Allreduce a = {.bytes = 4.0 * (double)sp->params};
    a.ring_bytes = a.bytes * 2.0 * (d - 1) / d;
    a.seconds = a.ring_bytes / cfg->network_bandwidth;
    return a;
}

double allreduce_exposed(const Config *cfg, const StagePlan *sp, double bwd)
{
    Allreduce whole = stage_allreduce(cfg, sp);
    if (whole.seconds <= 0)
        return 0;
    GradRange *ranges = xmalloc((size_t)(sp->n_layers + 5) * sizeof *ranges);
    int n = stage_grad_ranges(cfg, sp, ranges);
    double flops = 0;
    for (int i = 0; i < n; i++)
        flops += ranges[i].bwd_flops;
    // range i is final once the FLOPs up to it are done (after the rerun forward, with
    // recompute); the ring reduces one range at a time
    double rerun = sp->recompute ? bwd * sp->fwd_flops / (sp->fwd_flops + sp->bwd_flops) : 0;
    double done = 0, reduced = 0;
    for (int i = 0; i < n; i++) {
        done += ranges[i].bwd_flops;
        double ready = rerun + (flops > 0 ? (bwd - rerun) * done / flops : bwd - rerun);
        reduced = (ready > reduced ? ready : reduced) + whole.seconds * ranges[i].params / (double)sp->params;
    }
    free(ranges);
    return reduced > bwd ? reduced - bwd : 0;
}

void cost_model_allreduce(const Config *cfg, const Plan *plan, CostModel *cm)
{
    for (int s = 0; s < plan->stages; s++) {
        const StagePlan *sp = &plan->stage[s];
        cm->allreduce[s] = allreduce_exposed(cfg, sp, cm->bwd[s]);
        // W's seconds: as a profile measured them, else its products' share of the backward's FLOPs
        // (on a CPU a smaller share: the backward's other ops, all B, cost more there than their FLOPs)
        cm->late[s] = sp->bwd_flops > 0 ? cm->bwd[s] * sp->late_flops / sp->bwd_flops : 0;
        if (!config_splits_backward(cfg))
            cm->w[s] = 0;
        else if (cm->w_measured[s] > 0)
            cm->w[s] = cm->w_measured[s];
        else
            cm->w[s] = sp->bwd_flops > 0 ? cm->bwd[s] * sp->w_flops / sp->bwd_flops : 0;
    }
    // a synchronous program's steps wait for the global norm (run_segment asks the program),
    // unless post-validated: the check then comes before the next step, after every stage has
    // published its sums, and waits for nothing (executor.c, settle_step); a rollback's redone
    // window is rare and not priced. Replicas keep the barrier.
    cm->step_barrier = (paci_schedule_is_sync(cfg->schedule) || cfg->warm_steps > 0) && cfg->grad_clip > 0 &&
                       plan->stages > 1 && !config_post_validates(cfg);
}

void cost_model_from_plan(const Config *cfg, const Plan *plan, CostModel *cm)
{
    memset(cm, 0, sizeof *cm);
    for (int s = 0; s < plan->stages; s++) {
        const StagePlan *sp = &plan->stage[s];
        cost_stage(cfg, sp, &cm->fwd[s], &cm->bwd[s], &cm->step[s]);
        cm->msg[s] = s + 1 < plan->stages
                         ? cfg->link_latency + (double)sp->msg_bytes / cfg->link_bandwidth
                         : 0;
    }
    cost_model_allreduce(cfg, plan, cm);
}

/* What a time in a profile may be: at most 1e30 s, as a machine's latency, so that every
 * time --explain adds up from it stays finite (1e308 made the step time inf). */
#define SECONDS_RANGE ", SECONDS in [0, 1e30]"

/* Reads a number of seconds in [0, 1e30] at *p, advancing it; false if there is none. */
static bool read_seconds(char **p, double *out)
{
    char *end;
    double v = strtod(*p, &end);
    if (end == *p || !(v >= 0 && v <= MACHINE_RATE_MAX))
        return false;
    *p = end;
    *out = v;
    return true;
}

static void skip_blanks(char **p)
{
    while (**p == ' ' || **p == '\t')
        (*p)++;
}

static bool read_word(char **p, const char *word)
{
    skip_blanks(p);
    size_t n = strlen(word);
    if (strncmp(*p, word, n) != 0 || !(isspace((unsigned char)(*p)[n]) || (*p)[n] == '\0'))
        return false;
    *p += n;
    return true;
}

/* A decimal integer in [0, limit). */
static bool read_index(char **p, long limit, long *out)
{
    skip_blanks(p);
    if (!isdigit((unsigned char)**p))
        return false;
    char *end;
    errno = 0;
    long v = strtol(*p, &end, 10);
    if (errno || v >= limit || !(isspace((unsigned char)*end) || *end == '\0'))
        return false;
    *p = end;
    *out = v;
    return true;
}

static bool read_stage(char **p, int stages, int *out)
{
    long v;
    if (!read_index(p, stages, &v))
        return false;
    *out = (int)v;
    return true;
}

/* A C identifier (sections and kernel names), copied. */
static bool read_identifier(char **p, char **out)
{
    skip_blanks(p);
    char *begin = *p;
    if (!(isalpha((unsigned char)*begin) || *begin == '_'))
        return false;
    char *end = begin;
    while (isalnum((unsigned char)*end) || *end == '_')
        end++;
    if (!(isspace((unsigned char)*end) || *end == '\0'))
        return false;
    *out = xasprintf("%.*s", (int)(end - begin), begin);
    *p = end;
    return true;
}

/* "text" with no quote inside, copied. */
static bool read_quoted(char **p, char **out)
{
    skip_blanks(p);
    if (**p != '"')
        return false;
    char *close = strchr(*p + 1, '"');
    if (!close)
        return false;
    *out = xasprintf("%.*s", (int)(close - *p - 1), *p + 1);
    *p = close + 1;
    return true;
}

enum { PROFILE_VERSION = 2 }; /* the newest format this pacic reads */

typedef struct ProfileReader {
    const Plan *plan;
    CostModel cm;
    OpProfile ops;
    int version;         /* 1 until a version line says otherwise */
    bool saw_content;    /* a line other than comments has been read */
} ProfileReader;

static void op_add(OpProfile *ops, ProfileOp op)
{
    ops->ops = xrealloc(ops->ops, (size_t)(ops->n_ops + 1) * sizeof *ops->ops);
    ops->ops[ops->n_ops++] = op;
}

/* `op S I SECTION NAME calls N total SECONDS mean SECONDS "WHAT"` (version 2). */
static const char *profile_op_line(char **p, ProfileReader *r)
{
    ProfileOp op = {0};
    long index, calls;
    const char *err = NULL;
    if (!read_stage(p, r->plan->stages, &op.stage))
        err = "expected a stage number of this plan after 'op'";
    else if (!read_index(p, 1L << 30, &index))
        err = "expected the op's number after the stage";
    else if (!read_identifier(p, &op.section))
        err = "expected the op's section (a name such as block_forward)";
    else if (!read_identifier(p, &op.name))
        err = "expected the op's name (a kernel, gemm, zero, copy or adamw)";
    else if (!read_word(p, "calls") || !read_index(p, LONG_MAX, &calls))
        err = "expected 'calls N'";
    else if (!read_word(p, "total") || (skip_blanks(p), !read_seconds(p, &op.total)))
        err = "expected 'total SECONDS'" SECONDS_RANGE;
    else if (!read_word(p, "mean") || (skip_blanks(p), !read_seconds(p, &op.mean)))
        err = "expected 'mean SECONDS'" SECONDS_RANGE;
    else if (!read_quoted(p, &op.what))
        err = "expected the op's description in double quotes";
    else if (fabs(op.mean * (double)calls - op.total) > 1e-6 * op.total + 1e-12)
        err = "the mean is not the total over the calls";
    op.index = (int)index;
    op.calls = calls;
    for (int i = 0; !err && i < r->ops.n_ops; i++)
        if (r->ops.ops[i].stage == op.stage && r->ops.ops[i].index == op.index)
            err = "a second line for the same stage and op";
    if (err) {
        free(op.section);
        free(op.name);
        free(op.what);
        return err;
    }
    op_add(&r->ops, op);
    return NULL;
}

/* One profile line (comment removed, not blank); an error names what was expected. */
static const char *profile_line(char *line, ProfileReader *r)
{
    char *p = line;
    int s;
    bool first = !r->saw_content;
    r->saw_content = true;
    CostModel *cm = &r->cm;
    if (read_word(&p, "version")) {
        long v;
        if (!first)
            return "'version' must come before every other line";
        if (!read_index(&p, 1000, &v) || v < 1)
            return "expected a version number after 'version'";
        if (v > PROFILE_VERSION)
            return "a newer profile format than this pacic reads (versions 1 and 2)";
        r->version = (int)v;
    } else if (read_word(&p, "stage")) {
        double f, b, st;
        if (!read_stage(&p, r->plan->stages, &s))
            return "expected a stage number of this plan after 'stage'";
        if (!read_word(&p, "fwd") || (skip_blanks(&p), !read_seconds(&p, &f)))
            return "expected 'fwd SECONDS'" SECONDS_RANGE;
        if (!read_word(&p, "bwd") || (skip_blanks(&p), !read_seconds(&p, &b)))
            return "expected 'bwd SECONDS'" SECONDS_RANGE;
        if (!read_word(&p, "step") || (skip_blanks(&p), !read_seconds(&p, &st)))
            return "expected 'step SECONDS'" SECONDS_RANGE;
        double w = 0;
        if (read_word(&p, "w") && (skip_blanks(&p), !read_seconds(&p, &w)))
            return "expected SECONDS after 'w'" SECONDS_RANGE;
        if (w > b)
            return "a backward's W takes more than the whole backward ('w' above 'bwd')";
        cm->fwd[s] = f;
        cm->bwd[s] = b;
        cm->step[s] = st;
        cm->w_measured[s] = w;
    } else if (read_word(&p, "link")) {
        double m;
        if (!read_stage(&p, r->plan->stages - 1, &s))
            return "expected a link number (0 .. stages-2) after 'link'";
        skip_blanks(&p);
        if (!read_seconds(&p, &m))
            return "expected SECONDS after the link number" SECONDS_RANGE;
        cm->msg[s] = m;
    } else if (r->version >= 2 && read_word(&p, "compute")) {
        if (!read_stage(&p, r->plan->stages, &s))
            return "expected a stage number of this plan after 'compute'";
        skip_blanks(&p);
        if (!read_seconds(&p, &r->ops.compute[s]))
            return "expected SECONDS after the stage number" SECONDS_RANGE;
    } else if (r->version >= 2 && read_word(&p, "op")) {
        const char *err = profile_op_line(&p, r);
        if (err)
            return err;
    } else if (r->version == 1 && (read_word(&p, "op") || read_word(&p, "compute"))) {
        return "'op' and 'compute' lines need 'version 2' as the file's first line";
    } else {
        return r->version >= 2 ? "expected 'stage', 'link', 'compute' or 'op'" : "expected 'stage' or 'link'";
    }
    while (isspace((unsigned char)*p))
        p++;
    return *p ? "unexpected text at the end of the line" : NULL;
}

/* A '#' outside double quotes starts a comment. */
static void strip_comment(char *line)
{
    bool quoted = false;
    for (char *c = line; *c; c++) {
        if (*c == '"')
            quoted = !quoted;
        else if (*c == '#' && !quoted) {
            *c = '\0';
            return;
        }
    }
}

void op_profile_free(OpProfile *ops)
{
    for (int i = 0; i < ops->n_ops; i++) {
        free(ops->ops[i].section);
        free(ops->ops[i].name);
        free(ops->ops[i].what);
    }
    free(ops->ops);
    *ops = (OpProfile){0};
}

bool profile_load(const char *path, const Plan *plan, CostModel *cm, OpProfile *ops)
{
    char why[200];
    char *text = read_input_file(path, PROFILE_FILE_LIMIT, NULL, why, sizeof why);
    if (!text) {
        diag_plain(DIAG_ERROR, "cannot read the profile %s: %s", path, why);
        return false;
    }
    ProfileReader r = {.plan = plan, .cm = *cm, .version = 1};
    for (int s = 0; s < PACI_MAX_STAGES; s++)
        r.ops.compute[s] = -1;
    bool ok = true;
    int line_no = 0;
    for (char *line = text; line && ok;) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        line_no++;
        strip_comment(line);
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        size_t len = strlen(p);
        while (len > 0 && isspace((unsigned char)p[len - 1]))
            p[--len] = '\0';
        if (*p) {
            char *shown = xstrdup(p); /* the line as written, for the message */
            const char *err = profile_line(p, &r);
            if (err) {
                diag_plain(DIAG_ERROR, "%s:%d: %s, in '%.200s'", path, line_no, err, shown);
                ok = false;
            }
            free(shown);
        }
        line = next;
    }
    free(text);
    r.ops.version = r.version;
    if (ok) {
        *cm = r.cm;
        if (ops)
            *ops = r.ops;
        else
            op_profile_free(&r.ops);
    } else {
        op_profile_free(&r.ops);
    }
    return ok;
}

/* Calls of a section at a stage, adding its ops' times to *total: the fewest calls of its
 * ops (an op inside a loop, as matmul attention's per (sequence, head), runs more often). */
static long stage_section_calls(const OpProfile *ops, int stage, const char *section, double *total)
{
    long calls = 0;
    for (int i = 0; i < ops->n_ops; i++) {
        const ProfileOp *op = &ops->ops[i];
        if (op->stage != stage || strcmp(op->section, section) != 0)
            continue;
        *total += op->total;
        if (op->calls > 0 && (calls == 0 || op->calls < calls))
            calls = op->calls;
    }
    return calls;
}

/* How often a section ran, over every stage. */
static long section_calls(const OpProfile *ops, const char *section)
{
    long calls = 0;
    double ignored = 0;
    for (int s = 0; s < PACI_MAX_STAGES; s++)
        calls += stage_section_calls(ops, s, section, &ignored);
    return calls;
}

/* Seconds per call of a section (per layer for the blocks), over every stage that ran it. */
static double section_seconds(const OpProfile *ops, const char *section)
{
    double total = 0;
    long calls = 0;
    for (int s = 0; s < PACI_MAX_STAGES; s++)
        calls += stage_section_calls(ops, s, section, &total);
    return calls > 0 ? total / (double)calls : -1;
}

bool measured_costs_load(const char *path, const Plan *plan, MeasuredCosts *mc)
{
    CostModel cm = {0};
    OpProfile ops = {0};
    if (!profile_load(path, plan, &cm, &ops))
        return false;
    static const char *const sections[6] = {"block_forward", "block_backward", "embed_forward",
                                            "embed_backward", "head_forward", "head_backward"};
    double seconds[6];
    bool ok = true;
    for (int i = 0; i < 6 && ok; i++) {
        seconds[i] = section_seconds(&ops, sections[i]);
        if (seconds[i] < 0) {
            diag_plain(DIAG_ERROR, "%s has no per-op times for %s (--balance needs a profile that "
                       "run --profile-out wrote, version 2)", path, sections[i]);
            ok = false;
        }
    }
    /* The ops are timed by a clock that counts waits (monotonic on the CPU, events on the
     * GPU), the stage lines in the stages' own time, which --profile replays and AdamW is
     * priced in: the ops' times are scaled to the stage lines' fwd and bwd over the run
     * (every stage ran head_forward's count of forwards and backwards). */
    double step = 0, stage_seconds = 0, op_seconds = 0;
    for (int s = 0; s < plan->stages; s++) {
        step += cm.step[s];
        stage_seconds += cm.fwd[s] + cm.bwd[s];
    }
    for (int i = 0; i < ops.n_ops; i++)
        if (strcmp(ops.ops[i].section, "adamw") != 0)
            op_seconds += ops.ops[i].total;
    long passes = ok ? section_calls(&ops, "head_forward") : 0;
    double scale = op_seconds > 0 && stage_seconds > 0 ? stage_seconds * (double)passes / op_seconds : 1;
    op_profile_free(&ops);
    if (!ok)
        return false;
    *mc = (MeasuredCosts){scale * seconds[0], scale * seconds[1], scale * seconds[2], scale * seconds[3],
                          scale * seconds[4], scale * seconds[5], step / (double)plan->total_params};
    return true;
}

bool cost_model_load_profile(const char *path, const Plan *plan, CostModel *cm)
{
    return profile_load(path, plan, cm, NULL);
}

/* ---- event simulation ----------------------------------------------------------------- */

typedef struct SimChannel {
    long sent, received;
    int capacity;
    double *arrival;  /* ring of capacity: arrival time of message k at k % capacity */
    double *popped;   /* ring: when message k was received */
} SimChannel;

typedef struct EventList {
    SimEvent *items;
    long n, cap;
} EventList;

static void add_event(EventList *ev, int stage, int op, long mb, double start, double end)
{
    if (ev->n == ev->cap) {
        ev->cap = ev->cap ? ev->cap * 2 : 4096;
        ev->items = xrealloc(ev->items, (size_t)ev->cap * sizeof *ev->items);
    }
    ev->items[ev->n++] = (SimEvent){stage, op, mb, start, end};
}

typedef struct SegmentRun {
    const CostModel *cm;
    const paci_table *t;
    int stages, devices;
    long first_mb;
    bool barrier; /* cm->step_barrier, for a synchronous program */
    paci_instr *list[PACI_MAX_STAGES]; /* per device, as the clocks and counters below */
    long n[PACI_MAX_STAGES], pc[PACI_MAX_STAGES];
    double clock[PACI_MAX_STAGES];
    SimChannel act[PACI_MAX_STAGES], grad[PACI_MAX_STAGES]; /* per stage */
    /* the step barrier, per device (which waits once a window, at the first of its stages'
     * steps): barriers each device passed, when it reached the one it waits at (-1: none), and
     * when barrier k let them go (k mod 2: no device is two barriers ahead); steps_run counts
     * every step instruction the device ran */
    long steps_done[PACI_MAX_STAGES], steps_run[PACI_MAX_STAGES];
    double arrived[PACI_MAX_STAGES], released[2];
} SegmentRun;

/* Device s at its step under cm->step_barrier: false while another device has not reached
 * the same step; then every device goes on at the last arrival. */
static bool step_barrier(SegmentRun *r, int s, double *clock)
{
    long k = r->steps_done[s];
    if (r->arrived[s] < 0)
        r->arrived[s] = *clock;
    double release = r->arrived[s];
    for (int t = 0; t < r->devices; t++) {
        if (r->steps_done[t] > k) {
            release = r->released[k % 2];
            break;
        }
        if (r->arrived[t] < 0)
            return false;
        release = r->arrived[t] > release ? r->arrived[t] : release;
    }
    r->released[k % 2] = release;
    r->arrived[s] = -1;
    r->steps_done[s]++;
    *clock = release;
    return true;
}

/* A send may go once the message `capacity` places earlier has left the link. */
static bool sim_send(SimChannel *c, double *clock, double transfer)
{
    long k = c->sent;
    if (k >= c->capacity) {
        if (c->received <= k - c->capacity)
            return false;
        double freed = c->popped[k % c->capacity];
        if (freed > *clock)
            *clock = freed;
    }
    c->arrival[k % c->capacity] = *clock + transfer;
    c->sent++;
    return true;
}

static bool sim_receive(SimChannel *c, double *clock)
{
    long k = c->received;
    if (k >= c->sent)
        return false;
    double at = c->arrival[k % c->capacity];
    if (at > *clock)
        *clock = at;
    c->popped[k % c->capacity] = *clock;
    c->received++;
    return true;
}

/* Seconds a message from stage s to s+1 (or back) takes: none between stages of one device. */
static double transfer(const SegmentRun *r, int s)
{
    return r->t->stage_device[s] == r->t->stage_device[s + 1] ? 0 : r->cm->msg[s];
}

/* Runs device d's next instruction if it can (the device computes one at a time); records
 * it with its times, under its stage. */
static bool sim_step(SegmentRun *r, int d, EventList *ev)
{
    paci_instr in = r->list[d][r->pc[d]];
    int s = in.stage;
    const CostModel *cm = r->cm;
    double start = r->clock[d];
    double *clock = &r->clock[d];
    bool ran = true;
    switch (in.op) {
    case PACI_OP_RECV_ACT:
        ran = sim_receive(&r->act[s - 1], clock);
        break;
    case PACI_OP_SEND_ACT:
        ran = sim_send(&r->act[s], clock, transfer(r, s));
        break;
    case PACI_OP_RECV_GRAD:
        ran = sim_receive(&r->grad[s], clock);
        break;
    case PACI_OP_SEND_GRAD: {
        // right after its BWD the backward sent it itself, before its late section (executor.c);
        // a send that waits for the link holds that section up
        double late = 0;
        if (r->pc[d] > 0) {
            paci_instr bwd = r->list[d][r->pc[d] - 1];
            if (bwd.op == PACI_OP_BWD && bwd.stage == s && bwd.mb == in.mb)
                late = cm->late[s];
        }
        double at = *clock - late;
        ran = sim_send(&r->grad[s - 1], &at, transfer(r, s - 1));
        if (ran && at + late > *clock)
            *clock = at + late;
        break;
    }
    case PACI_OP_FWD:
        *clock += cm->fwd[s];
        break;
    case PACI_OP_BWD:
        *clock += cm->bwd[s];
        break;
    case PACI_OP_BWD_B:
        *clock += cm->bwd[s] - cm->w[s];
        break;
    case PACI_OP_BWD_W:
        *clock += cm->w[s];
        break;
    case PACI_OP_STEP: {
        /* the replicas average the stage's gradients before it updates: the part of the
         * allreduce the window's last backward did not hide (docs/dsl.md "parallel"); then
         * the global norm's barrier, where clipping has one */
        double at = *clock + cm->allreduce[s];
        if (r->barrier && r->steps_run[d] % r->t->chunks == 0 && !step_barrier(r, d, &at))
            return false;
        r->steps_run[d]++;
        if (cm->allreduce[s] > 0)
            add_event(ev, s, SIM_OP_ALLREDUCE, -1, start, start + cm->allreduce[s]);
        start = at;
        *clock = at + cm->step[s];
        break;
    }
    }
    if (!ran)
        return false;
    add_event(ev, s, in.op, in.op == PACI_OP_STEP ? -1 : r->first_mb + in.mb, start, *clock);
    r->pc[d]++;
    return true;
}

/* Simulates one segment from time `start`; returns when the last stage finishes. */
static double run_segment(SegmentRun *r, int capacity, double start, EventList *ev)
{
    for (int s = 0; s < r->stages; s++) {
        r->steps_done[s] = r->steps_run[s] = 0;
        r->arrived[s] = -1;
        for (SimChannel *c = &r->act[s]; c; c = c == &r->act[s] ? &r->grad[s] : NULL) {
            *c = (SimChannel){.capacity = capacity};
            c->arrival = xcalloc((size_t)capacity, sizeof *c->arrival);
            c->popped = xcalloc((size_t)capacity, sizeof *c->popped);
        }
    }
    for (int d = 0; d < r->devices; d++) {
        r->clock[d] = start;
        r->pc[d] = 0;
    }
    for (bool progress = true; progress;) {
        progress = false;
        for (int d = 0; d < r->devices; d++)
            while (r->pc[d] < r->n[d] && sim_step(r, d, ev))
                progress = true;
    }
    double end = start;
    for (int d = 0; d < r->devices; d++) {
        if (r->pc[d] != r->n[d])
            ICE("simulation stalls at device %d instruction %ld of a verified schedule", d, r->pc[d]);
        if (r->clock[d] > end)
            end = r->clock[d];
    }
    for (int s = 0; s < r->stages; s++) {
        free(r->act[s].arrival);
        free(r->act[s].popped);
        free(r->grad[s].arrival);
        free(r->grad[s].popped);
    }
    return end;
}

/* Busy time of device d's compute events inside [from, to]. */
static double busy_between(const SimResult *t, const EventList *ev, int d, double from, double to)
{
    double busy = 0;
    for (long i = 0; i < ev->n; i++) {
        const SimEvent *e = &ev->items[i];
        if (t->stage_device[e->stage] != d || !(e->op == PACI_OP_FWD || e->op == PACI_OP_BWD || e->op == PACI_OP_STEP ||
                               e->op == PACI_OP_BWD_B || e->op == PACI_OP_BWD_W))
            continue;
        double a = e->start > from ? e->start : from, b = e->end < to ? e->end : to;
        if (b > a)
            busy += b - a;
    }
    return busy;
}

/* The end of device d's optimizer step number `step` (0-based): its last stage's step, the
 * one with the highest number, is its last of the window. -1 if none. */
static double step_end(const SimResult *t, const EventList *ev, int d, long step)
{
    int last = -1;
    for (int s = 0; s < t->stages; s++)
        if (t->stage_device[s] == d)
            last = s;
    long seen = 0;
    for (long i = 0; i < ev->n; i++)
        if (ev->items[i].stage == last && ev->items[i].op == PACI_OP_STEP && seen++ == step)
            return ev->items[i].end;
    return -1;
}

/* The steady state: between the ends of (0-based) steps j1 and j2, the middle half of the run. */
static void steady_window(long n, long *j1, long *j2)
{
    *j1 = n / 4;
    *j2 = n - 1 - n / 4;
}

void sim_steady_steps(const SimResult *res, long *first, long *last)
{
    long j1, j2;
    steady_window(res->steps, &j1, &j2);
    *first = j2 > j1 ? j1 + 2 : 1;
    *last = j2 > j1 ? j2 + 1 : res->steps;
}

/* Whole-run figures, and steady-state ones measured between each stage's optimizer steps
 * in the middle half of the run (fill and drain excluded). */
static void summarise(const Config *cfg, const EventList *ev, SimResult *res)
{
    long n = res->steps;
    long j1, j2;
    int stages = res->devices; /* each device's figures */
    steady_window(n, &j1, &j2);
    double period_sum = 0;
    for (int s = 0; s < stages; s++) {
        double busy = busy_between(res, ev, s, 0, res->makespan);
        res->busy[s] = res->makespan > 0 ? busy / res->makespan : 0;
        if (j2 > j1) {
            double from = step_end(res, ev, s, j1), to = step_end(res, ev, s, j2);
            res->steady_busy[s] = to > from ? busy_between(res, ev, s, from, to) / (to - from) : 1;
            period_sum += (to - from) / (double)(j2 - j1);
        } else {
            res->steady_busy[s] = res->busy[s];
            period_sum += n > 0 ? res->makespan / (double)n : 0;
        }
    }
    double mean_busy = 0;
    for (int s = 0; s < stages; s++)
        mean_busy += res->steady_busy[s];
    mean_busy /= stages;
    res->bubble = 1 - mean_busy;
    res->step_time = period_sum / stages;
    double tokens = (double)cfg->micro * cfg->window * cfg->context;
    res->tokens_per_s = res->step_time > 0 ? tokens / res->step_time : 0;
}

void simulate(const Config *cfg, const paci_table *t, const CostModel *cm, long steps, SimResult *res)
{
    memset(res, 0, sizeof *res);
    res->stages = t->stages;
    res->devices = t->devices;
    memcpy(res->stage_device, t->stage_device, sizeof res->stage_device);
    if (steps <= 0 || steps > t->total_steps)
        steps = t->total_steps;
    EventList ev = {0};
    SegmentRun run = {.cm = cm, .t = t, .stages = t->stages, .devices = t->devices};
    PipeShape shape = {t->stages, t->devices, t->chunks, t->placement};
    double now = 0;
    long done = 0;
    for (int32_t seg = 0; done < steps; seg++) {
        const paci_program *prog = paci_segment_program(t, seg);
        long seg_steps = prog->steps;
        SegmentLists cut = {0};
        if (steps - done < seg_steps) {
            /* A run stopped early drains there: exactly the program of a shorter segment. */
            seg_steps = steps - done;
            schedule_generate_shape(prog->schedule, &shape, t->window, seg_steps, t->slots, &cut);
        }
        for (int s = 0; s < t->devices; s++) {
            if (cut.stages) {
                run.list[s] = cut.instrs[s];
                run.n[s] = cut.count[s];
            } else {
                run.n[s] = schedule_expand(t, (int)(prog - t->program), s, &run.list[s]);
            }
        }
        run.first_mb = done * t->window;
        run.barrier = cm->step_barrier && paci_schedule_is_sync(prog->schedule);
        now = run_segment(&run, t->channel_capacity, now, &ev);
        if (cut.stages)
            segment_lists_free(&cut);
        else
            for (int s = 0; s < t->devices; s++)
                free(run.list[s]);
        done += seg_steps;
    }
    res->steps = steps;
    res->makespan = now;
    res->events = ev.items;
    res->n_events = ev.n;
    summarise(cfg, &ev, res);
}

SimView sim_view(const Config *cfg, const SimResult *sim, const char *model, long show_steps)
{
    SimView v = {.sim = sim, .model = model, .stages = sim->devices, .run_steps = cfg->steps, .fill_drain = show_steps == 0};
    sim_steady_steps(sim, &v.steady_first, &v.steady_last);
    v.first = v.fill_drain ? 1 : v.steady_first;
    v.last = v.fill_drain ? sim->steps : v.first + show_steps - 1;
    if (v.last > sim->steps)
        v.last = sim->steps;
    // from the earliest end of the step before the first drawn to the latest end of the last
    EventList ev = {.items = sim->events, .n = sim->n_events};
    v.from = v.fill_drain ? 0 : INFINITY;
    v.to = v.fill_drain ? sim->makespan : 0;
    for (int s = 0; s < sim->devices && !v.fill_drain; s++) {
        double from = v.first > 1 ? step_end(sim, &ev, s, v.first - 2) : 0, to = step_end(sim, &ev, s, v.last - 1);
        v.from = from < v.from ? from : v.from;
        v.to = to > v.to ? to : v.to;
    }
    if (!(v.to > v.from)) {
        v.from = 0;
        v.to = sim->makespan;
    }
    return v;
}

void sim_bubble_phrase(const SimView *v, char *buf, size_t size)
{
    const SimResult *sim = v->sim;
    if (v->fill_drain) {
        double busy = 0;
        for (int s = 0; s < v->stages; s++)
            busy += sim->busy[s];
        snprintf(buf, size, "idle %.1f%% of a %ld-step run, its fill and drain included (%s)",
                 100 * (1 - busy / v->stages), sim->steps, v->model);
        return;
    }
    snprintf(buf, size, "bubble %.1f%% (steady state: steps %ld-%ld of %ld simulated, %s)", 100 * sim->bubble,
             v->steady_first, v->steady_last, sim->steps, v->model);
}

void sim_result_free(SimResult *res)
{
    free(res->events);
    res->events = NULL;
    res->n_events = 0;
}

void cost_model_unit(const Config *cfg, int stages, CostModel *cm)
{
    *cm = (CostModel){0};
    double chunk = 1.0 / config_chunks(cfg);
    for (int s = 0; s < stages; s++) {
        cm->fwd[s] = chunk;
        cm->bwd[s] = 2 * chunk;
        cm->w[s] = config_splits_backward(cfg) ? chunk : 0;
    }
}
