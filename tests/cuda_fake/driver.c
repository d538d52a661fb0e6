/* driver.c: a fake CUDA driver (libcuda.so.1) for the CPU: test tooling, never part of pacic or run.
 *
 * It implements the driver calls runtime/cuda/ makes, with the kernels of one model's stages.cu
 * (compiled as C++ under tests/cuda_emu/simt.h and linked in) standing for the module images:
 *   - memory: host memory whose addresses carry FAKE_TAG (fake.h), filled with 0xff (NaN as floats)
 *     at allocation, as real device memory holds anything; a per-GPU capacity (FAKE_CUDA_MEM_MIB);
 *   - contexts: one primary context per GPU, reference counted, current per thread; calls that need
 *     one fail with CUDA_ERROR_INVALID_CONTEXT without it, as the real driver's do;
 *   - streams: a worker thread each, running its queue in order; events carry a sequence number,
 *     so cuStreamWaitEvent waits for the record made before the call, as CUDA's does;
 *   - lazy streams (FAKE_CUDA_LAZY=1): a stream runs an item only once something depends on it:
 *     a host wait (cuStreamSynchronize, cuEventSynchronize, cuEventQuery, a copy to host memory,
 *     cuMemFree) or a stream that waits for an event recorded after it. A GPU may run a stream
 *     that late, and so a read that lacks its event wait sees what the memory held before,
 *     every run, not only when the timing is unlucky;
 *   - copies from host memory take the source at the call and run in stream order (the driver
 *     stages pageable memory); copies to host memory return once done (CUDA's rule);
 *   - launches copy their arguments at the call (pointers checked to lie in the launching GPU's
 *     memory) and run later on the stream's worker, one kernel at a time in the whole process.
 * Environment: FAKE_CUDA_GPUS (default 1), FAKE_CUDA_MEM_MIB (per GPU, default 143360, an H200),
 * FAKE_CUDA_CC (default 90), FAKE_CUDA_REPORT=1 (counts of calls on stderr at exit, among them
 * "host waits": cuStreamSynchronize and cuEventSynchronize calls),
 * FAKE_CUDA_JITTER_US (each stream waits up to that many microseconds before each item),
 * FAKE_CUDA_LAZY=1 (lazy streams; not with NCCL, whose fake matches sends and receives as
 * they run).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake.h"
#include "simt_table.h" /* tests/cuda_emu's kernel table, linked in by build.sh */

enum { MAX_GPUS = 16, FAKE_MAGIC = 0x46414b45 };


static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* every table below */
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER; /* a queue drained, an event completed */
static pthread_mutex_t kernel_lock = PTHREAD_MUTEX_INITIALIZER; /* simt runs one kernel at a time */
static int initialised, gpus = 1, cc = 90, jitter_us, lazy;
static size_t capacity = (size_t)143360 << 20;

void fake_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fake cuda: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

/* Zeroed memory, or the process ends: the fake has no way to report running out. */
static void *zalloc(size_t bytes)
{
    void *p = calloc(1, bytes);
    if (!p)
        fake_die("out of memory");
    return p;
}

/* ---- counts ---- */

static struct {
    const char *what;
    long n;
} counts[64];

void fake_count(const char *what)
{
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < 64 && counts[i].what && strcmp(counts[i].what, what) != 0)
        i++;
    if (i < 64) {
        counts[i].what = what;
        counts[i].n++;
    }
    pthread_mutex_unlock(&lock);
}

static void report(void)
{
    fprintf(stderr, "fake cuda: calls:");
    for (int i = 0; i < 64 && counts[i].what; i++)
        fprintf(stderr, " %s %ld", counts[i].what, counts[i].n);
    fputc('\n', stderr);
}

/* ---- contexts ---- */

typedef struct fake_ctx {
    int magic, gpu, refs, alive;
} fake_ctx;

static fake_ctx *primary[MAX_GPUS]; /* the live primary context of each GPU, or NULL */
static __thread fake_ctx *current;

static int has_context(void)
{
    return current && current->alive;
}

#define NEED_INIT()                                                                            \
    do {                                                                                       \
        if (!initialised)                                                                      \
            return CUDA_ERROR_NOT_INITIALIZED;                                                 \
    } while (0)
#define NEED_CONTEXT()                                                                         \
    do {                                                                                       \
        NEED_INIT();                                                                           \
        if (!has_context())                                                                    \
            return CUDA_ERROR_INVALID_CONTEXT;                                                 \
    } while (0)

