/* executor.c: per-stage arenas and the device threads that walk the schedule table.
 *
 * A device thread executes its instruction list for one segment exactly as written: the
 * order, the slots, the peers and the weight versions all come from the table. Each
 * instruction names the (virtual) stage it runs on; a stage's state (weights, slots, the cut
 * of the segment) is its own, whichever device holds it. Receives check that the
 * micro-batch that arrives is the one the table expects.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prt.h"

static const char *op_name(int op)
{
    static const char *const names[] = {
#define PR_OP_NAME(name, text) text,
        PACI_OPS(PR_OP_NAME)
#undef PR_OP_NAME
    };
    return op >= 0 && op < PACI_OP_COUNT ? names[op] : "?";
}

const char *pr_placement_name(int placement)
{
    static const char *const names[] = {
#define PR_PLACEMENT_NAME(name, text) text,
        PACI_PLACEMENTS(PR_PLACEMENT_NAME)
#undef PR_PLACEMENT_NAME
    };
    return placement >= 0 && placement < PACI_PLACEMENT_COUNT ? names[placement] : "?";
}

/* Instructions stage s runs in one segment of program pg, counting body repetitions: those of
 * its device's list that name it. */
static int64_t count_op(const paci_table *tab, const paci_program *pg, int s, int op)
{
    const paci_stage_program *sp = &pg->device[tab->stage_device[s]];
    int64_t n = 0;
    for (int32_t i = 0; i < sp->n_prologue; i++)
        n += tab->instrs[sp->prologue + i].op == op && tab->instrs[sp->prologue + i].stage == s;
    for (int32_t i = 0; i < sp->n_body; i++)
        n += (int64_t)pg->body_reps * (tab->instrs[sp->body + i].op == op && tab->instrs[sp->body + i].stage == s);
    for (int32_t i = 0; i < sp->n_epilogue; i++)
        n += tab->instrs[sp->epilogue + i].op == op && tab->instrs[sp->epilogue + i].stage == s;
    return n;
}

/* Device d's instructions [first, first + n): each names a stage d holds, and uses that
 * stage's slots, stashes and peers. */
static int check_range(const paci_table *tab, int d, int32_t first, int32_t n, char *err)
{
    if (first < 0 || n < 0 || (int64_t)first + n > tab->n_instrs)
        return pr_fail(err, "schedule table: device %d's instruction range [%d, +%d) is outside the "
                       "table (%d instructions)", d, first, n, tab->n_instrs);
    for (int32_t i = first; i < first + n; i++) {
        const paci_instr *in = &tab->instrs[i];
        int s = in->stage;
        if (in->op >= PACI_OP_COUNT)
            return pr_fail(err, "schedule table: instruction %d has unknown op %d", i, in->op);
        if (s >= tab->stages || tab->stage_device[s] != d)
            return pr_fail(err, "schedule table: instruction %d (%s) in device %d's list names stage %d, which "
                           "runs on device %d", i, op_name(in->op), d, s,
                           s < tab->stages ? tab->stage_device[s] : -1);
        if (in->op != PACI_OP_STEP && in->slot >= tab->slots[s])
            return pr_fail(err, "schedule table: instruction %d uses slot %d of stage %d's %d",
                           i, in->slot, s, tab->slots[s]);
        if (in->aux < 0)
            return pr_fail(err, "schedule table: instruction %d has aux %d", i, in->aux);
        if ((in->op == PACI_OP_BWD || in->op == PACI_OP_STEP) && in->aux > tab->stash[s])
            return pr_fail(err, "schedule table: instruction %d uses stash %d of stage %d's %d",
                           i, in->aux, s, tab->stash[s]);
        int first_stage = s == 0, last_stage = s == tab->stages - 1;
        if (((in->op == PACI_OP_RECV_ACT || in->op == PACI_OP_SEND_GRAD) && first_stage) ||
            ((in->op == PACI_OP_SEND_ACT || in->op == PACI_OP_RECV_GRAD) && last_stage))
            return pr_fail(err, "schedule table: stage %d has a %s with no peer", s, op_name(in->op));
    }
    return 0;
}

/* Devices, chunks and placement: S = p v stages, chunk c of device d is the stage
 * paci_placed_stage names, and stage_device says the same. */
static int check_placement(const paci_table *tab, char *err)
{
    if (tab->devices < 1 || tab->chunks < 1 || (int64_t)tab->devices * tab->chunks != tab->stages ||
        tab->placement < 0 || tab->placement >= PACI_PLACEMENT_COUNT)
        return pr_fail(err, "schedule table: %d stages on %d devices of %d chunks each, placement %d: "
                       "stages must be devices x chunks", tab->stages, tab->devices, tab->chunks, tab->placement);
    for (int d = 0; d < tab->devices; d++)
        for (int c = 0; c < tab->chunks; c++) {
            int32_t s = paci_placed_stage(tab->placement, tab->devices, d, c);
            if (s < 0 || s >= tab->stages || tab->stage_device[s] != d)
                return pr_fail(err, "schedule table: chunk %d of device %d is stage %d under placement %s, "
                               "but the table puts stage %d on device %d", c, d, s,
                               pr_placement_name(tab->placement), s,
                               s >= 0 && s < tab->stages ? tab->stage_device[s] : -1);
        }
    return 0;
}

/* The table and the program must agree before a thread starts: a bad table is a compiler
 * bug, reported here rather than as a hang. */
static int check_table(const pr_program *prog, const paci_table *tab, char *err)
{
    if (!tab)
        return pr_fail(err, "%s: the program has no schedule table", prog->source);
    if (tab->stages != prog->stages || tab->stages < 1 || tab->stages > PACI_MAX_STAGES)
        return pr_fail(err, "schedule table: %d stages, program: %d", tab->stages, prog->stages);
    if (check_placement(tab, err) != 0)
        return -1;
    if (tab->window < 1 || tab->channel_capacity < 1 || tab->segment_steps < 1 ||
        tab->total_steps < 1 || tab->n_programs < 1 || tab->n_programs > PACI_MAX_PROGRAMS)
        return pr_fail(err, "schedule table: window %d, channel capacity %d, segment %d steps, "
                       "total %d, %d programs: out of range", tab->window, tab->channel_capacity,
                       tab->segment_steps, tab->total_steps, tab->n_programs);
    for (int s = 0; s < tab->stages; s++) {
        const pr_stage_code *sc = &prog->stage[s];
        if (sc->has_embed != (s == 0) || sc->has_head != (s == tab->stages - 1))
            return pr_fail(err, "stage %d: embedding on the first stage and head on the last "
                           "expected", s);
        if (tab->slots[s] < 1 || tab->stash[s] < 0)
            return pr_fail(err, "schedule table: stage %d has %d slots, %d stashes", s,
                           tab->slots[s], tab->stash[s]);
    }
    if (tab->warm_steps < 0 || tab->warm_steps >= tab->total_steps ||
        (tab->warm_steps > 0 && !paci_schedule_sync(tab->warm_schedule)))
        return pr_fail(err, "schedule table: a warm start of %d steps of %d under schedule %d", tab->warm_steps,
                       tab->total_steps, tab->warm_schedule);
    paci_segment_run runs[PACI_MAX_SEGMENT_RUNS];
    int32_t n_runs = paci_segment_runs(tab, runs);
    for (int32_t r = 0; r < n_runs; r++) /* a run's segments share its first one's program */
        if (!paci_segment_program(tab, runs[r].first))
            return pr_fail(err, "schedule table: segment %d (steps [%lld, %lld)) has no program", runs[r].first,
                           (long long)paci_segment_first_step(tab, runs[r].first),
                           (long long)paci_segment_end(tab, runs[r].first));
    for (int p = 0; p < tab->n_programs; p++) {
        const paci_program *pg = &tab->program[p];
        for (int d = 0; d < tab->devices; d++) {
            const paci_stage_program *sp = &pg->device[d];
            if (check_range(tab, d, sp->prologue, sp->n_prologue, err) ||
                check_range(tab, d, sp->body, sp->n_body, err) ||
                check_range(tab, d, sp->epilogue, sp->n_epilogue, err))
                return -1;
        }
        for (int s = 0; s < tab->stages; s++) {
            int64_t steps = count_op(tab, pg, s, PACI_OP_STEP);
            int64_t fwds = count_op(tab, pg, s, PACI_OP_FWD), bs = count_op(tab, pg, s, PACI_OP_BWD_B);
            int64_t bwds = count_op(tab, pg, s, PACI_OP_BWD) + bs, ws = count_op(tab, pg, s, PACI_OP_BWD_W);
            if (ws != bs || (bs > 0 && (!prog->stage[s].backward_b || !prog->stage[s].backward_w)))
                return pr_fail(err, "schedule table: program %d stage %d has %lld B's and %lld W's, and the "
                               "stage's code %s them", p, s, (long long)bs, (long long)ws,
                               prog->stage[s].backward_b ? "runs" : "does not run");
            if (steps != pg->steps || fwds != steps * tab->window || bwds != fwds)
                return pr_fail(err, "schedule table: program %d stage %d has %lld steps, %lld "
                               "forwards, %lld backwards; expected %d, %lld, %lld", p, s,
                               (long long)steps, (long long)fwds, (long long)bwds, pg->steps,
                               (long long)pg->steps * tab->window, (long long)pg->steps * tab->window);
        }
    }
    return 0;
}

/* Whether some forward of stage s carries a delay (FWD aux > 0): under `delay_correction
 * predict` it runs on predicted weights, under `dc-asgd` its backward's gradient is corrected;
 * either way the stage keeps more buffers. */
static int stage_has_delays(const paci_table *tab, int s)
{
    for (int p = 0; p < tab->n_programs; p++) {
        const paci_stage_program *sp = &tab->program[p].device[tab->stage_device[s]];
        int32_t starts[3] = {sp->prologue, sp->body, sp->epilogue}, counts[3] = {sp->n_prologue, sp->n_body, sp->n_epilogue};
        for (int part = 0; part < 3; part++)
            for (int32_t i = starts[part]; i < starts[part] + counts[part]; i++)
                if (tab->instrs[i].stage == s && tab->instrs[i].op == PACI_OP_FWD && tab->instrs[i].aux > 0)
                    return 1;
    }
    return 0;
}

/* What a process keeps of stage s. Alone it runs every stage. One process per device keeps
 * the device's stages in full; rank 0 also keeps every other stage's weights and moments and
 * one activation slot (the gathers for evaluation and checkpoints land there), and other
 * ranks keep nothing of the stages they do not run. */
enum { HOLD_NONE, HOLD_COPY, HOLD_FULL };
static int stage_holding(const pr_run *run, int s)
{
    if (run->opt.world <= 1 || run->tab->stage_device[s] == run->opt.rank % run->tab->devices)
        return HOLD_FULL;
    return run->opt.rank == 0 ? HOLD_COPY : HOLD_NONE;
}

/* A bf16 copy read before it is first written would read as zeros, and train: it holds NaN
 * (all ones) until then instead, so such a read stops the run at its first step. */
static void poison_copies(const pr_device *dev, int s, pr_bf16 *copy, size_t count)
{
    enum { CHUNK = 1 << 18 };
    pr_bf16 *nan = pr_alloc(CHUNK * sizeof(pr_bf16));
    memset(nan, 0xff, CHUNK * sizeof(pr_bf16));
    for (size_t at = 0; at < count; at += CHUNK)
        dev->upload(s, copy + at, nan, (count - at < CHUNK ? count - at : CHUNK) * sizeof(pr_bf16));
    free(nan);
}

/* What each stage keeps on its device, sized before anything is allocated (pr_run_init). */
typedef struct stage_sizes {
    int64_t message;          /* the message buffers' floats: the largest message */
    int weight_copies;        /* products read bf16 copies of the weights (and of each stash slot) */
    int acc_buffers;          /* accumulate pairwise's gradient buffers per stage */
    int predicts[PACI_MAX_STAGES];
    int corrects[PACI_MAX_STAGES];  /* dc-asgd with lambda != 0: the weights before the last step, a gradient buffer */
    int recomputes[PACI_MAX_STAGES];
    int64_t floats[PACI_MAX_STAGES], bytes[PACI_MAX_STAGES], slots[PACI_MAX_STAGES];
    /* recompute full: a slot keeps the stage's input only (the first stage's tokens are kept
     * beside), and one full slot is the workspace (docs/dsl.md "Recompute"); a stage with one
     * slot keeps it whole, as compiler/plan.c counts it */
    int64_t slot_floats[PACI_MAX_STAGES], work_floats[PACI_MAX_STAGES];
} stage_sizes;

/* The run's shapes, and which replica this process is. */
static void set_shapes(pr_run *run, const pr_program *prog, const pr_options *opt)
{
    run->prog = prog;
    run->tab = prog->schedule;
    if (opt)
        run->opt = *opt;
    run->p = prog->stages;
    run->devices = prog->schedule->devices;
    run->B = prog->micro;
    run->T = prog->context;
    run->C = prog->width;
    run->K = prog->schedule->window;
    run->V = prog->vocab;
    run->replicas = prog->replicas > 1 ? prog->replicas : 1;
    // One process per device and replica: rank = replica * devices + device (docs/launch.md).
    run->replica = run->opt.world > 1 ? run->opt.rank / run->devices : 0;
}

