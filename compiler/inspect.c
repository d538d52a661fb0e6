/* inspect.c: what a user reads before spending GPU time: --explain, the schedule listing,
 * a terminal timeline, an SVG picture and a Chrome trace of the simulation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pacic.h"
#include "../runtime/pacirt.h"
#include "../runtime/paci_dgc.h"

static double gib(double bytes)
{
    return bytes / (1024.0 * 1024.0 * 1024.0);
}

/* What the timeline, the picture and the trace draw: compute, and the replicas' allreduce. */
static bool is_drawn(int op)
{
    return op == PACI_OP_FWD || op == PACI_OP_BWD || op == PACI_OP_BWD_B || op == PACI_OP_BWD_W ||
           op == PACI_OP_STEP || op == SIM_OP_ALLREDUCE;
}

/* ---- --explain ------------------------------------------------------------------------ */

static const char *scale_rule(LrScale s)
{
    switch (s) {
    case LR_SCALE_NONE: return "none";
    case LR_SCALE_LINEAR: return "linear";
    case LR_SCALE_SQRT: return "sqrt";
    }
    unreachable();
}

static const char *decay_name(int decay)
{
    switch (decay) {
    case PR_DECAY_COSINE: return "cosine";
    case PR_DECAY_LINEAR: return "linear";
    case PR_DECAY_CONSTANT: return "constant";
    }
    return "?";
}

/* The lr used and the rule that derived it from the one written. */
static void explain_lr(FILE *out, const Config *cfg)
{
    fprintf(out, "learning rate: peak %.3g", cfg->lr);
    if (cfg->lr_base_batch > 0 && cfg->lr_scale != LR_SCALE_NONE) {
        const char *op = cfg->lr_scale == LR_SCALE_SQRT ? "sqrt" : "";
        fprintf(out, " = %.3g x %s(%ld / %ld) (%s rule: lr follows the global batch from the base "
                     "batch %ld)",
                cfg->lr_base, op, cfg->global_batch, cfg->lr_base_batch, scale_rule(cfg->lr_scale),
                cfg->lr_base_batch);
    } else {
        fprintf(out, " (as written; no scaling rule)");
    }
    fprintf(out, "; warmup %ld steps, %s decay to %.3gx\n", cfg->warmup_steps,
            decay_name(cfg->lr_decay), cfg->min_lr_ratio);
}

/* Clipping by the norm over every stage (a synchronous program, p > 1): whether the steps wait
 * for it or are post-validated (docs/dsl.md, "Post-validation"), as the predictions price it. */
static void explain_clipping(FILE *out, const Config *cfg)
{
    if (!(paci_schedule_is_sync(cfg->schedule) || cfg->warm_steps > 0) || cfg->grad_clip <= 0 || cfg->stages < 2)
        return;
    fprintf(out, "clipping: by the norm over every stage (clip %g)", cfg->grad_clip);
    if (config_post_validates(cfg))
        fprintf(out, ", post-validated: no stage waits for it at its step; a step it clips is rolled back and "
                     "redone with the window since, and the next step waits, which the predictions do not price; "
                     "each stage keeps %d bytes a parameter to roll back, not in the table below\n",
                cfg->precision == PREC_BF16 ? 18 : 16);
    else
        fprintf(out, ": every step waits for every stage's gradients (%s), as the predictions price it\n",
                cfg->post_validation ? "data > 1 keeps the barrier" : "post_validation false");
}

/* optimizer nadamw and lans: the rule in one line (the other optimizers print none, as before). */
static void explain_optimizer(FILE *out, const Config *cfg)
{
    if (cfg->optimizer == PR_OPT_LANS)
        fprintf(out, "optimizer: lans (Zheng et al. 2020: LAMB with each block's gradient divided by its norm "
                     "and a Nesterov step, beta1 x the trust-ratio-scaled Adam direction + (1 - beta1) x the "
                     "normalised gradient's; a block is LAMB's: one layer's slice of a tensor, or a whole "
                     "tensor outside the layers; clip changes nothing, the normalisation cancels it): betas "
                     "%g %g, eps %g, weight_decay %g; state m and v (8 bytes per parameter, as AdamW)\n",
                cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay);
    if (cfg->optimizer != PR_OPT_NADAMW)
        return;
    fprintf(out, "optimizer: nadamw (Adam with Nesterov momentum, Dozat 2016, as torch.optim.NAdam; decoupled "
                 "weight decay): betas %g %g, eps %g, weight_decay %g, momentum_decay %g; state m and v "
                 "(8 bytes per parameter, as AdamW)\n",
            cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay, cfg->momentum_decay);
}

/* `delay_correction nesterov`: each stage's beta1 from its delay in the table (stage_beta1). */
static void explain_nesterov(FILE *out, const Config *cfg)
{
    fprintf(out, "delay correction: nesterov (arXiv 2505.01099's delay-aware momentum, as its code does it): "
                 "stage s runs NAdamW with beta1 = %g + d (0.99 - %g) / %d, d its most optimizer steps between "
                 "a micro-batch's forward and backward in the schedule table; cost: no extra memory, no "
                 "compute beyond NAdamW's step:\n", cfg->beta1, cfg->beta1, cfg->stages);
    for (int s = 0; s < cfg->stages; s++)
        fprintf(out, "  stage %d: d = %d, beta1 %.6g\n", s, cfg->stage_delay[s], stage_beta1(cfg, s));
}

/* The pipeline line with D replicas, and the job's shape: D x p ranks. */
static void explain_replicas(FILE *out, const Config *cfg, double tokens_per_step)
{
    int d = config_replicas(cfg), p = config_devices(cfg);
    fprintf(out, "pipeline: %s, %d stages, window K = %d micro-batches of %d sequences, %d data-parallel replicas: "
                 "global batch %d x %d x %d = %ld (%.0f tokens per step), %s\n",
            paci_schedule_name(cfg->schedule), p, cfg->window, cfg->micro, d, cfg->micro, cfg->window, d,
            cfg->global_batch, tokens_per_step, cfg->precision == PREC_BF16 ? "bf16" : "fp32");
    fprintf(out, "data parallel: D = %d copies of the pipeline, world size p x D = %d x %d = %d ranks (one GPU "
                 "each); rank = replica x %d + stage, so a pipeline's stages are consecutive ranks (one node) "
                 "and the replicas of a stage are on different nodes\n",
            d, p, d, p * d, p);
}

