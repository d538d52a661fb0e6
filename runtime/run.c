/* run.c: the `run` command: flags, the training loop with evaluation and checkpoints at
 * drain boundaries, logging and metrics, sampling, and the measured trace. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bpe.h"
#include "prt.h"

static const char usage[] =
    "usage: run [options]\n"
    "  --steps N        stop after N optimizer steps (at most the compiled total)\n"
    "  --resume         continue from the latest checkpoint in the checkpoint folder, on the\n"
    "                   lr schedule the run started with (its length and warmup, which the\n"
    "                   checkpoint records: a program recompiled with other steps keeps it,\n"
    "                   and after its end the lr stays at its final value)\n"
    "  --reschedule     with --resume: take the program's lr schedule instead, from the\n"
    "                   resumed step on\n"
    "  --overwrite      start anew in a checkpoint folder that holds checkpoints (of this\n"
    "                   program or another); they are deleted once this run saves its first\n"
    "                   (without it, run refuses to start there)\n"
    "  --init FILE      start from an llm.c GPT-2 checkpoint (version 3), a Hugging Face\n"
    "                   GPT-2 folder (config.json, model.safetensors) or a .safetensors file\n"
    "  --sample N       print N tokens from the latest checkpoint (or the initial weights):\n"
    "                   bytes for a 256-token vocabulary, else token ids; then a newline\n"
    "  --prompt TEXT    with --sample: continue TEXT (printed first; a byte-level vocabulary,\n"
    "                   or --bpe; the last context - 1 tokens of a longer one)\n"
    "  --temperature T  with --sample: divide the logits by T (default 1; 0: always the most\n"
    "                   likely token)\n"
    "  --top-k K        with --sample: draw from the K most likely tokens (default 0: all)\n"
    "  --seed S         with --sample: the draw's seed, an integer >= 0; without it one comes\n"
    "                   from the clock and is said on stderr (--seed S repeats it)\n"
    "  --tokenizer FILE with --sample: decode the tokens with llm.c's tokenizer file\n"
    "                   (gpt2_tokenizer.bin)\n"
    "  --bpe DIR        with --sample: GPT-2's BPE files in DIR (vocab.json and merges.txt, or\n"
    "                   encoder.json and vocab.bpe) encode --prompt and decode the tokens\n"
    "  --export hf DIR  write the latest checkpoint (or the initial weights) as a Hugging Face\n"
    "                   GPT-2 folder DIR, which must be new or empty\n"
    "  --data FILE      training tokens (llm.c format)\n"
    "  --val FILE       validation tokens\n"
    "  --ckpt-dir DIR   checkpoint folder\n"
    "  --no-checkpoint  save no checkpoint, not even at the end or on a signal (trial runs)\n"
    "  --metrics FILE   one JSON line per step and per evaluation (docs/run.md);\n"
    "                   `pacic plot FILE -o loss.svg` draws the loss curves\n"
    "  --trace FILE     Chrome trace of the measured instructions\n"
    "  --profile-out FILE  measured costs, the file `pacic --profile` reads: per stage\n"
    "                   the mean thread CPU seconds per instruction, per link per message,\n"
    "                   and per op of the generated code its calls and seconds\n"
    "  --device D       cpu or cuda (default: cuda when built with it and a GPU answers)\n"
    "  --threads N      cores to use (default: all); each stage's products and loops get\n"
    "                   max(1, N / stages) of them\n"
    "  --blas-threads N cores per stage for its products and loops, whatever the stage\n"
    "                   count (instead of --threads)\n"
    "  --peer-timeout S seconds a stage waits for a neighbour before giving up (default 600;\n"
    "                   0: forever); time the process spent stopped (Ctrl-Z) does not count\n"
    "  --connect-timeout S  seconds to find rank 0 and the neighbours when one process runs\n"
    "                   each stage (default 120)\n"
    "  --master-port P  rank 0's bootstrap port (default: MASTER_PORT, else 29500)\n"
    "  --quiet          print errors only\n"
    "  --help           this text\n"
    "SIGINT or SIGTERM: finish the optimizer step in progress, save a checkpoint there, exit 0\n"
    "(a second one stops at once); --resume continues from it.\n";

/* Live state of the log, touched by the last stage's thread during a segment and by the
 * main thread between segments. */
typedef struct logger {
    FILE *metrics;
    int tty;
    int64_t first_step;  /* run->step when training began in this process */
    int64_t every;       /* plain-line period when stdout is not a terminal */
    double begin;
    double last_loss;
} logger;

/* The tokens trained on after `step` steps: every replica's, the job's count, as --explain
 * predicts its rate. */
static int64_t tokens_after(const pr_run *run, int64_t step)
{
    return step * run->K * run->B * run->T * run->replicas;
}

static double tokens_per_s(const pr_run *run, int64_t step, double now, const logger *lg)
{
    double seconds = now - lg->begin;
    return seconds > 0 ? (double)(tokens_after(run, step) - tokens_after(run, lg->first_step)) / seconds : 0.0;
}

/* A stage's compute seconds: forwards, backwards (a zero-bubble one's B's and W's), steps. */
static double compute_seconds(const pr_stage_rt *st)
{
    return st->busy[PACI_OP_FWD] + st->busy[PACI_OP_BWD] + st->busy[PACI_OP_BWD_B] + st->busy[PACI_OP_BWD_W] +
           st->busy[PACI_OP_STEP];
}

/* Busy fraction of a stage: compute time over wall time. */
static double busy_fraction(const pr_stage_rt *st, double wall)
{
    return wall > 0 ? compute_seconds(st) / wall : 0.0;
}

/* `"key": value, ` in the metrics; JSON has no NaN or infinity, so a non-finite value is null. */
static void metric_number(FILE *metrics, const char *key, const char *format, double value)
{
    fprintf(metrics, "\"%s\": ", key);
    if (isfinite(value))
        fprintf(metrics, format, value);
    else
        fprintf(metrics, "null");
    fprintf(metrics, ", ");
}

static void log_step(pr_run *run, int64_t step, double loss, double lr, double grad_norm)
{
    logger *lg = run->user;
    double now = pr_now(), tps = tokens_per_s(run, step, now, lg);
    lg->last_loss = loss;
    if (lg->metrics) {
        fprintf(lg->metrics, "{\"step\": %lld, ", (long long)step);
        metric_number(lg->metrics, "loss", "%.6f", loss); // a skipped step's loss may be NaN
        fprintf(lg->metrics, "\"lr\": %.6g, ", lr);
        metric_number(lg->metrics, "grad_norm", "%.9g", grad_norm);
        double b_simple;
        if (pr_run_noise_scale(run, step, &b_simple)) // absent where not estimated; null while not > 0
            metric_number(lg->metrics, "noise_scale", "%.6g", b_simple > 0 ? b_simple : NAN);
        fprintf(lg->metrics, "\"tokens_per_s\": %.1f, \"busy\": [", tps);
        pthread_mutex_lock(&run->stats_mu);
        for (int s = 0; s < run->p; s++)
            fprintf(lg->metrics, "%s%.4f", s ? ", " : "", busy_fraction(&run->stage[s], now - lg->begin));
        fprintf(lg->metrics, "], \"drift\": [");
        for (int s = 0; s < run->p; s++)
            fprintf(lg->metrics, "%s%lld", s ? ", " : "", (long long)run->stage[s].drift_max);
        pthread_mutex_unlock(&run->stats_mu);
        fprintf(lg->metrics, "], \"tokens\": %lld}\n", (long long)tokens_after(run, step));
    }
    if (run->opt.quiet)
        return;
    int64_t total = run->opt.steps;
    double eta = tps > 0 ? (double)(total - step) * (double)(run->K * run->B * run->T) / tps : 0;
    if (lg->tty) {
        printf("\rstep %lld/%lld  loss %.4f  lr %.3g  %.0f tok/s  ETA %.0fs   ", (long long)step,
               (long long)total, loss, lr, tps, eta);
        fflush(stdout);
    } else if (step % lg->every == 0 || step == total) {
        printf("step %lld/%lld loss %.4f lr %.3g %.0f tok/s\n", (long long)step, (long long)total,
               loss, lr, tps);
        fflush(stdout);
    }
}

