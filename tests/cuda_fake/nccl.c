/* nccl.c: the fake libnccl.so.2 of the fake CUDA stack (test tooling, never part of pacic or
 * run). It implements the NCCL calls runtime/cuda/nccl_transport.c makes, with NCCL's rules
 * for point-to-point on two-rank communicators: the k-th send from a rank pairs with the
 * peer's k-th receive, a send completes only once the receiver has taken its data, work is
 * queued on the caller's stream at ncclGroupEnd, and ncclCommAbort stops what is queued. And
 * ncclAllReduce (sum, float32 or float64) on communicators of up to FAKE_MAX_RANKS ranks: the
 * k-th allreduce of every rank meets the others' k-th, with the same count and type, and the
 * sum adds the ranks in order 0, 1, ... (real NCCL promises no order). And ncclAllGather (any
 * type): rank q's sendcount elements land at recvbuff + q x sendcount on every rank, as NCCL
 * defines it, in place when sendbuff is the rank's own place there; it is a collective of the
 * same sequence as the allreduces (the k-th collective of every rank must be the same kind,
 * count and type).
 *
 * One mechanism serves ranks in one process and in several: each communicator is a POSIX
 * shared-memory segment named from its unique id ("/fakenccl-<hex>"), created by whichever
 * rank comes first and unlinked once both ranks have mapped it (or when a lone rank leaves).
 * A segment holds one channel per direction: a message header and a 1 MiB staging buffer
 * through which the message moves in chunks. A broken rule ends the process with a message
 * that starts "fake nccl:". FAKE_NCCL_RECV_DELAY_US=N delays every receive (run_batch).
 */
#include <errno.h>
#include <fcntl.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fake.h"

#define STAGE_BYTES ((size_t)1 << 20)
#define FAKE_MAX_RANKS 8
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "the segment's atomics must work across processes, so lock-free");

/* One direction of a communicator, in the shared segment: sender -> receiver. */
typedef struct {
    atomic_ullong announced;     /* messages whose header is posted */
    atomic_ullong done;          /* messages the receiver has taken in full */
    atomic_ullong written, read; /* chunks into and out of stage, over the channel's life */
    atomic_int broken;           /* the receiver found a mismatch; recv_* say what it wanted */
    int type, recv_type;         /* header of message announced - 1 */
    size_t count, recv_count;
    unsigned char stage[STAGE_BYTES];
} channel;

/* The allreduces of a communicator: every rank copies a chunk of its buffer into its slot,
 * waits for all, sums the slots in rank order into its buffer, and marks the chunk taken; a
 * slot is rewritten only once every rank has taken the chunk before. Pages of the slots are
 * touched only by communicators that reduce. */
typedef struct {
    atomic_ullong deposited[FAKE_MAX_RANKS], taken[FAKE_MAX_RANKS]; /* chunks, over the life */
    atomic_int type[FAKE_MAX_RANKS], gather[FAKE_MAX_RANKS];
    atomic_ullong count[FAKE_MAX_RANKS]; /* of the collective each rank is in */
    unsigned char slot[FAKE_MAX_RANKS][STAGE_BYTES];
} collective;

typedef struct {
    atomic_int joined[FAKE_MAX_RANKS];
    atomic_int nranks;   /* set by the first rank that maps the segment */
    atomic_int unlinked;
    channel ch[2]; /* ch[r]: from rank r to rank 1 - r (two-rank communicators) */
    collective coll;
} segment;

struct ncclComm {
    struct ncclComm *next;     /* the list of comms not yet freed */
    segment *seg;              /* mapped once per process: shared by its ranks here */
    char name[48];
    int live, rank, nranks, gpu, blocking; /* live: until destroy or abort */
    atomic_ullong colls, colls_done; /* allreduces posted, finished (they run in order) */
    unsigned long long chunks;  /* allreduce chunks this rank has taken */
    atomic_int refs;           /* the caller's, until destroy or abort, and one per posted op */
    atomic_int aborted, finalizing;
    atomic_long pending;       /* ops posted and not finished */
    atomic_ullong sends, recvs; /* sequence numbers handed out */
    pthread_mutex_t step;      /* held while an op touches the segment or the caller's memory */
};