/* Each stage's gradient allreduce among the replicas, per optimizer step (stage_allreduce). */
static void explain_allreduce(FILE *out, const Config *cfg, const Plan *plan)
{
    int d = config_replicas(cfg);
    fprintf(out, "gradient allreduce per optimizer step: the %d replicas of each stage average its fp32 gradients "
                 "before the stage's step (paci: each stage at its own step; synchronous schedules: at the flush); "
                 "a ring sends 2(D-1)/D = %.3g of them per rank over %.3g GB/s network_bandwidth; on GPUs each "
                 "range of gradients (head, layers, embeddings) starts as the window's last backward finishes it, "
                 "and the step waits for the rest (exposed; the CPU's transports reduce at the step)\n",
            d, 2.0 * (d - 1) / d, cfg->network_bandwidth / 1e9);
    fprintf(out, "  stage    params  gradients MB  ring sends MB per rank  allreduce ms  exposed ms\n");
    double total = 0;
    for (int s = 0; s < plan->stages; s++) {
        const StagePlan *sp = &plan->stage[s];
        Allreduce a = stage_allreduce(cfg, sp);
        double fwd, bwd, step;
        cost_stage(cfg, sp, &fwd, &bwd, &step);
        total += a.bytes;
        fprintf(out, "  %5d  %7.1fM  %12.4g  %22.4g  %12.3g  %10.3g\n", s, sp->params / 1e6, a.bytes / 1e6,
                a.ring_bytes / 1e6, a.seconds * 1e3, allreduce_exposed(cfg, sp, bwd) * 1e3);
    }
    fprintf(out, "  all stages: %.4g MB of gradients per replica per step\n", total / 1e6);
}

/* compression dgc: per stage, what a step's exchange moves per rank, dense (the ring's
 * allreduce) and compressed (an allgather of each of the D - 1 others' lists of k =
 * ceil(density n) pairs: 4 bytes a pair and 4 a block of 65536 entries, runtime/paci_dgc.h),
 * and both at network_bandwidth, so a user sees when it pays. */
static void explain_compression(FILE *out, const Config *cfg, const Plan *plan)
{
    int d = config_replicas(cfg);
    fprintf(out, "compression dgc { density %g; warmup_steps %ld }: each replica sends k = ceil(%g n) (index, value) "
                 "pairs per stage a step (after the warm-up), 4 bytes a pair (a 16-bit offset in a block of %d and "
                 "the value in bf16, its rounding kept in the residual) plus 4 a block (its count); a sparse "
                 "allgather: (D-1) x (4k + 4 ceil(n/%d)) bytes per rank, against the dense ring's 2(D-1)/D x 4n "
                 "(threads, processes, or NCCL on GPUs; the prediction below assumes the dense exchange)\n",
            cfg->dgc_density, cfg->dgc_warmup_steps, cfg->dgc_density, PACI_DGC_BLOCK, PACI_DGC_BLOCK);
    fprintf(out, "  stage  dense MB  dense ms    dgc MB    dgc ms  bytes a pair  (per rank per step, %.3g GB/s "
                 "network_bandwidth)\n", cfg->network_bandwidth / 1e9);
    for (int s = 0; s < plan->stages; s++) {
        Allreduce a = stage_allreduce(cfg, &plan->stage[s]);
        int64_t n = plan->stage[s].params, k = (int64_t)ceil(cfg->dgc_density * (double)n);
        k = k < 1 ? 1 : k > n ? n : k;
        double list = 4.0 * (double)paci_dgc_list_words(n, k), sparse = (d - 1) * list;
        fprintf(out, "  %5d  %8.4g  %8.3g  %8.4g  %8.3g  %12.4g\n", s, a.ring_bytes / 1e6, a.seconds * 1e3,
                sparse / 1e6, sparse / cfg->network_bandwidth * 1e3, list / (double)k);
    }
}

typedef struct Comparison {
    double uniform_bubble, uniform_idle; /* idle share of a step; idle time a step, in forwards */
    double bubble, step_time, tokens_per_s; /* priced as the file is (SimView.cm) */
    long peak_memory;
    int peak_stage;
    int drift0, stash0;
    bool fits;
} Comparison;

/* One schedule at this file's window and micro-batch: its plan, table and two simulations,
 * one at unit costs, one priced as the file is (measured costs, or the cost model op by op). */
static Comparison compare_schedule(const Config *cfg, int kind, long steps, const CostModel *measured)
{
    Config c;
    if (config_with_schedule(cfg, kind, &c))
        ICE("compare_schedule: %s does not fit", paci_schedule_name(kind));
    Plan plan;
    plan_layout(&c, &plan);
    paci_table *t = schedule_build(&c, &plan);
    Comparison cmp = {0};
    cmp.peak_memory = plan_peak_device_memory(&plan, &cmp.peak_stage);
    cmp.fits = (double)cmp.peak_memory <= cfg->device_memory;
    cmp.drift0 = drift_bound(t, 0);
    cmp.stash0 = t->stash[0];

    CostModel uniform;
    cost_model_unit(&c, c.stages, &uniform);
    SimResult sim;
    simulate(&c, t, &uniform, steps, &sim);
    cmp.uniform_bubble = sim.bubble;
    cmp.uniform_idle = sim.bubble * sim.step_time;
    sim_result_free(&sim);

    CostModel cm;
    if (measured) { /* the profile's stage costs, the W share and barrier of this kind */
        cm = *measured;
        cost_model_allreduce(&c, &plan, &cm);
    } else if (c.measured) {
        cost_model_from_plan(&c, &plan, &cm);
    } else {
        Lowered low;
        GpuCosts costs;
        lower_build(&c, &plan, &low);
        gpu_costs_build(&c, &low, &costs);
        cost_model_from_gpu_costs(&c, &plan, &costs, &cm);
        gpu_costs_free(&costs);
        lower_free(&low);
    }
    simulate(&c, t, &cm, steps, &sim);
    cmp.bubble = sim.bubble;
    cmp.step_time = sim.step_time;
    cmp.tokens_per_s = sim.tokens_per_s;
    sim_result_free(&sim);
    schedule_free(t);
    return cmp;
}

/* `delay_correction predict`: what it costs per stage, read off the table's forwards (their
 * aux is the delay d) in one body repetition, i.e. per optimizer step of the steady state. */
