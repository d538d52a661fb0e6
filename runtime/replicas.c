/* replicas.c: data parallelism. `parallel { data D }` runs D copies of the pipeline; replica
 * r reads its own micro-batches (pr_replica_batch), and at each optimizer step of stage s the
 * D copies of stage s sum their gradients, so every copy takes the same step. The sum adds
 * the replicas in order 0, 1, ..., D-1 element by element, on every transport, so a run's
 * bits do not depend on how its replicas were started. Under paci each stage's group reduces
 * when that stage steps, with no barrier across stages.
 *
 * In one process, replica 0 owns the other pipelines and one group per stage: the D stage
 * threads meet at the group's barrier, each sums a slice of the elements into replica 0's
 * gradients, and the others copy the sum back. With one process per stage and replica, each
 * replica r > 0 of stage s sends its gradients over TCP to replica 0 of stage s (rank s),
 * which adds them in replica order and sends the sum back (launch.c makes the sockets).
 * Under `compression dgc` the same sockets carry each replica's pair list (4 bytes a pair) to
 * replica 0 and every other replica's back (tcp_dgc), and every replica sums all D lists in
 * replica order, as the threads do, so processes and threads give the same bits. On GPUs
 * (the device's transport, NCCL) the sum is the transport's allreduce, and under compression
 * each replica selects its pairs on its GPU, the transport gathers every replica's, and each
 * sums them in replica order on its GPU (native_dgc, runtime/cuda/dgc.c).
 * Under `accumulate pairwise` the replicas' sums are added as a binary tree instead
 * (pairwise_sum), the grouping each stage's window uses: D replicas of window K then give the
 * bits of one pipeline of window D K when both are powers of two.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prt.h"

/* The D threads of one stage, one per replica. */
typedef struct replica_group {
    pthread_mutex_t mu;
    pthread_cond_t all_here;
    int arrived;
    int64_t round;       /* barrier rounds completed */
    int64_t *entered;    /* per replica: the round it last entered (to name the missing) */
    float **grads;       /* per replica: its stage's gradient block */
    double *loss;        /* per replica: its step's loss sum (last stage) */
    const pr_dgc_buffers **pairs; /* compression dgc, per replica: its stage's pairs */
    int *stop;           /* per replica: it had seen a stop signal */
} replica_group;

typedef struct pr_replicas {
    int D;
    replica_group group[PACI_MAX_STAGES];
} pr_replicas;

static void replicas_close(pr_run *run);
static void replicas_reduce(pr_run *run, pr_stage_rt *st, double *loss, int *stop);
static int replicas_overlaps(const pr_run *run, const pr_stage_rt *st);
static void replicas_ready(void *ctx, int64_t offset, int64_t count);
static void replicas_skip(pr_run *run, pr_stage_rt *st);
static const pr_replica_ops replica_ops = {replicas_reduce, replicas_overlaps, replicas_ready, replicas_skip,
                                           replicas_close};