/* The checkpoint a run ends with. An untied head (any model with stages > 1) is not in
 * model.bin: llm.c reads that file alone, finds no head and uses wte in its place, so it
 * would evaluate another model; users are told where the head is and how to carry it. */
static void print_checkpoint(const pr_run *run, int after_newline)
{
    const logger *lg = run->user;
    printf("%scheckpoint %s/step_%08lld", lg && lg->tty && !after_newline ? "\n" : "",
           run->opt.ckpt_dir, (long long)run->step);
    if (run->prog->tied)
        printf(" (model.bin: llm.c's GPT-2 format)\n");
    else
        printf(" (its LM head is untied and kept in state.bin; llm.c reads only model.bin and would "
               "use wte as the head, a different model: run --export hf DIR writes a file that "
               "carries the head)\n");
    fflush(stdout);
}

/* Evaluation and checkpoints happen only between segments, where every stage has drained:
 * that is what makes a resumed run continue bit-identically. A stop requested by a signal
 * cuts the segment after the step in progress (pr_run_segment drains it), saves a
 * checkpoint there and returns 1. */
/* The stop by a signal said, with the checkpoint it left (rank 0, or the only process). */
static void report_stop(const pr_run *run)
{
    const logger *lg = run->user;
    if (run->opt.world > 1 && run->opt.rank != 0)
        return;
    fflush(stdout);
    const char *signal_name = pr_stop_signal() == SIGINT ? "SIGINT" : "SIGTERM";
    if (run->opt.no_checkpoint)
        fprintf(stderr, "%srun: stopped by %s after step %lld; no checkpoint (--no-checkpoint)\n",
                lg && lg->tty ? "\n" : "", signal_name, (long long)run->step);
    else
        fprintf(stderr, "%srun: stopped by %s after step %lld; checkpoint %s/step_%08lld "
                "(continue with --resume)\n", lg && lg->tty ? "\n" : "", signal_name, (long long)run->step,
                run->opt.ckpt_dir, (long long)run->step);
}

/* Replicas: the bytes replica r put into its stages' gradient exchanges per step, stages
 * summed, as the transport counted them where it wrote them (replicas.c); -1 when this
 * process does not hold replica r. */
static double exchange_dense(const pr_run *run)
{
    double n = 0.0;
    for (int s = 0; s < run->p; s++)
        n += (double)run->stage[s].code->n_params * sizeof(float);
    return n;
}

static double exchange_per_step(const pr_run *run, int r)
{
    const pr_run *of = run->replica_runs ? run->replica_runs[r] : r == run->replica ? run : NULL;
    if (!of)
        return -1;
    double total = 0.0;
    for (int s = 0; s < run->p; s++) {
        const pr_stage_rt *st = &of->stage[s];
        if (st->exchanges > 0)
            total += (double)st->exchange_bytes / (double)st->exchanges;
    }
    return total;
}

/* The gradient noise scale against the batch a step trains on (docs/run.md), in sequences
 * and tokens; a line only where the run estimates it. */
static void print_noise_scale(pr_run *run)
{
    double b_simple;
    if (!pr_run_noise_scale(run, -1, &b_simple))
        return;
    int64_t batch = run->K * run->B * run->replicas;
    if (b_simple > 0)
        printf("noise scale: B_simple %.*f sequences (%.0f tokens); the global batch is %lld sequences "
               "(%lld tokens) a step\n", b_simple < 100 ? 1 : 0, b_simple, b_simple * (double)run->T,
               (long long)batch, (long long)(batch * run->T));
    else
        printf("noise scale: not yet positive (the |G|^2 estimate's average is %s); the global batch "
               "is %lld sequences (%lld tokens) a step\n", isfinite(b_simple) ? "<= 0" : "not finite",
               (long long)batch, (long long)(batch * run->T));
}

/* Post-validation's cost, where the run's steps were post-validated: the steps rolled back
 * and redone (each ran its window again) and the memory kept to roll back. Every stage comes
 * to the same verdict, so the first this process runs counts for all; NULL: none was checked. */
static const pr_post_validation *post_validation_of(const pr_run *run)
{
    for (int s = 0; s < run->p; s++)
        if (run->stage[s].pv.kept && run->stage[s].pv.checked + run->stage[s].pv.waited > 0)
            return &run->stage[s].pv;
    return NULL;
}

static void print_post_validation(const pr_run *run)
{
    const pr_post_validation *pv = post_validation_of(run);
    if (!pv)
        return;
    printf("post-validation: %lld of %lld steps taken on trust rolled back and redone (%lld clipped, %lld not "
           "finite), %lld after those waiting for the norm; kept to roll back:",
           (long long)(pv->rolled_clip + pv->rolled_skip), (long long)pv->checked, (long long)pv->rolled_clip,
           (long long)pv->rolled_skip, (long long)pv->waited);
    for (int s = 0, shown = 0; s < run->p; s++)
        if (run->stage[s].pv.kept)
            printf("%s stage %d %.2f MiB", shown++ ? "," : "", s, (double)run->stage[s].pv.kept_bytes / (1 << 20));
    printf("\n");
}

static void metrics_post_validation(const pr_run *run, FILE *metrics)
{
    const pr_post_validation *pv = post_validation_of(run);
    if (!pv)
        return;
    fprintf(metrics, "{\"post_validation\": {\"steps_checked\": %lld, \"rolled_back_clipped\": %lld, "
            "\"rolled_back_not_finite\": %lld, \"steps_waited\": %lld, \"kept_bytes\": [", (long long)pv->checked,
            (long long)pv->rolled_clip, (long long)pv->rolled_skip, (long long)pv->waited);
    for (int s = 0; s < run->p; s++)
        fprintf(metrics, "%s%lld", s ? ", " : "", (long long)run->stage[s].pv.kept_bytes);
    fprintf(metrics, "]}}\n");
}

/* The run's closing lines: time, rate and losses; the noise scale; each stage's busy share,
 * drift and memory. */
static void print_summary(pr_run *run, double val_loss)
{
    const logger *lg = run->user;
    double wall = pr_now() - lg->begin;
    if (lg->tty)
        printf("\n");
    // A resumed run says the steps it ran, and which: the checkpoint's steps took their time before.
    if (lg->first_step > 0)
        printf("done: %lld steps (%lld to %lld) in %.1f s", (long long)(run->step - lg->first_step),
               (long long)lg->first_step + 1, (long long)run->step, wall);
    else
        printf("done: %lld steps in %.1f s", (long long)run->step, wall);
    printf(" (%.2f s in the pipeline, the rest evaluation and checkpoints), %.0f tokens/s; final train "
           "loss %.4f", run->train_time, tokens_per_s(run, run->step, pr_now(), lg), lg->last_loss);
    if (val_loss >= 0)
        printf(", val loss %.4f", val_loss);
    printf("\n");
    print_noise_scale(run);
    printf("busy:");
    for (int s = 0; s < run->p; s++)
        printf("%s stage %d %.0f%%", s ? "," : "", s, 100.0 * busy_fraction(&run->stage[s], wall));
    printf("\ndrift:");
    for (int s = 0; s < run->p; s++) {
        const pr_stage_rt *st = &run->stage[s];
        printf("%s stage %d max %lld (%.0f%% of micro-batches)", s ? "," : "", s,
               (long long)st->drift_max,
               st->backwards ? 100.0 * (double)st->drifting / (double)st->backwards : 0.0);
        if (st->drift_effective_max != st->drift_max)
            printf(" effective %lld (%s)", (long long)st->drift_effective_max,
                   st->recompute ? "recomputed forward" : "stashed weights");
    }
    printf("\nmemory:");
    int64_t held = 0;
    for (int s = 0, shown = 0; s < run->p; s++) {
        held += run->stage[s].arena_bytes;
        if (run->opt.world <= 1 || run->tab->stage_device[s] == run->opt.rank % run->devices)
            printf("%s stage %d %.2f MiB", shown++ ? "," : "", s,
                   (double)run->stage[s].arena_bytes / (1 << 20));
    }
    if (run->opt.world > 1) // what the process holds of the stages it does not run too
        printf(" (this process: %.2f MiB)\n", (double)held / (1 << 20));
    else
        printf(" (allocated by the runtime)\n");
    if (run->replicas > 1) { // the in-process sum, TCP and the device's transport count what they send
        printf("exchange: bytes sent per step by");
        for (int r = 0, shown = 0; r < run->replicas; r++)
            if (exchange_per_step(run, r) >= 0)
                printf("%s replica %d %.0f", shown++ ? "," : "", r, exchange_per_step(run, r));
        if (run->prog->dgc_density > 0)
            printf(" (compression dgc, density %g; dense: %.0f)\n", run->prog->dgc_density,
                   exchange_dense(run));
        else
            printf(" (dense fp32 gradients)\n");
    }
    print_post_validation(run);
    if (run->dev->host_memory)
        printf("blas: OpenBLAS, %s kernels, %d thread%s a stage\n", pr_blas_kernels(),
               run->opt.blas_threads, run->opt.blas_threads == 1 ? "" : "s");
}