static void explain_prediction(FILE *out, const Config *cfg, const Plan *plan, const paci_table *t)
{
    char muon_cost[160] = "";
    if (cfg->optimizer == PR_OPT_MUON)
        snprintf(muon_cost, sizeof muon_cost, ", and on each block matrix the step's %d Newton-Schulz iterations",
                 cfg->ns_steps);
    bool bf16 = cfg->precision == PREC_BF16;
    fprintf(out, "delay correction: predict: a forward whose backward comes d > 0 optimizer steps later runs "
                 "on W - d lr u (u: %s); cost per stage: one extra weight copy%s (not in "
                 "the totals above), and per step one pass over the stage's weights for each delay its forwards "
                 "meet (reads W, m, v, writes the copy: 16 bytes and about 8 flops per weight%s):\n",
            cfg->optimizer == PR_OPT_MUON     ? "Muon's orthogonalised momentum on the block matrices, AdamW's "
                                                "update direction on the rest"
            : cfg->optimizer == PR_OPT_NADAMW ? "NAdamW's update direction"
            : cfg->optimizer == PR_OPT_LAMB   ? "LAMB's update direction, scaled by each layer's trust ratio"
            : cfg->optimizer == PR_OPT_LANS   ? "LANS's with m^ for the normalised gradient, which is LAMB's "
                                                "direction scaled by each layer's trust ratio"
                                              : "AdamW's update direction",
            bf16 ? ", and on the GPU its bf16 copy for the products" : "", muon_cost);
    const paci_program *pg = &t->program[0];
    for (int s = 0; s < plan->stages; s++) {
        const paci_stage_program *sp = &pg->device[s];
        int predicting = 0, forwards = 0, most = 0, any = 0, passes = 0;
        unsigned long long delays_seen = 0; // bit d-1: a forward of the step predicts d ahead
        // The runtime keeps the copy on a stage with any predicted forward in its lists.
        int32_t starts[3] = {sp->prologue, sp->body, sp->epilogue}, counts[3] = {sp->n_prologue, sp->n_body, sp->n_epilogue};
        for (int part = 0; part < 3; part++)
            for (int32_t i = starts[part]; i < starts[part] + counts[part]; i++)
                any |= t->instrs[i].op == PACI_OP_FWD && t->instrs[i].aux > 0;
        for (int32_t i = sp->body; i < sp->body + sp->n_body; i++)
            if (t->instrs[i].op == PACI_OP_FWD) {
                forwards++;
                predicting += t->instrs[i].aux > 0;
                int d = t->instrs[i].aux;
                if (d > 0 && (d > 64 || !(delays_seen >> (d - 1) & 1))) {
                    passes++;
                    if (d <= 64)
                        delays_seen |= 1ULL << (d - 1);
                }
                most = t->instrs[i].aux > most ? t->instrs[i].aux : most;
            }
        fprintf(out, "  stage %d: +%.2f MiB, %d of %d forwards per step predicted (d <= %d), %d pass%s per step\n", s,
                any ? (double)plan->stage[s].params * (bf16 ? 6 : 4) / (1 << 20) : 0.0, predicting, forwards, most, passes,
                passes == 1 ? "" : "es");
    }
}

/* `delay_correction dc-asgd`: what it costs per stage, read off the table's forwards (their aux
 * is the delay d of their backward) in one body repetition, i.e. per step of the steady state;
 * the runtime keeps the buffers on a stage with any delayed forward, and none at lambda 0. */
static void explain_dc_asgd(FILE *out, const Config *cfg, const Plan *plan, const paci_table *t)
{
    fprintf(out, "delay correction: dc-asgd (DC-ASGD, Zheng et al. 2017, constant lambda %g): a backward whose "
                 "forward came d > 0 optimizer steps earlier adds g + lambda g g d (W - W_prev) for its gradient g, "
                 "W - W_prev the stage's last update; ", cfg->dc_lambda);
    if (cfg->dc_lambda == 0) {
        fprintf(out, "lambda 0 is plain PACI: every backward runs as without it and no stage keeps more\n");
        return;
    }
    fprintf(out, "cost per stage: the weights before the last step and one micro-batch's gradient (2 copies "
                 "of the weights, not in the totals above), per step one copy of the weights, and per "
                 "corrected backward the buffer zeroed and one pass over them (reads g, W, W_prev and the "
                 "sum, writes the sum: 24 bytes with the zeroing, and 6 flops per weight):\n");
    const paci_program *pg = &t->program[0];
    for (int s = 0; s < plan->stages; s++) {
        const paci_stage_program *sp = &pg->device[s];
        int corrected = 0, backwards = 0, most = 0, any = 0;
        int32_t starts[3] = {sp->prologue, sp->body, sp->epilogue}, counts[3] = {sp->n_prologue, sp->n_body, sp->n_epilogue};
        for (int part = 0; part < 3; part++)
            for (int32_t i = starts[part]; i < starts[part] + counts[part]; i++)
                any |= t->instrs[i].op == PACI_OP_FWD && t->instrs[i].aux > 0;
        for (int32_t i = sp->body; i < sp->body + sp->n_body; i++) {
            backwards += t->instrs[i].op == PACI_OP_BWD;
            if (t->instrs[i].op == PACI_OP_FWD) {
                corrected += t->instrs[i].aux > 0;
                most = t->instrs[i].aux > most ? t->instrs[i].aux : most;
            }
        }
        fprintf(out, "  stage %d: +%.2f MiB, %d of %d backwards per step corrected (d <= %d)\n", s,
                any ? (double)plan->stage[s].params * 8 / (1 << 20) : 0.0, corrected, backwards, most);
    }
}

/* `recompute full`: the activation memory it saves per stage and the forward it adds to each
 * backward, priced as the cost model prices them (cost_stage). */
static void explain_recompute(FILE *out, const Config *cfg, const Plan *plan, const char *unit, double unit_bytes)
{
    fprintf(out, "recompute full: a slot keeps only the stage's input (the first stage: its tokens), one workspace "
                 "of a full slot runs the forwards, and each backward first reruns its micro-batch's forward there "
                 "on the weights the backward uses, so the effective drift within a stage is 0 (the inputs "
                 "received from upstream stages still carry theirs); a stage with one slot keeps it whole:\n");
    fprintf(out, "  stage  activations %s without   with  saved   extra compute per step\n", unit);
    for (int s = 0; s < plan->stages; s++) {
        const StagePlan *sp = &plan->stage[s];
        double without = (double)sp->act_bytes * sp->slots, with = (double)sp->mem_acts;
        fprintf(out, "  %5d  %20.2f %6.2f %6.2f   ", s, without / unit_bytes, with / unit_bytes,
                (without - with) / unit_bytes);
        if (!sp->recompute) {
            fprintf(out, "none (one slot, kept whole)\n");
            continue;
        }
        double fwd, bwd, step;
        cost_stage(cfg, sp, &fwd, &bwd, &step);
        // bwd includes the rerun: the forward and backward without it are fwd + (bwd - fwd)
        fprintf(out, "%d forwards, +%.4g ms (+%.0f%% of the stage's forwards and backwards)\n", cfg->window,
                cfg->window * fwd * 1e3, bwd > 0 ? 100 * fwd / bwd : 0.0);
    }
}

/* The run's segments, and the warm start's part of them. */
static void explain_segments(FILE *out, const Config *cfg, const paci_table *t)
{
    fprintf(out, "run: %ld steps in %d segment%s of %d steps (the pipeline drains at every segment's end: "
                 "evaluation, checkpoint, end of training)\n",
            cfg->steps, paci_segments(t), paci_segments(t) == 1 ? "" : "s", t->segment_steps);
    if (t->warm_steps > 0)
        fprintf(out, "warm start: steps 1-%d under %s (synchronous: drift 0), the pipeline drained once at its end, "
                     "steps %d-%ld under %s\n", t->warm_steps, paci_schedule_name(t->warm_schedule), t->warm_steps + 1,
                cfg->steps, paci_schedule_name(t->schedule));
}

