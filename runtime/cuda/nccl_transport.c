/* cuda/nccl_transport.c: the links between stages on different GPUs, over NCCL point to
 * point (libpacirt_cuda.a). NEVER RUN ON A GPU: written and compiled against NCCL 2.28's
 * header on a machine without one; see docs/gpu.md.
 *
 * NCCL is loaded with dlopen ("libnccl.so.2"), so `run` starts where it is missing; only a
 * run that needs it (one process per stage on GPUs) stops, saying so. One process with
 * stages on several GPUs falls back to device links (links.c) with a notice.
 *
 * Shape. Every directed link (act[i]: i -> i+1, grad[i]: i+1 -> i) has a communicator of
 * its own with two ranks, sender 0 and receiver 1 (pr_link_of), and each end has a stream
 * of its own. NCCL matches the k-th send with the k-th receive of a communicator and runs a
 * communicator's operations one after another, so the link's messages keep the table's
 * order, and no link's pending operation ever waits behind another link's: a send to s+1
 * still waiting for its receive cannot hold up the receive from s+1 (one stream or one
 * communicator for both would). Each message is a group of two sends (or two receives):
 * the floats, then the micro-batch as one int64, which carries the stop mark too.
 *
 * Capacity. An NCCL send completes only once the peer has posted the matching receive, so
 * a send that waited for completion would be a channel of capacity 0, which the verifier
 * never checked (1F1B's steady state deadlocks on it). The sender therefore owns a ring of
 * channel_capacity device buffers per link: a send copies the message into the next slot
 * (on the link's stream, after the compute stream's work), posts the NCCL send from it and
 * returns; it blocks only when that slot's previous send, `capacity` messages ago, has not
 * completed, i.e. while `capacity` messages are unreceived. That is the in-process
 * channel's contract, which the verifier proved deadlock-free for the table's order. The
 * compute stream waits for the copy, so later kernels may overwrite the source at once.
 * A receive posts the NCCL receive straight into its destination and waits for it.
 *
 * Waits. Every wait polls the operation's event and ncclCommGetAsyncError (communicators
 * are non-blocking, config.blocking = 0) until the peer timeout; on expiry or an NCCL error
 * the communicator is aborted (ncclCommAbort) and the executor prints the stage, rank, peer
 * and micro-batch and exits. Connections are made at start: one warm-up message per link in
 * one group, so a link's first real message never waits on NCCL's lazy connection set-up.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../prt.h"
#include "cuda_layer.h"

/* Without nccl.h (a toolkit that ships none) the transport is a stub that says so where a
 * run needs it, so the rest of the GPU path still builds (see the end of this file). */
#if __has_include(<nccl.h>)
#include <nccl.h>

_Static_assert(sizeof(ncclUniqueId) == PR_BOOT_ID_BYTES, "an NCCL id is the bootstrap's blob");

#define NAME_OF2(symbol) #symbol
#define NAME_OF(symbol) NAME_OF2(symbol) /* after cuda.h's renames: "cuMemcpyDtoH_v2" */
#define NCCL_NEEDED 21800                /* 2.18: non-blocking communicators, finalize */

/* The NCCL and driver entry points used, typed by their headers. */
#define NCCL_FUNCTIONS(X)                                                                     \
    X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRankConfig) X(ncclCommGetAsyncError)   \
    X(ncclCommFinalize) X(ncclCommDestroy) X(ncclCommAbort) X(ncclSend) X(ncclRecv)           \
    X(ncclGroupStart) X(ncclGroupEnd) X(ncclGetErrorString) X(ncclGetLastError) X(ncclAllReduce)    \
    X(ncclAllGather)
#define DRIVER_FUNCTIONS(X)                                                                   \
    X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamWaitEvent) X(cuEventCreate)                \
    X(cuEventRecord) X(cuEventQuery) X(cuEventDestroy) X(cuMemcpyAsync) X(cuMemcpyDtoH)       \
    X(cuMemsetD32Async)

static struct {
#define API_FIELD(symbol) __typeof__(symbol) *symbol;
    NCCL_FUNCTIONS(API_FIELD)
    DRIVER_FUNCTIONS(API_FIELD)
#undef API_FIELD
} api;

static int nccl_version;  /* > 0 once NCCL is loaded */
static int driver_loaded;

/* One stage's end of one directed link. */
typedef struct nccl_end {
    int open, sending, stage, peer, self_rank, peer_rank;
    ncclComm_t comm;          /* NULL after an abort */
    CUstream stream;          /* this end's own stream */
    CUevent ordered;          /* on the compute stream: the link's stream waits for it */
    CUevent copied;           /* sender: the copy into the ring, on the compute stream */
    CUevent *done;            /* per ring slot (receiver: one), after its NCCL operation */
    int capacity;             /* ring slots: the table's channel capacity (receiver: 1) */
    size_t floats;            /* per message */
    float *ring;              /* sender: capacity messages, device memory */
    int64_t *mbs;             /* their micro-batches (receiver: the one arriving), device */
    int64_t count;            /* messages through this end */
} nccl_end;