/* The program's options the device or the stages' code must allow. */
static int check_options(const pr_program *prog, const pr_device *dev, stage_sizes *z, char *err)
{
    for (int s = 0; s < prog->stages; s++) {
        int delays = stage_has_delays(prog->schedule, s);
        z->predicts[s] = delays && !prog->dc_asgd;
        z->corrects[s] = delays && prog->dc_asgd && prog->dc_lambda != 0.0;
        if (z->corrects[s] && !dev->dc_asgd_add)
            return pr_fail(err, "%s: delay_correction dc-asgd is not supported on the %s device; run with --device "
                           "cpu, or compile with delay_correction none", prog->source, dev->name);
        if (z->predicts[s] && prog->optimizer == PR_OPT_LARS)
            return pr_fail(err, "%s: delay_correction predict needs optimizer adamw, muon, lamb, nadamw or lans, "
                           "not lars", prog->source);
        if (z->predicts[s] && prog->optimizer != PR_OPT_ADAMW && !prog->stage[s].optim_rule)
            return pr_fail(err, "%s: stage %d's code carries no optimizer rule to predict with", prog->source, s);
    }
    // The tree's additions run on the host, over the stage's gradient buffers.
    if (prog->accumulate_pairwise && !dev->host_memory)
        return pr_fail(err, "%s: accumulate pairwise runs on the CPU only for now; run with --device cpu, "
                       "or compile with accumulate sequential", prog->source);
    return 0;
}

/* Everything a stage keeps on its device, so that a plan that does not fit stops with the
 * stage named before any of it is allocated. */
static void size_stages(const pr_run *run, const pr_device *dev, stage_sizes *z)
{
    const pr_program *prog = run->prog;
    const paci_table *tab = run->tab;
    int64_t BT = run->B * run->T;
    // the message buffers hold the largest message (the vocabulary split's may pass B T C)
    z->message = pr_link_floats_max(prog);
    z->weight_copies = prog->bf16_operands && dev->weight_copy;
    z->acc_buffers = prog->accumulate_pairwise ? pr_pairwise_buffers(tab->window) : 0;
    for (int s = 0; s < run->p; s++) {
        const pr_stage_code *sc = &prog->stage[s];
        // floats of a copy, and 64 more to start the copies on 256 bytes as the products want
        int64_t n = sc->n_params, n_h = z->weight_copies ? (n + 1) / 2 : 0, pad = z->weight_copies ? 64 : 0;
        int hold = stage_holding(run, s), predicts = z->predicts[s];
        z->slots[s] = hold == HOLD_FULL ? tab->slots[s] : hold == HOLD_COPY;
        z->recomputes[s] = prog->recompute && tab->slots[s] > 1;
        z->slot_floats[s] = !z->recomputes[s] ? sc->act_floats : s > 0 ? pr_link_floats(prog, PR_LINK_ACT, s - 1) : 0;
        z->work_floats[s] = z->recomputes[s] ? sc->act_floats : 0;
        z->floats[s] = hold == HOLD_FULL ? (4 + predicts + 2 * z->corrects[s] + z->acc_buffers) * n +
                                               z->slots[s] * z->slot_floats[s] + z->work_floats[s] +
                                               tab->stash[s] * (n + n_h) + sc->scratch_floats + 2 * z->message +
                                               (1 + predicts) * n_h + pad
                     : hold == HOLD_COPY ? 3 * n + sc->act_floats + n_h + pad
                     : 0;
        z->bytes[s] = z->floats[s] * (int64_t)sizeof(float) +
                      z->slots[s] * BT * (2 * (int64_t)sizeof(int32_t) + (int64_t)sizeof(float));
    }
}

/* Opens the stages this process holds anything of (on a GPU: streams, module, cuBLASLt
 * workspace); on a failure the ones opened are closed again. */
static int open_stages(const pr_run *run, const pr_device *dev, char *err)
{
    for (int s = 0; s < run->p; s++)
        if (stage_holding(run, s) != HOLD_NONE && dev->open_stage(run->prog, s, err) != 0) {
            for (int opened = 0; opened < s; opened++)
                if (stage_holding(run, opened) != HOLD_NONE)
                    dev->close_stage(opened);
            return -1;
        }
    return 0;
}

/* Stage st's arena, cut into its blocks: the whole stage, or a copy of the weights and moments
 * with the evaluation's slot (a rank that evaluates and saves for stages it does not run). */
static void carve_arena(pr_stage_rt *st, const paci_table *tab, const stage_sizes *z, int hold)
{
    int s = st->index;
    int64_t n = st->code->n_params, n_h = z->weight_copies ? (n + 1) / 2 : 0;
    float *at = st->arena;
    if (hold == HOLD_FULL) {
        st->params = at, at += n;
        st->grads = at, at += n;
        st->m = at, at += n;
        st->v = at, at += n;
        st->slots = at, at += z->slots[s] * z->slot_floats[s];
        st->work = z->recomputes[s] ? at : st->slots;
        at += z->work_floats[s];
        st->slot_floats = z->slot_floats[s];
        st->recompute = z->recomputes[s];
        st->stash = at, at += tab->stash[s] * n;
        st->scratch = at, at += st->code->scratch_floats;
        st->grad_in = at, at += z->message;
        st->grad_out = at, at += z->message;
        if (z->predicts[s])
            st->predicted = at, at += n;
        if (z->corrects[s]) {
            st->dc_prev = at, at += n;
            st->dc_grad = at, at += n;
        }
        if (z->acc_buffers > 0) {
            st->acc_level = pr_alloc(64 * sizeof *st->acc_level);
            st->acc_free = pr_alloc((size_t)z->acc_buffers * sizeof *st->acc_free);
            for (st->acc_n_free = 0; st->acc_n_free < z->acc_buffers; st->acc_n_free++)
                st->acc_free[st->acc_n_free] = at, at += n;
        }
        if (z->weight_copies) {
            at = st->arena + (at - st->arena + 63) / 64 * 64;
            st->params_h = (pr_bf16 *)at, at += n_h;
            st->stash_h = (pr_bf16 *)at;
            st->predicted_h = z->predicts[s] ? st->stash_h + (size_t)tab->stash[s] * (size_t)n : NULL;
        }
    } else if (hold == HOLD_COPY) { // weights, moments and the evaluation's slot
        st->params = at, at += n;
        st->m = at, at += n;
        st->v = at, at += n;
        st->slots = st->work = at, at += st->code->act_floats;
        if (z->weight_copies)
            st->params_h = (pr_bf16 *)(st->arena + (at - st->arena + 63) / 64 * 64);
    }
}

/* Each slot's token ids, targets, losses and bookkeeping, on the host (and the device's
 * copies where the host cannot read its memory). */
static void alloc_slot_buffers(pr_run *run, pr_stage_rt *st, int64_t slots, int hold, int64_t message)
{
    const pr_device *dev = run->dev;
    int64_t BT = run->B * run->T;
    if (slots == 0)
        slots = 1; // host bookkeeping stays uniform; it is a few bytes
    st->slot_tokens = pr_alloc((size_t)(slots * BT) * sizeof(int32_t));
    st->slot_targets = pr_alloc((size_t)(slots * BT) * sizeof(int32_t));
    st->slot_losses = pr_alloc((size_t)(slots * BT) * sizeof(float));
    st->slot_mb = pr_alloc((size_t)slots * sizeof(int64_t));
    st->slot_fwd_step = pr_alloc((size_t)slots * sizeof(int64_t));
    st->slot_fwd_delay = pr_alloc((size_t)slots * sizeof(int32_t));
    if (dev->host_memory) {
        st->dev_tokens = st->slot_tokens;
        st->dev_targets = st->slot_targets;
        st->dev_losses = st->slot_losses;
    } else if (hold != HOLD_NONE) {
        st->dev_tokens = dev->alloc(st->index, (size_t)(slots * BT) * sizeof(int32_t));
        st->dev_targets = dev->alloc(st->index, (size_t)(slots * BT) * sizeof(int32_t));
        st->dev_losses = dev->alloc(st->index, (size_t)(slots * BT) * sizeof(float));
        st->staging = pr_alloc((size_t)message * sizeof(float));
    }
    for (int64_t i = 0; i < slots; i++)
        st->slot_mb[i] = -1;
}

/* Whether some segment of this run may post-validate its steps (post_validating). */
static int post_validation_possible(const pr_run *run)
{
    const pr_program *prog = run->prog;
    return prog->post_validation && prog->grad_clip > 0.0 && prog->global_clip && run->p > 1 &&
           run->replicas <= 1;
}

/* Room on the device for what a rollback restores: the step's params, m, v and grads as it
 * found them, and the bf16 weights. */
static void keep_for_rollback_alloc(pr_run *run, pr_stage_rt *st)
{
    size_t n = (size_t)st->code->n_params;
    st->pv.kept = run->dev->alloc(st->index, 4 * n * sizeof(float));
    st->pv.kept_bytes = (int64_t)(4 * n * sizeof(float));
    if (st->params_h) {
        st->pv.kept_h = run->dev->alloc(st->index, n * sizeof(pr_bf16));
        st->pv.kept_bytes += (int64_t)(n * sizeof(pr_bf16));
    }
}

/* Stage s: its arena and buffers, its profile counters and its links to stage s + 1. */
static void init_stage(pr_run *run, int s, const stage_sizes *z)
{
    const pr_program *prog = run->prog;
    const paci_table *tab = run->tab;
    pr_stage_rt *st = &run->stage[s];
    const pr_stage_code *sc = &prog->stage[s];
    int hold = stage_holding(run, s);
    st->index = s;
    st->code = sc;
    st->arena = z->floats[s] > 0 ? run->dev->alloc(s, (size_t)z->floats[s] * sizeof(float)) : NULL;
    // What this stage holds: its arena, per-slot batch buffers, the links it sends on.
    st->arena_bytes = z->floats[s] * (int64_t)sizeof(float) +
                      z->slots[s] * run->B * run->T * (int64_t)(2 * sizeof(int32_t) + sizeof(float)) +
                      (hold == HOLD_FULL ? (int64_t)tab->channel_capacity * (int64_t)sizeof(float) *
                                               ((s + 1 < run->p ? pr_link_floats(prog, PR_LINK_ACT, s) : 0) +
                                                (s > 0 ? pr_link_floats(prog, PR_LINK_GRAD, s - 1) : 0))
                                         : 0);
    carve_arena(st, tab, z, hold);
    if (st->params_h) // the copies read NaN until a first weight copy fills them
        poison_copies(run->dev, s, st->params_h,
                      (size_t)(sc->n_params * (hold == HOLD_FULL ? 1 + tab->stash[s] + z->predicts[s] : 1)));
    alloc_slot_buffers(run, st, z->slots[s], hold, z->message);
    st->grad_in_mb = st->grad_out_mb = st->work_mb = st->grad_sent_mb = -1;
    for (int k = 0; k < 2; k++)
        st->tensor_sumsq[k] = pr_alloc((size_t)(sc->n_tensors + 1) * sizeof(double));
    if (hold == HOLD_FULL && post_validation_possible(run) && run->opt.sample == 0) // sampling takes no step
        keep_for_rollback_alloc(run, st);
    if (run->opt.profile_out)
        pr_op_stats_open(s, sc->n_ops);
    if (s + 1 < run->p) {
        int capacity = pr_link_capacity(tab, s);
        pr_channel_init(&run->act[s], capacity, pr_link_floats(prog, PR_LINK_ACT, s));
        pr_channel_init(&run->grad[s], capacity, pr_link_floats(prog, PR_LINK_GRAD, s));
        run->act[s].timeout = run->grad[s].timeout = run->opt.peer_timeout;
    }
}

/* The step losses' ring, the stages' barrier and statistics lock. */
static int init_shared(pr_run *run, char *err)
{
    // The last stage holds a forwarded micro-batch in a slot until its backward, and a step's
    // update comes after its micro-batches' backwards and before the next step's (one gradient
    // buffer): at most slots + 1 steps have losses not yet taken, whatever the step count.
    run->step_loss_len = (int64_t)run->tab->slots[run->p - 1] + 1;
    run->step_loss = pr_alloc((size_t)run->step_loss_len * sizeof(double));
    run->step_loss_step = pr_alloc((size_t)run->step_loss_len * sizeof(int64_t));
    for (int64_t i = 0; i < run->step_loss_len; i++)
        run->step_loss_step[i] = -1;
    // Refused (the system is out of them or of memory), the run ends with the reason.
    // The norm's barrier counts device threads: a device computes its stages' sums together.
    int rc = pthread_barrier_init(&run->barrier, NULL, run->opt.world > 1 ? 1u : (unsigned)run->devices);
    if (rc != 0)
        return pr_fail(err, "cannot create the stages' barrier: %s", strerror(rc));
    run->barrier_made = 1;
    if ((rc = pthread_mutex_init(&run->stats_mu, NULL)) != 0)
        return pr_fail(err, "cannot create the stages' statistics lock: %s", strerror(rc));
    run->stats_mu_made = 1;
    if ((rc = pthread_mutex_init(&run->pv_mu, NULL)) != 0)
        return pr_fail(err, "cannot create the stages' post-validation lock: %s", strerror(rc));
    if ((rc = pthread_cond_init(&run->pv_cv, NULL)) != 0) {
        pthread_mutex_destroy(&run->pv_mu);
        return pr_fail(err, "cannot create the stages' post-validation condition: %s", strerror(rc));
    }
    run->pv_made = 1;
    run->start_time = pr_now();
    run->stop_at = PR_NO_STOP;
    for (int d = 0; d < PACI_MAX_STAGES; d++)
        run->device_norm_t[d] = -1;
    return 0;
}

/* One process: links between stages on different GPUs go native where the device has a
 * transport (between processes pr_launch_join opens them once the ranks have met); the other
 * in-process links of a device the host cannot read go device to device, their channels
 * carrying only the micro-batch numbers: in one process every such link, in one process per
 * device those between two stages of its device. */