/* Every schedule at this file's window and micro-batch, priced by the same cost model as the
 * prediction; the file's own row is that very simulation. */
static void explain_schedules(FILE *out, const Config *cfg, const SimView *view, const char *unit,
                              double unit_bytes)
{
    const SimResult *sim = view->sim;
    int replicas = config_replicas(cfg);
    fprintf(out, "\nschedules at window %d, micro-batch %d (bubble, step time, tokens/s: priced as above, %s, the\n"
                 "bubble of the same steady state; at unit costs: the schedule's own bubble with F = B = W = 1\n"
                 "(backward 2) and free messages, and that idle time a step, in forwards):\n", cfg->window,
            cfg->micro, view->model);
    fprintf(out, "  schedule    bubble  step time    tokens/s  peak memory (device) drift bound s0  at unit costs: bubble  idle\n");
    for (int kind = 0; kind < PACI_SCHED_COUNT; kind++) {
        Config as_kind;
        const char *unfit = config_with_schedule(cfg, kind, &as_kind);
        if (unfit) {
            fprintf(out, "  %-11s   n/a: %s\n", paci_schedule_name(kind), unfit);
            continue;
        }
        const char *excluded = config_splits_backward(&as_kind) ? zero_bubble_excluded(cfg) : NULL;
        if (excluded) {
            fprintf(out, "  %-11s   n/a: B and W are not built for %s\n", paci_schedule_name(kind), excluded);
            continue;
        }
        Comparison c = compare_schedule(cfg, kind, sim->steps, view->cm);
        if (kind == (int)cfg->schedule) { /* the file's own: the very simulation above */
            c.bubble = sim->bubble;
            c.step_time = sim->step_time;
            c.tokens_per_s = sim->tokens_per_s;
        }
        char order[64] = "";
        int p = config_devices(cfg);
        if (kind == PACI_SCHED_ZBH2 && !zero_bubble_h2_order(kind, p, cfg->window))
            snprintf(order, sizeof order, "   (zb-h1's order: K < 2p - 1 = %d)", 2 * p - 1);
        else if (config_chunks(&as_kind) > 1)
            snprintf(order, sizeof order, "   (%d chunks a device)", config_chunks(&as_kind));
        char drift[32];
        if (kind == PACI_SCHED_PIPEDREAM)
            snprintf(drift, sizeof drift, "0 (%d stashed)", c.stash0);
        else
            snprintf(drift, sizeof drift, "%d", c.drift0);
        fprintf(out, "  %-11s %5.1f%%  %9.4g  %10.4g  %7.2f %s (%d)%s  %-14s %20.1f%% %5.1f%s%s\n",
                paci_schedule_name(kind), 100 * c.bubble, c.step_time, c.tokens_per_s, (double)c.peak_memory / unit_bytes, unit,
                c.peak_stage, c.fits ? "   " : " !!", drift, 100 * c.uniform_bubble, c.uniform_idle,
                kind == (int)cfg->schedule ? "   <- this file" : "", order);
    }
    fprintf(out, "  (!! = over the %s memory; analytic 1F1B-flush bubble at unit costs (p-1)/(K+p-1) = %d/%d = %.1f%%)\n",
            cfg->machine == MACHINE_CPU ? "machine's" : "device's",
            config_devices(cfg) - 1, cfg->window + config_devices(cfg) - 1,
            100.0 * (config_devices(cfg) - 1) / (cfg->window + config_devices(cfg) - 1));
    if (replicas > 1)
        fprintf(out, "  (step time and tokens/s: one pipeline of the %d, with its allreduce)\n", replicas);
}

/* With chunks: which stages each device holds, and its memory, their sum. */
static void explain_devices(FILE *out, const Plan *plan, const paci_table *t, const char *unit, double unit_bytes)
{
    fprintf(out, "devices: %d, each running the %d stages its placement gives it (%s: chunk c of device d is "
                 "stage %s), one list a device; the busy column is the device's\n", t->devices, t->chunks,
            t->placement == PACI_PLACEMENT_V ? "v" : "loop",
            t->placement == PACI_PLACEMENT_V ? "c p + d for even c, c p + p - 1 - d for odd c" : "c p + d");
    for (int d = 0; d < t->devices; d++) {
        fprintf(out, "  device %d: stages", d);
        for (int c = 0; c < t->chunks; c++)
            fprintf(out, "%s %d", c ? "," : "", paci_placed_stage(t->placement, t->devices, d, c));
        fprintf(out, ", %.2f %s\n", (double)plan_device_memory(plan, d) / unit_bytes, unit);
    }
}