/* [kind][pair][sending]: in one process both ends of a link live here. */
static nccl_end ends[PR_LINK_KINDS][PACI_MAX_STAGES][2];

/* Replicas: this process's stage's reduction group, a communicator of D ranks (rank =
 * replica). Its allreduces run on the group's own stream: the gradients' range by range as
 * the window's last backward finishes them (reduce_start), each after an event of the
 * compute stream, so the backward goes on meanwhile; then at the step the loss and stop
 * flag (doubles, through a small device buffer), and the compute stream waits for them all
 * before the step reads the sums. Without the overlap the step sums the whole block. */
static struct {
    int open, stage, replicas;
    ncclComm_t comm;
    CUstream stream;
    CUevent queued, done;
    double *values;  /* device, PR_REDUCE_VALUES */
} group;
#define PR_REDUCE_VALUES 8

int pr_nccl_load(const char *library, char *err)
{
    if (nccl_version > 0)
        return nccl_version;
    const char *name = library ? library : "libnccl.so.2";
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return pr_fail(err, "NCCL is needed between stages on different GPUs, and %s does not load "
                       "(%s)", name, dlerror());
#define NCCL_LOAD(symbol)                                                                      \
    if (!(*(void **)&api.symbol = dlsym(lib, NAME_OF(symbol))))                                 \
        return pr_fail(err, "%s lacks %s: NCCL 2.18 or newer is needed", name, NAME_OF(symbol));
    NCCL_FUNCTIONS(NCCL_LOAD)
#undef NCCL_LOAD
    int version = 0;
    if (api.ncclGetVersion(&version) != ncclSuccess || version < NCCL_NEEDED)
        return pr_fail(err, "%s is NCCL version code %d: 2.18 (21800) or newer is needed", name,
                       version);
    nccl_version = version;
    return version;
}

/* The driver calls of this file, from the libcuda the device layer already loaded. */
static int load_driver(char *err)
{
    if (driver_loaded)
        return 0;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return pr_fail(err, "no CUDA driver (libcuda.so.1 does not load)");
#define DRIVER_LOAD(symbol)                                                                    \
    if (!(*(void **)&api.symbol = dlsym(lib, NAME_OF(symbol))))                                 \
        return pr_fail(err, "the CUDA driver lacks %s (too old?)", NAME_OF(symbol));
    DRIVER_FUNCTIONS(DRIVER_LOAD)
#undef DRIVER_LOAD
    driver_loaded = 1;
    return 0;
}

/* Sleeps a little longer each time, up to 200 us: short waits stay short, long ones idle. */
static void nap(double *pause)
{
    struct timespec ts = {0, (long)(*pause * 1e9)};
    nanosleep(&ts, NULL);
    *pause = *pause * 2 < 200e-6 ? *pause * 2 : 200e-6;
}

static double deadline_after(double seconds)
{
    return seconds > 0 ? pr_now() + seconds : 0;
}

/* NCCL's words for a failure: the code's name and the library's last message. */
static void describe(ncclComm_t comm, ncclResult_t rc, char *err)
{
    const char *last = comm ? api.ncclGetLastError(comm) : NULL;
    pr_fail(err, "NCCL: %s%s%s", api.ncclGetErrorString(rc), last && last[0] ? ": " : "",
            last ? last : "");
}

/* Nothing of an aborted communicator stays queued on the GPU; the end keeps no handle. */
static void abort_end(nccl_end *e)
{
    if (e->comm)
        api.ncclCommAbort(e->comm);
    e->comm = NULL;
}

/* A non-blocking call that returned ncclInProgress is issued once ncclCommGetAsyncError
 * says so; waits up to the deadline (0: none) and returns the final result, ncclInProgress
 * when the deadline passed first. */
static ncclResult_t settle(ncclComm_t comm, ncclResult_t rc, double deadline)
{
    double pause = 1e-6;
    while (rc == ncclInProgress) {
        if (deadline > 0 && pr_now() > deadline)
            return ncclInProgress;
        nap(&pause);
        if (api.ncclCommGetAsyncError(comm, &rc) != ncclSuccess)
            return ncclInternalError;
    }
    return rc;
}

/* Waits for ev (recorded after the communicator's last operation) until the deadline,
 * watching *comm's asynchronous error; a timeout or an error aborts *comm and clears it. */
static int wait_event(ncclComm_t *comm, int stage, CUevent ev, double deadline, char *err)
{
    double pause = 1e-6;
    for (;;) {
        CUresult q = api.cuEventQuery(ev);
        if (q == CUDA_SUCCESS)
            return PR_LINK_OK;
        if (q != CUDA_ERROR_NOT_READY)
            pr_cuda_check(stage, q, "cuEventQuery on an NCCL operation");
        ncclResult_t async = ncclSuccess;
        if (api.ncclCommGetAsyncError(*comm, &async) != ncclSuccess)
            async = ncclInternalError;
        int failed = async != ncclSuccess && async != ncclInProgress;
        if (failed || (deadline > 0 && pr_now() > deadline)) {
            if (failed)
                describe(*comm, async, err);
            api.ncclCommAbort(*comm);
            *comm = NULL;
            return failed ? PR_LINK_ERROR : PR_LINK_TIMEOUT;
        }
        nap(&pause);
    }
}