static int open_local_links(pr_run *run, char *err)
{
    const pr_device *dev = run->dev;
    const paci_table *tab = run->tab;
    if (run->opt.world <= 1 && dev->links && dev->links->open_local(run, err) != 0)
        return -1;
    int mine = run->opt.world > 1 ? run->opt.rank % run->devices : -1;
    for (int i = 0; !dev->host_memory && dev->event_create && i + 1 < run->p; i++)
        for (int kind = 0; kind < PR_LINK_KINDS; kind++) {
            if (run->native[kind][i] ||
                (mine >= 0 && (tab->stage_device[i] != mine || tab->stage_device[i + 1] != mine)))
                continue;
            pr_channel *c = kind == PR_LINK_ACT ? &run->act[i] : &run->grad[i];
            double timeout = c->timeout;
            pr_channel_destroy(c);
            pr_channel_init(c, pr_link_capacity(tab, i), 0);
            c->timeout = timeout;
            pr_dev_link_open(&run->dev_link[kind][i], dev, kind == PR_LINK_ACT ? i : i + 1,
                             kind == PR_LINK_ACT ? i + 1 : i, pr_link_capacity(tab, i),
                             (size_t)pr_link_floats(run->prog, kind, i));
        }
    return 0;
}

int pr_run_init(pr_run *run, const pr_program *prog, const pr_options *opt, char *err)
{
    memset(run, 0, sizeof *run);
    run->lr_steps = prog->steps;
    run->lr_warmup = prog->warmup_steps;
    if (check_table(prog, prog->schedule, err) || pr_check_layout(prog, err))
        return -1;
    // The device is chosen before run->prog is set: on failure pr_run_free has nothing to free.
    const pr_device *dev;
    const char *work = !opt || opt->quiet ? NULL : opt->sample > 0 ? "sampling" : opt->export_dir ? "exporting"
                                                                                        : "training";
    if (pr_device_select(prog, opt ? opt->device : NULL, work, &dev, err) != 0)
        return -1;
    // Replicas of chunked stages as processes reduce a device's stages one after another over
    // its TCP socket or NCCL group; the compression's state is a stage's (replicas.c).
    if (opt && opt->world > 1 && prog->schedule->chunks > 1 && prog->replicas > 1 && prog->dgc_density > 0)
        return pr_fail(err, "%s: %d chunks a device with parallel { data %d } and compression dgc run as threads "
                       "of one process only, for now", prog->source, prog->schedule->chunks, prog->replicas);
    stage_sizes z = {0};
    if (check_options(prog, dev, &z, err) != 0)
        return -1;
    set_shapes(run, prog, opt);
    size_stages(run, dev, &z);
    // One process per stage: this process's stages go on its launcher-given GPU.
    if (opt && opt->world > 1 && dev->pin && dev->pin(opt->local_rank, err) != 0)
        return -1;
    if (dev->check_memory(prog, z.bytes, err) != 0 || open_stages(run, dev, err) != 0)
        return -1;
    run->dev = dev;
    for (int s = 0; s < run->p; s++)
        init_stage(run, s, &z);
    if (init_shared(run, err) != 0)
        return -1;
    return open_local_links(run, err);
}

void pr_run_free(pr_run *run)
{
    if (!run->prog || !run->dev) /* nothing was allocated before the device was set */
        return;
    if (run->replica_ops)
        run->replica_ops->close(run);
    if (run->links)
        run->links->close(run);
    for (int kind = 0; kind < PR_LINK_KINDS; kind++)
        for (int i = 0; i + 1 < run->p; i++)
            pr_dev_link_close(&run->dev_link[kind][i], run->dev);
    for (int s = 0; s < run->p; s++) {
        pr_stage_rt *st = &run->stage[s];
        if (st->arena)
            run->dev->release(s, st->arena);
        if (st->pv.kept)
            run->dev->release(s, st->pv.kept);
        if (st->pv.kept_h)
            run->dev->release(s, st->pv.kept_h);
        if (!run->dev->host_memory && st->dev_tokens) {
            run->dev->release(s, st->dev_tokens);
            run->dev->release(s, st->dev_targets);
            run->dev->release(s, st->dev_losses);
            free(st->staging);
        }
        if (stage_holding(run, s) != HOLD_NONE)
            run->dev->close_stage(s);
        free(st->slot_tokens);
        free(st->slot_targets);
        free(st->slot_losses);
        free(st->slot_mb);
        free(st->slot_fwd_step);
        free(st->slot_fwd_delay);
        free(st->acc_level);
        free(st->acc_free);
        free(st->tensor_sumsq[0]);
        free(st->tensor_sumsq[1]);
        free(st->pv.done);
        free(st->pv.done_mb);
        free(st->trace);
        pr_op_stats_close(s);
        if (s + 1 < run->p) {
            pr_channel_destroy(&run->act[s]);
            pr_channel_destroy(&run->grad[s]);
        }
    }
    pr_tokens_free(&run->train);
    pr_tokens_free(&run->val);
    free(run->step_loss);
    free(run->step_loss_step);
    free(run->probs_host);
    if (run->barrier_made)
        pthread_barrier_destroy(&run->barrier);
    if (run->stats_mu_made)
        pthread_mutex_destroy(&run->stats_mu);
    if (run->pv_made) {
        pthread_cond_destroy(&run->pv_cv);
        pthread_mutex_destroy(&run->pv_mu);
    }
    memset(run, 0, sizeof *run);
}

static void expect_mb(const pr_stage_rt *st, int op, int64_t expected, int64_t got, const char *what)
{
    if (expected != got)
        pr_internal("stage %d %s: expected micro-batch %lld, %s holds %lld", st->index,
                    op_name(op), (long long)expected, what, (long long)got);
}

void pr_claim_exit(void)
{
    static atomic_flag exiting = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&exiting))
        for (;;)
            pause();
}

/* " of replica R" with replicas, whose pipelines share stage numbers, else "": so a message
 * names the stage the user can find. */
static const char *of_replica(const pr_run *run, char buf[32])
{
    if (run->replicas <= 1)
        return "";
    snprintf(buf, 32, " of replica %d", run->replica);
    return buf;
}

/* A stage's noise-scale averages as doubles, for a message of doubles (n is far below 2^53). */
enum { NOISE_WORDS = 4 };
static void noise_to_words(const pr_noise_ema *e, double *w)
{
    w[0] = e->g2, w[1] = e->trace, w[2] = e->weight, w[3] = (double)e->n;
}

static void noise_from_words(const double *w, pr_noise_ema *e)
{
    *e = (pr_noise_ema){.g2 = w[0], .trace = w[1], .weight = w[2], .n = (int64_t)w[3]};
}

/* One process per device: every rank publishes the per-tensor sums of step t + 1 of each stage
 * it holds (chunk by chunk) and takes the others', so the fold below sees every stage as the
 * threaded run does. The allgather sends the same length from every rank, chunks rows of the
 * most tensors any stage has: a stage with fewer sends its sums zero-padded from a row of that
 * length, never past its own buffer. Post-validated (on_trust; one stage a device), each row
 * then says whether its stage skipped the step itself, and the exchange runs on a thread of
 * its own while the stage goes on: the one wait a process's blame names is the stage thread's,
 * so this one is not marked. The noise scale's averages after step t - 1 ride at each row's
 * end (4 doubles), which the metrics line of step t sums over the stages
 * (pr_run_noise_scale); a stage changes them only once this exchange is joined (settle_device)
 * or, with the barrier, after it returns. */
static void exchange_sums(pr_run *run, pr_stage_rt *st, int64_t t, int on_trust)
{
    const paci_table *tab = run->tab;
    int most = 0, parity = (int)(t & 1), world = run->opt.world, v = tab->chunks;
    int d = tab->stage_device[st->index];
    for (int s = 0; s < run->p; s++)
        most = run->stage[s].code->n_tensors > most ? run->stage[s].code->n_tensors : most;
    int noise = pr_run_noise_estimated(run);
    size_t row = (size_t)(most + on_trust + (noise ? NOISE_WORDS : 0)), per_rank = (size_t)v * row;
    double *all = pr_alloc((size_t)(world + 1) * per_rank * sizeof(double));
    double *mine = all + (size_t)world * per_rank; // zeroed by pr_alloc past each stage's count
    for (int c = 0; c < v; c++) {
        const pr_stage_rt *own = &run->stage[paci_placed_stage(tab->placement, tab->devices, d, c)];
        double *at = mine + (size_t)c * row;
        memcpy(at, own->tensor_sumsq[parity], (size_t)own->code->n_tensors * sizeof(double));
        if (on_trust)
            at[most] = own->pv.skipped[parity];
        if (noise)
            noise_to_words(&own->noise, at + most + on_trust);
    }
    char err[PR_ERR_LEN];
    if (!on_trust)
        pr_wait_collective(PR_WAIT_NORM, t + 1);
    if (pr_bootstrap_allgather(run->opt.boot, mine, per_rank * sizeof(double), all, err) != 0) {
        pr_claim_exit();
        fflush(stdout);
        char of[32], blame[PR_ERR_LEN];
        pr_blame(blame, sizeof blame);
        fprintf(stderr, "run: error: stage %d%s (rank %d): %s (gradient-norm sums of step %lld)%s\n",
                st->index, of_replica(run, of), run->opt.rank, err, (long long)t + 1, blame);
        exit(1);
    }
    if (!on_trust)
        pr_wait_end();
    // Every rank sends; this replica's devices are ranks replica * devices .. + devices - 1
    // (the replicas' sums are equal: their gradients were reduced first).
    pthread_mutex_lock(&run->stats_mu);
    for (int other = 0; other < tab->devices; other++)
        for (int c = 0; c < v; c++) {
            pr_stage_rt *to = &run->stage[paci_placed_stage(tab->placement, tab->devices, other, c)];
            const double *from = all + (size_t)(run->replica * tab->devices + other) * per_rank + (size_t)c * row;
            memcpy(to->tensor_sumsq[parity], from, (size_t)to->code->n_tensors * sizeof(double));
            if (on_trust)
                to->pv.skipped[parity] = from[most] != 0.0;
            if (!noise || run->replica != 0 || other == d)
                continue; // a device's own stages keep their averages
            noise_from_words(from + most + on_trust, &to->noise);
            to->noise_at[t & 1] = to->noise; // after step t - 1, as the sender's own
            to->noise_at_step[t & 1] = t;
        }
    pthread_mutex_unlock(&run->stats_mu);
    free(all);
}

/* lr of step t on the run's schedule: the program's, or a resumed run's first one. */
static double run_lr(const pr_run *run, int64_t t)
{
    return pr_lr_over(run->prog, run->lr_steps, run->lr_warmup, t);
}

/* Whether steps clip by the norm over every stage (docs/dsl.md, clip): synchronous schedules
 * with a global clip and more than one stage. Asynchronous schedules (PACI, PipeDream), and
 * runs without clipping, have no common step: the norm is the stage's own gradients'. */
static int global_norm(const pr_run *run)
{
    return run->prog->grad_clip > 0.0 && run->prog->global_clip && !run->async_segment && run->p > 1;
}

/* PipeDream: the live weights (and their bf16 copy) go to stash slot aux-1 before a step
 * changes them. */
static void stash_live_weights(pr_run *run, pr_stage_rt *st, int aux)
{
    size_t n = (size_t)st->code->n_params;
    run->dev->copy(st->index, st->stash + (size_t)(aux - 1) * n, st->params, n * sizeof(float));
    if (st->params_h)
        run->dev->copy(st->index, st->stash_h + (size_t)(aux - 1) * n, st->params_h, n * sizeof(pr_bf16));
}

/* The last stage adds a micro-batch's mean loss to its step's entry of the ring; an entry
 * is reused once the update of the step it held has taken its loss. */
static void add_step_loss(pr_run *run, const pr_stage_rt *st, int64_t step, double loss)
{
    int64_t i = step % run->step_loss_len;
    if (run->step_loss_step[i] != step) {
        if (run->step_loss_step[i] >= st->t)
            pr_internal("stage %d: the loss of step %lld would overwrite step %lld's before its "
                        "update (%lld entries)", st->index, (long long)step + 1,
                        (long long)run->step_loss_step[i] + 1, (long long)run->step_loss_len);
        run->step_loss_step[i] = step;
        run->step_loss[i] = 0.0;
    }
    run->step_loss[i] += loss;
}

/* Step `step`'s loss sum, taken by the last stage at its update (0 if nothing was added). */
static double step_loss_of(const pr_run *run, int64_t step)
{
    int64_t i = step % run->step_loss_len;
    return run->step_loss_step[i] == step ? run->step_loss[i] : 0.0;
}

/* A non-finite loss (read by the last stage) or gradient is caught at the optimizer step
 * of the step it appears in, before any weight changes: one line names the step, the stage
 * and the tensor. on_nan stop ends the process there, so no checkpoint after the fault is
 * ever written; on_nan skip drops this stage's update (m, v and weights stay as they were)
 * and goes on. The per-tensor sums of squares are finite exactly when every gradient is.
 * t: the steps taken before the one checked; others: whether the other stages' sums are
 * read too (post-validation reads them at the check, after the step). Returns whether the
 * update is to be skipped. */
static int non_finite_step(pr_run *run, pr_stage_rt *st, int64_t t, double loss, int others)
{
    const pr_stage_code *sc = st->code;
    const double *sums = st->tensor_sumsq[t & 1];
    char what[160] = "";
    if (sc->has_head && !isfinite(loss))
        snprintf(what, sizeof what, "the loss is not finite (%g)", loss);
    for (int i = 0; i < sc->n_tensors && !what[0]; i++)
        if (!isfinite(sums[i]))
            snprintf(what, sizeof what, "the gradient of %s is not finite (sum of squares %g)",
                     sc->tensors[i].name, sums[i]);
    // Clipping by the global norm makes the decision global: every stage sees the sums.
    int global = others && global_norm(run);
    for (int s = 0; global && s < run->p && !what[0]; s++)
        for (int i = 0; i < run->stage[s].code->n_tensors && !what[0]; i++)
            if (!isfinite(run->stage[s].tensor_sumsq[t & 1][i]))
                snprintf(what, sizeof what, "stage %d's gradient of %s is not finite (the "
                         "clipping norm is global)", s, run->stage[s].code->tensors[i].name);
    if (!what[0])
        return 0;
    if (run->prog->on_nan != PR_ON_NAN_SKIP)
        pr_claim_exit();
    fflush(stdout);
    if (run->prog->on_nan == PR_ON_NAN_SKIP) {
        fprintf(stderr, "run: warning: step %lld, stage %d: %s; the step is skipped "
                "(on_nan skip)\n", (long long)t + 1, st->index, what);
        return 1;
    }
    fprintf(stderr, "run: error: step %lld, stage %d: %s; stopping before the update, no "
            "checkpoint written (on_nan skip would drop the step instead)\n",
            (long long)t + 1, st->index, what);
    exit(1);
}