void inspect_explain(FILE *out, const Config *cfg, const Plan *plan, const paci_table *t,
                     const VerifyReport *rep, const SimView *view)
{
    const SimResult *sim = view->sim;
    double tokens_per_step = (double)cfg->global_batch * cfg->context;
    int replicas = config_replicas(cfg);
    machine_explain(out, cfg);
    fprintf(out, "model: GPT-2, %d layers, width %d, %d heads, context %d, vocab %d%s: %.1fM parameters\n",
            cfg->layers, cfg->width, cfg->heads, cfg->context, cfg->vocab,
            cfg->tied ? ", tied head" : "", plan->total_params / 1e6);
    char stages[96];
    if (config_chunks(cfg) > 1)
        snprintf(stages, sizeof stages, "%d devices x %d chunks = %d stages", config_devices(cfg), config_chunks(cfg),
                 cfg->stages);
    else
        snprintf(stages, sizeof stages, "%d stages", cfg->stages);
    if (replicas == 1)
        fprintf(out, "pipeline: %s, %s, window K = %d micro-batches of %d sequences: global batch %ld "
                     "(%.0f tokens per step), %s\n",
                paci_schedule_name(cfg->schedule), stages, cfg->window, cfg->micro,
                cfg->global_batch, tokens_per_step, cfg->precision == PREC_BF16 ? "bf16" : "fp32");
    else
        explain_replicas(out, cfg, tokens_per_step);
    explain_segments(out, cfg, t);
    explain_lr(out, cfg);
    explain_clipping(out, cfg);
    explain_optimizer(out, cfg);

    /* One unit for the whole table: GiB for real models, MiB for the CPU-sized ones. */
    int peak_stage = 0;
    long peak = plan_peak_memory(plan, &peak_stage);
    const char *unit = peak >= (1L << 30) ? "GiB" : "MiB";
    double unit_bytes = peak >= (1L << 30) ? (double)(1L << 30) : (double)(1L << 20);
#define MEM(bytes) ((double)(bytes) / unit_bytes)

    fprintf(out, "\nstage  layers       params    weights  grads  optim  activations        stash   work  total  "
                 " drift  drifted  busy\n");
    fprintf(out, "                                %s     %s    %s    %s (slots x each)  %s    %s    %s  "
                 "  bound   share\n", unit, unit, unit, unit, unit, unit, unit);
    for (int s = 0; s < plan->stages; s++) {
        const StagePlan *sp = &plan->stage[s];
        char layers[32], acts[40];
        stage_layers_label(sp, layers, sizeof layers);
        if (sp->recompute) // slots of inputs, and the one workspace
            snprintf(acts, sizeof acts, "%6.2f (%d x %.2f + %.2f)", MEM(sp->mem_acts), sp->slots,
                     MEM(sp->keep_bytes), MEM(sp->act_bytes));
        else
            snprintf(acts, sizeof acts, "%6.2f (%d x %.2f)", MEM(sp->mem_acts), sp->slots, MEM(sp->act_bytes));
        fprintf(out, "%5d  %-12s %7.1fM  %6.2f %6.2f %6.2f  %-18s %5.2f %6.2f %6.2f   %4d %7.1f%% %5.1f%%\n", s,
                layers, sp->params / 1e6, MEM(sp->mem_weights), MEM(sp->mem_grads), MEM(sp->mem_optim),
                acts, MEM(sp->mem_stash), MEM(sp->mem_work), MEM(sp->mem_total), drift_bound(t, s),
                100 * rep->drift_share[s], 100 * sim->steady_busy[t->stage_device[s]]);
    }
    if (t->chunks > 1)
        explain_devices(out, plan, t, unit, unit_bytes);
    if (plan->vocab_split > 0)
        fprintf(out, "vocabulary split (%s): rows [0, %ld) of the LM head and the final LayerNorm on stage %d (hA), "
                "rows [%ld, %d) on stage %d (headB)\n", cfg->vocab_split > 0 ? "vocab_split" : "automatic",
                plan->vocab_split, plan->stages - 2, plan->vocab_split, cfg->vocab, plan->stages - 1);
    long all_stages = 0;
    for (int s = 0; s < plan->stages; s++)
        all_stages += plan->stage[s].mem_total;
    if (t->chunks > 1)
        peak = plan_peak_device_memory(plan, &peak_stage);
    const char *fullest = t->chunks > 1 ? "device" : "stage";
    if (cfg->machine == MACHINE_CPU)
        fprintf(out, "memory: the %d stages together %.2f %s of this machine's %.2f GiB (%.3g bytes; one process), "
                "the fullest %s %d at %.2f %s\n", plan->stages, MEM(all_stages), unit, gib(cfg->device_memory),
                cfg->device_memory, fullest, peak_stage, MEM(peak), unit);
    else
        fprintf(out, "memory: fullest %s %d at %.2f %s of the device's %.2f GiB (%.3g bytes); the %d stages "
                "together %.2f %s (one device running them all)\n", fullest, peak_stage, MEM(peak), unit,
                gib(cfg->device_memory), cfg->device_memory, plan->stages, MEM(all_stages), unit);
    fprintf(out, "drift: stage s crosses at most ceil((p-s-1)/K) optimizer updates between a micro-batch's "
                 "forward and backward (PACI; 0 for synchronous schedules, PipeDream stashes weights)\n");
    if (plan->recompute)
        explain_recompute(out, cfg, plan, unit, unit_bytes);
    if (cfg->accumulate == ACCUMULATE_PAIRWISE)
        fprintf(out, "accumulate pairwise: each backward's gradient is computed alone and the window's %d are "
                "added as a binary tree, as the replicas' reduction adds theirs (under gpipe and 1f1b, D "
                "replicas of window K give the bits of window D K when both are powers of two); the grads "
                "column holds %d more gradient buffers per stage; CPU only\n", cfg->window,
                pr_pairwise_buffers(cfg->window));
    if (cfg->delay_correction == DELAY_PREDICT)
        explain_prediction(out, cfg, plan, t);
    if (cfg->delay_correction == DELAY_NESTEROV)
        explain_nesterov(out, cfg);
    if (cfg->delay_correction == DELAY_DC_ASGD)
        explain_dc_asgd(out, cfg, plan, t);
    if (replicas > 1)
        explain_allreduce(out, cfg, plan);
    if (replicas > 1 && cfg->compression == COMPRESSION_DGC)
        explain_compression(out, cfg, plan);

    char bubble[1400];
    sim_bubble_phrase(view, bubble, sizeof bubble);
    fprintf(out, "\npredicted (%s; the file's first %ld steps simulated, the bubble and busy columns their "
                 "steady state, stage imbalance included):\n", view->model, sim->steps);
    fprintf(out, "  step time %.4g s, %.4g tokens/s, %s\n", sim->step_time, sim->tokens_per_s, bubble);
    if (replicas > 1)
        fprintf(out, "  whole job: %d pipelines x %.4g tokens/s = %.4g tokens/s on %d GPUs (per pipeline: the step "
                     "time includes each stage's allreduce; bubble and busy count compute only)\n",
                replicas, sim->tokens_per_s, replicas * sim->tokens_per_s, replicas * t->devices);

    explain_schedules(out, cfg, view, unit, unit_bytes);
#undef MEM
}

enum { EXPLAIN_TOP_OPS = 5 }; /* ops shown per stage */

/* Larger total first; the op's number breaks ties, so the table is stable. */
static int by_total_descending(const void *a, const void *b)
{
    const ProfileOp *x = *(const ProfileOp *const *)a, *y = *(const ProfileOp *const *)b;
    if (x->total != y->total)
        return x->total < y->total ? 1 : -1;
    return x->index - y->index;
}

void inspect_op_profile(FILE *out, const Plan *plan, const OpProfile *ops, const char *path)
{
    if (!ops || ops->n_ops == 0)
        return;
    fprintf(out, "\nmeasured ops (%s): the %d most expensive of each stage, as shares of the stage's "
                 "compute time\n(the wall time of its fwd, bwd and step instructions)\n", path, EXPLAIN_TOP_OPS);
    const ProfileOp **sorted = xmalloc((size_t)ops->n_ops * sizeof *sorted);
    for (int s = 0; s < plan->stages; s++) {
        int n = 0;
        double timed = 0;
        for (int i = 0; i < ops->n_ops; i++)
            if (ops->ops[i].stage == s) {
                sorted[n++] = &ops->ops[i];
                timed += ops->ops[i].total;
            }
        if (n == 0) {
            fprintf(out, "  stage %d: no op lines\n", s);
            continue;
        }
        qsort(sorted, (size_t)n, sizeof *sorted, by_total_descending);
        // Without a compute line the shares are of the ops' own sum.
        double compute = ops->compute[s] > 0 ? ops->compute[s] : timed;
        fprintf(out, "  stage %d: %d ops, %.4g s of compute%s; the ops account for %.1f%% of it\n", s, n,
                compute, ops->compute[s] > 0 ? "" : " (no compute line: the ops' sum)",
                compute > 0 ? 100 * timed / compute : 0.0);
        fprintf(out, "     share     seconds      calls  op\n");
        for (int k = 0; k < n && k < EXPLAIN_TOP_OPS; k++) {
            const ProfileOp *op = sorted[k];
            fprintf(out, "    %5.1f%%  %10.4g  %9ld  %s %s: %s\n", compute > 0 ? 100 * op->total / compute : 0.0,
                    op->total, op->calls, op->section, op->name, op->what);
        }
    }
    free(sorted);
}