int fake_current_gpu(void)
{
    return has_context() ? current->gpu : -1;
}

/* ---- memory ---- */

typedef struct allocation {
    char *host;
    size_t bytes;
    int gpu;
} allocation;

static allocation *allocs;
static int n_allocs, cap_allocs;
static size_t used_of[MAX_GPUS];

int fake_is_device(const void *p)
{
    return ((uintptr_t)p & FAKE_TAG) != 0;
}

static const allocation *find_locked(uintptr_t host)
{
    for (int i = 0; i < n_allocs; i++)
        if (host >= (uintptr_t)allocs[i].host && host < (uintptr_t)allocs[i].host + allocs[i].bytes)
            return &allocs[i];
    return NULL;
}

void *fake_device_range(CUdeviceptr p, size_t bytes, int gpu, const char *what)
{
    if (!(p & FAKE_TAG))
        fake_die("%s: %#llx is not a device address", what, (unsigned long long)p);
    uintptr_t host = (uintptr_t)(p & ~FAKE_TAG);
    pthread_mutex_lock(&lock);
    const allocation *a = find_locked(host);
    if (!a)
        fake_die("%s: %#llx is in no live allocation", what, (unsigned long long)p);
    if (bytes > (uintptr_t)a->host + a->bytes - host)
        fake_die("%s: %zu bytes at %#llx run %zu bytes past the end of its %zu-byte allocation", what, bytes,
                 (unsigned long long)p, bytes - ((uintptr_t)a->host + a->bytes - host), a->bytes);
    if (gpu >= 0 && a->gpu != gpu)
        fake_die("%s: %#llx is GPU %d's memory, used on GPU %d", what, (unsigned long long)p, a->gpu, gpu);
    pthread_mutex_unlock(&lock);
    return (void *)host;
}

/* ---- streams ---- */

typedef struct work {
    struct work *next;
    void (*run)(void *arg);
    void *arg;
} work;

typedef struct fake_stream {
    int magic, gpu, alive, busy, stop;
    unsigned flags, seed;
    fake_ctx *ctx;
    work *head, *tail;
    long queued, done; /* items */
    long forced;       /* lazy: items something depends on (the worker runs up to there) */
    pthread_t thread;
    pthread_cond_t wake;
} fake_stream;

static fake_stream *streams[1024]; /* every stream ever made (structs are never freed) */
static int n_streams;

static void *stream_main(void *p)
{
    fake_stream *s = p;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!(s->head && (!lazy || s->stop || s->done < s->forced)) && !s->stop)
            pthread_cond_wait(&s->wake, &lock);
        if (!s->head)
            break;
        work *w = s->head;
        s->head = w->next;
        if (!s->head)
            s->tail = NULL;
        s->busy = 1;
        pthread_mutex_unlock(&lock);
        if (jitter_us > 0) { // a GPU runs streams at no fixed pace: missing waits show up
            struct timespec pause = {0, 1000L * (long)(rand_r(&s->seed) % (unsigned)jitter_us)};
            nanosleep(&pause, NULL);
        }
        w->run(w->arg);
        free(w->arg);
        free(w);
        pthread_mutex_lock(&lock);
        s->busy = 0;
        s->done++;
        pthread_cond_broadcast(&changed);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

static fake_stream *live_stream_locked(CUstream handle)
{
    for (int i = 0; i < n_streams; i++)
        if ((CUstream)streams[i] == handle && streams[i]->alive)
            return streams[i];
    return NULL;
}

int fake_stream_gpu(CUstream handle)
{
    pthread_mutex_lock(&lock);
    fake_stream *s = live_stream_locked(handle);
    if (!s)
        fake_die("stream %p is not a live stream", (void *)handle);
    int gpu = s->gpu;
    pthread_mutex_unlock(&lock);
    return gpu;
}

static long enqueue_locked(fake_stream *s, void (*run)(void *), void *arg)
{
    work *w = zalloc(sizeof *w);
    *w = (work){NULL, run, arg};
    if (s->tail)
        s->tail->next = w;
    else
        s->head = w;
    s->tail = w;
    pthread_cond_signal(&s->wake);
    return ++s->queued;
}

void fake_stream_enqueue(CUstream handle, void (*run)(void *), void *arg)
{
    pthread_mutex_lock(&lock);
    fake_stream *s = live_stream_locked(handle);
    if (!s)
        fake_die("work queued on stream %p, which is not a live stream", (void *)handle);
    enqueue_locked(s, run, arg);
    pthread_mutex_unlock(&lock);
}