/* accumulate pairwise (docs/dsl.md): the backward's gradient g, computed alone, joins the
 * window's tree: while level j holds a sum of as many micro-batches as g, the two are added
 * and move up a level. Floating-point addition commutes, so only this grouping decides the
 * bits, and it is the one a replica reduction of the same micro-batches makes. */
static void pairwise_insert(pr_stage_rt *st, float *g)
{
    int64_t n = st->code->n_params;
    int j = 0;
    for (; st->acc_count >> j & 1; j++) {
        float *held = st->acc_level[j];
        for (int64_t i = 0; i < n; i++)
            held[i] = held[i] + g[i];
        st->acc_free[st->acc_n_free++] = g;
        g = held;
        st->acc_level[j] = NULL;
    }
    st->acc_level[j] = g;
    st->acc_count++;
}

/* The window's sum into grads: the levels from the highest (the earliest micro-batches) down;
 * for a window of 2^k micro-batches there is one. */
static void pairwise_finish(pr_stage_rt *st)
{
    int64_t n = st->code->n_params;
    float *sum = NULL;
    for (int j = 63; j >= 0; j--) {
        float *held = st->acc_level[j];
        if (!held)
            continue;
        if (!sum) {
            sum = held;
        } else {
            for (int64_t i = 0; i < n; i++)
                sum[i] = sum[i] + held[i];
            st->acc_free[st->acc_n_free++] = held;
        }
        st->acc_level[j] = NULL;
    }
    if (sum) {
        memcpy(st->grads, sum, (size_t)n * sizeof(float));
        st->acc_free[st->acc_n_free++] = sum;
    }
    st->acc_count = 0;
}

/* Whether the run estimates the noise scale (noise_scale.c, docs/run.md), and its two batch
 * sizes in sequences. Not where the step's gradient is no mean of the replicas' (compression
 * dgc), or where a window's only backward hands its gradients to the replicas' sum as it
 * makes them (a device transport's overlap at K = 1). A device whose sum of squares waits for
 * it (the GPU) needs sumsq_hold, which brings the sum back with the step's own download
 * (docs/gpu.md, "Host waits"). */
static int noise_estimated(const pr_run *run, double *b_small, double *b_big)
{
    if (!run->dev->host_memory && !run->dev->sumsq_hold)
        return 0;
    if (run->replicas > 1 && run->prog->dgc_density > 0)
        return 0;
    if (run->K == 1 && run->replicas > 1 && !run->shared && run->links && run->links->reduce_start)
        return 0;
    return pr_noise_batches(run->B, run->K, run->replicas, b_small, b_big);
}

/* The noise scale's small batch: the squared norm of the window's first micro-batch's
 * gradients, taken while they are alone in their buffer: after the window's first backward,
 * or after its first W when no other micro-batch's B (whose LayerNorm gradients join the same
 * buffer) came between. The backward scaled them by 1/(K D); the norm is of their mean.
 * `reducing`: the replicas' sum already runs on them. One sum of squares a window, on replica
 * 0 only (the one whose last stage writes the metrics); on a device with sumsq_hold it is
 * queued (noise_small_state 2) and read at the step (add_noise_estimate). */
static void note_first_gradients(pr_run *run, pr_stage_rt *st, const float *grads, int alone, int reducing)
{
    double b_small, b_big;
    if (st->noise_small_state != 0 || run->replica != 0 || !noise_estimated(run, &b_small, &b_big))
        return;
    if (!alone || reducing) {
        st->noise_small_state = -1;
        return;
    }
    if (run->dev->sumsq_hold) {
        run->dev->sumsq_hold(st->index, grads, st->code->n_params);
        st->noise_small_state = 2;
        return;
    }
    pr_tensor whole = {.name = "gradients", .size = st->code->n_params};
    double sum = 0.0, kd = (double)(run->K * run->replicas);
    run->dev->sumsq(st->index, grads, &whole, 1, &sum);
    st->noise_small = sum * kd * kd;
    st->noise_small_state = 1;
}

/* On a device with sumsq_hold, the window's first micro-batch's squared norm was queued
 * (noise_small_state 2) and came back with the step's own download (dev->sumsq): read it. */
static void take_held_first_norm(pr_run *run, pr_stage_rt *st)
{
    double held, kd = (double)(run->K * run->replicas);
    if (st->noise_small_state == 2 && run->dev->sumsq_held(st->index, &held)) {
        st->noise_small = held * kd * kd;
        st->noise_small_state = 1;
    }
}

/* Step `step`'s estimates of |G|^2 and tr(Sigma) into the stage's moving averages: the
 * first micro-batch's squared norm (small, where measured) against the step's gradient's
 * (sums: its tensors', every replica's window reduced), both this stage's parameters only. */
static void add_noise_estimate(pr_run *run, pr_stage_rt *st, int64_t step, int measured, double small,
                               const double *sums)
{
    double b_small, b_big, big = 0.0, g2 = 0.0, trace = 0.0;
    if (run->replica != 0 || !noise_estimated(run, &b_small, &b_big))
        return;
    for (int i = 0; i < st->code->n_tensors && measured; i++)
        big += sums[i];
    if (measured)
        pr_noise_estimates(small, b_small, big, b_big, &g2, &trace);
    int64_t i = step & 1;
    pthread_mutex_lock(&run->stats_mu);
    if (measured && isfinite(g2) && isfinite(trace))
        pr_noise_ema_add(&st->noise, g2, trace, PR_NOISE_DECAY);
    st->noise_at[i] = st->noise;
    st->noise_at_step[i] = step;
    pthread_mutex_unlock(&run->stats_mu);
}

int pr_run_noise_estimated(const pr_run *run)
{
    double b_small, b_big;
    return noise_estimated(run, &b_small, &b_big);
}

void pr_run_noise_restore(pr_run *run, int s, const pr_noise_ema *e)
{
    pr_stage_rt *st = &run->stage[s];
    st->noise = *e;
    st->noise_at[run->step & 1] = *e; // what the next step's metrics line reads (p > 1)
    st->noise_at_step[run->step & 1] = run->step;
}

int pr_run_noise_scale(pr_run *run, int64_t step, double *b_simple)
{
    double b_small, b_big;
    if (!noise_estimated(run, &b_small, &b_big))
        return 0;
    int64_t at = step < 0 || run->async_segment ? -1 : run->p == 1 ? step : step - 1;
    if (step >= 0 && at < 0 && run->opt.world > 1 && run->p > 1)
        return 0; // an asynchronous line: the other processes' stages' latest averages are not here
    pr_noise_ema total = {0};
    int every = 1;
    pthread_mutex_lock(&run->stats_mu);
    for (int s = 0; s < run->p; s++) {
        const pr_stage_rt *st = &run->stage[s];
        const pr_noise_ema *e = at < 0 ? &st->noise : &st->noise_at[at & 1];
        every &= (at < 0 || st->noise_at_step[at & 1] == at) && e->n > 0;
        pr_noise_ema_sum(&total, e);
    }
    pthread_mutex_unlock(&run->stats_mu);
    *b_simple = pr_noise_scale(&total);
    return every;
}

/* The optimizer's update of step t + 1 from the gradients, scaled by the clip factor. */
static void apply_update(pr_run *run, pr_stage_rt *st, int64_t t, float scale, double lr)
{
    const pr_program *prog = run->prog;
    const pr_stage_code *sc = st->code;
    const pr_device *dev = run->dev;
    pr_adamw_args args = {st->params, st->grads, st->m, st->v, (float)lr, scale, t + 1, st->params_h};
    if (prog->dgc_density > 0 && pr_dgc_momentum_correction(prog) && dev->host_memory)
        pr_dgc_step(prog, sc, &args); // the exchanged sum holds the replicas' velocities
    else if (prog->dgc_density > 0 && pr_dgc_momentum_correction(prog)) {
        // the device's rule as compiled, from a zero buffer: mu 0 + x is x, momentum 0's step
        dev->zero(st->index, st->m, (size_t)sc->n_params * sizeof(float));
        dev->adamw(prog, st->index, &args);
    } else
        dev->adamw(prog, st->index, &args);
}

/* ---- post-validation ------------------------------------------------------------------
 * A synchronous schedule clipping by the global norm would have every stage wait at its step
 * for every other stage's gradients. Post-validated, a stage publishes its per-tensor sums,
 * keeps its params, m, v and grads, and steps at once as if the norm did not clip and every
 * gradient were finite; it then runs the next window on those weights. Before its next step
 * (or at the segment's end) it checks: every stage published its sums by then (each stage's
 * window needs every other stage's messages of the same window, sent after their steps), so
 * the check waits for nothing in a synchronous table. Where the norm clips (the clip factor
 * is not exactly 1) or a gradient is not finite, every stage comes to the same verdict, puts
 * back what it kept, redoes the step as the barrier's run does (or skips it), and runs the
 * window since again: the links pair as the first time, since every stage reruns the same
 * window in the same order after finishing it. The result is the barrier run's, bit for bit. */

/* Whether the running segment's steps are post-validated: a synchronous segment clipping by
 * the global norm with post_validation on, one replica. */
static int post_validating(const pr_run *run)
{
    return post_validation_possible(run) && !run->async_segment;
}

typedef struct trusted_exchange {
    pr_run *run;
    pr_stage_rt *st;
    int64_t t;
} trusted_exchange;

static void *exchange_on_trust(void *arg)
{
    trusted_exchange *x = arg;
    exchange_sums(x->run, x->st, x->t, 1);
    free(x);
    return NULL;
}

/* The stage chunk c of st's device holds; chunk 0's keeps the device's post-validation
 * exchange thread and its log of the instructions run since its stages' trusted steps. */
static pr_stage_rt *own_stage(pr_run *run, const pr_stage_rt *st, int c)
{
    const paci_table *tab = run->tab;
    return &run->stage[paci_placed_stage(tab->placement, tab->devices, tab->stage_device[st->index], c)];
}

/* The stage's sums of step t + 1 (and whether it skipped it) where the others read them: in
 * the run's memory, or between processes by an allgather on a thread of its own, which sends
 * every stage of the device, so it starts once the last of them has stepped on trust. */
static void publish_sums(pr_run *run, pr_stage_rt *st)
{
    if (run->opt.world > 1) {
        for (int c = 0; c < run->tab->chunks; c++)
            if (own_stage(run, st, c)->pv.pending != st->t + 1)
                return;
        pr_stage_rt *holder = own_stage(run, st, 0);
        trusted_exchange *x = pr_alloc(sizeof *x);
        *x = (trusted_exchange){run, st, st->t};
        if (pthread_create(&holder->pv.exchange, NULL, exchange_on_trust, x) != 0)
            pr_internal("cannot start the gradient-norm exchange of stage %d", st->index);
        return;
    }
    pthread_mutex_lock(&run->pv_mu);
    st->pv.published = st->t + 1;
    pthread_cond_broadcast(&run->pv_cv);
    pthread_mutex_unlock(&run->pv_mu);
}

/* What the instruction a thread runs spent other than on its own work: instructions nested in
 * it (a post-validation redo runs the window again from inside a step) and waits for other
 * stages (the global norm, their sums). A step's busy time and CPU leave both out, so a second
 * counts once and a wait never as compute; execute() keeps the accounts per nesting level. */
static _Thread_local double nested_wall, nested_cpu, waited_wall, wait_end;

/* Marks time since `since` as waited on other stages, not worked. */
static void waited_since(double since)
{
    wait_end = pr_now();
    waited_wall += wait_end - since;
}

/* Until every stage has published its sums of `step` (from 1). */
static void await_sums(pr_run *run, pr_stage_rt *st, int64_t step)
{
    double since = pr_now();
    if (run->opt.world > 1) {
        int rc = pthread_join(own_stage(run, st, 0)->pv.exchange, NULL);
        if (rc != 0)
            pr_internal("cannot join the gradient-norm exchange of stage %d: %s", st->index, strerror(rc));
        waited_since(since);
        return;
    }
    pthread_mutex_lock(&run->pv_mu);
    for (int s = 0; s < run->p; s++)
        while (run->stage[s].pv.published < step)
            pthread_cond_wait(&run->pv_cv, &run->pv_mu);
    pthread_mutex_unlock(&run->pv_mu);
    waited_since(since);
}

/* The global norm of step t + 1, folded as grad_norm folds it. */
static double fold_global_norm(const pr_run *run, int64_t t)
{
    double total = 0.0;
    for (int s = 0; s < run->p; s++)
        for (int i = 0; i < run->stage[s].code->n_tensors; i++)
            total += run->stage[s].tensor_sumsq[t & 1][i];
    return sqrt(total);
}

/* Copies params, m, v and grads (and the bf16 weights) to the kept buffer, or back. */
static void rollback_copy(pr_run *run, pr_stage_rt *st, int restore)
{
    size_t n = (size_t)st->code->n_params, bytes = n * sizeof(float);
    float *live[4] = {st->params, st->m, st->v, st->grads};
    for (int k = 0; k < 4; k++) {
        float *kept = st->pv.kept + (size_t)k * n;
        run->dev->copy(st->index, restore ? live[k] : kept, restore ? kept : live[k], bytes);
    }
    if (st->params_h)
        run->dev->copy(st->index, restore ? (void *)st->params_h : (void *)st->pv.kept_h,
                       restore ? (const void *)st->pv.kept_h : (const void *)st->params_h, n * sizeof(pr_bf16));
}