/* The same for a link's end, after its last operation. */
static int wait_done(nccl_end *e, CUevent ev, double deadline, char *err)
{
    return wait_event(&e->comm, e->stage, ev, deadline, err);
}

/* The link's stream waits for everything the stage's compute stream has queued. */
static void after_compute(nccl_end *e)
{
    pr_cuda_check(e->stage, api.cuEventRecord(e->ordered, pr_cuda_compute_stream(e->stage)),
                  "cuEventRecord");
    pr_cuda_check(e->stage, api.cuStreamWaitEvent(e->stream, e->ordered, 0), "cuStreamWaitEvent");
}

/* One message as a group of two operations to the peer (same-peer operations in a group run
 * in order): `count` floats at data, then the int64 at mb. Then records done_ev. */
static int post(nccl_end *e, void *data, size_t count, int64_t *mb, CUevent done_ev,
                double deadline, char *err)
{
    cudaStream_t stream = (cudaStream_t)e->stream;
    ncclResult_t first = api.ncclGroupStart(), rc;
    if (first == ncclSuccess) {
        if (e->sending) {
            if (count > 0)
                first = api.ncclSend(data, count, ncclFloat32, e->peer_rank, e->comm, stream);
            rc = api.ncclSend(mb, 1, ncclInt64, e->peer_rank, e->comm, stream);
        } else {
            if (count > 0)
                first = api.ncclRecv(data, count, ncclFloat32, e->peer_rank, e->comm, stream);
            rc = api.ncclRecv(mb, 1, ncclInt64, e->peer_rank, e->comm, stream);
        }
        first = first != ncclSuccess && first != ncclInProgress ? first : rc;
        rc = api.ncclGroupEnd();
        if (first == ncclSuccess || first == ncclInProgress)
            first = rc;
    }
    rc = settle(e->comm, first, deadline);
    if (rc == ncclInProgress) {
        abort_end(e);
        return PR_LINK_TIMEOUT;
    }
    if (rc != ncclSuccess) {
        describe(e->comm, rc, err);
        abort_end(e);
        return PR_LINK_ERROR;
    }
    pr_cuda_check(e->stage, api.cuEventRecord(done_ev, e->stream), "cuEventRecord");
    return PR_LINK_OK;
}

static nccl_end *end_of(const pr_link_use *u, int stage)
{
    nccl_end *e = &ends[u->kind][u->index][u->sending];
    if (!e->open || e->stage != stage)
        pr_internal("stage %d: no NCCL end for link %d (%s)", stage, u->index,
                    u->kind == PR_LINK_ACT ? "act" : "grad");
    return e;
}

static int nccl_send(pr_run *run, int stage, const pr_link_use *u, int64_t mb, const float *src,
                     char *err)
{
    nccl_end *e = end_of(u, stage);
    pr_cuda_enter(stage);
    int k = (int)(e->count % e->capacity);
    // Slot k is free once the send made from it `capacity` messages ago was received.
    if (e->count >= e->capacity) {
        int rc = wait_done(e, e->done[k], deadline_after(run->opt.peer_timeout), err);
        if (rc != PR_LINK_OK)
            return rc;
    }
    float *slot = e->ring + (size_t)k * e->floats;
    // The copy into the slot goes on the compute stream, after the work that wrote src and
    // before any that overwrites it; on the link's stream it would queue behind the previous
    // send, which completes only when the peer receives it, and so hold up the compute
    // stream whenever two messages were unreceived.
    CUstream compute = pr_cuda_compute_stream(stage);
    pr_cuda_check(stage, api.cuMemcpyAsync((CUdeviceptr)(uintptr_t)slot, (CUdeviceptr)(uintptr_t)src,
                                           e->floats * sizeof(float), compute), "cuMemcpyAsync");
    // The micro-batch goes in as two 32-bit words, low first (the GPUs are little-endian).
    uint64_t bits = (uint64_t)mb;
    CUdeviceptr at = (CUdeviceptr)(uintptr_t)&e->mbs[k];
    pr_cuda_check(stage, api.cuMemsetD32Async(at, (unsigned)(bits & 0xffffffffu), 1, compute),
                  "cuMemsetD32Async");
    pr_cuda_check(stage, api.cuMemsetD32Async(at + 4, (unsigned)(bits >> 32), 1, compute),
                  "cuMemsetD32Async");
    pr_cuda_check(stage, api.cuEventRecord(e->copied, compute), "cuEventRecord");
    pr_cuda_check(stage, api.cuStreamWaitEvent(e->stream, e->copied, 0), "cuStreamWaitEvent");
    int rc = post(e, slot, e->floats, &e->mbs[k], e->done[k], deadline_after(run->opt.peer_timeout), err);
    if (rc == PR_LINK_OK)
        e->count++;
    return rc;
}