/* Something depends on s's items up to `upto`: a lazy stream runs them now. */
static void force_locked(fake_stream *s, long upto)
{
    if (s && upto > s->forced) {
        s->forced = upto;
        pthread_cond_signal(&s->wake);
    }
}

static void drain_locked(fake_stream *s, long upto)
{
    force_locked(s, upto);
    while (s->done < upto)
        pthread_cond_wait(&changed, &lock);
}

/* The calling thread's context must own the stream (a stream of another context is an error). */
static CUresult stream_of(CUstream handle, fake_stream **out)
{
    if (!handle)
        fake_die("the legacy default stream (stream 0) is not used by runtime/cuda and not emulated");
    fake_stream *s = live_stream_locked(handle);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (s->ctx != current)
        return CUDA_ERROR_INVALID_CONTEXT;
    *out = s;
    return CUDA_SUCCESS;
}

/* ---- initialisation and devices ---- */

static int env_int(const char *name, int fallback, int lo, int hi)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return fallback;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi)
        fake_die("%s=%s: want an integer in %d..%d", name, v, lo, hi);
    return (int)x;
}

CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    if (!initialised) {
        gpus = env_int("FAKE_CUDA_GPUS", 1, 0, MAX_GPUS);
        capacity = (size_t)env_int("FAKE_CUDA_MEM_MIB", 143360, 1, 1 << 24) << 20;
        cc = env_int("FAKE_CUDA_CC", 90, 10, 129);
        jitter_us = env_int("FAKE_CUDA_JITTER_US", 0, 0, 1000000);
        lazy = env_int("FAKE_CUDA_LAZY", 0, 0, 1);
        if (getenv("FAKE_CUDA_REPORT") && atexit(report) != 0)
            fake_die("atexit");
        initialised = 1;
    }
    pthread_mutex_unlock(&lock);
    fake_count("cuInit");
    return gpus > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult cuDriverGetVersion(int *version)
{
    *version = 13000;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    NEED_INIT();
    *count = gpus;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    NEED_INIT();
    if (ordinal < 0 || ordinal >= gpus)
        return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    NEED_INIT();
    if (dev < 0 || dev >= gpus)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "fake GPU %d (tests/cuda_fake)", dev);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attr, CUdevice dev)
{
    NEED_INIT();
    if (dev < 0 || dev >= gpus)
        return CUDA_ERROR_INVALID_DEVICE;
    switch (attr) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = cc / 10; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = cc % 10; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 132; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
    NEED_INIT();
    if (dev < 0 || dev >= gpus)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    if (!primary[dev]) {
        fake_ctx *c = zalloc(sizeof *c);
        *c = (fake_ctx){FAKE_MAGIC, dev, 0, 1};
        primary[dev] = c;
        pthread_mutex_unlock(&lock);
        fake_count("context created");
        pthread_mutex_lock(&lock);
    }
    primary[dev]->refs++;
    *ctx = (CUcontext)primary[dev];
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* The last release destroys the context: what it held must be gone by then (the real driver
 * frees it silently; here leftovers are reported, since runtime/cuda frees what it makes). */
CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    NEED_INIT();
    if (dev < 0 || dev >= gpus)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    fake_ctx *c = primary[dev];
    if (!c)
        fake_die("cuDevicePrimaryCtxRelease on GPU %d, whose primary context is not retained", dev);
    if (--c->refs == 0) {
        for (int i = 0; i < n_streams; i++)
            if (streams[i]->alive && streams[i]->ctx == c)
                fake_die("GPU %d's primary context destroyed with a live stream", dev);
        if (used_of[dev] != 0)
            fake_die("GPU %d's primary context destroyed with %zu bytes still allocated", dev, used_of[dev]);
        c->alive = 0;
        primary[dev] = NULL;
    }
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
    NEED_INIT();
    fake_ctx *c = (fake_ctx *)ctx;
    if (c && (c->magic != FAKE_MAGIC || !c->alive))
        return CUDA_ERROR_INVALID_CONTEXT;
    current = c;
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *ctx)
{
    NEED_INIT();
    *ctx = (CUcontext)current;
    return CUDA_SUCCESS;
}

/* ---- memory calls ---- */