/* The step on trust: sums published, state kept, the update with no clipping; the report
 * waits for the check. A stage whose own loss or sums are not finite skips (or stops) here,
 * as it would at the barrier. */
static void step_on_trust(pr_run *run, pr_stage_rt *st, double loss)
{
    pr_post_validation *pv = &st->pv;
    const pr_stage_code *sc = st->code;
    int skipped = non_finite_step(run, st, st->t, loss, 0);
    pv->skipped[st->t & 1] = skipped;
    pv->pending = st->t + 1;
    publish_sums(run, st);
    pv->loss = loss;
    pv->lr = run_lr(run, st->t + 1);
    pv->noise_small = st->noise_small;
    pv->noise_state = st->noise_small_state;
    st->noise_small_state = 0; // the next window measures its own
    if (skipped) {
        pv->noise_state = 0; // no estimate from a dropped step's gradients
    } else {
        rollback_copy(run, st, 0);
        apply_update(run, st, st->t, 1.0f, pv->lr);
    }
    run->dev->zero(st->index, st->grads, (size_t)sc->n_params * sizeof(float));
    st->t++;
}

/* Back to the start of the window run since the step: its gradients and loss forgotten. */
static void forget_window(pr_run *run, pr_stage_rt *st)
{
    for (int j = 0; st->acc_level && j < 64; j++)
        if (st->acc_level[j]) {
            st->acc_free[st->acc_n_free++] = st->acc_level[j];
            st->acc_level[j] = NULL;
        }
    st->acc_count = 0;
    run->dev->zero(st->index, st->grads, (size_t)st->code->n_params * sizeof(float));
    st->window_backwards = 0;
    st->noise_small_state = 0;
    int64_t i = st->t % run->step_loss_len;
    if (st->code->has_head && run->step_loss_step[i] == st->t)
        run->step_loss_step[i] = -1;
}

static void execute(pr_run *run, pr_stage_rt *st, const paci_instr *in, int64_t mb);

/* Whether every stage's sums of step t + 1 are finite, and whether some stage stepped on
 * trust (did not skip it on its own loss or sums). */
static int all_sums_finite(const pr_run *run, int64_t t, int *some_trusted)
{
    int finite = 1;
    *some_trusted = 0;
    for (int s = 0; s < run->p; s++) {
        const pr_stage_rt *other = &run->stage[s];
        *some_trusted |= !other->pv.skipped[t & 1];
        for (int i = 0; i < other->code->n_tensors; i++)
            finite &= isfinite(other->tensor_sumsq[t & 1][i]) != 0;
    }
    return finite;
}

/* The check of a step taken on trust, once every stage's sums of it are in: where the norm
 * clips or a gradient is not finite, the step is rolled back and redone (or skipped), and the
 * stage is back at the start of the window run since (1 returned: settle_device runs it
 * again); then the step is reported with the norm clipping used, as at the barrier. Every
 * stage reads the same sums and flags, so all of them redo the window or none does. */
static int settle_one(pr_run *run, pr_stage_rt *st)
{
    pr_post_validation *pv = &st->pv;
    const pr_stage_code *sc = st->code;
    int64_t t = pv->pending - 1; // steps taken before the one checked
    double norm = fold_global_norm(run, t);
    float scale = pr_clip_scale(norm, run->prog->grad_clip);
    int some_trusted, finite = all_sums_finite(run, t, &some_trusted);
    int wrong = !finite || scale != 1.0f, redo = wrong && some_trusted;
    pv->wait_next = wrong;
    if (!pv->skipped[t & 1] && !finite) {
        non_finite_step(run, st, t, pv->loss, 1); // another stage's sums: on_nan stop exits here
        rollback_copy(run, st, 1);
        pv->noise_state = 0;
    } else if (!pv->skipped[t & 1] && wrong) {
        rollback_copy(run, st, 1);
        apply_update(run, st, t, scale, pv->lr);
    }
    pv->checked++;
    if (redo)
        *(finite ? &pv->rolled_clip : &pv->rolled_skip) += 1;
    add_noise_estimate(run, st, t + 1, pv->noise_state == 1, pv->noise_small, st->tensor_sumsq[t & 1]);
    pv->pending = 0;
    if (sc->has_head && run->on_step)
        run->on_step(run, t + 1, pv->loss / (double)(run->K * run->replicas), pv->lr, norm);
    if (redo)
        forget_window(run, st);
    return redo;
}

/* The checks of the steps the device's stages took on trust up to step `upto` (a stage's
 * next step, or the segment's end): with chunks a device's stages step one after another, and
 * at its first step of a window every one of them has a step of the window before to check.
 * A redo runs the device's log again in the order it first ran: one stage's instructions may
 * wait on another's of the same device (a hand-over), so stage by stage could wait forever. */
static void settle_device(pr_run *run, pr_stage_rt *st, int64_t upto)
{
    pr_post_validation *log = &own_stage(run, st, 0)->pv;
    int redo = 0, settled = 0;
    for (int c = 0; c < run->tab->chunks; c++) {
        pr_stage_rt *own = own_stage(run, st, c);
        if (own->pv.pending == 0 || own->pv.pending > upto)
            continue;
        if (!settled++)
            await_sums(run, own, own->pv.pending);
        redo |= settle_one(run, own);
    }
    if (!settled)
        return;
    for (int32_t i = 0; redo && i < log->n_done; i++) {
        pr_stage_rt *again = &run->stage[log->done[i].stage];
        if (again->cut_stop == PR_NO_STOP || log->done_mb[i] < again->cut_stop * run->K) // not a stop mark's
            execute(run, again, &log->done[i], log->done_mb[i]);
    }
    log->n_done = 0;
}

/* An instruction run after a step taken on trust, which a rollback runs again. */
static void note_done(pr_stage_rt *st, const paci_instr *in, int64_t mb)
{
    pr_post_validation *pv = &st->pv;
    if (pv->n_done == pv->cap_done) {
        pv->cap_done = pv->cap_done ? 2 * pv->cap_done : 64;
        pv->done = realloc(pv->done, (size_t)pv->cap_done * sizeof *pv->done);
        pv->done_mb = realloc(pv->done_mb, (size_t)pv->cap_done * sizeof *pv->done_mb);
        if (!pv->done || !pv->done_mb)
            pr_internal("out of memory for the window of stage %d", st->index);
    }
    pv->done[pv->n_done] = *in;
    pv->done_mb[pv->n_done++] = mb;
}

/* The step's gradients as the norm and the update read them: the window's pairwise sum, the
 * replicas' sum (and the last stage's loss over them), and their per-tensor sums of squares. */
static void gather_gradients(pr_run *run, pr_stage_rt *st)
{
    const pr_stage_code *sc = st->code;
    if (st->acc_level)
        pairwise_finish(st);
    // Replicas: the step's gradient is the sum of every replica's (each scaled by 1/(D*K)).
    double loss = sc->has_head ? step_loss_of(run, st->t) : 0.0;
    if (run->replica_ops) {
        int stop = st->index == 0 && pr_stop_signal() != 0;
        run->replica_ops->reduce(run, st, &loss, &stop);
        if (st->index == 0 && stop)
            run->stop_seen = 1;
    }
    st->window_backwards = 0;
    st->step_loss_sum = loss;
    run->dev->sumsq(st->index, st->grads, sc->tensors, sc->n_tensors, st->tensor_sumsq[st->t & 1]);
    take_held_first_norm(run, st);
}

/* The gradient norm clipping uses, which the last stage reports to the metrics. Global: every
 * stage's per-tensor sums folded in stage order then tensor order, so the norm has the same
 * bits for any p and any placement. A device computes it at its first step of a window: it
 * gathers the gradients of every stage it holds (their window's backwards are done: the flush
 * comes before the steps), all devices meet at the barrier (the flush the schedule has
 * anyway), and its later steps of the window reuse the norm. */
static double grad_norm(pr_run *run, pr_stage_rt *st)
{
    if (!global_norm(run)) {
        gather_gradients(run, st);
        return pr_fold_norm(st->tensor_sumsq[st->t & 1], st->code->n_tensors);
    }
    const paci_table *tab = run->tab;
    int d = tab->stage_device[st->index];
    if (run->device_norm_t[d] == st->t)
        return run->device_norm[d];
    for (int c = 0; c < tab->chunks; c++) {
        pr_stage_rt *own = &run->stage[paci_placed_stage(tab->placement, tab->devices, d, c)];
        if (own->t != st->t || own->pending_w != 0)
            pr_internal("device %d: step %lld of stage %d comes before stage %d is ready for its own (%lld "
                        "steps taken, %lld W's to run): a global clip needs every stage's gradients",
                        d, (long long)st->t + 1, st->index, own->index, (long long)own->t,
                        (long long)own->pending_w);
        gather_gradients(run, own);
    }
    double since = pr_now();
    pthread_barrier_wait(&run->barrier);
    if (run->opt.world > 1)
        exchange_sums(run, st, st->t, 0);
    waited_since(since);
    // Every device folds the same numbers in the same order; the parity buffers keep the
    // next step's sums from overwriting ones a slower device is still reading.
    double total = 0.0;
    for (int s = 0; s < run->p; s++) {
        const double *other = run->stage[s].tensor_sumsq[st->t & 1];
        for (int i = 0; i < run->stage[s].code->n_tensors; i++)
            total += other[i];
    }
    run->device_norm[d] = sqrt(total);
    run->device_norm_t[d] = st->t;
    return run->device_norm[d];
}

static void do_step(pr_run *run, pr_stage_rt *st, const paci_instr *in)
{
    const pr_stage_code *sc = st->code;
    const pr_program *prog = run->prog;
    const pr_device *dev = run->dev;
    settle_device(run, st, st->t);
    if (in->aux > 0)
        stash_live_weights(run, st, in->aux);
    // dc-asgd: W - dc_prev is this step's update for the backwards after it (a skipped step's: 0)
    if (st->dc_prev)
        dev->copy(st->index, st->dc_prev, st->params, (size_t)sc->n_params * sizeof(float));
    if (post_validating(run) && !st->pv.wait_next) {
        gather_gradients(run, st);
        step_on_trust(run, st, st->step_loss_sum);
        return;
    }
    double norm = grad_norm(run, st);
    double loss = st->step_loss_sum, *sums = st->tensor_sumsq[st->t & 1];
    double mean_loss = loss / (double)(run->K * run->replicas);
    float scale = prog->grad_clip > 0.0 ? pr_clip_scale(norm, prog->grad_clip) : 1.0f;
    if (post_validating(run)) { // the step after one that clipped waited: does the next?
        int some_trusted;
        st->pv.wait_next = !all_sums_finite(run, st->t, &some_trusted) || scale != 1.0f;
        st->pv.waited++;
    }
    int measured = st->noise_small_state == 1;
    st->noise_small_state = 0;
    if (non_finite_step(run, st, st->t, loss, 1)) {
        if (run->replica_ops)
            run->replica_ops->skip(run, st);
        dev->zero(st->index, st->grads, (size_t)sc->n_params * sizeof(float));
        // no estimate from a dropped step's gradients
        add_noise_estimate(run, st, st->t + 1, 0, st->noise_small, sums);
        st->t++;
        if (sc->has_head && run->on_step)
            run->on_step(run, st->t, mean_loss, run_lr(run, st->t), norm);
        return;
    }
    add_noise_estimate(run, st, st->t + 1, measured, st->noise_small, sums);
    double lr = run_lr(run, st->t + 1);
    apply_update(run, st, st->t, scale, lr);
    dev->zero(st->index, st->grads, (size_t)sc->n_params * sizeof(float));
    st->t++;
    if (sc->has_head && run->on_step)
        run->on_step(run, st->t, mean_loss, lr, norm);
}

/* The weights a forward that meets its backward d optimizer steps later runs on:
 * W - d * lr(t+1) * u, u the stage's optimizer's update direction from its state after t steps
 * (pr_optim_predict, on the device: docs/dsl.md "Delay correction"), and their bf16 copy in
 * *weights_h where the products read one. Before the first step there are no moments and the
 * forward runs on W. */
static const float *predicted_weights(pr_run *run, pr_stage_rt *st, int32_t d, const pr_bf16 **weights_h)
{
    const pr_program *prog = run->prog;
    const pr_stage_code *sc = st->code;
    *weights_h = st->params_h;
    if (d <= 0 || st->t == 0)
        return st->params;
    *weights_h = st->predicted_h;
    // W, m and v change only at a step, which moves t: the forwards of a step that share d share the copy.
    if (st->predicted_t == st->t && st->predicted_d == d)
        return st->predicted;
    // AdamW's constants are the program's; the other rules' are the stage file's.
    pr_optim_rule adamw = {.kind = PR_OPT_ADAMW, .width = prog->width, .beta1 = prog->beta1,
                           .beta2 = prog->beta2, .eps = prog->eps, .weight_decay = prog->weight_decay};
    const pr_optim_rule *rule = prog->optimizer == PR_OPT_ADAMW ? &adamw : sc->optim_rule;
    pr_predict_args args = {st->params, st->m, st->v, st->t, run_lr(run, st->t + 1), d, st->predicted,
                            st->predicted_h};
    run->dev->predict(prog, st->index, rule, &args);
    st->predicted_t = st->t;
    st->predicted_d = d;
    return st->predicted;
}

static void record(pr_run *run, pr_stage_rt *st, int op, int64_t mb, double start, double end,
                   double busy, double cpu)
{
    pthread_mutex_lock(&run->stats_mu);
    st->busy[op] += busy;
    st->cpu[op] += cpu;
    st->ops[op]++;
    pthread_mutex_unlock(&run->stats_mu);
    if (!run->opt.trace || (op != PACI_OP_FWD && op != PACI_OP_BWD && op != PACI_OP_STEP && op != PACI_OP_BWD_B &&
                            op != PACI_OP_BWD_W))
        return;
    if (st->n_trace == st->cap_trace) {
        st->cap_trace = st->cap_trace ? 2 * st->cap_trace : 1024;
        st->trace = realloc(st->trace, (size_t)st->cap_trace * sizeof *st->trace);
        if (!st->trace)
            pr_internal("out of memory for the trace of stage %d", st->index);
    }
    st->trace[st->n_trace++] = (pr_trace_event){(uint8_t)op, mb, start - run->start_time,
                                                 end - run->start_time};
}