/* Between segments, where every stage has drained: the evaluation and the checkpoint due
 * (with one process per stage, rank 0 does them with every stage's state). 0, or -1 with err. */
static int between_segments(pr_run *run, int at_end, int stopped, double *val_loss, char *err)
{
    const pr_program *prog = run->prog;
    logger *lg = run->user;
    int want_eval = !stopped && run->val.tokens &&
                    ((prog->eval_every > 0 && run->step % prog->eval_every == 0) || at_end);
    int want_ckpt = !run->opt.no_checkpoint &&
                    ((prog->ckpt_every > 0 && run->step % prog->ckpt_every == 0) || at_end || stopped);
    if (run->opt.world > 1 && pr_gather_noise(run, err) != 0)
        return -1;
    if (run->opt.world > 1 && (want_eval || want_ckpt)) {
        if (pr_gather_stages(run, want_ckpt, err) != 0)
            return -1;
        if (run->opt.rank != 0)
            return 0;
    }
    if (want_eval) {
        *val_loss = pr_eval(run, &run->val, prog->eval_batches > 0 ? prog->eval_batches : 1);
        if (lg && lg->metrics) {
            // val_loss stays the last field, as scripts that read it with sed expect
            fprintf(lg->metrics, "{\"step\": %lld, \"tokens\": %lld, \"val_loss\": ", (long long)run->step,
                    (long long)tokens_after(run, run->step));
            if (isfinite(*val_loss))
                fprintf(lg->metrics, "%.6f}\n", *val_loss);
            else
                fprintf(lg->metrics, "null}\n");
        }
        if (!run->opt.quiet)
            printf("%sstep %lld: val loss %.4f\n", lg && lg->tty ? "\n" : "", (long long)run->step, *val_loss);
    }
    if (want_ckpt && pr_ckpt_save(run, run->opt.ckpt_dir, err) != 0)
        return -1;
    if (want_ckpt && (at_end || stopped) && !run->opt.quiet)
        print_checkpoint(run, want_eval);
    return 0;
}

/* Evaluation and checkpoints happen only between segments, where every stage has drained:
 * that is what makes a resumed run continue bit-identically. A stop requested by a signal
 * cuts the segment after the step in progress (pr_run_segment drains it), saves a
 * checkpoint there and returns 1. */
int pr_train(pr_run *run, char *err)
{
    const paci_table *tab = run->tab;
    int32_t seg = paci_segment_of_step(tab, run->step);
    double val_loss = -1.0;
    int stopped = 0;
    while (run->step < run->opt.steps && !stopped) {
        int64_t segment_end = paci_segment_end(tab, seg);
        run->stop_at = run->opt.steps < segment_end ? run->opt.steps : PR_NO_STOP;
        pr_run_segment(run, seg++);
        int at_end = run->step == run->opt.steps;
        stopped = !at_end && run->step < segment_end;
        if (between_segments(run, at_end, stopped, &val_loss, err) != 0)
            return -1;
    }
    if (stopped) {
        report_stop(run);
        return 1;
    }
    // The summary comes from the process that runs the last stage (it has the losses).
    if (run->user && !run->opt.quiet && (run->opt.world <= 1 || run->opt.rank == run->tab->stage_device[run->p - 1]))
        print_summary(run, val_loss);
    return 0;
}

static double mean_cpu(const pr_stage_rt *st, int op)
{
    return st->ops[op] ? st->cpu[op] / (double)st->ops[op] : 0.0;
}

/* A string as the profile quotes it (an op's description, the source path): no quote,
 * backslash or control character, so a newline in a folder name cannot end a comment line. */
static void write_quoted(FILE *f, const char *text)
{
    fputc('"', f);
    for (const char *c = text ? text : ""; *c; c++)
        fputc(*c == '"' || *c == '\\' ? '\'' : (unsigned char)*c < 0x20 ? ' ' : *c, f);
    fputc('"', f);
}

/* The measured costs as a profile (format version 2, compiler/simulate.c): a stage's compute
 * ops, and a link's message cost as the copy in plus the copy out, averaged over the two
 * directions; then each stage's compute wall time and its generated code's per-op times. */
static int write_profile(const pr_run *run, const char *path, char *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return pr_fail(err, "%s: cannot write profile: %s", path, strerror(errno));
    fputs("# measured by run (", f);
    write_quoted(f, run->prog->source);
    fprintf(f, ") on the %s over %lld steps\n", run->dev->host_memory ? "CPU" : "GPU",
            (long long)run->steps_this_process);
    fprintf(f, "version 2\n");
    fprintf(f, "# stage S fwd F bwd B step P [w W]: mean thread CPU seconds per instruction (a zero-bubble "
               "backward's: its B's and its W's; w: its W's alone)\n");
    for (int s = 0; s < run->p; s++) {
        const pr_stage_rt *st = &run->stage[s];
        // backwards whole or as B and W (a warm start may run both kinds): their time over their count
        int64_t backwards = st->ops[PACI_OP_BWD] + st->ops[PACI_OP_BWD_B];
        double bwd_cpu = st->cpu[PACI_OP_BWD] + st->cpu[PACI_OP_BWD_B] + st->cpu[PACI_OP_BWD_W];
        fprintf(f, "stage %d fwd %.9g bwd %.9g step %.9g", s, mean_cpu(st, PACI_OP_FWD),
                backwards ? bwd_cpu / (double)backwards : 0.0, mean_cpu(st, PACI_OP_STEP));
        if (st->ops[PACI_OP_BWD_W] > 0 && backwards > 0)
            fprintf(f, " w %.9g", fmin(mean_cpu(st, PACI_OP_BWD_W), bwd_cpu / (double)backwards));
        fputc('\n', f);
    }
    fprintf(f, "# link L SECONDS: mean seconds per message between stages L and L+1\n");
    for (int s = 0; s + 1 < run->p; s++) {
        const pr_stage_rt *from = &run->stage[s], *to = &run->stage[s + 1];
        double act = mean_cpu(from, PACI_OP_SEND_ACT) + mean_cpu(to, PACI_OP_RECV_ACT);
        double grad = mean_cpu(to, PACI_OP_SEND_GRAD) + mean_cpu(from, PACI_OP_RECV_GRAD);
        fprintf(f, "link %d %.9g\n", s, (act + grad) / 2);
    }
    fprintf(f, "# compute S SECONDS: wall seconds stage S spent in its fwd, bwd and step instructions\n");
    for (int s = 0; s < run->p; s++) {
        const pr_stage_rt *st = &run->stage[s];
        fprintf(f, "compute %d %.9g\n", s, compute_seconds(st));
    }
    fprintf(f, "# op S I SECTION NAME calls N total SECONDS mean SECONDS \"WHAT\": op I of stage S's "
               "generated code, summed over its calls (%s)\n",
            run->dev->host_memory ? "monotonic clock" : "CUDA events on the compute stream");
    for (int s = 0; s < run->p; s++) {
        const pr_op_stats *ps = &pr_op_stats_of[s];
        const pr_stage_code *sc = &run->prog->stage[s];
        for (int32_t i = 0; i < ps->n_ops && i < sc->n_ops; i++) {
            const pr_op_info *op = &sc->ops[i];
            double mean = ps->calls[i] ? ps->seconds[i] / (double)ps->calls[i] : 0.0;
            fprintf(f, "op %d %d %s %s calls %lld total %.9g mean %.9g ", s, i, op->section, op->name,
                    (long long)ps->calls[i], ps->seconds[i], mean);
            write_quoted(f, op->what);
            fputc('\n', f);
        }
    }
    if (fclose(f) != 0)
        return pr_fail(err, "%s: cannot write profile: %s", path, strerror(errno));
    return 0;
}