/* ---- --emit schedule ------------------------------------------------------------------- */

/* One instruction as a short token: F3/B3 compute (B3 and W3 a zero-bubble backward's two
 * parts), ra3/sa3 activations in and out, rg3/sg3 gradients in and out, S step; @j and >j name
 * PipeDream stash slots. */
static int instr_token(char *buf, size_t size, paci_instr in)
{
    switch (in.op) {
    case PACI_OP_RECV_ACT: return snprintf(buf, size, "ra%lld", (long long)in.mb);
    case PACI_OP_FWD:
        return in.aux ? snprintf(buf, size, "F%lld+%d", (long long)in.mb, in.aux) : snprintf(buf, size, "F%lld", (long long)in.mb);
    case PACI_OP_SEND_ACT: return snprintf(buf, size, "sa%lld", (long long)in.mb);
    case PACI_OP_RECV_GRAD: return snprintf(buf, size, "rg%lld", (long long)in.mb);
    case PACI_OP_BWD:
        return in.aux ? snprintf(buf, size, "B%lld@%d", (long long)in.mb, in.aux - 1) : snprintf(buf, size, "B%lld", (long long)in.mb);
    case PACI_OP_SEND_GRAD: return snprintf(buf, size, "sg%lld", (long long)in.mb);
    case PACI_OP_STEP: return in.aux ? snprintf(buf, size, "S>%d", in.aux - 1) : snprintf(buf, size, "S");
    case PACI_OP_BWD_B: return snprintf(buf, size, "B%lld", (long long)in.mb);
    case PACI_OP_BWD_W: return snprintf(buf, size, "W%lld", (long long)in.mb);
    }
    return snprintf(buf, size, "?%d", in.op);
}

/* With chunks, a token names its stage: F3.5 is micro-batch 3's forward on stage 5. */
static int staged_token(char *buf, size_t size, paci_instr in, bool chunks)
{
    int len = instr_token(buf, size, in);
    if (chunks && len > 0 && (size_t)len < size)
        len += snprintf(buf + len, size - (size_t)len, ".%d", in.stage);
    return len;
}

/* Prints a run of instructions after `label`, wrapped at 100 columns. */
static void print_part(FILE *out, const char *label, const paci_instr *instrs, long n, bool chunks)
{
    enum { WIDTH = 100, INDENT = 16 };
    if (n == 0)
        return;
    int col = fprintf(out, "    %-*s ", INDENT - 5, label); /* a long label keeps a space after it */
    for (long i = 0; i < n; i++) {
        char tok[32];
        int len = staged_token(tok, sizeof tok, instrs[i], chunks);
        if (col + 1 + len > WIDTH) {
            fprintf(out, "\n%*s", INDENT, "");
            col = INDENT;
        } else if (i > 0) {
            fputc(' ', out);
            col++;
        }
        fputs(tok, out);
        col += len;
    }
    fputc('\n', out);
}

void inspect_listing(FILE *out, const Config *cfg, const paci_table *t)
{
    fprintf(out, "# %s schedule: %d stages, window %d, %d steps in %d segment%s of %d steps, channel capacity %d\n",
            paci_schedule_name(t->schedule), t->stages, t->window, t->total_steps, paci_segments(t),
            paci_segments(t) == 1 ? "" : "s", t->segment_steps, t->channel_capacity);
    fprintf(out, "# F3/B3 forward/backward of micro-batch 3; ra3/sa3 receive/send its activation; "
                 "rg3/sg3 its gradient;\n"
                 "# S optimizer step. Slot = mb mod slots. Body micro-batches advance by %d per repetition.\n",
            t->window);
    if (t->schedule == PACI_SCHED_PIPEDREAM)
        fprintf(out, "# B3@j: backward with the weights in stash slot j; S>j: save the live weights into stash "
                     "slot j first (slots advance by one per repetition).\n");
    if (cfg->delay_correction == DELAY_PREDICT)
        fprintf(out, "# F3+d: forward on the weights predicted d optimizer steps ahead (delay_correction predict).\n");
    if (cfg->delay_correction == DELAY_DC_ASGD)
        fprintf(out, "# F3+d: its backward comes d optimizer steps later; its gradient is corrected for them "
                     "(delay_correction dc-asgd).\n");
    if (t->warm_steps > 0)
        fprintf(out, "# warm start: steps [0, %d) under %s, then %s; the pipeline drains at step %d.\n",
                t->warm_steps, paci_schedule_name(t->warm_schedule), paci_schedule_name(t->schedule), t->warm_steps);
    if (t->chunks > 1)
        fprintf(out, "# %d devices of %d chunks (placement %s), one list a device: F3.5 is micro-batch 3's forward on "
                     "stage 5.\n", t->devices, t->chunks, t->placement == PACI_PLACEMENT_V ? "v" : "loop");
    fprintf(out, "# %d instructions in the table.\n", t->n_instrs);
    for (int p = 0; p < t->n_programs; p++) {
        const paci_program *pg = &t->program[p];
        if (t->warm_steps > 0)
            fprintf(out, "\nprogram %d: %s, segments of %d step%s%s\n", p, paci_schedule_name(pg->schedule), pg->steps,
                    pg->steps == 1 ? "" : "s", pg->schedule == t->schedule ? "" : " (the warm start)");
        else
            fprintf(out, "\nprogram %d: segments of %d step%s%s\n", p, pg->steps, pg->steps == 1 ? "" : "s",
                    t->n_programs == 2 ? (p == 0 ? "" : " (the last, shorter segment)") : "");
        bool chunks = t->chunks > 1;
        for (int d = 0; d < t->devices; d++) {
            const paci_stage_program *sp = &pg->device[d];
            if (chunks) {
                fprintf(out, "  device %d:", d);
                for (int c = 0; c < t->chunks; c++) {
                    int s = paci_placed_stage(t->placement, t->devices, d, c);
                    fprintf(out, "%s stage %d %d slot%s", c ? "," : "", s, t->slots[s], t->slots[s] == 1 ? "" : "s");
                }
            } else {
                fprintf(out, "  stage %d: %d slot%s", d, t->slots[d], t->slots[d] == 1 ? "" : "s");
            }
            if (!chunks && t->stash[d])
                fprintf(out, ", %d stashed versions", t->stash[d]);
            fputc('\n', out);
            print_part(out, "prologue", t->instrs + sp->prologue, sp->n_prologue, chunks);
            char label[32];
            snprintf(label, sizeof label, "body x%d", pg->body_reps);
            print_part(out, label, t->instrs + sp->body, sp->n_body, chunks);
            print_part(out, "epilogue", t->instrs + sp->epilogue, sp->n_epilogue, chunks);
        }
    }
    (void)cfg;
}