CUresult cuMemGetInfo(size_t *free_bytes, size_t *total)
{
    NEED_CONTEXT();
    pthread_mutex_lock(&lock);
    *total = capacity;
    *free_bytes = capacity - used_of[current->gpu];
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc(CUdeviceptr *p, size_t bytes)
{
    NEED_CONTEXT();
    if (bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    int gpu = current->gpu;
    size_t rounded = (bytes + 255) & ~(size_t)255;
    pthread_mutex_lock(&lock);
    if (rounded > capacity - used_of[gpu]) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    char *host = aligned_alloc(256, rounded);
    if (!host)
        fake_die("out of host memory for a %zu-byte allocation", bytes);
    memset(host, 0xff, rounded);
    if (n_allocs == cap_allocs) {
        cap_allocs = cap_allocs ? 2 * cap_allocs : 64;
        allocs = realloc(allocs, (size_t)cap_allocs * sizeof *allocs);
        if (!allocs)
            fake_die("out of memory");
    }
    allocs[n_allocs++] = (allocation){host, bytes, gpu};
    used_of[gpu] += rounded;
    pthread_mutex_unlock(&lock);
    *p = (CUdeviceptr)((uintptr_t)host | FAKE_TAG);
    fake_count("cuMemAlloc");
    return CUDA_SUCCESS;
}

/* Like the real cuMemFree, waits for the GPU's queued work first (it may still use the memory). */
CUresult cuMemFree(CUdeviceptr p)
{
    NEED_CONTEXT();
    uintptr_t host = (uintptr_t)(p & ~FAKE_TAG);
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < n_allocs && (uintptr_t)allocs[i].host != host)
        i++;
    if (!(p & FAKE_TAG) || i == n_allocs)
        fake_die("cuMemFree(%#llx): not the start of a live allocation", (unsigned long long)p);
    for (int k = 0; k < n_streams; k++)
        if (streams[k]->alive && streams[k]->gpu == allocs[i].gpu)
            drain_locked(streams[k], streams[k]->queued);
    // the drain released the lock: find the entry again
    for (i = 0; i < n_allocs && (uintptr_t)allocs[i].host != host;)
        i++;
    used_of[allocs[i].gpu] -= (allocs[i].bytes + 255) & ~(size_t)255;
    free(allocs[i].host);
    allocs[i] = allocs[--n_allocs];
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

typedef struct copy_work {
    void *dst;
    const void *src;
    size_t bytes;
    int set, value_bytes;
    uint32_t value;
    void *staged; /* a copy from host memory: the source as it was at the call */
} copy_work;

static void run_copy(void *arg)
{
    copy_work *c = arg;
    if (!c->set) {
        memmove(c->dst, c->src, c->bytes);
        free(c->staged);
    } else if (c->value_bytes == 1) {
        memset(c->dst, (int)c->value, c->bytes);
    } else {
        for (size_t i = 0; i < c->bytes / 4; i++)
            memcpy((char *)c->dst + 4 * i, &c->value, 4);
    }
}

/* Host memory here is pageable. A copy to it returns once it is done (CUDA's rule for pageable
 * memory: a host wait); a copy from it takes the source now (the driver's staging) and is
 * queued, as a device-to-device copy is. */
CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream)
{
    NEED_CONTEXT();
    copy_work *c = zalloc(sizeof *c);
    int to_host = !(dst & FAKE_TAG), from_host = !(src & FAKE_TAG);
    if (to_host && from_host)
        fake_die("cuMemcpyAsync from host memory to host memory is not used by runtime/cuda");
    c->dst = dst & FAKE_TAG ? fake_device_range(dst, bytes, -1, "cuMemcpyAsync destination") : (void *)(uintptr_t)dst;
    c->src = src & FAKE_TAG ? fake_device_range(src, bytes, -1, "cuMemcpyAsync source") : (void *)(uintptr_t)src;
    c->bytes = bytes;
    if (from_host) {
        c->staged = zalloc(bytes ? bytes : 1);
        memcpy(c->staged, c->src, bytes);
        c->src = c->staged;
    }
    pthread_mutex_lock(&lock);
    fake_stream *s;
    CUresult res = stream_of(stream, &s);
    if (res != CUDA_SUCCESS) {
        pthread_mutex_unlock(&lock);
        free(c->staged);
        free(c);
        return res;
    }
    long item = enqueue_locked(s, run_copy, c);
    if (to_host)
        drain_locked(s, item);
    pthread_mutex_unlock(&lock);
    fake_count(to_host ? "cuMemcpyAsync (to host)" : from_host ? "cuMemcpyAsync (from host)" : "cuMemcpyAsync (device)");
    return CUDA_SUCCESS;
}

static CUresult memset_async(CUdeviceptr dst, uint32_t value, int value_bytes, size_t n, CUstream stream)
{
    NEED_CONTEXT();
    copy_work *c = zalloc(sizeof *c);
    *c = (copy_work){fake_device_range(dst, n * (size_t)value_bytes, -1, "cuMemset destination"), NULL,
                     n * (size_t)value_bytes, 1, value_bytes, value, NULL};
    pthread_mutex_lock(&lock);
    fake_stream *s;
    CUresult res = stream_of(stream, &s);
    if (res != CUDA_SUCCESS) {
        pthread_mutex_unlock(&lock);
        free(c);
        return res;
    }
    if (c->dst && fake_current_gpu() != s->gpu)
        fake_die("memset on a stream of GPU %d from GPU %d's context", s->gpu, fake_current_gpu());
    enqueue_locked(s, run_copy, c);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream)
{
    return memset_async(dst, value, 1, n, stream);
}

CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t n, CUstream stream)
{
    if (dst % 4 != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return memset_async(dst, value, 4, n, stream);
}

/* The legacy default stream: waits for the context's blocking streams only, as CUDA does
 * (streams made with CU_STREAM_NON_BLOCKING are not waited for). */
CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes)
{
    NEED_CONTEXT();
    const void *from = fake_device_range(src, bytes, -1, "cuMemcpyDtoH source");
    pthread_mutex_lock(&lock);
    for (int k = 0; k < n_streams; k++)
        if (streams[k]->alive && streams[k]->ctx == current && !(streams[k]->flags & CU_STREAM_NON_BLOCKING))
            drain_locked(streams[k], streams[k]->queued);
    pthread_mutex_unlock(&lock);
    memcpy(dst, from, bytes);
    fake_count("cuMemcpyDtoH");
    return CUDA_SUCCESS;
}