int pr_replicas_open(pr_run *run, char *err)
{
    int D = run->prog->replicas > 1 ? run->prog->replicas : 1;
    run->replicas = D;
    if (D == 1)
        return 0;
    run->replica_ops = &replica_ops;
    if (run->prog->dgc_density > 0 && run->opt.world > 1 && !run->dev->host_memory && !run->dev->dgc_open)
        return pr_fail(err, "%s: compression dgc is not supported on the %s device: it runs on the "
                       "CPU, with the replicas as threads of one process or as processes over TCP "
                       "(torchrun-style variables or mpirun, --device cpu), and on GPUs (NCCL); remove "
                       "the compression block to run the dense exchange", run->prog->source, run->dev->name);
    if (run->opt.world > 1) {
        // compression dgc: this process's replica of its own stage keeps its residual (on a
        // GPU in its memory, with the device's selection buffers: runtime/cuda/dgc.c)
        int s = run->opt.rank % run->p;
        pr_stage_rt *own = &run->stage[s];
        if (run->prog->dgc_density > 0 && run->dev->dgc_open)
            return run->dev->dgc_open(run->prog, s, &own->dgc, D, err);
        if (run->prog->dgc_density > 0)
            pr_dgc_alloc(&own->dgc, own->code->n_params, pr_dgc_momentum_correction(run->prog));
        return 0;
    }
    if (!run->dev->host_memory)
        return pr_fail(err, "%s: data %d runs its replicas in one process on the CPU only; on GPUs "
                       "start %d processes, one per stage and replica (docs/launch.md)",
                       run->prog->source, D, run->p * D);
    if (run->opt.profile_out)
        return pr_fail(err, "--profile-out measures one pipeline: profile a build with data 1");
    // The D pipelines share the host's memory: replica 0's is allocated, the other D - 1
    // must fit together in what is left, not each alone.
    int64_t others[PACI_MAX_STAGES];
    for (int s = 0; s < run->p; s++)
        others[s] = run->stage[s].arena_bytes * (D - 1);
    char why[PR_ERR_LEN];
    if (run->dev->check_memory(run->prog, others, why) != 0)
        return pr_fail(err, "data %d, replicas 1..%d: %s", D, D - 1, why);
    pr_replicas *sh = pr_alloc(sizeof *sh);
    sh->D = D;
    for (int s = 0; s < run->p; s++) {
        replica_group *g = &sh->group[s];
        if (pthread_mutex_init(&g->mu, NULL) != 0 || pthread_cond_init(&g->all_here, NULL) != 0)
            pr_internal("cannot create the reduction group of stage %d", s);
        g->entered = pr_alloc((size_t)D * sizeof *g->entered);
        g->grads = pr_alloc((size_t)D * sizeof *g->grads);
        g->loss = pr_alloc((size_t)D * sizeof *g->loss);
        g->stop = pr_alloc((size_t)D * sizeof *g->stop);
        g->pairs = pr_alloc((size_t)D * sizeof *g->pairs);
    }
    run->shared = sh;
    run->replica_runs = pr_alloc((size_t)D * sizeof *run->replica_runs);
    run->replica_runs[0] = run;
    pr_options quiet = run->opt;
    quiet.quiet = 1;
    for (int r = 1; r < D; r++) {
        pr_run *other = pr_alloc(sizeof *other);
        run->replica_runs[r] = other;
        if (pr_run_init(other, run->prog, &quiet, err) != 0) {
            char why[PR_ERR_LEN];
            snprintf(why, sizeof why, "%s", err);
            return pr_fail(err, "replica %d: %s", r, why);
        }
        other->replica = r;
        other->replicas = D;
        other->shared = sh;
        other->replica_ops = &replica_ops;
    }
    // compression dgc: every replica's own residual (and velocity) per stage, never synced
    for (int r = 0; run->prog->dgc_density > 0 && r < D; r++)
        for (int s = 0; s < run->p; s++) {
            pr_stage_rt *st = &run->replica_runs[r]->stage[s];
            pr_dgc_alloc(&st->dgc, st->code->n_params, pr_dgc_momentum_correction(run->prog));
        }
    return 0;
}

static void replicas_close(pr_run *run)
{
    for (int r = 0; run->reduce_fd && r < run->replicas; r++)
        if (run->reduce_fd[r] >= 0)
            close(run->reduce_fd[r]);
    free(run->reduce_fd);
    free(run->reduce_buffer);
    run->reduce_fd = NULL;
    run->reduce_buffer = NULL;
    for (int q = 0; run->reduce_pairs && q < run->replicas; q++)
        pr_dgc_free(&run->reduce_pairs[q]);
    free(run->reduce_pairs);
    free(run->dgc_gathered);
    run->reduce_pairs = NULL;
    run->dgc_gathered = NULL;
    if (!run->replica_runs) {
        for (int s = 0; s < run->p; s++) { // one process per stage and replica: its own stage's
            if (run->dev->dgc_close && run->stage[s].dgc.residual)
                run->dev->dgc_close(s, &run->stage[s].dgc);
            else
                pr_dgc_free(&run->stage[s].dgc);
        }
        return;
    }
    for (int r = 0; r < run->replicas; r++)
        for (int s = 0; run->replica_runs[r] && s < run->p; s++)
            pr_dgc_free(&run->replica_runs[r]->stage[s].dgc);
    for (int r = 1; r < run->replicas; r++) {
        pr_run *other = run->replica_runs[r];
        if (!other)
            continue;
        memset(&other->train, 0, sizeof other->train); // borrowed from replica 0
        pr_run_free(other);
        free(other);
    }
    free(run->replica_runs);
    run->replica_runs = NULL;
    pr_replicas *sh = run->shared;
    for (int s = 0; sh && s < run->p; s++) {
        replica_group *g = &sh->group[s];
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->all_here);
        free(g->entered);
        free(g->grads);
        free(g->loss);
        free(g->stop);
        free(g->pairs);
    }
    free(sh);
    run->shared = NULL;
}