/* ---- --emit timeline ----------------------------------------------------------------- */

/* Per-stage compute events in time order (they are appended in order per stage). */
typedef struct StageEvents {
    const SimEvent **items;
    long n;
} StageEvents;

/* Per device: with chunks its row holds every stage it runs. */
static void split_by_stage(const SimResult *sim, int stages, StageEvents *se)
{
    for (int s = 0; s < stages; s++)
        se[s] = (StageEvents){xmalloc((size_t)(sim->n_events + 1) * sizeof(SimEvent *)), 0};
    for (long i = 0; i < sim->n_events; i++) {
        const SimEvent *e = &sim->events[i];
        int d = sim->stage_device[e->stage];
        if (is_drawn(e->op) && e->end > e->start)
            se[d].items[se[d].n++] = e;
    }
}

/* The chunk a stage is of its device (both placements: stage / p). */
static int stage_chunk(const SimResult *sim, int stage)
{
    return stage / sim->devices;
}

static void free_stage_events(StageEvents *se, int stages)
{
    for (int s = 0; s < stages; s++)
        free(se[s].items);
}

static char op_char(int op)
{
    return op == PACI_OP_FWD                          ? 'F'
           : op == PACI_OP_BWD || op == PACI_OP_BWD_B ? 'B'
           : op == PACI_OP_BWD_W                      ? 'W'
           : op == SIM_OP_ALLREDUCE                   ? 'A'
                                                      : 'S';
}

/* The views' title: what is drawn, and the one bubble figure. */
static void view_title(char *buf, size_t size, const Config *cfg, const SimView *v)
{
    char bubble[1400];
    sim_bubble_phrase(v, bubble, sizeof bubble);
    char stages[64];
    if (config_chunks(cfg) > 1)
        snprintf(stages, sizeof stages, "%d devices x %d chunks", config_devices(cfg), config_chunks(cfg));
    else
        snprintf(stages, sizeof stages, "%d stages", cfg->stages);
    if (v->fill_drain)
        snprintf(buf, size, "%s, %s, window %d: a run of %ld step%s alone, %.4g s; %s",
                 paci_schedule_name(cfg->schedule), stages, cfg->window, v->sim->steps,
                 v->sim->steps == 1 ? "" : "s", v->to - v->from, bubble);
    else
        snprintf(buf, size, "%s, %s, window %d: steps %ld-%ld of %ld, %.4g s; %s",
                 paci_schedule_name(cfg->schedule), stages, cfg->window, v->first, v->last, v->run_steps,
                 v->to - v->from, bubble);
}

/* A stage's busy share as the views print it: over the steady state (--explain's busy column),
 * or over the whole run of --fill-drain. */
static double view_busy(const SimView *v, int s)
{
    return v->fill_drain ? v->sim->busy[s] : v->sim->steady_busy[s];
}

void inspect_timeline(FILE *out, const Config *cfg, const SimView *view)
{
    enum { COLUMNS = 96 };
    const SimResult *sim = view->sim;
    int stages = sim->devices;
    bool chunks = sim->devices < sim->stages;
    double span = view->to - view->from;
    double bucket = span / COLUMNS;
    StageEvents se[PACI_MAX_STAGES];
    split_by_stage(sim, stages, se);
    char title[1600];
    view_title(title, sizeof title, cfg, view);
    fprintf(out, "%s\n", title);
    fprintf(out, "       |");
    for (int c = 0; c < COLUMNS; c++)
        fputc(c % 10 == 0 ? '+' : '-', out);
    fprintf(out, "|  busy%s\n", view->fill_drain ? "" : " (steady state)");
    for (int s = 0; s < stages; s++) {
        fprintf(out, chunks ? "dev %2d |" : "stage%2d|", s);
        long k = 0;
        for (int c = 0; c < COLUMNS; c++) {
            /* the instruction running at the middle of the column, else idle; with chunks an
             * odd chunk's in lower case */
            double mid = view->from + (c + 0.5) * bucket;
            while (k < se[s].n && se[s].items[k]->end <= mid)
                k++;
            char ch = '.';
            if (k < se[s].n && se[s].items[k]->start <= mid) {
                ch = op_char(se[s].items[k]->op);
                if (chunks && stage_chunk(sim, se[s].items[k]->stage) % 2 == 1)
                    ch = (char)(ch - 'A' + 'a');
            }
            fputc(ch, out);
        }
        fprintf(out, "| %5.1f%%\n", 100 * view_busy(view, s));
    }
    char from[32];
    int width = snprintf(from, sizeof from, "%.4g s", view->from);
    fprintf(out, "       %s%*s%.4g s\n", from, COLUMNS - width - 2, "", view->to);
    fprintf(out, "legend: F forward, B backward%s, S optimizer step, . idle (waiting for a neighbour)%s\n",
            config_splits_backward(cfg) ? " (its input gradients), W its weight gradients" : "",
            config_replicas(cfg) > 1 ? ", A gradient allreduce among the replicas" : "");
    if (chunks)
        fprintf(out, "a row per device; capitals: its even chunks (stages 0-%d, %d-%d, ...), lower case: its odd ones\n",
                stages - 1, 2 * stages, 3 * stages - 1);
    free_stage_events(se, stages);
}

/* ---- --emit svg ------------------------------------------------------------------------ */

/* The picture's frame in pixels: a row per stage between a title and the time axis. */
enum { SVG_LEFT = 70, SVG_RIGHT = 20, SVG_TOP = 40, SVG_ROW = 30, SVG_WIDTH = 1200 };

/* One row per stage, a rectangle per instruction coloured by its kind, clipped to the view's
 * window of time; forwards are labelled F<micro-batch>, backwards by the micro-batch. */