/* ---- stream calls ---- */

CUresult cuStreamCreate(CUstream *out, unsigned int flags)
{
    NEED_CONTEXT();
    fake_stream *s = zalloc(sizeof *s);
    *s = (fake_stream){.magic = FAKE_MAGIC, .gpu = current->gpu, .alive = 1, .flags = flags, .ctx = current};
    s->seed = (unsigned)(uintptr_t)s ^ (unsigned)n_streams;
    pthread_cond_init(&s->wake, NULL);
    pthread_mutex_lock(&lock);
    if (n_streams == (int)(sizeof streams / sizeof streams[0]))
        fake_die("more than %d streams made", n_streams);
    streams[n_streams++] = s;
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0)
        fake_die("cannot start a stream thread");
    pthread_mutex_unlock(&lock);
    *out = (CUstream)s;
    fake_count("cuStreamCreate");
    return CUDA_SUCCESS;
}

/* Returns at once; queued work still runs (CUDA's rule), then the worker ends. */
CUresult cuStreamDestroy(CUstream handle)
{
    NEED_CONTEXT();
    pthread_mutex_lock(&lock);
    fake_stream *s;
    CUresult res = stream_of(handle, &s);
    if (res == CUDA_SUCCESS) {
        s->alive = 0;
        s->stop = 1; // a lazy stream runs what it holds too
        pthread_cond_signal(&s->wake);
    }
    pthread_mutex_unlock(&lock);
    if (res == CUDA_SUCCESS)
        pthread_detach(s->thread);
    return res;
}

CUresult cuStreamSynchronize(CUstream handle)
{
    NEED_CONTEXT();
    pthread_mutex_lock(&lock);
    fake_stream *s;
    CUresult res = stream_of(handle, &s);
    if (res == CUDA_SUCCESS)
        drain_locked(s, s->queued);
    pthread_mutex_unlock(&lock);
    fake_count("cuStreamSynchronize");
    fake_count("host waits");
    return res;
}

/* ---- events ---- */

typedef struct fake_event {
    int magic, alive;
    unsigned flags;
    fake_ctx *ctx;
    long recorded, completed; /* record calls made and done */
    double time;              /* when the last completed record ran */
    fake_stream *stream;      /* where the last record was queued, as item `item` */
    long item;
} fake_event;