/* One row (tid) per device thread; with chunks the rows are devices, named so, and each event
 * says its stage (as pacic's simulated trace does). */
int pr_write_trace(const pr_run *run, const char *path, char *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return pr_fail(err, "%s: cannot write trace: %s", path, strerror(errno));
    fprintf(f, "{\"traceEvents\": [\n");
    int chunks = run->tab->chunks > 1;
    for (int s = 0; s < run->p; s++) {
        if (s < run->devices) // device s's row, before the events of its first chunk (stage s)
            fprintf(f, "%s{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 0, \"tid\": %d, "
                    "\"args\": {\"name\": \"%s %d\"}}", s == 0 ? "" : ",\n", s, chunks ? "device" : "stage", s);
        for (int64_t i = 0; i < run->stage[s].n_trace; i++) {
            const pr_trace_event *e = &run->stage[s].trace[i];
            char name[32], stage[32] = "";
            if (e->op == PACI_OP_STEP)
                snprintf(name, sizeof name, "step");
            else
                snprintf(name, sizeof name, "%c%lld", e->op == PACI_OP_FWD ? 'F' : e->op == PACI_OP_BWD_W ? 'W' : 'B',
                         (long long)e->mb);
            if (chunks)
                snprintf(stage, sizeof stage, ", \"args\": {\"stage\": %d}", s);
            fprintf(f, ",\n{\"name\": \"%s\", \"ph\": \"X\", \"pid\": 0, \"tid\": %d, \"ts\": %.3f, "
                    "\"dur\": %.3f%s}", name, run->tab->stage_device[s], e->start * 1e6,
                    (e->end - e->start) * 1e6, stage);
        }
    }
    fprintf(f, "\n]}\n");
    if (fclose(f) != 0)
        return pr_fail(err, "%s: cannot write trace: %s", path, strerror(errno));
    return 0;
}

/* llm.c's tokenizer file (gpt2_tokenizer.bin): a header of 256 uint32 (magic 20240328,
 * version 1 or 2, the number of tokens, and in version 2 the end-of-text token), then per
 * token its length in one byte and its bytes. */
#define TOKENIZER_MAGIC 20240328u
#define TOKENIZER_HEADER_INTS 256

typedef struct tokenizer {
    uint32_t n;
    int64_t *start; /* token i is bytes[start[i] .. start[i + 1]) */
    unsigned char *bytes;
    bpe_tokenizer *bpe; /* --bpe instead: GPT-2's files, which encode too */
} tokenizer;

/* --bpe DIR: GPT-2's tokenizer files (runtime/bpe.c), for a model of the same vocabulary. */
static int bpe_open(const pr_run *run, const char *dir, tokenizer *tk, char *err)
{
    memset(tk, 0, sizeof *tk);
    if (bpe_load(dir, &tk->bpe, err, PR_ERR_LEN) != 0)
        return -1;
    if (bpe_vocab_size(tk->bpe) != run->V) {
        int n = bpe_vocab_size(tk->bpe);
        bpe_free(tk->bpe);
        tk->bpe = NULL;
        return pr_fail(err, "--bpe %s: its vocabulary has %d tokens, the model's %lld", dir, n, (long long)run->V);
    }
    return 0;
}

static int tokenizer_load(const char *path, tokenizer *tk, char *err)
{
    memset(tk, 0, sizeof *tk);
    FILE *f = pr_open_regular(path, "tokenizer", err);
    if (!f)
        return -1;
    uint32_t h[TOKENIZER_HEADER_INTS];
    int rc = 0;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size < 0 || fseek(f, 0, SEEK_SET) != 0)
        rc = pr_fail(err, "%s: cannot read tokenizer: %s", path, strerror(errno));
    else if (fread(h, 4, TOKENIZER_HEADER_INTS, f) != TOKENIZER_HEADER_INTS)
        rc = pr_fail(err, "%s: truncated tokenizer header (%ld bytes, the header is 1024)", path, size);
    else if (h[0] != TOKENIZER_MAGIC)
        rc = pr_fail(err, "%s: magic is %u, an llm.c tokenizer file has %u", path, h[0], TOKENIZER_MAGIC);
    else if (h[1] != 1 && h[1] != 2)
        rc = pr_fail(err, "%s: tokenizer version %u, expected 1 or 2", path, h[1]);
    else if (h[2] < 1 || h[2] > (1u << 24))
        rc = pr_fail(err, "%s: %u tokens, expected 1 to %u", path, h[2], 1u << 24);
    size_t body = rc == 0 ? (size_t)size - TOKENIZER_HEADER_INTS * 4 : 0;
    if (rc == 0) {
        tk->n = h[2];
        tk->start = pr_alloc(((size_t)tk->n + 1) * sizeof(int64_t));
        tk->bytes = pr_alloc(body);
        if (fread(tk->bytes, 1, body, f) != body)
            rc = pr_fail(err, "%s: read failed", path);
    }
    fclose(f);
    // Lengths and bytes interleave: walk them, moving each token's bytes down over the lengths.
    size_t at = 0, out = 0;
    for (uint32_t i = 0; rc == 0 && i < tk->n; i++) {
        size_t len = at < body ? tk->bytes[at] : 0;
        if (at >= body || at + 1 + len > body) {
            rc = pr_fail(err, "%s: truncated at token %u of %u", path, i, tk->n);
            break;
        }
        tk->start[i] = (int64_t)out;
        memmove(tk->bytes + out, tk->bytes + at + 1, len);
        out += len;
        at += 1 + len;
    }
    if (rc == 0 && at != body)
        rc = pr_fail(err, "%s: %zu bytes after the last of its %u tokens", path, body - at, tk->n);
    if (rc != 0) {
        free(tk->start);
        free(tk->bytes);
        memset(tk, 0, sizeof *tk);
        return rc;
    }
    tk->start[tk->n] = (int64_t)out;
    return 0;
}

/* The prompt as the model's tokens: GPT-2's BPE with --bpe; else its bytes for a byte-level
 * vocabulary (what `pacic tokenize` writes). llm.c's tokenizer file only decodes. 0, or -1
 * with err. */
static int encode_prompt(const pr_run *run, const tokenizer *tk, const char *prompt, int32_t **ids, size_t *n,
                         char *err)
{
    if (tk && tk->bpe) {
        bpe_ids out = {0};
        if (bpe_encode(tk->bpe, prompt, strlen(prompt), 1, &out) != 0)
            return pr_fail(err, "--prompt: out of memory");
        *ids = out.ids ? out.ids : pr_alloc(sizeof **ids);
        *n = out.n;
        return 0;
    }
    if (run->V != 256)
        return pr_fail(err, "--prompt needs an encoder for this model's %lld-token vocabulary: --bpe DIR "
                       "with GPT-2's vocab.json and merges.txt (examples/data/get-gpt2-vocab.sh), or a "
                       "byte-level model (vocab 256); --tokenizer's llm.c file only decodes",
                       (long long)run->V);
    size_t len = strlen(prompt);
    *ids = pr_alloc((len ? len : 1) * sizeof **ids);
    for (size_t i = 0; i < len; i++)
        (*ids)[i] = (unsigned char)prompt[i];
    *n = len;
    return 0;
}

/* The model's probabilities of the token after position pos of sequence 0, into p[0..V). The
 * GPU path's head leaves its fused classifier's unscaled dlogits p - onehot(target) there
 * (bf16 under bf16), target 0, not the probabilities; a vocab_split's come as probabilities. */