void pr_replicas_sync(pr_run *run)
{
    if (!run->replica_runs)
        return;
    for (int r = 1; r < run->replicas; r++) {
        pr_run *other = run->replica_runs[r]; // its data: pr_run_segment lends replica 0's
        other->step = run->step;
        other->lr_steps = run->lr_steps;
        other->lr_warmup = run->lr_warmup;
        for (int s = 0; s < run->p; s++) {
            const pr_stage_rt *from = &run->stage[s];
            pr_stage_rt *to = &other->stage[s];
            size_t bytes = (size_t)from->code->n_params * sizeof(float);
            memcpy(to->params, from->params, bytes);
            memcpy(to->m, from->m, bytes);
            memcpy(to->v, from->v, bytes);
            to->t = from->t;
            pr_weights_changed(other, s);
        }
    }
}

/* Waits until all D replicas of the group have entered this round; -1 after `timeout`
 * seconds (0: forever), with the missing replicas listed in `missing`. */
static int group_barrier(replica_group *g, int D, int replica, double timeout, char *missing,
                         size_t size)
{
    pthread_mutex_lock(&g->mu);
    int64_t round = g->round;
    g->entered[replica] = round + 1;
    if (++g->arrived == D) {
        g->arrived = 0;
        g->round++;
        pthread_cond_broadcast(&g->all_here);
        pthread_mutex_unlock(&g->mu);
        return 0;
    }
    unsigned continues = pr_continues();
    struct timespec deadline;
    int rc = ETIMEDOUT;
    while (g->round == round) {
        if (rc == ETIMEDOUT) { // the first pass, or a process continued after a stop: timeout s from now
            clock_gettime(CLOCK_REALTIME, &deadline);
            deadline.tv_sec += (time_t)timeout;
            deadline.tv_nsec += (long)((timeout - (double)(time_t)timeout) * 1e9);
            if (deadline.tv_nsec >= 1000000000L)
                deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;
        }
        rc = timeout > 0 ? pthread_cond_timedwait(&g->all_here, &g->mu, &deadline)
                         : pthread_cond_wait(&g->all_here, &g->mu);
        if (rc == ETIMEDOUT && g->round == round) {
            pthread_mutex_unlock(&g->mu);
            int stopped = pr_stopped_since(&continues);
            pthread_mutex_lock(&g->mu);
            if (!stopped)
                break;
        }
    }
    int late = g->round == round;
    if (late) {
        size_t used = 0;
        missing[0] = 0;
        for (int r = 0; r < D && used + 16 < size; r++)
            if (g->entered[r] != round + 1)
                used += (size_t)snprintf(missing + used, size - used, "%s%d", used ? ", " : "", r);
    }
    pthread_mutex_unlock(&g->mu);
    return late ? -1 : 0;
}

/* Exits naming the stage and replica that waited, and the ones that did not come; with
 * find_stuck, the rank the run is stuck on too (a wait that failed, not a message refused). */
static void reduce_exit(const pr_run *run, const pr_stage_rt *st, const char *why, int find_stuck)
{
    pr_claim_exit();
    fflush(stdout);
    char rank[32] = "";
    if (run->opt.world > 1)
        snprintf(rank, sizeof rank, " (rank %d)", run->opt.rank);
    char blame[PR_ERR_LEN] = "";
    if (find_stuck)
        pr_blame(blame, sizeof blame);
    fprintf(stderr, "run: error: stage %d of replica %d%s: %s (the gradient reduction of step %lld)%s\n",
            st->index, run->replica, rank, why, (long long)st->t + 1, blame);
    exit(1);
}

static void reduce_failed(const pr_run *run, const pr_stage_rt *st, const char *why)
{
    reduce_exit(run, st, why, 1);
}

/* The sum of v[0..n) grouped as a binary tree: sums of 2^j consecutive values, the earliest
 * blocks first, as executor.c's pairwise_insert and pairwise_finish group a window. */
static float pairwise_sum(const float *v, int n)
{
    float level[32];
    unsigned held = 0;
    for (int q = 0; q < n; q++) {
        float x = v[q];
        int j = 0;
        for (; held >> j & 1u; j++) {
            x = level[j] + x;
            held &= ~(1u << j);
        }
        level[j] = x;
        held |= 1u << j;
    }
    float sum = 0.0f;
    int first = 1;
    for (int j = 31; j >= 0; j--)
        if (held >> j & 1u) {
            sum = first ? level[j] : sum + level[j];
            first = 0;
        }
    return sum;
}

/* Replica 0's gradients become the sum of all D: sum[i] = the replicas' i-th elements added
 * in order 0, 1, ..., D-1, or as pairwise_sum groups them (`accumulate pairwise`). */