/* A peer that stops answering or goes away ends this process with the stages named; the
 * peer's own neighbours then see this one go, so every process of the run exits. */
static void link_failed(const pr_run *run, const pr_stage_rt *st, int peer, int64_t mb, int rc,
                        int sending, const char *why)
{
    pr_claim_exit();
    fflush(stdout);
    char of_buf[32], blame[PR_ERR_LEN];
    const char *of = of_replica(run, of_buf);
    pr_blame(blame, sizeof blame);
    if (rc == PR_LINK_ERROR)
        fprintf(stderr, "run: error: stage %d%s (rank %d): the %s link with stage %d%s failed: %s (%s "
                "micro-batch %lld)%s\n", st->index, of, run->opt.rank, run->links ? run->links->name : "?",
                peer, of, why, sending ? "sending" : "waiting for", (long long)mb, blame);
    else if (rc == PR_LINK_TIMEOUT && !sending)
        fprintf(stderr, "run: error: stage %d%s (rank %d): no message from stage %d%s for %g s "
                "(waiting for micro-batch %lld)%s\n", st->index, of, run->opt.rank, peer, of,
                run->opt.peer_timeout, (long long)mb, blame);
    else if (rc == PR_LINK_TIMEOUT)
        fprintf(stderr, "run: error: stage %d%s (rank %d): stage %d%s took no message for %g s "
                "(sending micro-batch %lld)%s\n", st->index, of, run->opt.rank, peer, of,
                run->opt.peer_timeout, (long long)mb, blame);
    else
        fprintf(stderr, "run: error: stage %d%s (rank %d): stage %d%s closed the connection (%s "
                "micro-batch %lld)%s\n", st->index, of, run->opt.rank, peer, of,
                sending ? "sending" : "waiting for", (long long)mb, blame);
    exit(1);
}

/* The link `link` points at (an element of run->act or run->grad) as the native transport
 * sees it from stage st; 0 when the channel carries it. */
static int native_use(const pr_run *run, const pr_stage_rt *st, const pr_channel *link, int sending,
                      pr_link_use *u)
{
    int grad = link >= run->grad && link < run->grad + PACI_MAX_STAGES;
    int index = (int)(link - (grad ? run->grad : run->act));
    if (!run->native[grad][index])
        return 0;
    int op = grad ? (sending ? PACI_OP_SEND_GRAD : PACI_OP_RECV_GRAD)
                  : (sending ? PACI_OP_SEND_ACT : PACI_OP_RECV_ACT);
    if (pr_link_of(op, st->index, run->p, u) != 0 || u->index != index)
        pr_internal("stage %d: link %d is not one of its own", st->index, index);
    return 1;
}

/* The device link that carries `link` (an element of run->act or run->grad), or NULL. */
static pr_dev_link *dev_link_of(pr_run *run, const pr_channel *link)
{
    int grad = link >= run->grad && link < run->grad + PACI_MAX_STAGES;
    pr_dev_link *l = &run->dev_link[grad][link - (grad ? run->grad : run->act)];
    return l->ring ? l : NULL;
}

/* A hand-over between two stages of one device: the device's one thread sends and later
 * receives, so a send into a full link or a receive from an empty one would wait forever.
 * The table's order is wrong (the link holds what the sender's slots hold, pr_link_capacity):
 * said at once rather than as a hang or a peer timeout. */
static void check_hand_over(const pr_run *run, const pr_stage_rt *st, pr_channel *link, int peer,
                            int64_t mb, int sending)
{
    int d = run->tab->stage_device[st->index];
    if (d != run->tab->stage_device[peer] || link->fd >= 0)
        return;
    int held = pr_channel_held(link);
    if (sending ? held < link->capacity : held > 0)
        return;
    pr_internal("device %d: stage %d %s micro-batch %lld %s stage %d on the same device, and the link %s: "
                "the device's list waits for itself", d, st->index, sending ? "sends" : "waits for",
                (long long)mb, sending ? "to" : "from", peer,
                sending ? "is full" : "is empty");
}

/* Receives micro-batch mb from stage `peer` into device memory at dst: over the native
 * transport where it carries the link, device to device over a device link, directly on a
 * host-memory device, else through the stage's host staging buffer. Returns the
 * micro-batch that arrived. */
static int64_t link_recv_by(pr_run *run, pr_stage_rt *st, pr_channel *link, int peer, int64_t mb,
                            float *dst)
{
    int64_t got = -1;
    pr_link_use u;
    if (native_use(run, st, link, 0, &u)) {
        char why[PR_ERR_LEN] = "";
        int rc = run->links->recv(run, st->index, &u, dst, &got, why);
        if (rc != PR_LINK_OK)
            link_failed(run, st, peer, mb, rc, 0, why);
        return got;
    }
    check_hand_over(run, st, link, peer, mb, 0);
    pr_dev_link *dl = dev_link_of(run, link);
    if (dl) {
        int rc = pr_dev_link_recv(dl, run->dev, link, dst, &got);
        if (rc != PR_LINK_OK)
            link_failed(run, st, peer, mb, rc, 0, "");
        return got;
    }
    float *into = run->dev->host_memory ? dst : st->staging;
    int rc = pr_channel_recv_timed(link, into, &got);
    if (rc != PR_LINK_OK)
        link_failed(run, st, peer, mb, rc, 0, "");
    if (!run->dev->host_memory)
        run->dev->upload(st->index, dst, st->staging, (size_t)link->floats * sizeof(float));
    return got;
}

/* The same, with the wait recorded for other ranks to ask about (blame.c). */
static int64_t link_recv(pr_run *run, pr_stage_rt *st, pr_channel *link, int peer, int64_t mb,
                         float *dst)
{
    int grad = link >= run->grad && link < run->grad + PACI_MAX_STAGES;
    int rank = run->replica * run->devices + run->tab->stage_device[peer];
    pr_wait_begin(grad ? PR_WAIT_RECV_GRAD : PR_WAIT_RECV_ACT, mb, &rank, 1);
    int64_t got = link_recv_by(run, st, link, peer, mb, dst);
    pr_wait_end();
    return got;
}

/* Sends the message at device memory src to stage `peer`, staged through the host the
 * same way. */
static void link_send_by(pr_run *run, pr_stage_rt *st, pr_channel *link, int peer, int64_t mb,
                         const float *src)
{
    pr_link_use u;
    if (native_use(run, st, link, 1, &u)) {
        char why[PR_ERR_LEN] = "";
        int rc = run->links->send(run, st->index, &u, mb, src, why);
        if (rc != PR_LINK_OK)
            link_failed(run, st, peer, mb, rc, 1, why);
        return;
    }
    check_hand_over(run, st, link, peer, mb, 1);
    pr_dev_link *dl = dev_link_of(run, link);
    if (dl) {
        int rc = pr_dev_link_send(dl, run->dev, link, mb, src);
        if (rc != PR_LINK_OK)
            link_failed(run, st, peer, mb, rc, 1, "");
        return;
    }
    if (!run->dev->host_memory) {
        run->dev->download(st->index, st->staging, src, (size_t)link->floats * sizeof(float));
        src = st->staging;
    }
    int rc = pr_channel_send_timed(link, mb, src);
    if (rc != PR_LINK_OK)
        link_failed(run, st, peer, mb, rc, 1, "");
}

static void link_send(pr_run *run, pr_stage_rt *st, pr_channel *link, int peer, int64_t mb,
                      const float *src)
{
    int rank = run->replica * run->devices + run->tab->stage_device[peer];
    pr_wait_begin(PR_WAIT_SEND, mb, &rank, 1);
    link_send_by(run, st, link, peer, mb, src);
    pr_wait_end();
}

/* ---- early stops ---------------------------------------------------------------------- */

static atomic_int stop_signal;

/* Records the signal that asks for a stop; a lock-free atomic store, safe in a handler. */
void pr_request_stop(int signal_number)
{
    atomic_store(&stop_signal, signal_number);
}

/* The signal that asked for a stop, or 0: read by stage 0 before each forward. */
int pr_stop_signal(void)
{
    return atomic_load(&stop_signal);
}

/* A stop travels down the pipeline in place of the first activation it cuts: the message
 * carries STOP_MARK(step) as its micro-batch, never a real (non-negative) one. */
#define STOP_MARK(step) (-2 - (int64_t)(step))

/* Stage s > 0 learns the stop where the table has it receive the first cut micro-batch. */
static void accept_stop(const pr_run *run, pr_stage_rt *st, int64_t mb, int64_t mark)
{
    int64_t stop = STOP_MARK(0) - mark;
    // The link's transport is named: an early mark seen once in the fake stack's dry run
    // could not be told apart (host channel or NCCL) from the message alone.
    if (stop * run->K != mb)
        pr_internal("stage %d: a stop after step %lld arrived in place of micro-batch %lld "
                    "(over the %s link from stage %d)", st->index, (long long)stop, (long long)mb,
                    run->native[PR_LINK_ACT][st->index - 1] && run->links ? run->links->name
                    : run->act[st->index - 1].fd >= 0 ? "TCP" : "host channel", st->index - 1);
    st->cut_stop = stop;
}

/* Stage 0 decides the stop before its forward of mb: the step run->stop_at asks for, else,
 * once a signal came, the step mb belongs to (finishing it, never starting the next). A
 * stop at or past the segment's end is no stop: the segment drains there anyway. */
static void decide_stop(const pr_run *run, pr_stage_rt *st, int64_t mb, int64_t segment_end)
{
    int64_t stop = run->stop_at;
    // Replicas stop at the same step: the signal counts once their stage 0s have shared it
    // at a step's reduction, after which all of them meet the same forward first.
    if (stop == PR_NO_STOP && (run->replicas > 1 ? run->stop_seen : pr_stop_signal()))
        stop = (mb + run->K - 1) / run->K;
    if (stop < segment_end)
        st->cut_stop = stop;
}

/* The cut of a segment keeps exactly the instructions on micro-batches in
 * [cut_from*K, cut_stop*K) and the steps numbered (cut_from, cut_stop]. It is the table's
 * list restricted to a set of micro-batches, so it keeps the table's order, its link
 * pairing and its freedom from deadlock. Cut at the end only, every kept instruction sees
 * the state it sees in the uninterrupted run; a mid-way start continues as after a drain.
 * Returns whether `in` runs; sends the stop mark in place of the first cut activation. */
static int keep(pr_run *run, pr_stage_rt *st, const paci_instr *in, int64_t mb, int64_t segment_end)
{
    if (in->op == PACI_OP_STEP) {
        int64_t step = ++st->steps_met;
        // Starting mid-way, the forwards kept so far ran at the live weights (version
        // cut_from); a stash the table fills at a step already done must hold them.
        if (step <= st->cut_from && in->aux > 0)
            stash_live_weights(run, st, in->aux);
        return step > st->cut_from && step <= st->cut_stop;
    }
    if (mb < st->cut_from * run->K)
        return 0;
    if (st->index == 0 && in->op == PACI_OP_FWD && st->cut_stop == PR_NO_STOP)
        decide_stop(run, st, mb, segment_end);
    if (st->cut_stop == PR_NO_STOP || mb < st->cut_stop * run->K)
        return 1;
    if (in->op == PACI_OP_SEND_ACT && mb == st->cut_stop * run->K) { // its floats are not read
        const float *out = (st->recompute ? st->work : st->slots + (size_t)in->slot * (size_t)st->slot_floats) +
                           st->code->out_offset;
        link_send(run, st, &run->act[st->index], st->index + 1, STOP_MARK(st->cut_stop), out);
    }
    return 0;
}

/* One instruction, with mb already made absolute. */
/* The buffers of the slot an instruction names: its activations (or, under recompute full,
 * its kept input and the workspace the forward and backward run in), tokens and targets. */
typedef struct slot_view {
    float *input, *acts, *losses, *dev_losses;
    int32_t *tokens, *targets, *dev_tokens, *dev_targets;
} slot_view;

static slot_view view_slot(const pr_run *run, const pr_stage_rt *st, int slot_index)
{
    int64_t BT = run->B * run->T, at = slot_index * BT;
    float *slot = st->slots + (size_t)slot_index * (size_t)st->slot_floats;
    return (slot_view){.input = st->recompute ? slot : slot + st->code->in_offset,
                       .acts = st->recompute ? st->work : slot,
                       .losses = st->slot_losses + at, .dev_losses = st->dev_losses + at,
                       .tokens = st->slot_tokens + at, .targets = st->slot_targets + at,
                       .dev_tokens = st->dev_tokens + at, .dev_targets = st->dev_targets + at};
}

/* recompute full: the slot's kept input into the workspace, where the forward reads it. */
static void input_to_workspace(pr_run *run, const pr_stage_rt *st, const slot_view *v)
{
    int s = st->index;
    if (st->recompute && s > 0)
        run->dev->copy(s, v->acts + st->code->in_offset, v->input,
                       (size_t)pr_link_floats(run->prog, PR_LINK_ACT, s - 1) * sizeof(float));
}

/* FWD: the micro-batch's tokens where the stage reads them, the forward on the live (or
 * predicted) weights, and on the last stage the micro-batch's mean loss. */