/* One send, receive or allreduce; a queued batch holds a (group, stream)'s ops. */
typedef struct {
    struct ncclComm *comm;
    CUstream stream;
    int send, reduce, gather, type, state; /* gather: an allgather (reduce is set too) */
    size_t count, bytes, moved;
    unsigned char *host;       /* allgather: the receive buffer, nranks x bytes */
    const unsigned char *from; /* allgather: the rank's send buffer */
    unsigned long long seq;
} p2p;

typedef struct {
    int n;
    p2p op[];
} batch;

static pthread_mutex_t comms_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm *comms;

/* Group state is per thread, as NCCL's is. */
static _Thread_local int depth, group_nonblocking, npending, cap_pending;
static _Thread_local p2p *pending;
static _Thread_local char last_error[256];

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
    static atomic_int dying;
    if (atomic_exchange(&dying, 1))
        for (;;)
            pause(); // another thread is already ending the process, with its own message
    va_list ap;
    va_start(ap, fmt);
    flockfile(stderr);
    fputs("fake nccl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    fflush(stderr);
    funlockfile(stderr);
    va_end(ap);
    // Best effort (the lock may be ours): no name a peer has yet to map outlives the process.
    pthread_mutex_trylock(&comms_lock);
    for (struct ncclComm *c = comms; c; c = c->next)
        if (!atomic_exchange(&c->seg->unlinked, 1))
            shm_unlink(c->name);
    abort();
}