static void svg_stage_rows(StrBuf *sb, const Config *cfg, const SimView *view, double scale)
{
    const SimResult *sim = view->sim;
    bool chunks = sim->devices < sim->stages;
    for (int s = 0; s < sim->devices; s++) {
        int y = SVG_TOP + s * SVG_ROW;
        emit_line(sb, "<text x=\"8\" y=\"%d\">%s %d</text>", y + SVG_ROW / 2 + 4, chunks ? "device" : "stage", s);
        emit_line(sb, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#e8e8e8\"/>", SVG_LEFT,
                  y + 2, SVG_WIDTH - SVG_LEFT - SVG_RIGHT, SVG_ROW - 4);
    }
    for (long i = 0; i < sim->n_events; i++) {
        const SimEvent *e = &sim->events[i];
        if (!is_drawn(e->op) || e->end <= e->start || e->end <= view->from || e->start >= view->to)
            continue;
        const char *fill = e->op == PACI_OP_FWD                            ? svg_colors[SVG_BLUE]
                           : e->op == PACI_OP_BWD || e->op == PACI_OP_BWD_B ? svg_colors[SVG_ORANGE]
                           : e->op == PACI_OP_BWD_W                         ? svg_colors[SVG_YELLOW]
                           : e->op == SIM_OP_ALLREDUCE                      ? svg_colors[SVG_PURPLE]
                                                                            : svg_colors[SVG_GREEN];
        double a = e->start > view->from ? e->start : view->from, b = e->end < view->to ? e->end : view->to;
        double x = SVG_LEFT + (a - view->from) * scale, w = (b - a) * scale;
        int y = SVG_TOP + sim->stage_device[e->stage] * SVG_ROW + 2;
        /* with chunks an odd chunk's instructions are drawn darker, and each names its stage */
        bool odd = chunks && stage_chunk(sim, e->stage) % 2 == 1;
        char stage[24] = "";
        if (chunks)
            snprintf(stage, sizeof stage, " (stage %d)", e->stage);
        emit_line(sb, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\" stroke=\"%s\" "
                      "stroke-width=\"0.5\"%s><title>%s %ld%s: %.4g-%.4g s</title></rect>",
                  x, y, w, SVG_ROW - 4, fill, odd ? "black" : "white", odd ? " fill-opacity=\"0.6\"" : "",
                  e->op == SIM_OP_ALLREDUCE ? "allreduce" : paci_op_name(e->op), e->mb, stage, e->start, e->end);
        if (e->op != PACI_OP_STEP && e->op != SIM_OP_ALLREDUCE && w >= 16)
            emit_line(sb, "<text x=\"%.2f\" y=\"%d\" fill=\"%s\" text-anchor=\"middle\">%s%ld</text>",
                      x + w / 2, y + SVG_ROW / 2 + 2, odd ? "black" : "white", e->op == PACI_OP_FWD ? "F" : "", e->mb);
    }
}

/* The time axis (ten ticks, milliseconds from the run's start) and the legend of the kinds
 * this configuration runs. */
static void svg_time_axis(StrBuf *sb, const Config *cfg, const SimView *view)
{
    double span = view->to - view->from;
    int axis = SVG_TOP + view->sim->devices * SVG_ROW + 8;
    emit_line(sb, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>", SVG_LEFT, axis,
              SVG_WIDTH - SVG_RIGHT, axis);
    for (int k = 0; k <= 10; k++) {
        double x = SVG_LEFT + (SVG_WIDTH - SVG_LEFT - SVG_RIGHT) * k / 10.0;
        emit_line(sb, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"black\"/>", x, axis, x,
                  axis + 5);
        emit_line(sb, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.4g ms</text>", x, axis + 18,
                  (view->from + span * k / 10.0) * 1e3);
    }
    int ly = axis + 40;
    const struct { const char *name, *fill; } legend[] = {
        {"forward", svg_colors[SVG_BLUE]}, {"backward", svg_colors[SVG_ORANGE]},
        {"optimizer step", svg_colors[SVG_GREEN]}, {"idle", "#e8e8e8"},
        {"gradient allreduce", svg_colors[SVG_PURPLE]}, {"weight gradients (W)", svg_colors[SVG_YELLOW]},
    };
    for (int k = 0, x = SVG_LEFT; k < 6; k++) {
        if ((k == 4 && config_replicas(cfg) == 1) || (k == 5 && !config_splits_backward(cfg)))
            continue;
        x += k ? 150 : 0;
        emit_line(sb, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"14\" fill=\"%s\"/>", x, ly - 11,
                  legend[k].fill);
        emit_line(sb, "<text x=\"%d\" y=\"%d\">%s</text>", x + 20, ly, legend[k].name);
    }
    if (view->sim->devices < view->sim->stages)
        emit_line(sb, "<text x=\"%d\" y=\"%d\">a row per device; its odd chunks' stages (%d-%d, ...) darker "
                      "with black labels; hover a box for its stage</text>", SVG_LEFT, ly + 20, view->sim->devices,
                  2 * view->sim->devices - 1);
}

void inspect_svg(FILE *out, const Config *cfg, const SimView *view)
{
    double span = view->to - view->from > 0 ? view->to - view->from : 1;
    char title[1600];
    view_title(title, sizeof title, cfg, view);
    StrBuf sb = {0};
    svg_open(&sb, SVG_WIDTH, SVG_TOP + view->sim->devices * SVG_ROW + (view->sim->devices < view->sim->stages ? 90 : 70));
    emit_line(&sb, "<text x=\"%d\" y=\"20\" font-size=\"14\">%s</text>", SVG_LEFT, title);
    svg_stage_rows(&sb, cfg, view, (SVG_WIDTH - SVG_LEFT - SVG_RIGHT) / span);
    svg_time_axis(&sb, cfg, view);
    svg_close(&sb);
    fputs(sb.data, out);
    sb_free(&sb);
}

/* ---- --emit trace ------------------------------------------------------------------------ */

/* Chrome trace JSON: one thread per stage, complete events in microseconds. */
void inspect_trace(FILE *out, const Config *cfg, const SimResult *sim)
{
    fprintf(out, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    fprintf(out, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"name\": \"pacic %s (simulated)\"}}",
            paci_schedule_name(cfg->schedule));
    bool chunks = sim->devices < sim->stages;
    for (int s = 0; s < sim->devices; s++)
        fprintf(out, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                     "\"args\": {\"name\": \"%s %d\"}}", s, chunks ? "device" : "stage", s);
    for (long i = 0; i < sim->n_events; i++) {
        const SimEvent *e = &sim->events[i];
        if (!is_drawn(e->op))
            continue;
        if (e->op == PACI_OP_STEP)
            fprintf(out, ",\n{\"name\": \"step\", \"cat\": \"step\"");
        else if (e->op == SIM_OP_ALLREDUCE)
            fprintf(out, ",\n{\"name\": \"allreduce\", \"cat\": \"allreduce\"");
        else
            fprintf(out, ",\n{\"name\": \"%c%ld\", \"cat\": \"%s\"", op_char(e->op), e->mb, paci_op_name(e->op));
        fprintf(out, ", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"mb\": %ld",
                sim->stage_device[e->stage], e->start * 1e6, (e->end - e->start) * 1e6, e->mb);
        if (chunks)
            fprintf(out, ", \"stage\": %d", e->stage);
        fprintf(out, "}}");
    }
    fprintf(out, "\n]}\n");
}