static void read_probabilities(const pr_run *run, const float *probs, int64_t pos, double *p)
{
    const pr_program *prog = run->prog;
    int gpu = prog->cuda_device && run->dev == prog->cuda_device &&
              prog->stage[prog->stages - 1].vocab_begin == 0;
    const float *row = probs + pos * prog->probs_stride;
    const pr_bf16 *row_h = (const pr_bf16 *)probs + pos * prog->probs_stride;
    for (int64_t v = 0; v < run->V; v++)
        p[v] = !gpu ? row[v] : (prog->bf16_operands ? pr_from_bf16(row_h[v]) : row[v]) + (v == 0 ? 1.0 : 0.0);
}

static int descending(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* The next token from probabilities p[0..V): the most likely (the first of equals) at
 * temperature 0; else one of the top_k most likely (all when 0; equals at the k-th kept in
 * index order), drawn by coin in [0, 1) with weights p^(1/temperature). w: V doubles of room. */
static int32_t choose_token(const pr_options *opt, const double *p, double *w, int64_t V, double coin)
{
    int32_t best = 0;
    for (int32_t v = 1; v < V; v++)
        best = p[v] > p[best] ? v : best;
    if (opt->temperature == 0)
        return best;
    double kth = -1.0; // every p is above it when all are kept
    int64_t equals_kept = 0;
    if (opt->top_k > 0 && opt->top_k < V) {
        memcpy(w, p, (size_t)V * sizeof *w);
        qsort(w, (size_t)V, sizeof *w, descending);
        kth = w[opt->top_k - 1];
        for (int64_t i = 0; i < opt->top_k; i++)
            equals_kept += w[i] == kth;
    }
    double total = 0.0, top = log(p[best]);
    for (int32_t v = 0; v < V; v++) {
        int kept = p[v] > kth || (p[v] == kth && equals_kept-- > 0);
        // scaled by the largest, so that a small temperature underflows to 0, never to NaN
        w[v] = kept && p[v] > 0 ? exp((log(p[v]) - top) / opt->temperature) : 0.0;
        total += w[v];
    }
    double target = coin * total, cdf = 0.0;
    for (int32_t v = 0; v < V; v++) {
        cdf += w[v];
        if (w[v] > 0 && target < cdf)
            return v;
    }
    return best;
}

/* One sampled token: through the tokenizer (ids it does not have as <|ID|>), else as a byte
 * for a 256-token vocabulary, else as its id (space-separated). */
static void print_token(const pr_run *run, const tokenizer *tk, int32_t id, int first)
{
    size_t len;
    const unsigned char *bytes = tk && tk->bpe ? bpe_token_bytes(tk->bpe, id, &len) : NULL;
    if (bytes)
        fwrite(bytes, 1, len, stdout);
    else if (tk && (uint32_t)id < tk->n)
        fwrite(tk->bytes + tk->start[id], 1, (size_t)(tk->start[id + 1] - tk->start[id]), stdout);
    else if (tk)
        printf("<|%d|>", id);
    else if (run->V == 256)
        putchar(id);
    else
        printf("%s%d", first ? "" : " ", id);
}

/* --seed, or one from the clock, said so that the sample can be repeated. */
static uint64_t sample_seed(const pr_options *opt)
{
    if (opt->seed.given)
        return opt->seed.value;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    pr_rng mix = {(uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec + ((uint64_t)getpid() << 40)};
    uint64_t seed = pr_rng_next(&mix) >> 32; // short enough to copy from the line below
    if (!opt->quiet)
        fprintf(stderr, "run: seed %llu (--seed %llu repeats this sample)\n", (unsigned long long)seed,
                (unsigned long long)seed);
    return seed;
}

enum { GPT2_VOCAB = 50257 }; /* its last token, 50256, is <|endoftext|> */

/* Sampling: sequence 0 of a micro-batch holds the last T tokens of the text, which is a start
 * token (a newline for bytes; <|endoftext|>, where documents start, with --bpe or GPT-2's
 * vocabulary; else 0), the prompt (at most its last T - 1 tokens), then the n
 * tokens drawn; the prompt is printed, then what was drawn, then a newline. Deterministic from
 * the seed. */
static void sample(pr_run *run, const tokenizer *tk, const int32_t *prompt, size_t n_prompt)
{
    const pr_options *opt = &run->opt;
    int64_t T = run->T, BT = run->B * T, V = run->V, n = opt->sample;
    int64_t fed = (int64_t)n_prompt < T - 1 ? (int64_t)n_prompt : T - 1, first = 1 + fed;
    if (fed < (int64_t)n_prompt && !opt->quiet)
        fprintf(stderr, "run: note: the prompt is %zu tokens and the context %lld: only its last %lld "
                "are fed (after the start token)\n", n_prompt, (long long)T, (long long)fed);
    int32_t *tokens = pr_alloc((size_t)BT * sizeof(int32_t));
    int32_t *text = pr_alloc((size_t)(first + n) * sizeof(int32_t));
    double *p = pr_alloc((size_t)V * sizeof(double)), *room = pr_alloc((size_t)V * sizeof(double));
    pr_rng rng = {sample_seed(opt)};
    text[0] = tk && tk->bpe ? bpe_end_of_text(tk->bpe) : V == 256 ? '\n' : V == GPT2_VOCAB ? GPT2_VOCAB - 1 : 0;
    if (fed > 0)
        memcpy(text + 1, prompt + n_prompt - (size_t)fed, (size_t)fed * sizeof(int32_t));
    if (opt->prompt)
        fputs(opt->prompt, stdout);
    for (int64_t i = first; i < first + n; i++) {
        int64_t len = i < T ? i : T;
        for (int64_t j = 0; j < BT; j++)
            tokens[j] = j < len ? text[i - len + j] : text[0];
        read_probabilities(run, pr_forward_all(run, tokens), len - 1, p);
        text[i] = choose_token(opt, p, room, V, pr_rng_uniform(&rng));
        print_token(run, tk, text[i], i == first && !opt->prompt);
    }
    printf("\n");
    free(tokens);
    free(text);
    free(p);
    free(room);
}

/* Seconds >= 0, fractions allowed. */
static int parse_seconds(const char *flag, const char *value, double *out)
{
    char *end;
    errno = 0;
    double s = value ? strtod(value, &end) : -1;
    if (!value || errno || *end || end == value || !(s >= 0) || s > 1e9) {
        fprintf(stderr, "run: error: %s needs a number of seconds >= 0\n", flag);
        return -1;
    }
    *out = s;
    return 0;
}

/* A flag's value that is not one it takes, said with the value: -1. */
static int bad_value(const char *flag, const char *value, const char *needs)
{
    if (value)
        fprintf(stderr, "run: error: %s %s: needs %s\n", flag, value, needs);
    else
        fprintf(stderr, "run: error: %s needs %s\n", flag, needs);
    return -1;
}

static int parse_count(const char *flag, const char *value, int64_t min, int64_t *out)
{
    char *end;
    errno = 0;
    long long n = value ? strtoll(value, &end, 10) : 0;
    if (!value || errno || *end || end == value || n < min) {
        char needs[64];
        snprintf(needs, sizeof needs, "an integer >= %lld", (long long)min);
        return bad_value(flag, value, needs);
    }
    *out = n;
    return 0;
}

/* --temperature: a number in [0, DBL_MAX] (NaN fails the comparison). strtod's ERANGE on
 * underflow is not an error: a subnormal, or one below it that reads as 0, keeps only the
 * most likely token as 0 does; on overflow it is (the value read is HUGE_VAL). */
static int parse_temperature(const char *flag, const char *value, double *out)
{
    char *end;
    errno = 0;
    double t = value ? strtod(value, &end) : -1;
    if (value && errno == ERANGE && !*end && isinf(t) && t > 0)
        return bad_value(flag, value, "at most 1.8e308, the largest double (0: always the most likely token)");
    if (!value || (errno && errno != ERANGE) || *end || end == value || !(t >= 0) || !isfinite(t))
        return bad_value(flag, value, "a finite number >= 0 (0: always the most likely token)");
    *out = t;
    return 0;
}

/* --seed: an integer in [0, 2^64), digits only (strtoull would wrap a minus sign). */
static int parse_seed(const char *flag, const char *value, struct pr_seed *out)
{
    char *end;
    errno = 0;
    unsigned long long s = value && value[0] >= '0' && value[0] <= '9' ? strtoull(value, &end, 10) : 0;
    if (!value || value[0] < '0' || value[0] > '9' || errno || *end)
        return bad_value(flag, value, "an integer in [0, 18446744073709551615]");
    out->value = s;
    out->given = 1;
    return 0;
}

/* SIGINT and SIGTERM ask for a stop after the current step (pr_train saves a checkpoint
 * there); the handler only records it. A second one, of either kind, acts as if unhandled:
 * it ends the process at once, and the checkpoints on disk are as crash-safe as ever. The
 * handler stays installed for both and counts them, so that two signals taken at once by
 * two threads are counted too. */
static atomic_int stop_signals_seen;

static void on_stop_signal(int signal_number)
{
    static const char note[] = "\nrun: stopping: finishing the current step, then saving a "
                               "checkpoint unless --no-checkpoint (signal again to stop at once)\n";
    if (atomic_fetch_add(&stop_signals_seen, 1) > 0) {
        struct sigaction unhandled;
        memset(&unhandled, 0, sizeof unhandled);
        unhandled.sa_handler = SIG_DFL;
        sigemptyset(&unhandled.sa_mask);
        sigaction(signal_number, &unhandled, NULL);
        raise(signal_number); // blocked in this handler: it acts once the handler returns
        return;
    }
    pr_request_stop(signal_number);
    ssize_t ignored = write(STDERR_FILENO, note, sizeof note - 1);
    (void)ignored;
}

static void install_stop_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* Flags; returns 0 to go on, 1 after --help, -1 on a bad flag. */
/* The flags, each once: what its value is and where it goes in pr_options. */
enum flag_kind { FLAG_SWITCH, FLAG_INT, FLAG_INT64, FLAG_COUNT, FLAG_PORT, FLAG_SECONDS, FLAG_TEXT,
                 FLAG_DEVICE, FLAG_TEMPERATURE, FLAG_SEED };
/* The runs a flag is for: any, or only those that sample or resume (refused in others). */
enum flag_use { FOR_ANY, FOR_SAMPLE, FOR_RESUME };
#define AT(field) offsetof(pr_options, field)
static const struct flag {
    const char *name;
    int kind;           /* enum flag_kind */
    size_t at;          /* the field it sets */
    int use;            /* enum flag_use */
} flags[] = {
    {"--resume", FLAG_SWITCH, AT(resume), FOR_ANY}, {"--quiet", FLAG_SWITCH, AT(quiet), FOR_ANY},
    {"--overwrite", FLAG_SWITCH, AT(overwrite), FOR_ANY},
    {"--no-checkpoint", FLAG_SWITCH, AT(no_checkpoint), FOR_ANY}, {"--steps", FLAG_INT64, AT(steps), FOR_ANY},
    {"--sample", FLAG_INT64, AT(sample), FOR_ANY}, {"--threads", FLAG_INT, AT(threads), FOR_ANY},
    {"--blas-threads", FLAG_INT, AT(blas_threads), FOR_ANY},
    {"--master-port", FLAG_PORT, AT(master_port), FOR_ANY},
    {"--peer-timeout", FLAG_SECONDS, AT(peer_timeout), FOR_ANY},
    {"--connect-timeout", FLAG_SECONDS, AT(connect_timeout), FOR_ANY},
    {"--init", FLAG_TEXT, AT(init_path), FOR_ANY}, {"--trace", FLAG_TEXT, AT(trace_path), FOR_ANY},
    {"--data", FLAG_TEXT, AT(data), FOR_ANY}, {"--val", FLAG_TEXT, AT(val), FOR_ANY},
    {"--ckpt-dir", FLAG_TEXT, AT(ckpt_dir), FOR_ANY}, {"--metrics", FLAG_TEXT, AT(metrics_path), FOR_ANY},
    {"--profile-out", FLAG_TEXT, AT(profile_out), FOR_ANY}, {"--device", FLAG_DEVICE, AT(device), FOR_ANY},
    {"--tokenizer", FLAG_TEXT, AT(tokenizer_path), FOR_SAMPLE}, {"--bpe", FLAG_TEXT, AT(bpe_dir), FOR_SAMPLE},
    {"--prompt", FLAG_TEXT, AT(prompt), FOR_SAMPLE},
    {"--temperature", FLAG_TEMPERATURE, AT(temperature), FOR_SAMPLE},
    {"--top-k", FLAG_COUNT, AT(top_k), FOR_SAMPLE}, {"--seed", FLAG_SEED, AT(seed), FOR_SAMPLE},
    {"--reschedule", FLAG_SWITCH, AT(reschedule), FOR_RESUME},
};
#undef AT

/* One flag's value into its field; -1 (said) when it is not one the flag takes. */
static int set_flag(const struct flag *f, const char *value, pr_options *opt)
{
    char *field = (char *)opt + f->at;
    int64_t n;
    switch (f->kind) {
    case FLAG_SWITCH:
        *(int *)field = 1;
        return 0;
    case FLAG_INT:
    case FLAG_INT64:
    case FLAG_PORT:
        if (parse_count(f->name, value, 1, &n) != 0)
            return -1;
        if (f->kind == FLAG_PORT && n > 65535) {
            fprintf(stderr, "run: error: %s needs a port in [1, 65535]\n", f->name);
            return -1;
        }
        if (f->kind == FLAG_INT64)
            *(int64_t *)field = n;
        else
            *(int *)field = (int)n;
        return 0;
    case FLAG_COUNT:
        if (parse_count(f->name, value, 0, &n) != 0)
            return -1;
        *(int64_t *)field = n;
        return 0;
    case FLAG_TEMPERATURE:
        return parse_temperature(f->name, value, (double *)field);
    case FLAG_SEED:
        return parse_seed(f->name, value, (struct pr_seed *)field);
    case FLAG_SECONDS:
        return parse_seconds(f->name, value, (double *)field);
    case FLAG_DEVICE:
        if (!value || (strcmp(value, "cpu") != 0 && strcmp(value, "cuda") != 0)) {
            fprintf(stderr, "run: error: %s needs cpu or cuda\n", f->name);
            return -1;
        }
        *(const char **)field = value;
        return 0;
    default:
        if (!value || !value[0]) {
            fprintf(stderr, "run: error: %s needs a value\n", f->name);
            return -1;
        }
        *(const char **)field = value;
        return 0;
    }
}

/* 0 to run, 1 when --help was answered, -1 on a bad flag (said). */
static int parse_flags(int argc, char **argv, pr_options *opt)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            return 1;
        }
        if (strcmp(a, "--export") == 0) {
            if (!value || strcmp(value, "hf") != 0 || i + 2 >= argc || !argv[i + 2][0]) {
                fprintf(stderr, "run: error: --export needs a format and a folder: --export hf DIR\n");
                return -1;
            }
            opt->export_dir = argv[i + 2];
            i += 2;
            continue;
        }
        const struct flag *f = NULL;
        for (size_t k = 0; k < sizeof flags / sizeof *flags && !f; k++)
            if (strcmp(a, flags[k].name) == 0)
                f = &flags[k];
        if (!f) {
            fprintf(stderr, "run: error: unknown option '%s' (try --help)\n", a);
            return -1;
        }
        if (set_flag(f, value, opt) != 0)
            return -1;
        const char **first_for = f->use == FOR_SAMPLE   ? &opt->sample_only
                                 : f->use == FOR_RESUME ? &opt->resume_only
                                                        : NULL;
        if (first_for && !*first_for)
            *first_for = f->name;
        i += f->kind != FLAG_SWITCH;
    }
    if (opt->threads > 0 && opt->blas_threads > 0) {
        fprintf(stderr, "run: error: --threads and --blas-threads both set the BLAS threads: give one\n");
        return -1;
    }
    return 0;
}