static void sum_replicas(const pr_run *run, float *sum, float *const *others, int D, int64_t from, int64_t to)
{
    if (run->prog->accumulate_pairwise && D > 2) {
        float v[PR_MAX_RANKS];
        for (int64_t i = from; i < to; i++) {
            v[0] = sum[i];
            for (int q = 1; q < D; q++)
                v[q] = others[q][i];
            sum[i] = pairwise_sum(v, D);
        }
        return;
    }
    for (int64_t i = from; i < to; i++) {
        float acc = sum[i];
        for (int q = 1; q < D; q++)
            acc += others[q][i];
        sum[i] = acc;
    }
}

/* compression dgc (dgc.c), this replica's side on every transport: clips its gradient, adds
 * it to its residual (through its velocity under LARS) and selects this step's pairs. */
static int64_t dgc_compress_own(pr_run *run, pr_stage_rt *st)
{
    int64_t n = st->code->n_params;
    float mu = pr_dgc_momentum_correction(run->prog) ? (float)st->code->optim_rule->momentum : 0.0f;
    float scale = pr_dgc_clip_scale(run->prog, run->replicas, st->grads, n);
    return pr_dgc_compress(&st->dgc, st->grads, n, pr_dgc_count(run->prog, st->t + 1, n), scale, mu);
}

/* compression dgc (dgc.c), the replicas as threads: each replica's pairs, then every replica
 * sums all D replicas' pairs in replica order into its own gradients, so that all hold the
 * same bits; the second barrier keeps the pairs until every replica has read them. */
static void in_process_dgc(pr_run *run, pr_stage_rt *st, double *loss, int *stop)
{
    pr_replicas *sh = run->shared;
    replica_group *g = &sh->group[st->index];
    int D = sh->D, r = run->replica;
    int64_t n = st->code->n_params;
    char missing[256], why[PR_ERR_LEN];
    int64_t k = dgc_compress_own(run, st);
    // what the exchange carries from this replica: its count, then its list (paci_dgc.h)
    st->exchange_bytes += (int64_t)sizeof(int64_t) + paci_dgc_list_words(n, k) * (int64_t)sizeof(uint32_t);
    st->exchanges++;
    g->pairs[r] = &st->dgc;
    g->loss[r] = *loss;
    g->stop[r] = *stop;
    for (int phase = 0; phase < 2; phase++) {
        if (group_barrier(g, D, r, run->opt.peer_timeout, missing, sizeof missing) != 0) {
            snprintf(why, sizeof why, "replica %s of stage %d did not come for %g s", missing,
                     st->index, run->opt.peer_timeout);
            reduce_failed(run, st, why);
        }
        if (phase == 0) {
            pr_dgc_sum(st->grads, n, g->pairs, D);
            double total = 0.0;
            int any = 0;
            for (int q = 0; q < D; q++) {
                total += g->loss[q];
                any |= g->stop[q];
            }
            *loss = total;
            *stop = any;
        }
    }
}

static void in_process_reduce(pr_run *run, pr_stage_rt *st, double *loss, int *stop)
{
    pr_replicas *sh = run->shared;
    replica_group *g = &sh->group[st->index];
    int D = sh->D, r = run->replica;
    char missing[256], why[PR_ERR_LEN];
    if (run->prog->dgc_density > 0) {
        in_process_dgc(run, st, loss, stop);
        return;
    }
    // what the exchange carries from this replica: its gradients
    st->exchange_bytes += st->code->n_params * (int64_t)sizeof(float);
    st->exchanges++;
    g->grads[r] = st->grads;
    g->loss[r] = *loss;
    g->stop[r] = *stop;
    for (int phase = 0; phase < 3; phase++) {
        if (group_barrier(g, D, r, run->opt.peer_timeout, missing, sizeof missing) != 0) {
            snprintf(why, sizeof why, "replica %s of stage %d did not come for %g s", missing,
                     st->index, run->opt.peer_timeout);
            reduce_failed(run, st, why);
        }
        if (phase == 0) {
            // Replica r sums its slice of the elements into replica 0's.
            int64_t n = st->code->n_params, slice = (n + D - 1) / D;
            int64_t from = (int64_t)r * slice, to = from + slice < n ? from + slice : n;
            sum_replicas(run, g->grads[0], g->grads, D, from, to);
            double total = 0.0;
            int any = 0;
            for (int q = 0; q < D; q++) {
                total += g->loss[q];
                any |= g->stop[q];
            }
            *loss = total;
            *stop = any;
        } else if (phase == 1 && r != 0) {
            memcpy(st->grads, g->grads[0], (size_t)st->code->n_params * sizeof(float));
        }
    }
}