static void exec_forward(pr_run *run, pr_stage_rt *st, const paci_instr *in, int64_t mb)
{
    const pr_stage_code *sc = st->code;
    const pr_device *dev = run->dev;
    int s = st->index;
    int64_t BT = run->B * run->T;
    slot_view v = view_slot(run, st, in->slot);
    if (s > 0)
        expect_mb(st, in->op, mb, st->slot_mb[in->slot], "the slot");
    if (sc->has_embed || sc->has_head || sc->has_lnf) {
        pr_tokens_batch(&run->train, pr_replica_batch(run, mb), run->B, run->T, v.tokens, v.targets);
        if (!dev->host_memory) {
            dev->upload(s, v.dev_tokens, v.tokens, (size_t)BT * sizeof(int32_t));
            dev->upload(s, v.dev_targets, v.targets, (size_t)BT * sizeof(int32_t));
        }
    }
    st->slot_mb[in->slot] = mb;
    st->slot_fwd_step[in->slot] = st->t;
    st->slot_fwd_delay[in->slot] = in->aux;
    const pr_bf16 *weights_h = st->params_h;
    const float *weights = in->aux > 0 && !run->prog->dc_asgd ? predicted_weights(run, st, in->aux, &weights_h)
                                                              : st->params;
    input_to_workspace(run, st, &v);
    pr_fwd_args args = {weights, v.acts, v.dev_tokens, v.dev_targets, v.dev_losses, weights_h};
    dev->forward(run->prog, s, &args);
    st->work_mb = mb;
    if (sc->has_head) {
        if (!dev->host_memory)
            dev->download(s, v.losses, v.dev_losses, (size_t)BT * sizeof(float));
        double sum = 0.0;
        for (int64_t i = 0; i < BT; i++)
            sum += v.losses[i];
        add_step_loss(run, st, mb / run->K, sum / (double)BT);
    }
}

/* The drift statistics of one backward: optimizer steps since its forward. */
static void count_drift(pr_run *run, pr_stage_rt *st, const paci_instr *in)
{
    int64_t drift = st->t - st->slot_fwd_step[in->slot];
    pthread_mutex_lock(&run->stats_mu);
    st->backwards++;
    if (drift > 0)
        st->drifting++;
    if (drift > st->drift_max)
        st->drift_max = drift;
    if (in->aux == 0 && !st->recompute && drift > st->drift_effective_max)
        st->drift_effective_max = drift;
    pthread_mutex_unlock(&run->stats_mu);
}

/* The gradient buffer a backward adds into: the stage's, or under accumulate pairwise one of
 * its own, zeroed. */
static float *backward_gradients(const pr_run *run, pr_stage_rt *st)
{
    if (!st->acc_level)
        return st->grads;
    if (st->acc_n_free == 0) // pr_pairwise_buffers holds for K backwards per step
        pr_internal("stage %d: backward %lld of a window of %lld has no free gradient buffer",
                    st->index, (long long)st->acc_count + 1, (long long)run->K);
    float *grads = st->acc_free[--st->acc_n_free];
    memset(grads, 0, (size_t)st->code->n_params * sizeof(float));
    return grads;
}

/* dc-asgd: the delay d a backward's gradient is corrected for, 0 where none is: its
 * forward's in the table, or where a run resumed mid-way after a stop skipped steps the table
 * counts, the steps this stage took since that forward (W - dc_prev is a step of this run). */
static int64_t corrected_delay(const pr_stage_rt *st, const paci_instr *in)
{
    if (!st->dc_grad || st->recompute || in->op != PACI_OP_BWD)
        return 0;
    int64_t table = st->slot_fwd_delay[in->slot], taken = st->t - st->slot_fwd_step[in->slot];
    return taken < table ? taken : table;
}

/* A backward's context for its callbacks: the replicas' (pr_ready_ctx, first) and its own. */
typedef struct early_send {
    pr_ready_ctx ready;
    paci_instr bwd;
    int64_t mb;
} early_send;

static void execute(pr_run *run, pr_stage_rt *st, const paci_instr *in, int64_t mb);

/* pr_bwd_args.dx_ready: the SEND_GRAD that follows the backward, run now, while the backward's
 * last weight gradients are still to come; the instruction itself then does nothing. */
static void send_gradient_early(void *ctx)
{
    early_send *e = ctx;
    pr_stage_rt *st = e->ready.st;
    paci_instr send = {.op = PACI_OP_SEND_GRAD, .stage = e->bwd.stage, .slot = e->bwd.slot, .mb = e->bwd.mb};
    st->grad_out_mb = e->mb;
    execute(e->ready.run, st, &send, e->mb);
    st->grad_sent_mb = e->mb;
}

/* BWD (or a zero-bubble B): on the live or stashed weights (rerunning the forward there under
 * recompute full), into the gradients, the gradient for the previous stage into grad_out. A
 * B keeps the slot for its W. */
static void exec_backward(pr_run *run, pr_stage_rt *st, const paci_instr *in, int64_t mb)
{
    const pr_stage_code *sc = st->code;
    int s = st->index;
    slot_view v = view_slot(run, st, in->slot);
    expect_mb(st, in->op, mb, st->slot_mb[in->slot], "the slot");
    if (!sc->has_head)
        expect_mb(st, in->op, mb, st->grad_in_mb, "the gradient buffer");
    const float *weights = in->aux ? st->stash + (size_t)(in->aux - 1) * (size_t)sc->n_params : st->params;
    const pr_bf16 *weights_h = !st->params_h ? NULL
                               : in->aux ? st->stash_h + (size_t)(in->aux - 1) * (size_t)sc->n_params
                               : st->params_h;
    if (st->recompute) { // the forward again, on the weights this backward uses: no drift within the stage
        input_to_workspace(run, st, &v);
        pr_fwd_args again = {weights, v.acts, v.dev_tokens, v.dev_targets, v.dev_losses, weights_h};
        run->dev->forward(run->prog, s, &again);
        st->work_mb = -1;
    }
    float *grads = backward_gradients(run, st);
    // dc-asgd: a delayed backward's gradient is computed alone and joins grads corrected
    int64_t delay = corrected_delay(st, in);
    if (delay > 0)
        run->dev->zero(s, st->dc_grad, (size_t)sc->n_params * sizeof(float));
    pr_bwd_args args = {weights, delay > 0 ? st->dc_grad : grads, v.acts, st->scratch, v.dev_tokens, v.dev_targets,
                        sc->has_head ? NULL : st->grad_in, s == 0 ? NULL : st->grad_out,
                        1.0f / (float)(run->K * run->replicas), weights_h, NULL, NULL, NULL};
    early_send ready = {{run, st}, *in, mb};
    args.ready_ctx = &ready.ready;
    if (in->op == PACI_OP_BWD && delay == 0 && run->replica_ops && run->replica_ops->overlaps(run, st))
        args.grads_ready = run->replica_ops->ready;
    if (st->send_early)
        args.dx_ready = send_gradient_early;
    if (in->op == PACI_OP_BWD_B)
        run->dev->backward_part(run->prog, s, PR_BACKWARD_B, &args);
    else
        run->dev->backward(run->prog, s, &args);
    if (delay > 0)
        run->dev->dc_asgd_add(s, grads, st->dc_grad, st->params, st->dc_prev, sc->n_params,
                              (float)(run->prog->dc_lambda * (double)delay * (double)(run->K * run->replicas)));
    if (in->op == PACI_OP_BWD)
        note_first_gradients(run, st, grads, st->window_backwards == 0, args.grads_ready != NULL);
    if (st->acc_level)
        pairwise_insert(st, grads);
    st->window_backwards++;
    count_drift(run, st, in);
    st->grad_out_mb = mb;
    st->grad_in_mb = -1;
    if (in->op == PACI_OP_BWD)
        st->slot_mb[in->slot] = -1;
    else
        st->pending_w++;
}

/* A zero-bubble W: the weights' gradients from what mb's B kept in the slot, which it frees. */
static void exec_weight_gradient(pr_run *run, pr_stage_rt *st, const paci_instr *in, int64_t mb)
{
    const pr_stage_code *sc = st->code;
    slot_view v = view_slot(run, st, in->slot);
    expect_mb(st, in->op, mb, st->slot_mb[in->slot], "the slot");
    pr_bwd_args args = {st->params, st->grads, v.acts, st->scratch, v.dev_tokens, v.dev_targets,
                        sc->has_head ? NULL : st->grad_in, st->index == 0 ? NULL : st->grad_out,
                        1.0f / (float)(run->K * run->replicas), st->params_h, NULL, NULL, NULL};
    run->dev->backward_part(run->prog, st->index, PR_BACKWARD_W, &args);
    note_first_gradients(run, st, st->grads, st->window_backwards == 1, 0);
    st->slot_mb[in->slot] = -1;
    st->pending_w--;
}

static void execute(pr_run *run, pr_stage_rt *st, const paci_instr *in, int64_t mb)
{
    int s = st->index;
    double outer_wall = nested_wall, outer_cpu = nested_cpu, outer_waited = waited_wall, outer_wait_end = wait_end;
    nested_wall = nested_cpu = waited_wall = 0.0;
    double start = pr_now(), cpu_start = pr_thread_cpu();
    switch (in->op) {
    case PACI_OP_RECV_ACT: {
        int64_t got = link_recv(run, st, &run->act[s - 1], s - 1, mb, view_slot(run, st, in->slot).input);
        if (got <= STOP_MARK(0)) {
            accept_stop(run, st, mb, got);
            break;
        }
        expect_mb(st, in->op, mb, got, "the link");
        st->slot_mb[in->slot] = mb;
        break;
    }
    case PACI_OP_FWD:
        exec_forward(run, st, in, mb);
        break;
    case PACI_OP_SEND_ACT:
        expect_mb(st, in->op, mb, st->slot_mb[in->slot], "the slot");
        if (st->recompute) // the table sends each forward's output before the next forward or backward (verify.c)
            expect_mb(st, in->op, mb, st->work_mb, "the workspace");
        link_send(run, st, &run->act[s], s + 1, mb, view_slot(run, st, in->slot).acts + st->code->out_offset);
        break;
    case PACI_OP_RECV_GRAD:
        st->grad_in_mb = link_recv(run, st, &run->grad[s], s + 1, mb, st->grad_in);
        expect_mb(st, in->op, mb, st->grad_in_mb, "the link");
        break;
    case PACI_OP_BWD:
    case PACI_OP_BWD_B:
        exec_backward(run, st, in, mb);
        break;
    case PACI_OP_BWD_W:
        exec_weight_gradient(run, st, in, mb);
        break;
    case PACI_OP_SEND_GRAD:
        expect_mb(st, in->op, mb, st->grad_out_mb, "the gradient buffer");
        link_send(run, st, &run->grad[s - 1], s - 1, mb, st->grad_out);
        break;
    case PACI_OP_STEP:
        do_step(run, st, in);
        break;
    default:
        pr_internal("stage %d: unknown instruction op %d", s, in->op);
    }
    // A device that queues work returns early; measured runs wait, so the times are its own.
    if (run->dev->finish && (run->opt.profile_out || run->opt.trace))
        run->dev->finish(s);
    // Thread CPU time excludes waits and time-sharing of the cores: the cost as if alone.
    double end = pr_now(), cpu = pr_thread_cpu() - cpu_start;
    double others = nested_wall + waited_wall;
    // The trace draws a step that waited from its last wait's end, so it never starts before the
    // norm is known; what it did before (sums of squares, a rollback and its window run again,
    // drawn on their own) lies before that.
    record(run, st, in->op, mb, waited_wall > 0.0 ? wait_end : start, end, end - start - others, cpu - nested_cpu);
    nested_wall = outer_wall + (end - start); // all of it is nested in the instruction around it, if any
    nested_cpu = outer_cpu + cpu;
    waited_wall = outer_waited;
    wait_end = outer_wait_end;
}

/* Whether BWD `in` is followed (at instruction `next`, -1: none in this list) by the SEND_GRAD
 * of its gradient: its backward may then send it as soon as it is complete (dx_ready), which
 * sends nothing sooner than the table orders, since only that stage's own work lies between. */
static int gradient_sent_next(const pr_run *run, const paci_instr *in, int32_t next, int32_t rep)
{
    if (in->op != PACI_OP_BWD || in->stage == 0 || next < 0)
        return 0;
    paci_instr then = run->tab->instrs[next];
    if (rep >= 0)
        then = paci_body_instr(run->tab, then, rep);
    return then.op == PACI_OP_SEND_GRAD && then.stage == in->stage && then.mb == in->mb;
}

/* Runs device instructions [first, first + n), each on the stage it names; rep >= 0 marks
 * body repetition rep, whose micro-batches, slots and stash slots shift as paci_body_instr
 * says. */
static void execute_list(pr_run *run, int32_t first, int32_t n, int64_t first_mb, int32_t rep,
                         int64_t segment_end)
{
    for (int32_t i = first; i < first + n; i++) {
        paci_instr in = run->tab->instrs[i];
        if (rep >= 0)
            in = paci_body_instr(run->tab, in, rep);
        pr_stage_rt *st = &run->stage[in.stage];
        int64_t mb = in.op == PACI_OP_STEP ? -1 : first_mb + in.mb;
        if (!keep(run, st, &in, mb, segment_end))
            continue;
        if (st->pv.pending && in.op != PACI_OP_STEP)
            note_done(own_stage(run, st, 0), &in, mb);
        if (in.op == PACI_OP_SEND_GRAD && st->grad_sent_mb == mb) { // its backward sent it
            st->grad_sent_mb = -1;
            continue;
        }
        st->send_early = gradient_sent_next(run, &in, i + 1 < first + n ? i + 1 : -1, rep);
        execute(run, st, &in, mb);
        st->send_early = 0;
    }
}

/* The optimizer steps stage s takes in one repetition of its device's body. */
static int64_t body_steps(const paci_table *tab, const paci_stage_program *sp, int s)
{
    int64_t steps = 0;
    for (int32_t i = sp->body; i < sp->body + sp->n_body; i++)
        steps += tab->instrs[i].op == PACI_OP_STEP && tab->instrs[i].stage == s;
    return steps;
}