static int fail_main(pr_run *run, const char *err)
{
    fflush(stdout);
    fprintf(stderr, "run: error: %s\n", err);
    pr_run_free(run);
    return 1;
}

/* Starting weights: the latest checkpoint when resuming (or sampling), else --init, else
 * the seeded initialisation. */
static int load_weights(pr_run *run, int want_checkpoint, char *err)
{
    pr_ckpt_new_run(run);
    if (want_checkpoint) {
        int rc = pr_ckpt_load_latest(run, run->opt.ckpt_dir, err);
        if (rc <= 0)
            return rc;
        if (run->opt.resume)
            return pr_fail(err, "%s: no checkpoint to resume from (no 'latest' file)", run->opt.ckpt_dir);
    }
    if (run->opt.init_path)
        return pr_load_init(run, run->opt.init_path, err);
    int64_t offsets[PR_CKPT_COUNT];
    float *flat = pr_alloc((size_t)pr_ckpt_offsets(run->prog, offsets) * sizeof(float));
    pr_init_params(run->prog, flat);
    pr_scatter(run, 0, flat);
    free(flat);
    return 0;
}

/* Who this process is (the launcher's variables; under mpirun, MPI started), said when it is
 * one of several. 0, or -1 with the error printed. */
static int find_launch(const pr_program *prog, const pr_options *opt, pr_launch *launch)
{
    char err[PR_ERR_LEN];
    if (pr_launch_parse((const char *const *)environ, prog->schedule->devices, prog->replicas, opt->master_port, launch,
                        err) != 0) {
        fprintf(stderr, "run: error: %s\n", err);
        return -1;
    }
    if (launch->world > 1 && launch->launcher == PR_LAUNCH_OPEN_MPI && pr_mpi()) {
        if (pr_mpi()->start(launch, err) != 0) {
            fprintf(stderr, "run: error: rank %d: %s\n", launch->rank, err);
            return -1;
        }
        launch->mpi = 1;
    }
    if (launch->world > 1 && !opt->quiet)
        printf("run: rank %d of %d (%s%s); rank 0 at %s:%d (from %s)\n", launch->rank, launch->world,
               pr_launcher_name(launch->launcher), launch->mpi ? ", collectives over MPI" : "",
               launch->master_addr, launch->master_port, launch->addr_from ? launch->addr_from : "?");
    return 0;
}