static void nap(long ns)
{
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

static const char *type_names[ncclNumTypes] = {"int8", "uint8", "int32", "uint32", "int64",
    "uint64", "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
static const size_t type_sizes[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

static const char *type_name(int t)
{
    return t >= 0 && t < ncclNumTypes ? type_names[t] : "?";
}

/* Dies unless comm is a communicator this process made and has not destroyed or aborted. */
static struct ncclComm *check_live(ncclComm_t comm, const char *call)
{
    pthread_mutex_lock(&comms_lock);
    struct ncclComm *c = comms;
    while (c && (c != comm || !c->live))
        c = c->next;
    pthread_mutex_unlock(&comms_lock);
    if (!c)
        die("%s on %p, which is not a live communicator (never made, destroyed or aborted)", call,
            (void *)comm);
    return c;
}

static int ready(struct ncclComm *c)
{
    for (int r = 0; r < c->nranks; r++)
        if (!atomic_load(&c->seg->joined[r]))
            return 0;
    return 1;
}

static void release(struct ncclComm *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    pthread_mutex_lock(&comms_lock);
    struct ncclComm **at = &comms, *o;
    while (*at != c)
        at = &(*at)->next;
    *at = c->next;
    for (o = comms; o && o->seg != c->seg; o = o->next)
        ;
    pthread_mutex_unlock(&comms_lock);
    if (!o && !atomic_exchange(&c->seg->unlinked, 1))
        shm_unlink(c->name);
    if (!o)
        munmap(c->seg, sizeof *c->seg);
    pthread_mutex_destroy(&c->step);
    free(c);
}

ncclResult_t ncclGetVersion(int *version)
{
    *version = 22809;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    for (size_t got = 0; got < sizeof id->internal;) {
        ssize_t n = getrandom(id->internal + got, sizeof id->internal - got, 0);
        if (n < 0 && errno != EINTR)
            die("getrandom: %s", strerror(errno));
        got += n > 0 ? (size_t)n : 0;
    }
    return ncclSuccess;
}

/* Maps the segment called name, creating it if this rank comes first; NULL on a system error,
 * which last_error describes. */
static segment *attach(const char *name)
{
    int fd;
    for (;;) {
        fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd >= 0) {
            if (ftruncate(fd, sizeof(segment)) == 0)
                break;
            snprintf(last_error, sizeof last_error, "ftruncate %s: %s", name, strerror(errno));
            close(fd);
            shm_unlink(name);
            return NULL;
        }
        if (errno != EEXIST)
            break;
        fd = shm_open(name, O_RDWR, 0);
        if (fd < 0 && errno == ENOENT)
            continue; // the other rank left (and unlinked) between our two opens
        if (fd < 0)
            break;
        // The creator sizes the segment right after making it; until then a map would fault.
        struct stat st;
        while (fstat(fd, &st) == 0 && (size_t)st.st_size < sizeof(segment))
            nap(50000);
        break;
    }
    if (fd < 0) {
        snprintf(last_error, sizeof last_error, "shm_open %s: %s", name, strerror(errno));
        return NULL;
    }
    void *p = mmap(NULL, sizeof(segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        snprintf(last_error, sizeof last_error, "mmap %s: %s", name, strerror(errno));
        return NULL;
    }
    return p;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config)
{
    if (nranks < 2 || nranks > FAKE_MAX_RANKS)
        die("ncclCommInitRankConfig with nranks %d: the fake has communicators of 2..%d ranks",
            nranks, FAKE_MAX_RANKS);
    const char *lazy = getenv("FAKE_CUDA_LAZY");
    if (lazy && strcmp(lazy, "0") != 0) // a lazy sender stream would never meet its receive
        die("FAKE_CUDA_LAZY with NCCL: not supported by the fake");
    if (rank < 0 || rank >= nranks)
        die("ncclCommInitRankConfig with rank %d of %d", rank, nranks);
    int blocking = !config || config->blocking != 0;
    if (blocking && depth > 0)
        die("a blocking ncclCommInitRankConfig inside a group: not supported by the fake");
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c)
        die("out of memory");
    int at = snprintf(c->name, sizeof c->name, "/fakenccl-");
    for (int i = 0; i < 16; i++)
        at += snprintf(c->name + at, sizeof c->name - (size_t)at, "%02x",
                       (unsigned char)id.internal[i]);
    pthread_mutex_lock(&comms_lock);
    // Ranks in one process share one mapping: atomics at one address, which TSan follows.
    for (struct ncclComm *o = comms; o && !c->seg; o = o->next)
        if (strcmp(o->name, c->name) == 0)
            c->seg = o->seg;
    if (!c->seg && !(c->seg = attach(c->name))) {
        pthread_mutex_unlock(&comms_lock);
        free(c);
        return ncclSystemError;
    }
    int expected = 0;
    if (!atomic_compare_exchange_strong(&c->seg->nranks, &expected, nranks) && expected != nranks)
        die("rank %d joins communicator %s as one of %d ranks, another rank said %d", rank,
            c->name, nranks, expected);
    if (atomic_exchange(&c->seg->joined[rank], 1))
        die("rank %d joins communicator %s twice", rank, c->name);
    c->live = 1;
    c->rank = rank;
    c->nranks = nranks;
    c->gpu = fake_current_gpu();
    c->blocking = blocking;
    atomic_init(&c->refs, 1);
    pthread_mutex_init(&c->step, NULL);
    c->next = comms;
    comms = c;
    pthread_mutex_unlock(&comms_lock);
    // Both ranks hold the segment now: unlinking its name early leaves nothing behind a crash.
    if (ready(c) && !atomic_exchange(&c->seg->unlinked, 1))
        shm_unlink(c->name);
    *comm = c;
    if (depth > 0) {
        group_nonblocking = 1;
        return ncclSuccess;
    }
    while (blocking && !ready(c))
        nap(100000);
    return ready(c) ? ncclSuccess : ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *result)
{
    struct ncclComm *c = check_live(comm, "ncclCommGetAsyncError");
    if (atomic_load(&c->finalizing))
        *result = atomic_load(&c->pending) > 0 ? ncclInProgress : ncclSuccess;
    else
        *result = ready(c) ? ncclSuccess : ncclInProgress;
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void)
{
    depth++;
    return ncclSuccess;
}

/* out[i] = slot 0's + slot 1's + ... (rank order), for n bytes of type t. */
static void sum_slots(const collective *k, int nranks, int t, unsigned char *out, size_t n)
{
    if (t == ncclFloat32) {
        float *o = (float *)out;
        for (size_t i = 0; i < n / 4; i++) {
            float acc = ((const float *)k->slot[0])[i];
            for (int q = 1; q < nranks; q++)
                acc += ((const float *)k->slot[q])[i];
            o[i] = acc;
        }
    } else {
        double *o = (double *)out;
        for (size_t i = 0; i < n / 8; i++) {
            double acc = ((const double *)k->slot[0])[i];
            for (int q = 1; q < nranks; q++)
                acc += ((const double *)k->slot[q])[i];
            o[i] = acc;
        }
    }
}

/* An allreduce's next chunk: deposit (once every rank took the last chunk), then sum (once
 * every rank deposited this one); 1 once the whole buffer holds the sum. */
static int step_reduce(p2p *p, int *moved)
{
    struct ncclComm *c = p->comm;
    collective *k = &c->seg->coll;
    if (atomic_load(&c->colls_done) != p->seq) // an earlier allreduce of the comm runs first
        return 0;
    while (p->moved < p->bytes) {
        size_t n = p->bytes - p->moved < STAGE_BYTES ? p->bytes - p->moved : STAGE_BYTES;
        unsigned long long g = c->chunks;
        if (p->state == 0) {
            for (int q = 0; q < c->nranks; q++)
                if (atomic_load(&k->taken[q]) < g)
                    return 0;
            // What this chunk belongs to, checked by every rank before any rewrites it.
            atomic_store(&k->type[c->rank], p->type);
            atomic_store(&k->gather[c->rank], p->gather);
            atomic_store(&k->count[c->rank], p->count);
            memcpy(k->slot[c->rank], (p->gather ? p->from : p->host) + p->moved, n);
            atomic_store(&k->deposited[c->rank], g + 1);
            p->state = 1, *moved = 1;
        }
        for (int q = 0; q < c->nranks; q++)
            if (atomic_load(&k->deposited[q]) < g + 1)
                return 0;
        for (int q = 0; q < c->nranks; q++)
            if (atomic_load(&k->type[q]) != p->type || atomic_load(&k->count[q]) != p->count ||
                atomic_load(&k->gather[q]) != p->gather)
                die("rank %d %s %zu %s as collective %llu on %s, and rank %d %s %llu %s", c->rank,
                    p->gather ? "gathers" : "reduces", p->count, type_name(p->type), p->seq, c->name, q,
                    atomic_load(&k->gather[q]) ? "gathers" : "reduces",
                    (unsigned long long)atomic_load(&k->count[q]), type_name(atomic_load(&k->type[q])));
        if (p->gather)
            for (int q = 0; q < c->nranks; q++) // rank q's part at q x count, NCCL's layout
                memcpy(p->host + (size_t)q * p->bytes + p->moved, k->slot[q], n);
        else
            sum_slots(k, c->nranks, p->type, p->host + p->moved, n);
        c->chunks = g + 1;
        atomic_store(&k->taken[c->rank], g + 1);
        p->moved += n, p->state = 0, *moved = 1;
    }
    atomic_fetch_add(&c->colls_done, 1);
    return 1;
}

/* Advances op p as far as it can without waiting; 1 once it has finished. */
static int step(p2p *p, int *moved)
{
    struct ncclComm *c = p->comm;
    channel *ch = &c->seg->ch[p->send ? c->rank : 1 - c->rank];
    if (atomic_load(&c->aborted))
        return 1;
    if (p->reduce)
        return step_reduce(p, moved);
    if (p->send) {
        if (atomic_load(&ch->broken))
            die("rank %d sent %zu %s as message %llu on %s, and rank %d expected %zu %s", c->rank,
                ch->count, type_name(ch->type), atomic_load(&ch->announced) - 1, c->name,
                1 - c->rank, ch->recv_count, type_name(ch->recv_type));
        if (p->state == 0 && atomic_load(&ch->done) == p->seq) {
            ch->type = p->type;
            ch->count = p->count;
            atomic_store(&ch->announced, p->seq + 1);
            p->state = 1, *moved = 1;
        }
        if (p->state == 1 && p->moved < p->bytes &&
            atomic_load(&ch->written) == atomic_load(&ch->read)) {
            size_t n = p->bytes - p->moved < STAGE_BYTES ? p->bytes - p->moved : STAGE_BYTES;
            memcpy(ch->stage, p->host + p->moved, n);
            p->moved += n, *moved = 1;
            atomic_fetch_add(&ch->written, 1);
        }
        return p->state == 1 && p->moved == p->bytes && atomic_load(&ch->done) > p->seq;
    }
    if (p->state == 0) {
        if (atomic_load(&ch->announced) != p->seq + 1)
            return 0;
        if (ch->type != p->type || ch->count != p->count) {
            ch->recv_type = p->type;
            ch->recv_count = p->count;
            atomic_store(&ch->broken, 1);
            die("rank %d expected %zu %s as message %llu on %s, and rank %d sent %zu %s", c->rank,
                p->count, type_name(p->type), p->seq, c->name, 1 - c->rank, ch->count,
                type_name(ch->type));
        }
        p->state = 1, *moved = 1;
    }
    if (p->moved < p->bytes && atomic_load(&ch->written) > atomic_load(&ch->read)) {
        size_t n = p->bytes - p->moved < STAGE_BYTES ? p->bytes - p->moved : STAGE_BYTES;
        memcpy(p->host + p->moved, ch->stage, n);
        p->moved += n, *moved = 1;
        atomic_fetch_add(&ch->read, 1);
    }
    if (p->moved < p->bytes)
        return 0;
    atomic_store(&ch->done, p->seq + 1);
    return 1;
}

/* FAKE_NCCL_RECV_DELAY_US: microseconds a batch holding a receive waits before it starts, so
 * every send waits long for its receive and a sender that rewrites a buffer an unfinished send
 * still reads is caught (the receiver gets the new bytes). 0, the default: no wait. */
static long recv_delay_us(void)
{
    static atomic_long delay = -1;
    long d = atomic_load(&delay);
    if (d < 0) {
        const char *v = getenv("FAKE_NCCL_RECV_DELAY_US");
        char *end = NULL;
        d = v && *v ? strtol(v, &end, 10) : 0;
        if (v && *v && (*end || d < 0 || d > 10000000))
            die("FAKE_NCCL_RECV_DELAY_US=%s: want an integer in 0..10000000", v);
        atomic_store(&delay, d);
    }
    return d;
}

/* The stream worker's part: progresses all of a batch's ops together, so a send waiting for
 * its receive never holds up a receive in the same group. */
static void run_batch(void *arg)
{
    batch *b = arg;
    int left = b->n;
    long delay = recv_delay_us();
    for (int i = 0; i < b->n && delay > 0; i++)
        if (!b->op[i].send && !b->op[i].reduce) {
            struct timespec late = {delay / 1000000, delay % 1000000 * 1000};
            nanosleep(&late, NULL);
            break;
        }
    while (left > 0) {
        int moved = 0;
        for (int i = 0; i < b->n; i++) {
            p2p *p = &b->op[i];
            if (!p->comm)
                continue;
            pthread_mutex_lock(&p->comm->step);
            int finished = step(p, &moved);
            pthread_mutex_unlock(&p->comm->step);
            if (finished) {
                atomic_fetch_sub(&p->comm->pending, 1);
                release(p->comm);
                p->comm = NULL;
                left--, moved = 1;
            }
        }
        if (!moved)
            nap(100000);
    }
}

/* Queues the calling thread's pending ops, one batch per stream, in the order posted. */
static void launch(void)
{
    for (int i = 0; i < npending; i++) {
        if (!pending[i].comm)
            continue;
        CUstream s = pending[i].stream;
        int n = 0;
        for (int j = i; j < npending; j++)
            n += pending[j].comm && pending[j].stream == s;
        batch *b = malloc(sizeof *b + (size_t)n * sizeof(p2p));
        if (!b)
            die("out of memory");
        b->n = 0;
        for (int j = i; j < npending; j++)
            if (pending[j].comm && pending[j].stream == s) {
                b->op[b->n++] = pending[j];
                fake_count(pending[j].gather ? "ncclAllGather" : pending[j].reduce ? "ncclAllReduce"
                           : pending[j].send ? "ncclSend" : "ncclRecv");
                pending[j].comm = NULL;
            }
        fake_stream_enqueue(s, run_batch, b);
    }
    npending = 0;
}

ncclResult_t ncclGroupEnd(void)
{
    if (depth == 0)
        die("ncclGroupEnd without ncclGroupStart");
    if (--depth > 0)
        return ncclSuccess;
    launch();
    int nonblocking = group_nonblocking;
    group_nonblocking = 0;
    // Non-blocking communicators finish a group asynchronously: the caller must poll.
    return nonblocking ? ncclInProgress : ncclSuccess;
}

/* Adds op p to the calling thread's group (one op outside a group is a group of its own). */
static ncclResult_t queue(const p2p *p)
{
    struct ncclComm *c = p->comm;
    atomic_fetch_add(&c->refs, 1);
    atomic_fetch_add(&c->pending, 1);
    if (npending == cap_pending) {
        cap_pending = cap_pending ? 2 * cap_pending : 16;
        if (!(pending = realloc(pending, (size_t)cap_pending * sizeof *pending)))
            die("out of memory");
    }
    pending[npending++] = *p;
    if (!c->blocking)
        group_nonblocking = 1;
    return depth > 0 ? ncclSuccess : (depth++, ncclGroupEnd());
}

static ncclResult_t post(int send, void *buf, size_t count, ncclDataType_t type, int peer,
                         ncclComm_t comm, cudaStream_t stream)
{
    const char *call = send ? "ncclSend" : "ncclRecv";
    struct ncclComm *c = check_live(comm, call);
    if (!ready(c))
        die("%s on %s (rank %d) before its initialization completed", call, c->name, c->rank);
    if (atomic_load(&c->finalizing))
        die("%s on %s (rank %d) after ncclCommFinalize", call, c->name, c->rank);
    if (c->nranks != 2)
        die("%s on %s, a communicator of %d ranks: the fake sends and receives on two-rank ones only",
            call, c->name, c->nranks);
    if (peer != 1 - c->rank)
        die("%s from rank %d to peer %d on a two-rank communicator", call, c->rank, peer);
    if ((int)type < 0 || (int)type >= ncclNumTypes)
        die("%s with datatype %d", call, (int)type);
    int gpu = fake_stream_gpu((CUstream)stream);
    if (c->gpu >= 0 && gpu != c->gpu)
        die("%s on a stream of GPU %d, and communicator %s (rank %d) belongs to GPU %d", call,
            gpu, c->name, c->rank, c->gpu);
    p2p p = {.comm = c, .stream = (CUstream)stream, .send = send, .type = type, .count = count,
             .bytes = count * type_sizes[type]};
    if (p.bytes > 0)
        p.host = fake_device_range((CUdeviceptr)(uintptr_t)buf, p.bytes, gpu,
                                   send ? "ncclSend buffer" : "ncclRecv buffer");
    p.seq = atomic_fetch_add(send ? &c->sends : &c->recvs, 1);
    return queue(&p);
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                          cudaStream_t stream)
{
    struct ncclComm *c = check_live(comm, "ncclAllReduce");
    if (!ready(c))
        die("ncclAllReduce on %s (rank %d) before its initialization completed", c->name, c->rank);
    if (atomic_load(&c->finalizing))
        die("ncclAllReduce on %s (rank %d) after ncclCommFinalize", c->name, c->rank);
    if (sendbuff != recvbuff)
        die("ncclAllReduce out of place: the fake reduces in place only");
    if (op != ncclSum || (datatype != ncclFloat32 && datatype != ncclFloat64))
        die("ncclAllReduce with op %d, datatype %s: the fake sums float32 and float64 only", (int)op,
            type_name(datatype));
    int gpu = fake_stream_gpu((CUstream)stream);
    if (c->gpu >= 0 && gpu != c->gpu)
        die("ncclAllReduce on a stream of GPU %d, and communicator %s (rank %d) belongs to GPU %d",
            gpu, c->name, c->rank, c->gpu);
    p2p p = {.comm = c, .stream = (CUstream)stream, .reduce = 1, .type = datatype, .count = count,
             .bytes = count * type_sizes[datatype]};
    if (p.bytes > 0)
        p.host = fake_device_range((CUdeviceptr)(uintptr_t)recvbuff, p.bytes, gpu, "ncclAllReduce buffer");
    p.seq = atomic_fetch_add(&c->colls, 1);
    return queue(&p);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    struct ncclComm *c = check_live(comm, "ncclAllGather");
    if (!ready(c))
        die("ncclAllGather on %s (rank %d) before its initialization completed", c->name, c->rank);
    if (atomic_load(&c->finalizing))
        die("ncclAllGather on %s (rank %d) after ncclCommFinalize", c->name, c->rank);
    if ((int)datatype < 0 || (int)datatype >= ncclNumTypes)
        die("ncclAllGather with datatype %d", (int)datatype);
    int gpu = fake_stream_gpu((CUstream)stream);
    if (c->gpu >= 0 && gpu != c->gpu)
        die("ncclAllGather on a stream of GPU %d, and communicator %s (rank %d) belongs to GPU %d",
            gpu, c->name, c->rank, c->gpu);
    p2p p = {.comm = c, .stream = (CUstream)stream, .reduce = 1, .gather = 1, .type = datatype,
             .count = sendcount, .bytes = sendcount * type_sizes[datatype]};
    if (p.bytes > 0) {
        p.host = fake_device_range((CUdeviceptr)(uintptr_t)recvbuff, p.bytes * (size_t)c->nranks, gpu,
                                   "ncclAllGather receive buffer");
        p.from = fake_device_range((CUdeviceptr)(uintptr_t)sendbuff, p.bytes, gpu, "ncclAllGather send buffer");
        // in place only as NCCL allows it: the send buffer is the rank's own part
        const unsigned char *own = p.host + (size_t)c->rank * p.bytes;
        if (p.from != own && p.from < p.host + p.bytes * (size_t)c->nranks && p.from + p.bytes > p.host)
            die("ncclAllGather on %s (rank %d): the send buffer overlaps the receive buffer away from "
                "the rank's own part", c->name, c->rank);
    }
    p.seq = atomic_fetch_add(&c->colls, 1);
    return queue(&p);
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    return post(1, (void *)sendbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    return post(0, recvbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    struct ncclComm *c = check_live(comm, "ncclCommFinalize");
    atomic_store(&c->finalizing, 1);
    return atomic_load(&c->pending) > 0 ? ncclInProgress : ncclSuccess;
}

static void unlist(struct ncclComm *c)
{
    pthread_mutex_lock(&comms_lock);
    c->live = 0;
    pthread_mutex_unlock(&comms_lock);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    struct ncclComm *c = check_live(comm, "ncclCommDestroy");
    long left = atomic_load(&c->pending);
    if (left > 0)
        die("ncclCommDestroy on %s (rank %d) with %ld operations unfinished", c->name, c->rank,
            left);
    unlist(c);
    release(c);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    struct ncclComm *c = check_live(comm, "ncclCommAbort");
    unlist(c);
    atomic_store(&c->aborted, 1);
    // Waits out a step in progress: after this no op reads or writes the caller's buffers.
    pthread_mutex_lock(&c->step);
    pthread_mutex_unlock(&c->step);
    release(c);
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return last_error;
}