#define REDUCE_MAGIC 0x50414352u /* "PACR" */

/* What travels before the gradients, both ways: the step, and the loss and stop flag (each
 * replica's to replica 0, the sums from it). */
typedef struct reduce_head {
    uint32_t magic, replica;
    int64_t step;
    double loss;
    int32_t stop, pad;
} reduce_head;

/* Moves `bytes` over fd to or from replica `peer` of the stage (reading when `in`) by
 * `deadline` (shared by a message's parts); what it writes counts as this replica's exchange.
 * A failure names the peer, leaves the wait in place for pr_blame and exits. */
static void reduce_bytes(pr_run *run, pr_stage_rt *st, int fd, int peer, int in, void *data, size_t bytes,
                         pr_deadline *deadline)
{
    int rank = peer * run->devices + run->tab->stage_device[st->index];
    pr_wait_begin(PR_WAIT_REDUCE, st->t + 1, &rank, 1);
    int rc = in ? pr_sock_read(fd, data, bytes, deadline) : pr_sock_write(fd, data, bytes, deadline);
    if (rc == 0) {
        if (!in)
            st->exchange_bytes += (int64_t)bytes;
        pr_wait_end();
        return;
    }
    char why[PR_ERR_LEN];
    if (errno == ETIMEDOUT)
        snprintf(why, sizeof why, "replica %d of stage %d (rank %d) %s for %g s", peer, st->index,
                 rank, in ? "sent nothing" : "took nothing", run->opt.peer_timeout);
    else
        snprintf(why, sizeof why, "replica %d of stage %d (rank %d) closed the connection", peer,
                 st->index, rank);
    reduce_failed(run, st, why);
}

/* A message from replica `peer` that this step cannot take (printf-style: what it sent):
 * names the peer and exits. */