typedef struct record_work {
    fake_event *event;
    long seq;
    fake_stream *stream; /* a wait: the stream and item of the record it waits for */
    long item;
} record_work;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run_record(void *arg)
{
    record_work *r = arg;
    pthread_mutex_lock(&lock);
    if (r->seq > r->event->completed) {
        r->event->completed = r->seq;
        r->event->time = now();
    }
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
}

static void run_wait(void *arg)
{
    record_work *r = arg;
    pthread_mutex_lock(&lock);
    force_locked(r->stream, r->item);
    while (r->event->completed < r->seq)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
}

static fake_event *event_of(CUevent handle)
{
    fake_event *e = (fake_event *)handle;
    if (!e || e->magic != FAKE_MAGIC || !e->alive)
        fake_die("event %p is not a live event", (void *)handle);
    return e;
}

CUresult cuEventCreate(CUevent *out, unsigned int flags)
{
    NEED_CONTEXT();
    fake_event *e = zalloc(sizeof *e);
    *e = (fake_event){.magic = FAKE_MAGIC, .alive = 1, .flags = flags, .ctx = current};
    *out = (CUevent)e;
    fake_count("cuEventCreate");
    return CUDA_SUCCESS;
}

/* The struct stays (a queued record may still complete it); the handle is dead. */
CUresult cuEventDestroy(CUevent handle)
{
    NEED_INIT();
    pthread_mutex_lock(&lock);
    event_of(handle)->alive = 0;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent handle, CUstream stream)
{
    NEED_CONTEXT();
    record_work *r = zalloc(sizeof *r);
    pthread_mutex_lock(&lock);
    fake_event *e = event_of(handle);
    fake_stream *s;
    CUresult res = stream_of(stream, &s);
    if (res == CUDA_SUCCESS && e->ctx != s->ctx)
        res = CUDA_ERROR_INVALID_HANDLE;
    if (res != CUDA_SUCCESS) {
        pthread_mutex_unlock(&lock);
        free(r);
        return res;
    }
    *r = (record_work){e, ++e->recorded, NULL, 0};
    e->stream = s;
    e->item = enqueue_locked(s, run_record, r);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

/* Waits for the event's last record made before this call; none made: nothing to wait for.
 * The event may belong to another context (how one GPU's stream waits for another's). */
CUresult cuStreamWaitEvent(CUstream stream, CUevent handle, unsigned int flags)
{
    NEED_CONTEXT();
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    fake_event *e = event_of(handle);
    fake_stream *s;
    CUresult res = stream_of(stream, &s);
    if (res == CUDA_SUCCESS && e->recorded > 0) {
        record_work *r = zalloc(sizeof *r);
        *r = (record_work){e, e->recorded, e->stream, e->item};
        enqueue_locked(s, run_wait, r);
    }
    pthread_mutex_unlock(&lock);
    if (res == CUDA_SUCCESS)
        fake_count("cuStreamWaitEvent");
    return res;
}

CUresult cuEventQuery(CUevent handle)
{
    NEED_INIT();
    pthread_mutex_lock(&lock);
    fake_event *e = event_of(handle);
    force_locked(e->stream, e->item);
    CUresult res = e->completed >= e->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&lock);
    return res;
}

CUresult cuEventSynchronize(CUevent handle)
{
    NEED_INIT();
    pthread_mutex_lock(&lock);
    fake_event *e = event_of(handle);
    force_locked(e->stream, e->item);
    while (e->completed < e->recorded)
        pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
    fake_count("cuEventSynchronize");
    fake_count("host waits");
    return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
    NEED_INIT();
    pthread_mutex_lock(&lock);
    fake_event *a = event_of(start), *b = event_of(end);
    CUresult res = CUDA_SUCCESS;
    if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING || a->recorded == 0 || b->recorded == 0)
        res = CUDA_ERROR_INVALID_HANDLE;
    else if (a->completed < a->recorded || b->completed < b->recorded)
        res = CUDA_ERROR_NOT_READY;
    else
        *ms = (float)(1e3 * (b->time - a->time));
    pthread_mutex_unlock(&lock);
    return res;
}

/* ---- modules and launches ---- */

typedef struct fake_module {
    int magic, alive;
    fake_ctx *ctx;
} fake_module;

typedef struct fake_function {
    int magic, kernel;
    fake_module *module;
} fake_function;