/* The flags against each other and the launch, and the program's defaults for those not
 * given. 0, or -1 with the error printed. */
static int settle_options(const pr_program *prog, const pr_launch *launch, pr_options *opt)
{
    const paci_table *tab = prog->schedule;
    if (opt->sample_only && opt->sample == 0) {
        fprintf(stderr, "run: error: %s is for --sample N\n", opt->sample_only);
        return -1;
    }
    if (opt->resume_only && !opt->resume) {
        fprintf(stderr, "run: error: %s is for --resume\n", opt->resume_only);
        return -1;
    }
    if (opt->top_k > prog->vocab) {
        fprintf(stderr, "run: error: --top-k %lld: more than the %d tokens of the vocabulary\n",
                (long long)opt->top_k, prog->vocab);
        return -1;
    }
    opt->rank = launch->rank;
    opt->world = launch->world;
    opt->local_rank = launch->local_rank;
    if (opt->world > 1 && (opt->sample > 0 || opt->export_dir)) {
        fprintf(stderr, "run: error: rank %d: %s runs in one process, not under %s\n", launch->rank,
                opt->sample > 0 ? "--sample" : "--export", pr_launcher_name(launch->launcher));
        return -1;
    }
    if (opt->sample > 0 && opt->export_dir) {
        fprintf(stderr, "run: error: --sample and --export: one at a time\n");
        return -1;
    }
    if (!opt->data)
        opt->data = prog->train_data;
    if (!opt->val)
        opt->val = prog->val_data;
    if (!opt->ckpt_dir)
        opt->ckpt_dir = prog->ckpt_dir ? prog->ckpt_dir : "checkpoints";
    if (tab && opt->steps == 0)
        opt->steps = tab->total_steps;
    if (tab && opt->steps > tab->total_steps) {
        fprintf(stderr, "run: error: --steps %lld: must be at most %d (the compiled total)\n",
                (long long)opt->steps, tab->total_steps);
        return -1;
    }
    opt->trace = opt->trace_path != NULL;
    // OpenBLAS's threaded products round differently from its single-threaded ones:
    // --blas-threads gives every stage the same count at any p (cores N, one "stage").
    if (opt->blas_threads > 0)
        pr_blas_threads(opt->blas_threads, 1);
    else // every replica's device threads share the cores when one process runs them all
        opt->blas_threads = pr_blas_threads(opt->threads, (tab ? tab->devices : prog->stages) *
                                                              (prog->replicas > 1 && launch->world == 1
                                                                   ? prog->replicas : 1));
    return 0;
}

/* --sample N and --export hf DIR: from the latest checkpoint, --init or the initial weights. */
static int sample_or_export(pr_run *run, char *err)
{
    const pr_options *opt = &run->opt;
    if (opt->sample > 0) {
        tokenizer tk = {0};
        int32_t *prompt = NULL;
        size_t n_prompt = 0;
        int rc = opt->tokenizer_path && opt->bpe_dir ? pr_fail(err, "--tokenizer and --bpe: one of them")
                 : opt->tokenizer_path                ? tokenizer_load(opt->tokenizer_path, &tk, err)
                 : opt->bpe_dir                       ? bpe_open(run, opt->bpe_dir, &tk, err)
                                                      : 0;
        const tokenizer *text = opt->tokenizer_path || opt->bpe_dir ? &tk : NULL;
        if (rc == 0 && opt->prompt)
            rc = encode_prompt(run, text, opt->prompt, &prompt, &n_prompt, err);
        if (rc == 0)
            rc = load_weights(run, 1, err);
        if (rc == 0)
            sample(run, text, prompt, n_prompt);
        free(prompt);
        free(tk.start);
        free(tk.bytes);
        bpe_free(tk.bpe);
        return rc;
    }
    if (load_weights(run, 1, err) != 0 || pr_export_hf(run, opt->export_dir, err) != 0)
        return -1;
    if (!opt->quiet)
        printf("run: exported %s%lld to %s (config.json, model.safetensors%s)\n",
               run->step > 0 ? "the checkpoint of step " : opt->init_path ? "the --init weights, step "
                                                                         : "the initial weights, step ",
               (long long)run->step, opt->export_dir,
               run->prog->tied ? "; head tied to wte" : "; untied head as lm_head.weight");
    return 0;
}

/* A resume keeps the lr schedule its run started with (its length and warmup, which the
 * checkpoint records), unless --reschedule takes the program's: a cosine over another length
 * would make the lr jump. Said when they differ, or when the checkpoint does not say. */
static void keep_lr_schedule(pr_run *run, int says)
{
    const pr_program *prog = run->prog;
    if (!run->lr_recorded) { // lr_steps and lr_warmup are the program's
        if (says)
            printf("run: the checkpoint does not record the lr schedule its run started with (written by "
                   "an older pacic): the lr follows the program's, %lld steps\n", (long long)prog->steps);
        return;
    }
    if (run->lr_steps == prog->steps && run->lr_warmup == prog->warmup_steps)
        return;
    if (run->opt.reschedule) {
        if (says)
            printf("run: --reschedule: the lr follows the program's schedule of %lld steps (warmup %lld) "
                   "from step %lld; the run started with %lld (warmup %lld)\n", (long long)prog->steps,
                   (long long)prog->warmup_steps, (long long)run->step + 1, (long long)run->lr_steps,
                   (long long)run->lr_warmup);
        run->lr_steps = prog->steps;
        run->lr_warmup = prog->warmup_steps;
        return;
    }
    if (says && prog->steps > run->lr_steps)
        printf("run: the lr schedule of the first %lld steps (warmup %lld) is kept: after step %lld the lr "
               "stays at its final value; --reschedule follows the program's %lld steps (warmup %lld) instead\n",
               (long long)run->lr_steps, (long long)run->lr_warmup, (long long)run->lr_steps,
               (long long)prog->steps, (long long)prog->warmup_steps);
    else if (says)
        printf("run: the lr schedule of the first %lld steps (warmup %lld) is kept: the program's %lld steps "
               "(warmup %lld) end before it does; --reschedule follows the program's schedule instead\n",
               (long long)run->lr_steps, (long long)run->lr_warmup, (long long)prog->steps,
               (long long)prog->warmup_steps);
}