static void reduce_refused(pr_run *run, pr_stage_rt *st, int peer, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void reduce_refused(pr_run *run, pr_stage_rt *st, int peer, const char *fmt, ...)
{
    char what[PR_ERR_LEN / 2], why[PR_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(why, sizeof why, "replica %d of stage %d (rank %d) %s", peer, st->index,
             peer * run->devices + run->tab->stage_device[st->index], what);
    reduce_exit(run, st, why, 0); // nobody is stuck: the peer answered, wrongly
}

static pr_deadline reduce_deadline(const pr_run *run)
{
    return pr_deadline_in(run->opt.peer_timeout);
}

/* Moves the head over fd (reading when `in`, then checking it is this step's), then n floats;
 * a failure names the peer replica and exits. */
static void reduce_move(pr_run *run, pr_stage_rt *st, int fd, int peer, int in, reduce_head *h,
                        float *data, size_t n)
{
    pr_deadline deadline = reduce_deadline(run);
    reduce_bytes(run, st, fd, peer, in, h, sizeof *h, &deadline);
    if (in && (h->magic != REDUCE_MAGIC || h->step != st->t))
        reduce_refused(run, st, peer, "sent step %lld's gradients, not step %lld's", (long long)h->step + 1,
                       (long long)st->t + 1);
    reduce_bytes(run, st, fd, peer, in, data, n * sizeof(float), &deadline);
}

#define PAIRS_MAGIC 0x50414350u /* "PACP" */

/* compression dgc over TCP: before each pair list, whose list it is and its count of pairs;
 * then the list's 32-bit words (paci_dgc.h: a count per block and a word per pair, or the n
 * values when the count is n). */
typedef struct pairs_head {
    uint32_t magic, replica;
    int64_t count;
} pairs_head;

static void send_pairs(pr_run *run, pr_stage_rt *st, int fd, int peer, int whose, const pr_dgc_buffers *b,
                       pr_deadline *deadline)
{
    pairs_head ph = {PAIRS_MAGIC, (uint32_t)whose, b->k};
    size_t words = (size_t)paci_dgc_list_words(st->code->n_params, b->k);
    reduce_bytes(run, st, fd, peer, 0, &ph, sizeof ph, deadline);
    reduce_bytes(run, st, fd, peer, 0, b->list, words * sizeof *b->list, deadline);
}

/* Receives replica `whose` list from `peer` into b (room for `want` pairs). Every replica
 * sends exactly this step's k (pr_dgc_count), so any other count is refused before a pair
 * is read, and a list that pr_dgc_sum could not take (block counts that do not run up to k,
 * offsets out of order or past their block) after. */
static void receive_pairs(pr_run *run, pr_stage_rt *st, int fd, int peer, int whose, pr_dgc_buffers *b,
                          int64_t want, pr_deadline *deadline)
{
    pairs_head ph;
    reduce_bytes(run, st, fd, peer, 1, &ph, sizeof ph, deadline);
    if (ph.magic != PAIRS_MAGIC || ph.replica != (uint32_t)whose)
        reduce_refused(run, st, peer, "sent no pair list of replica %d where one was due (corrupt, or "
                       "another program)", whose);
    if (ph.count != want)
        reduce_refused(run, st, peer, "sent a list of %lld pairs for replica %d, step %lld's compression "
                       "sends %lld (corrupt, or another program)", (long long)ph.count, whose,
                       (long long)st->t + 1, (long long)want);
    int64_t n = st->code->n_params;
    char why[160];
    reduce_bytes(run, st, fd, peer, 1, b->list, (size_t)paci_dgc_list_words(n, want) * sizeof *b->list, deadline);
    if (pr_dgc_check_list(b->list, n, want, why, sizeof why) != 0)
        reduce_refused(run, st, peer, "sent replica %d's list of %lld pairs with %s (corrupt)", whose,
                       (long long)want, why);
    b->k = want;
}

/* The other replicas' lists of this step, with room for `words` words each (k falls over
 * the warm-up, so the first steps' room serves the run). */
static pr_dgc_buffers *peer_lists(pr_run *run, int64_t words)
{
    if (!run->reduce_pairs)
        run->reduce_pairs = pr_alloc((size_t)run->replicas * sizeof *run->reduce_pairs);
    if (words > run->reduce_pairs_room) {
        for (int q = 0; q < run->replicas; q++) {
            pr_dgc_free(&run->reduce_pairs[q]);
            run->reduce_pairs[q].list = pr_alloc((size_t)words * sizeof(uint32_t));
        }
        run->reduce_pairs_room = words;
    }
    return run->reduce_pairs;
}

/* compression dgc, one process per stage and replica: an allgather of the pair lists through
 * replica 0 of the stage, over the dense sum's sockets. Replica r > 0 sends the head (its loss
 * and stop flag) and its list; replica 0 answers each with the head (the sums) and every other
 * replica's list, in replica order. Then every replica sums all D lists in replica order
 * 0..D-1 with pr_dgc_sum, as the threads do: all hold the threads' bits. */
static void tcp_dgc(pr_run *run, pr_stage_rt *st, double *loss, int *stop)
{
    int D = run->replicas, me = run->replica;
    int64_t k = dgc_compress_own(run, st);
    st->exchanges++;
    pr_dgc_buffers *lists = peer_lists(run, paci_dgc_list_words(st->code->n_params, k));
    const pr_dgc_buffers *from[PR_MAX_REPLICAS];
    for (int q = 0; q < D; q++)
        from[q] = q == me ? &st->dgc : &lists[q];
    reduce_head h = {REDUCE_MAGIC, (uint32_t)me, st->t, *loss, *stop, 0};
    if (me > 0) {
        int fd = run->reduce_fd[0];
        pr_deadline deadline = reduce_deadline(run);
        reduce_bytes(run, st, fd, 0, 0, &h, sizeof h, &deadline);
        send_pairs(run, st, fd, 0, me, &st->dgc, &deadline);
        deadline = reduce_deadline(run);
        reduce_bytes(run, st, fd, 0, 1, &h, sizeof h, &deadline);
        if (h.magic != REDUCE_MAGIC || h.step != st->t)
            reduce_refused(run, st, 0, "sent step %lld's pairs, not step %lld's", (long long)h.step + 1,
                           (long long)st->t + 1);
        for (int q = 0; q < D; q++)
            if (q != me)
                receive_pairs(run, st, fd, 0, q, &lists[q], k, &deadline);
        *loss = h.loss;
        *stop = h.stop;
    } else {
        double total = *loss;
        int any = *stop;
        for (int q = 1; q < D; q++) {
            pr_deadline deadline = reduce_deadline(run);
            reduce_bytes(run, st, run->reduce_fd[q], q, 1, &h, sizeof h, &deadline);
            if (h.magic != REDUCE_MAGIC || h.step != st->t)
                reduce_refused(run, st, q, "sent step %lld's pairs, not step %lld's", (long long)h.step + 1,
                               (long long)st->t + 1);
            receive_pairs(run, st, run->reduce_fd[q], q, q, &lists[q], k, &deadline);
            total += h.loss;
            any |= h.stop;
        }
        h = (reduce_head){REDUCE_MAGIC, 0, st->t, total, any, 0};
        for (int q = 1; q < D; q++) {
            pr_deadline deadline = reduce_deadline(run);
            reduce_bytes(run, st, run->reduce_fd[q], q, 0, &h, sizeof h, &deadline);
            for (int other = 0; other < D; other++)
                if (other != q)
                    send_pairs(run, st, run->reduce_fd[q], q, other, from[other], &deadline);
        }
        *loss = total;
        *stop = any;
    }
    pr_dgc_sum(st->grads, st->code->n_params, from, D);
}

static void tcp_reduce(pr_run *run, pr_stage_rt *st, double *loss, int *stop)
{
    if (run->prog->dgc_density > 0) {
        tcp_dgc(run, st, loss, stop);
        return;
    }
    size_t n = (size_t)st->code->n_params;
    st->exchanges++;
    reduce_head h = {REDUCE_MAGIC, (uint32_t)run->replica, st->t, *loss, *stop, 0};
    if (run->replica > 0) {
        reduce_move(run, st, run->reduce_fd[0], 0, 0, &h, st->grads, n);
        reduce_move(run, st, run->reduce_fd[0], 0, 1, &h, st->grads, n);
        *loss = h.loss;
        *stop = h.stop;
        return;
    }
    // A pairwise sum of more than two needs every replica's gradients at once.
    int D = run->replicas, keep_all = run->prog->accumulate_pairwise && D > 2;
    if (!run->reduce_buffer) { // room for the largest stage this process reduces (chunks: several)
        size_t most = 0;
        for (int s = 0; s < run->p; s++)
            if (run->tab->stage_device[s] == run->tab->stage_device[st->index])
                most = (size_t)run->stage[s].code->n_params > most ? (size_t)run->stage[s].code->n_params : most;
        run->reduce_buffer = pr_alloc((size_t)(keep_all ? D - 1 : 1) * most * sizeof(float));
    }
    double total = *loss;
    int any = *stop;
    for (int q = 1; q < D; q++) {
        float *in = run->reduce_buffer + (keep_all ? (size_t)(q - 1) * n : 0);
        reduce_move(run, st, run->reduce_fd[q], q, 1, &h, in, n);
        if (!keep_all)
            for (size_t i = 0; i < n; i++) // replica order, as in one process
                st->grads[i] = st->grads[i] + in[i];
        total += h.loss;
        any |= h.stop;
    }
    if (keep_all) {
        float **others = pr_alloc((size_t)D * sizeof *others);
        for (int q = 1; q < D; q++)
            others[q] = run->reduce_buffer + (size_t)(q - 1) * n;
        sum_replicas(run, st->grads, others, D, 0, (int64_t)n);
        free(others);
    }
    h = (reduce_head){REDUCE_MAGIC, 0, st->t, total, any, 0};
    for (int q = 1; q < run->replicas; q++)
        reduce_move(run, st, run->reduce_fd[q], q, 0, &h, st->grads, n);
    *loss = total;
    *stop = any;
}

/* The wait-for edge of a reduction over the device's transport: every other replica of the
 * stage (which of them is late, the collective does not say). */
static void wait_for_replicas(const pr_run *run, const pr_stage_rt *st)
{
    int others[PR_MAX_REPLICAS], n = 0;
    for (int q = 0; q < run->replicas; q++)
        if (q != run->replica)
            others[n++] = q * run->devices + run->tab->stage_device[st->index];
    pr_wait_begin(PR_WAIT_REDUCE, st->t + 1, others, n);
}

/* A transport's failure, named: a timeout (a replica stuck or gone) or its own words. */
static void native_failed(pr_run *run, pr_stage_rt *st, int rc, const char *err)
{
    char why[PR_ERR_LEN];
    if (rc == PR_LINK_TIMEOUT)
        snprintf(why, sizeof why, "no %s reduction with the other replicas of stage %d within %g s "
                 "(one of them is stuck or gone)", run->links->name, st->index, run->opt.peer_timeout);
    else
        snprintf(why, sizeof why, "the %s reduction failed: %s", run->links->name, err);
    reduce_failed(run, st, why);
}

/* The overlap is dense only: compression dgc selects from the whole window's gradient. */
static int replicas_overlaps(const pr_run *run, const pr_stage_rt *st)
{
    return run->replicas > 1 && !run->shared && run->links && run->links->reduce_start &&
           run->prog->dgc_density <= 0 && st->window_backwards + 1 == run->K;
}

static void replicas_ready(void *ctx, int64_t offset, int64_t count)
{
    pr_ready_ctx *c = ctx;
    pr_stage_rt *st = c->st;
    if (offset < 0 || count <= 0 || offset + count > st->code->n_params)
        pr_internal("stage %d's backward reported gradients [%lld, %lld) of %lld", st->index,
                    (long long)offset, (long long)(offset + count), (long long)st->code->n_params);
    char err[PR_ERR_LEN] = "";
    pr_run *run = c->run;
    wait_for_replicas(run, st);
    int rc = run->links->reduce_start(run, st->index, st->grads + offset, (size_t)count, err);
    if (rc != PR_LINK_OK)
        native_failed(run, st, rc, err);
    pr_wait_end();
    st->reduce_started += count;
}

/* On GPUs: the device's transport (NCCL's allreduce; its order of addition is NCCL's). With
 * the overlap, the gradients' sums are already under way, and the step adds only the values. */
static void native_reduce(pr_run *run, pr_stage_rt *st, double *loss, int *stop)
{
    double values[2] = {*loss, (double)*stop};
    char err[PR_ERR_LEN] = "";
    int64_t n = st->code->n_params;
    if (st->reduce_started != 0 && st->reduce_started != n)
        pr_internal("stage %d's last backward reported %lld of its %lld gradients", st->index,
                    (long long)st->reduce_started, (long long)n);
    if (st->reduce_started == n)
        n = 0;
    st->reduce_started = 0;
    wait_for_replicas(run, st);
    int rc = run->links->reduce(run, st->index, st->grads, (size_t)n, values, 2, err);
    if (rc != PR_LINK_OK)
        native_failed(run, st, rc, err);
    pr_wait_end();
    *loss = values[0];
    *stop = values[1] > 0.0;
}

/* compression dgc over the device's transport (dgc.c's steps; runtime/cuda/dgc.c on the GPU):
 * this replica's pairs selected on the device into its slot, every replica's slots gathered
 * (NCCL's allgather: the same k everywhere, as k depends only on the step and n), then the
 * slots summed in replica order on the device, so every replica holds the same bits. */
static void native_dgc(pr_run *run, pr_stage_rt *st, double *loss, int *stop)
{
    const pr_device *dev = run->dev;
    int s = st->index, D = run->replicas;
    int64_t n = st->code->n_params, k = pr_dgc_count(run->prog, st->t + 1, n);
    if (!run->links->gather || !dev->dgc_compress || !st->dgc.residual) // never dense in silence
        pr_internal("stage %d: compression dgc over %s without its gather or device state", s, run->links->name);
    float scale = 1.0f, mu = pr_dgc_momentum_correction(run->prog) ? (float)st->code->optim_rule->momentum : 0.0f;
    if (run->prog->dgc_clip > 0) { // the local norm, summed on the device in its own order
        pr_tensor whole = {.name = "gradients", .size = n};
        double sum = 0.0;
        dev->sumsq(s, st->grads, &whole, 1, &sum);
        scale = pr_clip_scale(sqrt(sum), run->prog->dgc_clip / sqrt((double)D));
    }
    uint32_t *slots = dev->dgc_compress(s, &st->dgc, st->grads, k, scale, mu, run->replica);
    double values[2] = {*loss, (double)*stop};
    char err[PR_ERR_LEN] = "";
    wait_for_replicas(run, st);
    int rc = run->links->gather(run, s, slots, (size_t)paci_dgc_list_words(n, k), values, 2, err);
    if (rc != PR_LINK_OK)
        native_failed(run, st, rc, err);
    pr_wait_end();
    dev->dgc_sum(s, st->grads, slots, k);
    *loss = values[0];
    *stop = values[1] > 0.0;
}

/* A skipped step's compression undone: its pairs were sent and summed but never stepped on,
 * so they stay in the residual (never lost), and its own gradient is dropped with the step. */
static void replicas_skip(pr_run *run, pr_stage_rt *st)
{
    if (run->prog->dgc_density <= 0 || !st->dgc.residual)
        return;
    if (run->dev->dgc_open) // the device keeps them (as pr_replicas_open opened them)
        run->dev->dgc_undo(st->index, &st->dgc);
    else
        pr_dgc_undo(&st->dgc, st->code->n_params);
}

static void replicas_reduce(pr_run *run, pr_stage_rt *st, double *loss, int *stop)
{
    if (run->replicas <= 1)
        return;
    if (run->shared)
        in_process_reduce(run, st, loss, stop);
    else if (run->links && run->prog->dgc_density > 0)
        native_dgc(run, st, loss, stop);
    else if (run->links && run->links->reduce)
        native_reduce(run, st, loss, stop);
    else if (run->reduce_fd)
        tcp_reduce(run, st, loss, stop);
    else
        pr_internal("stage %d of replica %d: no way to reach the other replicas", st->index,
                    run->replica);
}