/* A cubin is an ELF file; PTX is text that names its .version. */
CUresult cuModuleLoadData(CUmodule *out, const void *image)
{
    NEED_CONTEXT();
    if (!image)
        return CUDA_ERROR_INVALID_VALUE;
    if (memcmp(image, "\177ELF", 4) != 0 && !strstr((const char *)image, ".version"))
        return CUDA_ERROR_INVALID_IMAGE;
    fake_module *m = zalloc(sizeof *m);
    *m = (fake_module){FAKE_MAGIC, 1, current};
    *out = (CUmodule)m;
    fake_count("cuModuleLoadData");
    return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule handle)
{
    NEED_CONTEXT();
    fake_module *m = (fake_module *)handle;
    if (!m || m->magic != FAKE_MAGIC || !m->alive)
        return CUDA_ERROR_INVALID_HANDLE;
    m->alive = 0;
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *out, CUmodule handle, const char *name)
{
    NEED_CONTEXT();
    fake_module *m = (fake_module *)handle;
    if (!m || m->magic != FAKE_MAGIC || !m->alive)
        return CUDA_ERROR_INVALID_HANDLE;
    for (int k = 0; k < simt_n_kernels; k++) {
        if (strcmp(simt_kernels[k].name, name) == 0) {
            fake_function *f = zalloc(sizeof *f);
            *f = (fake_function){FAKE_MAGIC, k, m};
            *out = (CUfunction)f;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_NOT_FOUND;
}

typedef struct launch_work {
    int kernel;
    unsigned grid, block;
    void *bound;
} launch_work;

static void run_launch(void *arg)
{
    launch_work *l = arg;
    pthread_mutex_lock(&kernel_lock);
    simt_kernels[l->kernel].run_bound(l->bound, l->grid, l->block);
    pthread_mutex_unlock(&kernel_lock);
}

/* simt's hook for the pointer arguments of the kernel being bound on this thread. */
static __thread int binding_gpu, binding_kernel;

static void *translate_argument(const void *p, int index)
{
    if (!p)
        return NULL;
    char what[160];
    snprintf(what, sizeof what, "kernel %s, argument %d", simt_kernels[binding_kernel].name, index);
    return fake_device_range((CUdeviceptr)(uintptr_t)p, 0, binding_gpu, what);
}

CUresult cuLaunchKernel(CUfunction handle, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, CUstream stream, void **params, void **extra)
{
    NEED_CONTEXT();
    fake_function *f = (fake_function *)handle;
    if (!f || f->magic != FAKE_MAGIC || !f->module->alive)
        return CUDA_ERROR_INVALID_HANDLE;
    if (f->module->ctx != current)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (gx == 0 || bx == 0 || bx > 1024 || gx > 0x7fffffffu || !params || extra)
        return CUDA_ERROR_INVALID_VALUE;
    if (gy != 1 || gz != 1 || by != 1 || bz != 1 || shared != 0)
        fake_die("kernel %s: only 1-D launches without dynamic shared memory are emulated",
                 simt_kernels[f->kernel].name);
    pthread_mutex_lock(&lock);
    fake_stream *s;
    CUresult res = stream_of(stream, &s);
    int gpu = res == CUDA_SUCCESS ? s->gpu : -1;
    pthread_mutex_unlock(&lock);
    if (res != CUDA_SUCCESS)
        return res;
    launch_work *l = zalloc(sizeof *l);
    binding_gpu = gpu;
    binding_kernel = f->kernel;
    simt_translate_pointer = translate_argument;
    *l = (launch_work){f->kernel, gx, bx, simt_kernels[f->kernel].bind(params)};
    fake_stream_enqueue(stream, run_launch, l);
    fake_count("cuLaunchKernel");
    return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult res, const char **text)
{
    switch (res) {
    case CUDA_SUCCESS: *text = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *text = "invalid argument"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *text = "out of memory"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *text = "initialization error"; break;
    case CUDA_ERROR_NO_DEVICE: *text = "no CUDA-capable device is detected"; break;
    case CUDA_ERROR_INVALID_DEVICE: *text = "invalid device ordinal"; break;
    case CUDA_ERROR_INVALID_IMAGE: *text = "device kernel image is invalid"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *text = "invalid device context"; break;
    case CUDA_ERROR_INVALID_HANDLE: *text = "invalid resource handle"; break;
    case CUDA_ERROR_NOT_FOUND: *text = "named symbol not found"; break;
    case CUDA_ERROR_NOT_READY: *text = "device not ready"; break;
    default: *text = NULL; return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}