static int nccl_recv(pr_run *run, int stage, const pr_link_use *u, float *dst, int64_t *mb,
                     char *err)
{
    nccl_end *e = end_of(u, stage);
    pr_cuda_enter(stage);
    after_compute(e);
    double deadline = deadline_after(run->opt.peer_timeout);
    int rc = post(e, dst, e->floats, e->mbs, e->done[0], deadline, err);
    if (rc == PR_LINK_OK)
        rc = wait_done(e, e->done[0], deadline, err);
    if (rc != PR_LINK_OK)
        return rc;
    pr_cuda_check(stage, api.cuMemcpyDtoH(mb, (CUdeviceptr)(uintptr_t)e->mbs, sizeof *mb),
                  "cuMemcpyDtoH");
    e->count++;
    return PR_LINK_OK;
}

/* The use of link (kind, index) by `stage`, which must be one of its two ends. */
static void use_at(int stage, int kind, int index, int stages, pr_link_use *u)
{
    int op = kind == PR_LINK_ACT ? (index == stage ? PACI_OP_SEND_ACT : PACI_OP_RECV_ACT)
                                 : (index == stage ? PACI_OP_RECV_GRAD : PACI_OP_SEND_GRAD);
    if (pr_link_of(op, stage, stages, u) != 0 || u->index != index)
        pr_internal("stage %d is not an end of link %d", stage, index);
}