/* The checkpoint folder, made, locked and probed before anything in it is read or written:
 * by rank 0 for a run of several processes (one holder per folder); the others learn whether
 * it could, so that a refused run's ranks all stop. */
static int claim_checkpoint_folder(pr_run *run, char *err)
{
    const pr_options *opt = &run->opt;
    int rc = opt->world <= 1 || opt->rank == 0 ? pr_ckpt_claim(run, opt->ckpt_dir, opt->argv, err) : 0;
    if (opt->world <= 1)
        return rc;
    int32_t mine = rc, *all = pr_alloc((size_t)opt->world * sizeof *all);
    char why[PR_ERR_LEN];
    int shared = pr_bootstrap_allgather(opt->boot, &mine, sizeof mine, all, why);
    int refused = shared == 0 && all[0] != 0;
    free(all);
    if (rc != 0)
        return rc;
    if (shared != 0)
        return pr_fail(err, "rank %d: %s", opt->rank, why);
    if (refused)
        return pr_fail(err, "rank %d: stopped: rank 0 could not take the checkpoint folder %s (its "
                       "error says why)", opt->rank, opt->ckpt_dir);
    return 0;
}

/* --metrics, --trace and --profile-out, probed before training: a path that cannot be written
 * fails now, not after the steps (the trace and the profile are written at the end). */
static int probe_outputs(const pr_options *opt, char *err)
{
    if (opt->metrics_path && pr_probe_output(opt->metrics_path, "metrics", err) != 0)
        return -1;
    if (opt->trace_path && pr_probe_output(opt->trace_path, "trace", err) != 0)
        return -1;
    return opt->profile_out ? pr_probe_output(opt->profile_out, "profile", err) : 0;
}

/* The data, the starting weights (a resume's checkpoint, --init, or the seeded ones) and the
 * checkpoint folder, checked before training. 1 when a resumed run has nothing left to train
 * (said), 0 to train, -1 with err. */
static int prepare_training(pr_run *run, char *err)
{
    const pr_program *prog = run->prog;
    const pr_options *opt = &run->opt;
    int says = !opt->quiet && (opt->world <= 1 || opt->rank == 0);
    if (!opt->data)
        return pr_fail(err, "no training data: give `data` in the DSL or --data FILE");
    if (probe_outputs(opt, err) != 0 || (!opt->no_checkpoint && claim_checkpoint_folder(run, err) != 0) ||
        pr_tokens_load(&run->train, opt->data, prog->vocab, run->B, run->T, err) != 0 ||
        (opt->val && pr_tokens_load(&run->val, opt->val, prog->vocab, run->B, run->T, err) != 0) ||
        load_weights(run, opt->resume, err) != 0 ||
        (!opt->no_checkpoint && pr_ckpt_guard(run, opt->ckpt_dir, err) != 0))
        return -1;
    run->train.shuffled = prog->data_order == PR_DATA_SHUFFLED;
    run->train.order_seed = prog->seed;
    if (opt->resume && says)
        printf("run: resumed from step %lld (checkpoint %s)\n", (long long)run->step, run->resumed_from);
    if (opt->resume)
        keep_lr_schedule(run, says);
    if (opt->resume && run->step >= opt->steps) {
        if (says)
            printf("run: nothing left to train: the checkpoint is at step %lld, the run's last "
                   "(%lld steps%s)\n", (long long)run->step, (long long)opt->steps,
                   opt->steps < run->tab->total_steps ? ", from --steps" : "");
        return 1;
    }
    pr_replicas_sync(run);
    return 0;
}

/* Training with its log and metrics, then the trace and profile asked for. 0, or -1 with err. */
static int train_and_report(pr_run *run, char *err)
{
    const pr_options *opt = &run->opt;
    logger lg = {.tty = isatty(STDOUT_FILENO), .first_step = run->step, .begin = pr_now()};
    lg.every = opt->steps / 20 > 0 ? opt->steps / 20 : 1;
    if (opt->metrics_path && !(lg.metrics = fopen(opt->metrics_path, opt->resume ? "a" : "w")))
        return pr_fail(err, "%s: cannot write metrics: %s", opt->metrics_path, strerror(errno));
    if (lg.metrics) {
        fprintf(lg.metrics, "{\"stage_bytes\": [");
        for (int s = 0; s < run->p; s++)
            fprintf(lg.metrics, "%s%lld", s ? ", " : "", (long long)run->stage[s].arena_bytes);
        fprintf(lg.metrics, "]}\n");
    }
    run->user = &lg;
    if (run->dev->host_memory) // said as training starts, so that an error stays one line
        pr_blas_kernels_note(opt->quiet);
    // Replicas log nothing of their own: replica 0's last stage logs the step's mean over all.
    run->on_step = run->replica == 0 ? log_step : NULL;
    install_stop_handlers();
    pr_watch_stops(); // a run stopped (Ctrl-Z) for longer than --peer-timeout goes on when continued
    // A file-size limit then fails a checkpoint write with EFBIG, reported like a full disk,
    // instead of killing the process.
    signal(SIGXFSZ, SIG_IGN);
    int rc = pr_train(run, err);
    if (rc > 0)
        rc = 0; // stopped by a signal, at a checkpoint
    if (lg.metrics && run->replicas > 1) {
        fprintf(lg.metrics, "{\"exchange_bytes_per_step\": [");
        for (int r = 0, shown = 0; r < run->replicas; r++)
            if (exchange_per_step(run, r) >= 0)
                fprintf(lg.metrics, "%s%.0f", shown++ ? ", " : "", exchange_per_step(run, r));
        fprintf(lg.metrics, "]}\n");
    }
    if (lg.metrics)
        metrics_post_validation(run, lg.metrics);
    if (lg.metrics && fclose(lg.metrics) != 0 && rc == 0)
        rc = pr_fail(err, "%s: cannot write metrics", opt->metrics_path);
    run->user = NULL;
    if (rc == 0 && opt->trace_path)
        rc = pr_write_trace(run, opt->trace_path, err);
    if (rc == 0 && opt->profile_out)
        rc = write_profile(run, opt->profile_out, err);
    return rc;
}

int pr_main(int argc, char **argv, const pr_program *prog)
{
    pr_blas_choose_kernels(argv);
    pr_options opt = {.peer_timeout = 600, .connect_timeout = PR_DEFAULT_CONNECT_TIMEOUT, .temperature = 1.0};
    int rc = parse_flags(argc, argv, &opt);
    opt.argv = argv;
    if (rc != 0)
        return rc < 0 ? 1 : 0;
    pr_launch launch;
    if (find_launch(prog, &opt, &launch) != 0 || settle_options(prog, &launch, &opt) != 0)
        return 1;
    char err[PR_ERR_LEN];
    pr_run run;
    pr_bootstrap boot = {0};
    if (pr_run_init(&run, prog, &opt, err) != 0) {
        // One process of several: say which (the device errors do not know the rank).
        if (opt.world > 1 && strncmp(err, "rank ", 5) != 0 && strncmp(err, "stage ", 6) != 0) {
            char ranked[PR_ERR_LEN + 32];
            snprintf(ranked, sizeof ranked, "rank %d: %s", opt.rank, err);
            return fail_main(&run, ranked);
        }
        return fail_main(&run, err);
    }
    if (pr_replicas_open(&run, err) != 0)
        return fail_main(&run, err);
    if (opt.world > 1 && pr_launch_join(&run, &launch, opt.connect_timeout, &boot, err) != 0) {
        pr_bootstrap_close(&boot);
        return fail_main(&run, err);
    }
    if (opt.sample > 0 || opt.export_dir)
        rc = sample_or_export(&run, err);
    else if ((rc = prepare_training(&run, err)) == 0)
        rc = train_and_report(&run, err);
    else if (rc < 0)
        pr_ckpt_unclaim();
    if (rc < 0)
        return fail_main(&run, err);
    pr_bootstrap_close(&boot);
    pr_run_free(&run);
    if (launch.mpi)
        pr_mpi()->finish();
    return 0;
}