/* Whether keep() would drop every instruction of body repetitions rep.. with no effect but
 * counting their steps: for each instruction, its stage knows the cut and has met its last
 * kept step, and rep's micro-batches (they grow with rep) all lie past the first cut one,
 * whose activation carries the stop mark. A run cut far before a long segment's end then
 * skips the rest in one go instead of walking it repetition by repetition. */
static int rest_of_body_cut(const pr_run *run, const paci_stage_program *sp, int64_t first_mb, int32_t rep)
{
    for (int32_t i = sp->body; i < sp->body + sp->n_body; i++) {
        paci_instr in = paci_body_instr(run->tab, run->tab->instrs[i], rep);
        const pr_stage_rt *st = &run->stage[in.stage];
        if (st->cut_stop == PR_NO_STOP || st->steps_met < st->cut_stop || st->steps_met < st->cut_from)
            return 0;
        if (in.op != PACI_OP_STEP && first_mb + in.mb <= st->cut_stop * run->K)
            return 0;
    }
    return 1;
}

typedef struct device_job {
    pr_run *run;
    int device;
    int32_t seg;
} device_job;

/* A device thread: its list's prologue, body x reps, epilogue, over the stages it holds. */
static void *device_thread(void *arg)
{
    device_job *job = arg;
    pr_run *run = job->run;
    const paci_table *tab = run->tab;
    int d = job->device;
    const paci_program *pg = paci_segment_program(tab, job->seg);
    const paci_stage_program *sp = &pg->device[d];
    int64_t first_step = paci_segment_first_step(tab, job->seg);
    int64_t first_mb = first_step * run->K, end = first_step + pg->steps;
    for (int c = 0; c < tab->chunks; c++) {
        pr_stage_rt *st = &run->stage[paci_placed_stage(tab->placement, tab->devices, d, c)];
        st->cut_from = run->step;
        st->cut_stop = PR_NO_STOP;
        st->steps_met = first_step;
        st->window_backwards = 0;
        st->pending_w = 0;
    }
    run->device_norm_t[d] = -1;
    execute_list(run, sp->prologue, sp->n_prologue, first_mb, -1, end);
    for (int32_t r = 0; r < pg->body_reps; r++) {
        if (rest_of_body_cut(run, sp, first_mb, r)) {
            for (int c = 0; c < tab->chunks; c++) {
                pr_stage_rt *st = &run->stage[paci_placed_stage(tab->placement, tab->devices, d, c)];
                st->steps_met += (int64_t)(pg->body_reps - r) * body_steps(tab, sp, st->index);
            }
            break;
        }
        execute_list(run, sp->body, sp->n_body, first_mb, r, end);
    }
    execute_list(run, sp->epilogue, sp->n_epilogue, first_mb, -1, end);
    // the segment's last steps, checked before the drain
    settle_device(run, &run->stage[paci_placed_stage(tab->placement, tab->devices, d, 0)], INT64_MAX);
    // The segment ends when the device has done its stages' work (their time is the GPU's).
    for (int c = 0; c < tab->chunks && run->dev->finish; c++)
        run->dev->finish(paci_placed_stage(tab->placement, tab->devices, d, c));
    return NULL;
}

/* Per-op timing covers the schedule's instructions only, not evaluation or sampling, which run
 * the same stage code from the main thread between segments: the main thread sets the timer
 * of each stage code of the devices it runs before their threads start and clears it once
 * they are joined (replicas as threads share the code, so no device thread may write it). */
static void set_op_timers(const pr_run *run, int first, int last, int on)
{
    for (int s = 0; s < run->p; s++) {
        if (run->tab->stage_device[s] < first || run->tab->stage_device[s] > last)
            continue;
        const pr_op_timer **timer = run->prog->stage[s].op_timer;
        if (run->opt.profile_out && timer)
            *timer = on ? run->dev->op_timer : NULL;
    }
}

void pr_run_segment(pr_run *run, int32_t seg)
{
    double start = pr_now();
    const paci_table *tab = run->tab;
    // One process per device runs only its own; alone, the process runs them all, of every
    // replica it holds.
    int first = run->opt.world > 1 ? run->opt.rank % run->devices : 0;
    int last = run->opt.world > 1 ? first : run->devices - 1;
    int held = run->replica_runs ? run->replicas : 1;
    int n = (last - first + 1) * held;
    pthread_t *threads = pr_alloc((size_t)n * sizeof *threads);
    device_job *jobs = pr_alloc((size_t)n * sizeof *jobs);
    for (int r = 1; r < held; r++) { // the others follow replica 0's stop and data
        run->replica_runs[r]->stop_at = run->stop_at;
        run->replica_runs[r]->train = run->train;
    }
    for (int r = 0; r < held; r++) // a warm start's table clips globally in its synchronous part only
        (held > 1 ? run->replica_runs[r] : run)->async_segment =
            !paci_schedule_sync(paci_segment_schedule(tab, seg));
    set_op_timers(run, first, last, 1);
    for (int i = 0; i < n; i++) {
        pr_run *rr = held > 1 ? run->replica_runs[i / (last - first + 1)] : run;
        jobs[i] = (device_job){rr, first + i % (last - first + 1), seg};
        if (pthread_create(&threads[i], NULL, device_thread, &jobs[i]) != 0)
            pr_internal("cannot start the thread of %s %d", tab->chunks > 1 ? "device" : "stage", jobs[i].device);
    }
    for (int i = 0; i < n; i++) {
        int rc = pthread_join(threads[i], NULL);
        if (rc != 0) { // the stages' state is unknown: no checkpoint can be trusted, stop here
            int device = jobs[i].device;
            free(threads);
            free(jobs);
            fflush(stdout);
            fprintf(stderr, "run: error: cannot join the thread of %s %d: %s\n", tab->chunks > 1 ? "device" : "stage",
                    device, strerror(rc));
            exit(1);
        }
    }
    set_op_timers(run, first, last, 0);
    free(threads);
    free(jobs);
    int64_t end = paci_segment_end(tab, seg);
    int lowest = run->opt.world > 1 ? paci_placed_stage(tab->placement, tab->devices, first, 0) : 0;
    for (int r = 0; r < held; r++) {
        pr_run *rr = held > 1 ? run->replica_runs[r] : run;
        int64_t expected = rr->stage[lowest].cut_stop < end ? rr->stage[lowest].cut_stop : end;
        rr->steps_this_process += expected - rr->step;
        rr->step = expected;
        rr->train_time += pr_now() - start;
        for (int s = 0; s < run->p; s++)
            if (tab->stage_device[s] >= first && tab->stage_device[s] <= last && rr->stage[s].t != rr->step)
                pr_internal("after segment %d stage %d of replica %d has taken %lld steps, expected %lld",
                            seg, s, r, (long long)rr->stage[s].t, (long long)rr->step);
    }
}

/* Forward of one micro-batch through every stage in order, on the calling thread, in slot 0
 * (free at a drain boundary). Returns the last stage's slot. */
static float *forward_through(pr_run *run, const int32_t *tokens, const int32_t *targets)
{
    const pr_device *dev = run->dev;
    int64_t BT = run->B * run->T;
    float *prev_out = NULL;
    for (int s = 0; s < run->p; s++) {
        pr_stage_rt *st = &run->stage[s];
        const pr_stage_code *sc = st->code;
        if (prev_out && dev->follow) // the copy reads what stage s-1's forward writes
            dev->follow(s, s - 1);
        if (prev_out)
            dev->copy(s, st->work + sc->in_offset, prev_out,
                      (size_t)pr_link_floats(run->prog, PR_LINK_ACT, s - 1) * sizeof(float));
        if (!dev->host_memory) {
            dev->upload(s, st->dev_tokens, tokens, (size_t)BT * sizeof(int32_t));
            dev->upload(s, st->dev_targets, targets, (size_t)BT * sizeof(int32_t));
        }
        pr_fwd_args args = {st->params, st->work, dev->host_memory ? tokens : st->dev_tokens,
                            dev->host_memory ? targets : st->dev_targets, st->dev_losses, st->params_h};
        dev->forward(run->prog, s, &args);
        st->work_mb = -1;
        prev_out = st->work + sc->out_offset;
    }
    pr_stage_rt *last = &run->stage[run->p - 1];
    if (!dev->host_memory)
        dev->download(run->p - 1, last->slot_losses, last->dev_losses, (size_t)BT * sizeof(float));
    return last->work;
}

double pr_eval(pr_run *run, const pr_tokens *d, int64_t batches)
{
    int64_t BT = run->B * run->T;
    int32_t *tokens = pr_alloc((size_t)BT * sizeof(int32_t));
    int32_t *targets = pr_alloc((size_t)BT * sizeof(int32_t));
    double total = 0.0;
    for (int64_t g = 0; g < batches; g++) {
        pr_tokens_batch(d, g, run->B, run->T, tokens, targets);
        forward_through(run, tokens, targets);
        const float *losses = run->stage[run->p - 1].slot_losses;
        double sum = 0.0;
        for (int64_t i = 0; i < BT; i++)
            sum += losses[i];
        total += sum / (double)BT;
    }
    free(tokens);
    free(targets);
    return batches > 0 ? total / (double)batches : NAN;
}

/* Under the vocabulary split the probabilities are assembled on the host: the stage before
 * the last holds its rows' logits, the last its rows' p - onehot(target) (targets 0 here: in
 * the first rows, so these are p) and each row's log-sum-exp; on the GPU under bf16 both are
 * bf16. */
static const float *split_probabilities(pr_run *run)
{
    const pr_program *prog = run->prog;
    int p = run->p;
    const pr_stage_code *front = &prog->stage[p - 2], *back = &prog->stage[p - 1];
    int64_t BT = run->B * run->T, VP = prog->probs_stride, n0 = back->vocab_begin, n1 = prog->vocab - n0;
    int64_t vp0 = (n0 + 63) / 64 * 64, vp1 = (n1 + 63) / 64 * 64;
    int gpu = prog->cuda_device && run->dev == prog->cuda_device, bf16 = gpu && prog->bf16_operands;
    float *logits = pr_alloc((size_t)(BT * vp0) * sizeof(float)), *dlogits = pr_alloc((size_t)(BT * vp1) * sizeof(float));
    float *lse = pr_alloc((size_t)BT * sizeof(float));
    run->dev->download(p - 2, logits, run->stage[p - 2].work + front->probs_offset, (size_t)(BT * vp0) * sizeof(float));
    run->dev->download(p - 1, dlogits, run->stage[p - 1].work + back->probs_offset, (size_t)(BT * vp1) * sizeof(float));
    run->dev->download(p - 1, lse, run->stage[p - 1].work + back->lse_offset, (size_t)BT * sizeof(float));
    if (!run->probs_host)
        run->probs_host = pr_alloc((size_t)(BT * VP) * sizeof(float));
    for (int64_t r = 0; r < BT; r++)
        for (int64_t v = 0; v < prog->vocab; v++) {
            int64_t at = v < n0 ? r * vp0 + v : r * vp1 + v - n0;
            const float *from = v < n0 ? logits : dlogits;
            float x = bf16 ? pr_from_bf16(((const pr_bf16 *)from)[at]) : from[at];
            run->probs_host[r * VP + v] = v < n0 ? expf(x - lse[r]) : x;
        }
    free(logits);
    free(dlogits);
    free(lse);
    return run->probs_host;
}

const float *pr_forward_all(pr_run *run, const int32_t *tokens)
{
    int64_t BT = run->B * run->T;
    int32_t *targets = pr_alloc((size_t)BT * sizeof(int32_t)); // zeros
    float *last = forward_through(run, tokens, targets) + run->stage[run->p - 1].code->probs_offset;
    free(targets);
    if (run->prog->stage[run->p - 1].vocab_begin > 0)
        return split_probabilities(run);
    if (run->dev->host_memory)
        return last;
    // The probabilities come back in a host buffer the run keeps until the next call.
    size_t bytes = (size_t)(BT * run->prog->probs_stride) * sizeof(float);
    if (!run->probs_host)
        run->probs_host = pr_alloc(bytes);
    run->dev->download(run->p - 1, run->probs_host, last, bytes);
    return run->probs_host;
}

static float *block_of(const pr_stage_rt *st, int which)
{
    return which == 0 ? st->params : which == 1 ? st->m : st->v;
}

void pr_gather(const pr_run *run, int which, float *flat)
{
    int64_t offsets[PR_CKPT_COUNT];
    pr_ckpt_offsets(run->prog, offsets);
    for (int s = 0; s < run->p; s++) {
        const pr_stage_code *sc = run->stage[s].code;
        const float *block = block_of(&run->stage[s], which);
        if (!block) // a stage another process runs (stage_holding)
            continue;
        for (int i = 0; i < sc->n_tensors; i++) {
            const pr_tensor *t = &sc->tensors[i];
            run->dev->download(s, flat + offsets[t->ckpt_tensor] + t->ckpt_offset, block + t->offset,
                               (size_t)t->size * sizeof(float));
        }
    }
}

void pr_weights_changed(pr_run *run, int s)
{
    pr_stage_rt *st = &run->stage[s];
    if (st->params_h)
        run->dev->weight_copy(run->prog, s, st->params, st->params_h);
}

void pr_scatter(pr_run *run, int which, const float *flat)
{
    int64_t offsets[PR_CKPT_COUNT];
    pr_ckpt_offsets(run->prog, offsets);
    for (int s = 0; s < run->p; s++) {
        const pr_stage_code *sc = run->stage[s].code;
        float *block = block_of(&run->stage[s], which);
        if (!block)
            continue;
        for (int i = 0; i < sc->n_tensors; i++) {
            const pr_tensor *t = &sc->tensors[i];
            run->dev->upload(s, block + t->offset, flat + offsets[t->ckpt_tensor] + t->ckpt_offset,
                             (size_t)t->size * sizeof(float));
        }
        if (which == 0)
            pr_weights_changed(run, s);
    }
}