/* Streams, events and device buffers of one end; run->native marks the link. */
static nccl_end *open_end(pr_run *run, int stage, int kind, int index)
{
    pr_link_use u;
    use_at(stage, kind, index, run->p, &u);
    nccl_end *e = &ends[kind][index][u.sending];
    memset(e, 0, sizeof *e);
    e->open = 1;
    e->sending = u.sending;
    e->stage = stage;
    e->peer = u.peer;
    e->self_rank = u.self_rank;
    e->peer_rank = u.peer_rank;
    e->capacity = u.sending ? run->tab->channel_capacity : 1;
    e->floats = (size_t)pr_link_floats(run->prog, kind, index);
    pr_cuda_enter(stage);
    pr_cuda_check(stage, api.cuStreamCreate(&e->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    pr_cuda_check(stage, api.cuEventCreate(&e->ordered, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    pr_cuda_check(stage, api.cuEventCreate(&e->copied, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    e->done = pr_alloc((size_t)e->capacity * sizeof(CUevent));
    for (int k = 0; k < e->capacity; k++)
        pr_cuda_check(stage, api.cuEventCreate(&e->done[k], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    if (u.sending)
        e->ring = pr_cuda_dev_alloc(stage, (size_t)e->capacity * e->floats * sizeof(float));
    e->mbs = pr_cuda_dev_alloc(stage, (size_t)e->capacity * sizeof(int64_t));
    run->native[kind][index] = 1;
    run->links = &pr_nccl_links;
    return e;
}

/* Aborts the communicators of the n ends (after a failed set-up: none stays half made). */
static void abort_all(nccl_end **list, int n)
{
    for (int i = 0; i < n; i++)
        abort_end(list[i]);
}

/* Creates the communicators of the n ends (ids[i] for end i) in one group, then moves one
 * warm-up message over each, also in one group, so every connection exists before the table
 * runs. Waits up to the connect timeout; errors name the stage, rank and peer. */
static int connect_ends(pr_run *run, nccl_end **list, const ncclUniqueId *ids, int n, char *err)
{
    double deadline = deadline_after(run->opt.connect_timeout);
    char why[PR_ERR_LEN] = "";
    ncclResult_t rc = api.ncclGroupStart();
    for (int i = 0; i < n && rc == ncclSuccess; i++) {
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        pr_cuda_enter(list[i]->stage);
        rc = api.ncclCommInitRankConfig(&list[i]->comm, 2, ids[i], list[i]->self_rank, &config);
        rc = rc == ncclInProgress ? ncclSuccess : rc;
    }
    ncclResult_t end = api.ncclGroupEnd();
    rc = rc == ncclSuccess ? end : rc;
    for (int i = 0; i < n; i++) {
        nccl_end *e = list[i];
        ncclResult_t mine = e->comm ? settle(e->comm, rc, deadline) : rc;
        if (mine == ncclSuccess)
            continue;
        if (mine != ncclInProgress)
            describe(e->comm, mine, why);
        abort_all(list, n);
        return mine == ncclInProgress
            ? pr_fail(err, "stage %d (rank %d): the NCCL link with stage %d was not set up within "
                      "%g s", e->stage, run->opt.rank, e->peer, run->opt.connect_timeout)
            : pr_fail(err, "stage %d (rank %d): cannot set up the NCCL link with stage %d: %s",
                      e->stage, run->opt.rank, e->peer, why);
    }
    rc = api.ncclGroupStart();
    for (int i = 0; i < n && rc == ncclSuccess; i++) {
        nccl_end *e = list[i];
        cudaStream_t stream = (cudaStream_t)e->stream;
        pr_cuda_enter(e->stage);
        after_compute(e);
        rc = e->sending ? api.ncclSend(e->mbs, 1, ncclInt64, e->peer_rank, e->comm, stream)
                        : api.ncclRecv(e->mbs, 1, ncclInt64, e->peer_rank, e->comm, stream);
        rc = rc == ncclInProgress ? ncclSuccess : rc;
    }
    end = api.ncclGroupEnd();
    rc = rc == ncclSuccess ? end : rc;
    for (int i = 0; i < n; i++) {
        nccl_end *e = list[i];
        ncclResult_t mine = settle(e->comm, rc, deadline);
        int link_rc = mine == ncclSuccess ? PR_LINK_OK : mine == ncclInProgress ? PR_LINK_TIMEOUT
                                                                                : PR_LINK_ERROR;
        if (mine != ncclSuccess && mine != ncclInProgress)
            describe(e->comm, mine, why);
        if (link_rc == PR_LINK_OK) {
            pr_cuda_enter(e->stage);
            pr_cuda_check(e->stage, api.cuEventRecord(e->done[0], e->stream), "cuEventRecord");
            link_rc = wait_done(e, e->done[0], deadline, why);
        }
        if (link_rc == PR_LINK_OK)
            continue;
        abort_all(list, n);
        return link_rc == PR_LINK_TIMEOUT
            ? pr_fail(err, "stage %d (rank %d): the NCCL link with stage %d did not connect within "
                      "%g s", e->stage, run->opt.rank, e->peer, run->opt.connect_timeout)
            : pr_fail(err, "stage %d (rank %d): the NCCL link with stage %d failed while "
                      "connecting: %s", e->stage, run->opt.rank, e->peer, why);
    }
    return 0;
}

/* One process: a communicator per directed link whose two stages sit on different GPUs. */
static int nccl_open_local(pr_run *run, char *err)
{
    int wanted = 0;
    for (int i = 0; i + 1 < run->p; i++)
        wanted += pr_link_native(1, pr_cuda_gpu_of(i), pr_cuda_gpu_of(i + 1));
    if (!wanted)
        return 0;
    char why[PR_ERR_LEN];
    if (pr_nccl_load(NULL, why) < 0 || load_driver(why) != 0) {
        if (!run->opt.quiet)
            fprintf(stderr, "run: note: %s; those stages exchange messages by device copies\n",
                    why);
        return 0;
    }
    nccl_end *list[2 * PR_LINK_KINDS * PACI_MAX_STAGES];
    ncclUniqueId ids[2 * PR_LINK_KINDS * PACI_MAX_STAGES];
    int n = 0;
    for (int i = 0; i + 1 < run->p; i++) {
        if (!pr_link_native(1, pr_cuda_gpu_of(i), pr_cuda_gpu_of(i + 1)))
            continue;
        for (int kind = 0; kind < PR_LINK_KINDS; kind++) {
            ncclUniqueId id;
            ncclResult_t rc = api.ncclGetUniqueId(&id);
            if (rc != ncclSuccess) {
                describe(NULL, rc, why);
                return pr_fail(err, "stage %d: no NCCL id for the link with stage %d: %s", i, i + 1, why);
            }
            for (int stage = i; stage <= i + 1; stage++) {
                ids[n] = id;
                list[n++] = open_end(run, stage, kind, i);
            }
        }
    }
    return connect_ends(run, list, ids, n, err);
}

/* One process per device (and replica): rank r = replica * devices + d makes the ids of the
 * links from each stage it holds to the next stage when another device runs that one (act,
 * grad, in the slots of the stage's chunk), and replica 0 of each device the id of its
 * reduction group; one allgather over the bootstrap gives every rank the ids it needs. Links
 * between two stages of the device stay in the process (device links, executor.c). */
static int nccl_open_ranks(pr_run *run, pr_bootstrap *b, char *err)
{
    const paci_table *tab = run->tab;
    int r = b->rank, devices = run->devices, d = r % devices, replica = r / devices, v = tab->chunks;
    int s = paci_placed_stage(tab->placement, devices, d, 0); // the device's first stage, for messages
    char why[PR_ERR_LEN];
    if (pr_nccl_load(NULL, why) < 0 || load_driver(why) != 0)
        return pr_fail(err, "stage %d (rank %d): one process per stage on GPUs needs NCCL: %s", s, r,
                       why);
    // the links' ids, chunk by chunk, then the group's
    int ids_per_rank = PR_LINK_KINDS * v + 1;
    ncclUniqueId *mine = pr_alloc((size_t)ids_per_rank * sizeof *mine);
    for (int k = 0; k < ids_per_rank; k++) {
        int stage = paci_placed_stage(tab->placement, devices, d, k / PR_LINK_KINDS);
        int wanted = k < PR_LINK_KINDS * v ? stage + 1 < run->p && tab->stage_device[stage + 1] != d
                                           : replica == 0 && run->replicas > 1;
        ncclResult_t rc = wanted ? api.ncclGetUniqueId(&mine[k]) : ncclSuccess;
        if (rc != ncclSuccess) {
            describe(NULL, rc, why);
            free(mine);
            return pr_fail(err, "stage %d (rank %d): no NCCL id for %s: %s", stage, r,
                           k < PR_LINK_KINDS * v ? "the link with the next stage" : "the replicas' reduction", why);
        }
    }
    ncclUniqueId *all = pr_alloc((size_t)b->world * (size_t)ids_per_rank * sizeof *mine);
    int gathered = pr_bootstrap_allgather(b, mine, (size_t)ids_per_rank * sizeof *mine, all, why);
    free(mine);
    if (gathered != 0) {
        free(all);
        return pr_fail(err, "stage %d (rank %d): %s (exchanging the NCCL ids)", s, r, why);
    }
    nccl_end *list[2 * PR_LINK_KINDS * PACI_MAX_STAGES];
    ncclUniqueId ids[2 * PR_LINK_KINDS * PACI_MAX_STAGES];
    int n = 0;
    for (int c = 0; c < v; c++) {
        int own = paci_placed_stage(tab->placement, devices, d, c);
        for (int index = own - 1; index <= own; index++) {
            if (index < 0 || index + 1 >= run->p || tab->stage_device[index] == tab->stage_device[index + 1])
                continue;
            // the id lives with the link's lower stage: its device's rank, at its chunk
            int maker = replica * devices + tab->stage_device[index], chunk = index / devices;
            for (int kind = 0; kind < PR_LINK_KINDS; kind++) {
                ids[n] = all[(size_t)maker * (size_t)ids_per_rank + (size_t)(chunk * PR_LINK_KINDS + kind)];
                list[n++] = open_end(run, own, kind, index);
            }
        }
    }
    ncclUniqueId group_id = all[(size_t)d * (size_t)ids_per_rank + (size_t)(PR_LINK_KINDS * v)];
    free(all);
    int rc = n > 0 ? connect_ends(run, list, ids, n, err) : 0;
    if (rc != 0 || run->replicas <= 1)
        return rc;
    // The group: D ranks, each replica's process of stage s.
    memset(&group, 0, sizeof group);
    group.stage = s;
    group.replicas = run->replicas;
    pr_cuda_enter(s);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t made = api.ncclCommInitRankConfig(&group.comm, run->replicas, group_id, replica, &config);
    made = settle(group.comm, made, deadline_after(run->opt.connect_timeout));
    if (made != ncclSuccess) {
        if (made != ncclInProgress)
            describe(group.comm, made, why);
        if (group.comm)
            api.ncclCommAbort(group.comm);
        return made == ncclInProgress
            ? pr_fail(err, "stage %d of replica %d (rank %d): the NCCL group of stage %d's replicas "
                      "was not set up within %g s", s, replica, r, s, run->opt.connect_timeout)
            : pr_fail(err, "stage %d of replica %d (rank %d): cannot set up the NCCL group of stage "
                      "%d's replicas: %s", s, replica, r, s, why);
    }
    pr_cuda_check(s, api.cuStreamCreate(&group.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    pr_cuda_check(s, api.cuEventCreate(&group.queued, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    pr_cuda_check(s, api.cuEventCreate(&group.done, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    group.values = pr_cuda_dev_alloc(s, PR_REDUCE_VALUES * sizeof(double));
    group.open = 1;
    run->links = &pr_nccl_links;
    return 0;
}

/* The group's stream waits for everything the stage's compute stream has queued. */
static void group_follows_compute(int stage)
{
    pr_cuda_check(stage, api.cuEventRecord(group.queued, pr_cuda_compute_stream(stage)), "cuEventRecord");
    pr_cuda_check(stage, api.cuStreamWaitEvent(group.stream, group.queued, 0), "cuStreamWaitEvent");
}

/* A call on the group that did not settle by the deadline, or failed: the group is aborted. */
static int group_failed(ncclResult_t rc, char *err)
{
    if (rc != ncclInProgress)
        describe(group.comm, rc, err);
    api.ncclCommAbort(group.comm);
    group.comm = NULL;
    group.open = 0;
    return rc == ncclInProgress ? PR_LINK_TIMEOUT : PR_LINK_ERROR;
}

/* The step's exchange is done on the group's stream: the compute stream waits for it, and so
 * does the host, for the values (the step's loss and stop flag, read at once). */
static int group_finish(int stage, double *values, int n_values, double deadline, char *err)
{
    pr_cuda_check(stage, api.cuEventRecord(group.done, group.stream), "cuEventRecord");
    pr_cuda_check(stage, api.cuStreamWaitEvent(pr_cuda_compute_stream(stage), group.done, 0), "cuStreamWaitEvent");
    int waited = wait_event(&group.comm, stage, group.done, deadline, err);
    if (waited != PR_LINK_OK) {
        group.open = 0;
        return waited;
    }
    pr_cuda_dev_download(stage, values, group.values, (size_t)n_values * sizeof(double));
    return PR_LINK_OK;
}

/* Whether the group reduces stage's replicas: it is the process's, and with chunks every stage
 * of its device shares it, their reductions queued one after another on its stream in the
 * table's order, the same on every replica. */
static int in_group(const pr_run *run, int stage)
{
    return group.open && run->tab->stage_device[stage] == run->tab->stage_device[group.stage];
}

/* Overlap: the allreduce of a range the window's last backward has just finished, queued on
 * the group's stream behind that backward's kernels; returns without waiting for it. */
static int nccl_reduce_start(pr_run *run, int stage, float *grads, size_t n, char *err)
{
    if (!in_group(run, stage))
        pr_internal("stage %d: no NCCL group for its replicas", stage);
    pr_cuda_enter(stage);
    group_follows_compute(stage);
    ncclResult_t rc = api.ncclAllReduce(grads, grads, n, ncclFloat32, ncclSum, group.comm,
                                        (cudaStream_t)group.stream);
    rc = settle(group.comm, rc, deadline_after(run->opt.peer_timeout));
    if (rc != ncclSuccess)
        return group_failed(rc, err);
    run->stage[stage].exchange_bytes += (int64_t)(n * sizeof(float)); // what this replica puts in
    return PR_LINK_OK;
}

/* The step's allreduce: the gradients (n of them; 0 when reduce_start sent them all already)
 * and the values, on the group's stream; the compute stream waits for it, and so does the
 * host (the values are the step's loss and stop flag, read at once). */
static int nccl_reduce(pr_run *run, int stage, float *grads, size_t n, double *values,
                       int n_values, char *err)
{
    if (!in_group(run, stage) || n_values > PR_REDUCE_VALUES)
        pr_internal("stage %d: no NCCL group for its replicas", stage);
    pr_cuda_enter(stage);
    pr_cuda_dev_queue_copy(stage, group.values, values, (size_t)n_values * sizeof(double));
    group_follows_compute(stage);
    double deadline = deadline_after(run->opt.peer_timeout);
    ncclResult_t rc = api.ncclGroupStart(), op = ncclSuccess;
    if (rc == ncclSuccess) {
        if (n > 0)
            op = api.ncclAllReduce(grads, grads, n, ncclFloat32, ncclSum, group.comm,
                                   (cudaStream_t)group.stream);
        if (op == ncclSuccess || op == ncclInProgress)
            op = api.ncclAllReduce(group.values, group.values, (size_t)n_values, ncclFloat64, ncclSum,
                                   group.comm, (cudaStream_t)group.stream);
        rc = api.ncclGroupEnd();
        if (op != ncclSuccess && op != ncclInProgress)
            rc = op;
    }
    rc = settle(group.comm, rc, deadline);
    if (rc != ncclSuccess)
        return group_failed(rc, err);
    run->stage[stage].exchange_bytes += (int64_t)(n * sizeof(float));
    run->stage[stage].exchanges++;
    return group_finish(stage, values, n_values, deadline, err);
}

/* compression dgc: every replica's pairs (its slot of `words` words, written by the compute
 * stream) gathered in place, slot q from replica q (NCCL's allgather puts rank q's buffer at
 * offset q x count), and the values summed, in one group on the group's stream. */
static int nccl_gather(pr_run *run, int stage, uint32_t *slots, size_t words, double *values,
                       int n_values, char *err)
{
    if (!in_group(run, stage) || n_values > PR_REDUCE_VALUES)
        pr_internal("stage %d: no NCCL group for its replicas", stage);
    pr_cuda_enter(stage);
    pr_cuda_dev_queue_copy(stage, group.values, values, (size_t)n_values * sizeof(double));
    group_follows_compute(stage);
    double deadline = deadline_after(run->opt.peer_timeout);
    uint32_t *mine = slots + (size_t)run->replica * words;
    ncclResult_t rc = api.ncclGroupStart(), op;
    if (rc == ncclSuccess) {
        op = api.ncclAllGather(mine, slots, words, ncclUint32, group.comm, (cudaStream_t)group.stream);
        if (op == ncclSuccess || op == ncclInProgress)
            op = api.ncclAllReduce(group.values, group.values, (size_t)n_values, ncclFloat64, ncclSum,
                                   group.comm, (cudaStream_t)group.stream);
        rc = api.ncclGroupEnd();
        if (op != ncclSuccess && op != ncclInProgress)
            rc = op;
    }
    rc = settle(group.comm, rc, deadline);
    if (rc != ncclSuccess)
        return group_failed(rc, err);
    run->stage[stage].exchange_bytes += (int64_t)(words * sizeof(uint32_t)); // this replica's slot
    run->stage[stage].exchanges++;
    return group_finish(stage, values, n_values, deadline, err);
}

/* Flushes and frees every end; a communicator still busy at the peer timeout is aborted.
 * Finalizing completes only when both ranks of a communicator finalize, and in one process
 * both ends are here: so every end starts its finalize before any end waits for one. */
static void nccl_close(pr_run *run)
{
    ncclResult_t started[PR_LINK_KINDS][PACI_MAX_STAGES][2];
    for (int kind = 0; kind < PR_LINK_KINDS; kind++)
        for (int i = 0; i < PACI_MAX_STAGES; i++)
            for (int side = 0; side < 2; side++) {
                nccl_end *e = &ends[kind][i][side];
                started[kind][i][side] = ncclSuccess;
                if (e->open && e->comm) {
                    pr_cuda_enter(e->stage);
                    started[kind][i][side] = api.ncclCommFinalize(e->comm);
                }
            }
    double deadline = deadline_after(run->opt.peer_timeout);
    for (int kind = 0; kind < PR_LINK_KINDS; kind++)
        for (int i = 0; i < PACI_MAX_STAGES; i++)
            for (int side = 0; side < 2; side++) {
                nccl_end *e = &ends[kind][i][side];
                if (!e->open)
                    continue;
                pr_cuda_enter(e->stage);
                if (e->comm) {
                    ncclResult_t rc = settle(e->comm, started[kind][i][side], deadline);
                    if (rc == ncclSuccess)
                        api.ncclCommDestroy(e->comm);
                    else
                        abort_end(e);
                }
                for (int k = 0; k < e->capacity; k++)
                    api.cuEventDestroy(e->done[k]);
                free(e->done);
                api.cuEventDestroy(e->ordered);
                api.cuEventDestroy(e->copied);
                api.cuStreamDestroy(e->stream);
                if (e->ring)
                    pr_cuda_dev_release(e->stage, e->ring);
                pr_cuda_dev_release(e->stage, e->mbs);
                memset(e, 0, sizeof *e);
            }
    if (group.open) {
        pr_cuda_enter(group.stage);
        ncclResult_t rc = settle(group.comm, api.ncclCommFinalize(group.comm),
                                 deadline_after(run->opt.peer_timeout));
        if (rc == ncclSuccess)
            api.ncclCommDestroy(group.comm);
        else
            api.ncclCommAbort(group.comm);
        api.cuEventDestroy(group.done);
        api.cuEventDestroy(group.queued);
        api.cuStreamDestroy(group.stream);
        pr_cuda_dev_release(group.stage, group.values);
        memset(&group, 0, sizeof group);
    }
    memset(run->native, 0, sizeof run->native);
    run->links = NULL;
}

const pr_link_ops pr_nccl_links = {
    .name = "NCCL",
    .open_local = nccl_open_local,
    .open_ranks = nccl_open_ranks,
    .send = nccl_send,
    .recv = nccl_recv,
    .close = nccl_close,
    .reduce = nccl_reduce,
    .reduce_start = nccl_reduce_start,
    .gather = nccl_gather,
};

#else /* no nccl.h */

int pr_nccl_load(const char *library, char *err)
{
    (void)library;
    return pr_fail(err, "NCCL is needed between stages on different GPUs, and this runtime was built "
                   "without nccl.h");
}

static int nccl_open_local(pr_run *run, char *err)
{
    (void)err;
    char why[PR_ERR_LEN];
    for (int i = 0; i + 1 < run->p; i++)
        if (pr_link_native(1, pr_cuda_gpu_of(i), pr_cuda_gpu_of(i + 1))) {
            pr_nccl_load(NULL, why);
            if (!run->opt.quiet)
                fprintf(stderr, "run: note: %s; those stages exchange messages through host memory\n", why);
            break;
        }
    return 0;
}

static int nccl_open_ranks(pr_run *run, pr_bootstrap *b, char *err)
{
    (void)run;
    char why[PR_ERR_LEN];
    pr_nccl_load(NULL, why);
    return pr_fail(err, "stage %d (rank %d): one process per stage on GPUs needs NCCL: %s", b->rank, b->rank, why);
}

/* Never reached: no link is carried natively when opening carried none. */
static int nccl_send(pr_run *run, int stage, const pr_link_use *u, int64_t mb, const float *src, char *err)
{
    (void)run, (void)stage, (void)u, (void)mb, (void)src;
    return pr_fail(err, "no NCCL in this runtime"), PR_LINK_ERROR;
}

static int nccl_recv(pr_run *run, int stage, const pr_link_use *u, float *dst, int64_t *mb, char *err)
{
    (void)run, (void)stage, (void)u, (void)dst, (void)mb;
    return pr_fail(err, "no NCCL in this runtime"), PR_LINK_ERROR;
}

static void nccl_close(pr_run *run)
{
    (void)run;
}

const pr_link_ops pr_nccl_links = {
    .name = "NCCL",
    .open_local = nccl_open_local,
    .open_ranks = nccl_open_ranks,
    .send = nccl_send,
    .recv = nccl_recv,
    .close = nccl_close,
};

#endif
