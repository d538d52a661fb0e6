/* cuda/device.c: the bottom of the CUDA device layer (libpacirt_cuda.a, built only with a CUDA
 * toolkit); layer.c assembles pr_device_cuda from its calls and the NCCL transport's.
 *
 * Driver API loaded with dlopen, so `run` starts on a machine without a driver and trains on
 * the CPU there. Stage s runs on GPU s mod (GPUs): its device's primary context, one compute
 * stream (kernels, GEMMs, uploads, device copies and zeroing, in the executor's order) and
 * one communication stream for downloads, ordered by an event recorded on the compute stream
 * that the communication stream waits for. Modules come from the images pacic embedded: the
 * cubin of the GPU's architecture, else PTX.
 *
 * Where the host waits for the GPU (docs/gpu.md, "Host waits"): nowhere per instruction.
 * Only (1) a download: the last stage's losses after each forward (the step's loss and its
 * non-finite check), evaluation, sampling and checkpoint gathers; (2) pr_cuda_dev_sumsq, once per
 * stage and step: the gradients' sums of squares for clipping's norm (the global norm's
 * exchange between stages is on the host) and the non-finite check; (3) pr_cuda_dev_finish: each
 * stage at the end of a segment, and after every instruction of a measured run (--trace,
 * --profile-out); (4) an NCCL receive, which waits for its message and reads its
 * micro-batch (nccl_transport.c); (5) set-up and close. Stages order their work with
 * events: a device link's copies (links.c), eval's hand-over (pr_cuda_dev_follow), NCCL.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "../prt.h"
#include "cuda_layer.h"

#define NAME_OF2(symbol) #symbol
#define NAME_OF(symbol) NAME_OF2(symbol) /* after cuda.h's renames: "cuMemAlloc_v2" */

/* The driver entry points used, typed by cuda.h. */
#define DRIVER_FUNCTIONS(X)                                                                   \
    X(cuInit) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetAttribute) X(cuDeviceGetName)  \
    X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)              \
    X(cuMemGetInfo) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyAsync) X(cuMemsetD8Async)            \
    X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamWaitEvent)         \
    X(cuEventCreate) X(cuEventRecord) X(cuEventDestroy) X(cuEventElapsedTime)                \
    X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuLaunchKernel)           \
    X(cuGetErrorString)

static struct {
#define DRIVER_FIELD(symbol) __typeof__(symbol) *symbol;
    DRIVER_FUNCTIONS(DRIVER_FIELD)
#undef DRIVER_FIELD
} drv;

/* One timed op on the compute stream: events recorded before and after it. */
typedef struct op_events {
    CUevent start, stop;
    int32_t op;
} op_events;

typedef struct cuda_stage {
    int open, gpu;
    CUcontext ctx;
    CUstream compute, comm;
    CUevent compute_done, handoff;
    CUmodule module;
    CUfunction *kernels;
    int n_kernels;
    /* sums of squares of the gradients (pr_cuda_dev_sumsq): SUMSQ_BLOCKS partials per tensor */
    CUfunction sumsq;
    double *partials, *partials_host;
    /* the noise scale's held sum (pr_cuda_dev_sumsq_hold): its partials in the slot after the
     * n_tensors tensors'; held_blocks > 0 while they wait for a download, held_ready once one
     * brought them (held_sum) */
    int n_tensors, held_blocks, held_ready;
    double held_sum;
    CUfunction dc_asgd_add; /* delay_correction dc-asgd's kernel (pr_cuda_dev_dc_asgd_add); NULL without it */
    /* per-op timing (run --profile-out): pairs recorded since the last resolve, from a pool
     * of created pairs that grows to the most ops one forward, backward or step queues */
    op_events *timed;
    int n_timed, n_created;
} cuda_stage;

enum { SUMSQ_BLOCKS = 512 }; /* most blocks per tensor: enough to stream a large gradient */

static cuda_stage stages[PACI_MAX_STAGES];
static int gpu_count = -1;
/* A primary context the memory check retained, kept until a stage opens on that GPU: released
 * in between, the driver would destroy it and the open would create it again (costly). */
static int check_holds[PACI_MAX_STAGES];
static int pinned_gpu = -1; /* >= 0: every stage of this process runs there */

/* A driver error mid-run is fatal: name the stage, the call and the driver's words. */
void pr_cuda_check(int stage, CUresult res, const char *call)
{
    if (res == CUDA_SUCCESS)
        return;
    const char *text = NULL;
    if (drv.cuGetErrorString)
        drv.cuGetErrorString(res, &text);
    pr_internal("stage %d: %s failed: %s (CUDA error %d)", stage, call, text ? text : "unknown", (int)res);
}

/* Loads libcuda and initialises it once; the number of GPUs, or 0 with the reason. */
int pr_cuda_dev_probe(char *err)
{
    static char reason[PR_ERR_LEN];
    if (gpu_count >= 0) {
        if (gpu_count == 0)
            snprintf(err, PR_ERR_LEN, "%s", reason);
        return gpu_count;
    }
    gpu_count = 0;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(reason, sizeof reason, "no CUDA driver (libcuda.so.1 does not load)");
        snprintf(err, PR_ERR_LEN, "%s", reason);
        return 0;
    }
#define DRIVER_LOAD(symbol)                                                                   \
    if (!(*(void **)&drv.symbol = dlsym(lib, NAME_OF(symbol)))) {                             \
        snprintf(reason, sizeof reason, "the CUDA driver lacks %s (too old?)", NAME_OF(symbol)); \
        snprintf(err, PR_ERR_LEN, "%s", reason);                                              \
        return 0;                                                                             \
    }
    DRIVER_FUNCTIONS(DRIVER_LOAD)
#undef DRIVER_LOAD
    int count = 0;
    CUresult res = drv.cuInit(0);
    if (res == CUDA_SUCCESS)
        res = drv.cuDeviceGetCount(&count);
    if (res != CUDA_SUCCESS || count < 1) {
        const char *text = NULL;
        drv.cuGetErrorString(res, &text);
        snprintf(reason, sizeof reason, "%s", res != CUDA_SUCCESS ? (text ? text : "cuInit failed")
                                                                  : "the driver reports no GPU");
        snprintf(err, PR_ERR_LEN, "%s", reason);
        return 0;
    }
    gpu_count = count;
    return count;
}

/* The program's table, once a stage is sized or opened: a stage goes on its device's GPU. */
static const paci_table *placed;

/* Stage s on the GPU of its device (stage_device: itself without chunks), the devices dealt
 * round the GPUs there are. */
int pr_cuda_gpu_of(int stage)
{
    if (pinned_gpu >= 0)
        return pinned_gpu;
    int device = placed && stage >= 0 && stage < placed->stages ? placed->stage_device[stage] : stage;
    return device % (gpu_count > 0 ? gpu_count : 1);
}

/* One process per stage: the launcher's local rank names the GPU, which must exist here. */
int pr_cuda_dev_pin(int gpu, char *err)
{
    char why[PR_ERR_LEN];
    int count = pr_cuda_dev_probe(why);
    if (count < 1)
        return pr_fail(err, "local rank %d: no usable GPU: %s", gpu, why);
    if (gpu < 0 || gpu >= count)
        return pr_fail(err, "local rank %d: this machine has %d GPU%s (the local rank picks the "
                       "GPU: start at most %d processes per machine)", gpu, count,
                       count == 1 ? "" : "s", count);
    pinned_gpu = gpu;
    return 0;
}

/* Makes the stage's context current on the calling thread (stage threads come and go). */
static cuda_stage *enter(int stage)
{
    cuda_stage *cs = &stages[stage];
    if (!cs->open)
        pr_internal("stage %d: CUDA call before the stage was opened", stage);
    pr_cuda_check(stage, drv.cuCtxSetCurrent(cs->ctx), "cuCtxSetCurrent");
    return cs;
}

void pr_cuda_enter(int stage)
{
    enter(stage);
}

/* The cubin for the GPU's architecture (same major, highest minor not above it), else PTX
 * for an architecture not above it; NULL if neither. */
static const pr_cuda_image *pick_image(const pr_cuda_stage *code, int major, int minor)
{
    const pr_cuda_image *best = NULL;
    int best_minor = -1;
    for (int i = 0; i < code->n_images; i++) {
        int maj = 0, min = 0;
        const char *arch = code->images[i].arch;
        if (sscanf(arch, "sm_%1d%1d", &maj, &min) == 2 && maj == major && min <= minor && min > best_minor) {
            best = &code->images[i];
            best_minor = min;
        }
    }
    if (best)
        return best;
    for (int i = 0; i < code->n_images; i++) {
        int maj = 0, min = 0;
        if (sscanf(code->images[i].arch, "compute_%1d%1d", &maj, &min) == 2 &&
            maj * 10 + min <= major * 10 + minor)
            best = &code->images[i];
    }
    return best;
}


/* The memory calls gemm.c makes, handed to it at its open (it calls no function of this file). */
static const pr_device memory_calls = {.alloc = pr_cuda_dev_alloc, .release = pr_cuda_dev_release,
                                       .upload = pr_cuda_dev_queue_copy};

int pr_cuda_dev_open_stage(const pr_program *prog, int stage, char *err)
{
    if (pr_cuda_dev_probe(err) < 1)
        return -1;
    cuda_stage *cs = &stages[stage];
    memset(cs, 0, sizeof *cs);
    placed = prog->schedule;
    cs->gpu = pr_cuda_gpu_of(stage);
    CUdevice dev;
    int major = 0, minor = 0;
    char name[128] = "";
    if (drv.cuDeviceGet(&dev, cs->gpu) != CUDA_SUCCESS ||
        drv.cuDevicePrimaryCtxRetain(&cs->ctx, dev) != CUDA_SUCCESS)
        return pr_fail(err, "stage %d: cannot open GPU %d", stage, cs->gpu);
    drv.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    drv.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    drv.cuDeviceGetName(name, sizeof name, dev);
    cs->open = 1;
    enter(stage);
    if (check_holds[cs->gpu]) {
        drv.cuDevicePrimaryCtxRelease(dev);
        check_holds[cs->gpu] = 0;
    }
    const pr_cuda_stage *code = &prog->cuda[stage];
    const pr_cuda_image *image = pick_image(code, major, minor);
    if (!image)
        return pr_fail(err, "stage %d: GPU %d (%s) has compute capability %d.%d; this run holds "
                       "code for sm_80, sm_90 and newer only", stage, cs->gpu, name, major, minor);
    CUresult res = drv.cuModuleLoadData(&cs->module, image->data);
    if (res != CUDA_SUCCESS) {
        const char *text = NULL;
        drv.cuGetErrorString(res, &text);
        return pr_fail(err, "stage %d: GPU %d (%s) cannot load the %s kernels: %s", stage, cs->gpu,
                       name, image->arch, text ? text : "unknown error");
    }
    cs->n_kernels = code->n_kernels;
    cs->kernels = pr_alloc((size_t)code->n_kernels * sizeof(CUfunction));
    for (int k = 0; k < code->n_kernels; k++)
        if (drv.cuModuleGetFunction(&cs->kernels[k], cs->module, code->kernel_names[k]) != CUDA_SUCCESS)
            return pr_fail(err, "stage %d: the %s image has no kernel %s", stage, image->arch,
                           code->kernel_names[k]);
    if (drv.cuModuleGetFunction(&cs->sumsq, cs->module, PR_CUDA_SUMSQ_KERNEL) != CUDA_SUCCESS)
        return pr_fail(err, "stage %d: the %s image has no kernel %s", stage, image->arch, PR_CUDA_SUMSQ_KERNEL);
    cs->dc_asgd_add = NULL;
    if (prog->dc_asgd && drv.cuModuleGetFunction(&cs->dc_asgd_add, cs->module, PR_CUDA_DC_ASGD_KERNEL) != CUDA_SUCCESS)
        return pr_fail(err, "stage %d: the %s image has no kernel %s", stage, image->arch, PR_CUDA_DC_ASGD_KERNEL);
    pr_cuda_check(stage, drv.cuStreamCreate(&cs->compute, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    pr_cuda_check(stage, drv.cuStreamCreate(&cs->comm, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    pr_cuda_check(stage, drv.cuEventCreate(&cs->compute_done, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    pr_cuda_check(stage, drv.cuEventCreate(&cs->handoff, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    cs->n_tensors = prog->stage[stage].n_tensors;
    cs->held_blocks = cs->held_ready = 0;
    size_t partial_bytes = (size_t)(prog->stage[stage].n_tensors + 1) * SUMSQ_BLOCKS * sizeof(double);
    cs->partials = pr_cuda_dev_alloc(stage, partial_bytes);
    cs->partials_host = pr_alloc(partial_bytes);
    return pr_cuda_gemm_open(stage, cs->gpu, cs->compute, &memory_calls, err);
}

void pr_cuda_dev_close_stage(int stage)
{
    cuda_stage *cs = &stages[stage];
    if (!cs->open)
        return;
    enter(stage);
    drv.cuStreamSynchronize(cs->compute);
    for (int i = 0; i < cs->n_created; i++) {
        drv.cuEventDestroy(cs->timed[i].start);
        drv.cuEventDestroy(cs->timed[i].stop);
    }
    free(cs->timed);
    if (cs->partials)
        drv.cuMemFree((CUdeviceptr)(uintptr_t)cs->partials);
    free(cs->partials_host);
    pr_cuda_gemm_close(stage);
    drv.cuEventDestroy(cs->compute_done);
    drv.cuEventDestroy(cs->handoff);
    drv.cuStreamDestroy(cs->compute);
    drv.cuStreamDestroy(cs->comm);
    drv.cuModuleUnload(cs->module);
    free(cs->kernels);
    CUdevice dev;
    drv.cuDeviceGet(&dev, cs->gpu);
    drv.cuDevicePrimaryCtxRelease(dev);
    memset(cs, 0, sizeof *cs);
}

/* Device bytes of the sender ring stage s will hold for its link to `peer`: the link's capacity
 * messages and (NCCL) their micro-batch numbers, whether the link goes over NCCL
 * (nccl_transport.c) or is a device link between stages of this process (links.c). */
static int64_t ring_bytes(const pr_program *prog, int s, int peer)
{
    if (peer < 0 || peer >= prog->stages || !prog->schedule)
        return 0;
    int64_t message = pr_link_floats(prog, peer > s ? PR_LINK_ACT : PR_LINK_GRAD, peer > s ? s : peer) *
                      (int64_t)sizeof(float);
    return (int64_t)pr_link_capacity(prog->schedule, peer > s ? s : peer) * (message + (int64_t)sizeof(int64_t));
}

/* The stages sharing a GPU add up, with the NCCL rings they send from; the first stage that
 * does not fit is named with the shortfall, before anything is allocated. A margin is kept
 * for cuBLASLt and the driver. */
int pr_cuda_dev_check_memory(const pr_program *prog, const int64_t *stage_bytes, char *err)
{
    if (pr_cuda_dev_probe(err) < 1)
        return -1;
    const int64_t margin = PR_CUDA_WORKSPACE_BYTES + ((int64_t)256 << 20);
    int64_t used[PACI_MAX_STAGES] = {0};
    // Free memory is read once per GPU, and the context stays retained until the GPU's first
    // stage opens (check_holds).
    size_t free_of[PACI_MAX_STAGES] = {0};
    int known[PACI_MAX_STAGES] = {0};
    placed = prog->schedule;
    for (int s = 0; s < prog->stages; s++) {
        int gpu = pr_cuda_gpu_of(s);
        if (!known[gpu]) {
            CUdevice dev;
            CUcontext ctx;
            size_t total = 0;
            if (drv.cuDeviceGet(&dev, gpu) != CUDA_SUCCESS || drv.cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
                return pr_fail(err, "stage %d: cannot open GPU %d", s, gpu);
            drv.cuCtxSetCurrent(ctx);
            drv.cuMemGetInfo(&free_of[gpu], &total);
            if (check_holds[gpu]) // checked before: one hold is enough
                drv.cuDevicePrimaryCtxRelease(dev);
            check_holds[gpu] = 1;
            known[gpu] = 1;
        }
        size_t free_bytes = free_of[gpu];
        if (stage_bytes[s] == 0) // a stage another process runs: nothing of it is here
            continue;
        used[gpu] += stage_bytes[s] + ring_bytes(prog, s, s + 1) + ring_bytes(prog, s, s - 1) + margin;
        if (used[gpu] > (int64_t)free_bytes)
            return pr_fail(err, "stage %d on GPU %d: needs %.2f GiB (with the stages before it on "
                           "that GPU), %.2f GiB free: short by %.2f GiB", s, gpu,
                           (double)used[gpu] / (1 << 30), (double)free_bytes / (1 << 30),
                           (double)(used[gpu] - (int64_t)free_bytes) / (1 << 30));
    }
    return 0;
}

void *pr_cuda_dev_alloc(int stage, size_t bytes)
{
    cuda_stage *cs = enter(stage);
    CUdeviceptr p = 0;
    CUresult res = drv.cuMemAlloc(&p, bytes ? bytes : 1);
    if (res != CUDA_SUCCESS)
        pr_internal("stage %d: cannot allocate %.2f GiB on GPU %d (memory was checked before: another "
                    "process may hold it)", stage, (double)bytes / (1 << 30), cs->gpu);
    pr_cuda_check(stage, drv.cuMemsetD8Async(p, 0, bytes, cs->comm), "cuMemsetD8Async");
    pr_cuda_check(stage, drv.cuStreamSynchronize(cs->comm), "cuStreamSynchronize");
    return (void *)(uintptr_t)p;
}

void pr_cuda_dev_release(int stage, void *p)
{
    enter(stage);
    drv.cuMemFree((CUdeviceptr)(uintptr_t)p);
}

/* Communication-stream work waits for everything the compute stream has queued. */
static cuda_stage *after_compute(int stage)
{
    cuda_stage *cs = enter(stage);
    pr_cuda_check(stage, drv.cuEventRecord(cs->compute_done, cs->compute), "cuEventRecord");
    pr_cuda_check(stage, drv.cuStreamWaitEvent(cs->comm, cs->compute_done, 0), "cuStreamWaitEvent");
    return cs;
}

/* Unified addressing: one call moves host<->device and device<->device (even across GPUs).
 * Uploads and device copies queue on the compute stream, in order with the stage's kernels,
 * and return: the driver takes a pageable source into its staging memory before returning. */
void pr_cuda_dev_queue_copy(int stage, void *dst, const void *src, size_t bytes)
{
    cuda_stage *cs = enter(stage);
    pr_cuda_check(stage, drv.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src,
                                           bytes, cs->compute), "cuMemcpyAsync");
}

/* A download returns with the data: the host waits for the stage's work so far. */
void pr_cuda_dev_download(int stage, void *dst, const void *src, size_t bytes)
{
    cuda_stage *cs = after_compute(stage);
    pr_cuda_check(stage, drv.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src,
                                           bytes, cs->comm), "cuMemcpyAsync");
    pr_cuda_check(stage, drv.cuStreamSynchronize(cs->comm), "cuStreamSynchronize");
}

void pr_cuda_dev_zero(int stage, void *dst, size_t bytes)
{
    cuda_stage *cs = enter(stage);
    pr_cuda_check(stage, drv.cuMemsetD8Async((CUdeviceptr)(uintptr_t)dst, 0, bytes, cs->compute),
                  "cuMemsetD8Async");
}

/* Stage's later work waits for what `other` has queued (both may share a GPU or not). */
void pr_cuda_dev_follow(int stage, int other)
{
    cuda_stage *from = enter(other);
    pr_cuda_check(other, drv.cuEventRecord(from->handoff, from->compute), "cuEventRecord");
    cuda_stage *cs = enter(stage);
    pr_cuda_check(stage, drv.cuStreamWaitEvent(cs->compute, from->handoff, 0), "cuStreamWaitEvent");
}

void *pr_cuda_dev_event_create(int stage)
{
    enter(stage);
    CUevent ev;
    pr_cuda_check(stage, drv.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    return ev;
}

void pr_cuda_dev_event_destroy(int stage, void *event)
{
    enter(stage);
    drv.cuEventDestroy((CUevent)event);
}

void pr_cuda_dev_event_record(int stage, void *event)
{
    cuda_stage *cs = enter(stage);
    pr_cuda_check(stage, drv.cuEventRecord((CUevent)event, cs->compute), "cuEventRecord");
}

void pr_cuda_dev_event_wait(int stage, void *event)
{
    cuda_stage *cs = enter(stage);
    pr_cuda_check(stage, drv.cuStreamWaitEvent(cs->compute, (CUevent)event, 0), "cuStreamWaitEvent");
}

static void resolve_ops(int stage);

/* Clipping's sums of squares: partial sums per block on the GPU (PR_CUDA_SUMSQ_KERNEL), one
 * download of the partials, added on the host in order: the same bits every run, and about
 * 4 KiB per tensor over the bus instead of the gradients. */
void pr_cuda_dev_sumsq(int stage, const float *base, const pr_tensor *tensors, int n, double *sums)
{
    cuda_stage *cs = enter(stage);
    int blocks[n > 0 ? n : 1];
    for (int i = 0; i < n; i++) {
        const float *x = base + tensors[i].offset;
        long size = (long)tensors[i].size;
        double *partial = cs->partials + (size_t)i * SUMSQ_BLOCKS;
        int64_t wanted = (tensors[i].size + PR_CUDA_SUMSQ_BLOCK - 1) / PR_CUDA_SUMSQ_BLOCK;
        blocks[i] = wanted < SUMSQ_BLOCKS ? (int)wanted : SUMSQ_BLOCKS;
        if (blocks[i] == 0)
            continue;
        void *args[] = {&x, &size, &partial};
        pr_cuda_check(stage, drv.cuLaunchKernel(cs->sumsq, (unsigned)blocks[i], 1, 1, PR_CUDA_SUMSQ_BLOCK, 1, 1, 0,
                                                cs->compute, args, NULL), "cuLaunchKernel (sums of squares)");
    }
    // a held sum's partials, in the slot right after the stage's tensors', ride on this download
    int held = cs->held_blocks > 0 && n == cs->n_tensors;
    size_t bytes = (size_t)(n + held) * SUMSQ_BLOCKS * sizeof(double);
    pr_cuda_check(stage, drv.cuMemcpyAsync((CUdeviceptr)(uintptr_t)cs->partials_host,
                                           (CUdeviceptr)(uintptr_t)cs->partials, bytes, cs->compute),
                  "cuMemcpyAsync (sums of squares)");
    pr_cuda_check(stage, drv.cuStreamSynchronize(cs->compute), "cuStreamSynchronize");
    resolve_ops(stage);
    if (held) {
        cs->held_sum = 0.0;
        for (int b = 0; b < cs->held_blocks; b++)
            cs->held_sum += cs->partials_host[(size_t)n * SUMSQ_BLOCKS + (size_t)b];
        cs->held_blocks = 0;
        cs->held_ready = 1;
    }
    for (int i = 0; i < n; i++) {
        double sum = 0.0;
        for (int b = 0; b < blocks[i]; b++)
            sum += cs->partials_host[(size_t)i * SUMSQ_BLOCKS + (size_t)b];
        sums[i] = sum;
    }
}

/* The noise scale's sum of squares of x[0..size) (docs/run.md): queued, no wait; its partials
 * come back with the stage's next sumsq of all its tensors (the step's), in the same download. */
void pr_cuda_dev_sumsq_hold(int stage, const float *x, int64_t size)
{
    cuda_stage *cs = enter(stage);
    double *partial = cs->partials + (size_t)cs->n_tensors * SUMSQ_BLOCKS;
    long count = (long)size;
    int64_t wanted = (size + PR_CUDA_SUMSQ_BLOCK - 1) / PR_CUDA_SUMSQ_BLOCK;
    cs->held_blocks = wanted < SUMSQ_BLOCKS ? (int)wanted : SUMSQ_BLOCKS;
    cs->held_ready = 0;
    if (cs->held_blocks == 0) { // nothing to sum: no launch, nothing to download
        cs->held_sum = 0.0;
        cs->held_ready = 1;
        return;
    }
    void *args[] = {&x, &count, &partial};
    pr_cuda_check(stage, drv.cuLaunchKernel(cs->sumsq, (unsigned)cs->held_blocks, 1, 1, PR_CUDA_SUMSQ_BLOCK, 1, 1,
                                            0, cs->compute, args, NULL), "cuLaunchKernel (held sum of squares)");
}

int pr_cuda_dev_sumsq_held(int stage, double *sum)
{
    cuda_stage *cs = &stages[stage];
    if (!cs->held_ready)
        return 0;
    cs->held_ready = 0;
    *sum = cs->held_sum;
    return 1;
}

/* Per-op timing: an event before and one after each op on the compute stream. Recording
 * does not wait; the times are read once the stage's work has synchronised (resolve_ops),
 * so profiling adds no synchronisation of its own. Called with the stage's context current
 * (from its forward, backward or step). */
static void cuda_op_begin(int32_t stage, int32_t op)
{
    cuda_stage *cs = &stages[stage];
    if (cs->n_timed == cs->n_created) {
        int grown = cs->n_created ? 2 * cs->n_created : 256;
        cs->timed = realloc(cs->timed, (size_t)grown * sizeof *cs->timed);
        if (!cs->timed)
            pr_internal("stage %d: out of memory for %d op timings", stage, grown);
        for (int i = cs->n_created; i < grown; i++) {
            pr_cuda_check(stage, drv.cuEventCreate(&cs->timed[i].start, CU_EVENT_DEFAULT), "cuEventCreate");
            pr_cuda_check(stage, drv.cuEventCreate(&cs->timed[i].stop, CU_EVENT_DEFAULT), "cuEventCreate");
        }
        cs->n_created = grown;
    }
    op_events *e = &cs->timed[cs->n_timed++];
    e->op = op;
    pr_cuda_check(stage, drv.cuEventRecord(e->start, cs->compute), "cuEventRecord");
}

static void cuda_op_end(int32_t stage, int32_t op)
{
    cuda_stage *cs = &stages[stage];
    if (cs->n_timed == 0 || cs->timed[cs->n_timed - 1].op != op)
        pr_internal("stage %d: op %d ends without its begin", stage, op);
    pr_cuda_check(stage, drv.cuEventRecord(cs->timed[cs->n_timed - 1].stop, cs->compute), "cuEventRecord");
}

const pr_op_timer pr_cuda_dev_op_timer = {cuda_op_begin, cuda_op_end};

/* After the compute stream has synchronised every recorded event is complete: add the
 * times (milliseconds from the driver) to the op profile and reuse the pairs. */
static void resolve_ops(int stage)
{
    cuda_stage *cs = &stages[stage];
    for (int i = 0; i < cs->n_timed; i++) {
        float ms = 0.0f;
        pr_cuda_check(stage, drv.cuEventElapsedTime(&ms, cs->timed[i].start, cs->timed[i].stop),
                      "cuEventElapsedTime");
        pr_op_stats_add(stage, cs->timed[i].op, 1e-3 * (double)ms);
    }
    cs->n_timed = 0;
}

/* Stage code queues its launches on the compute stream and returns: the host does not wait
 * for them (see the top of the file for where it does). */
void pr_cuda_dev_forward(const pr_program *prog, int stage, const pr_fwd_args *args)
{
    enter(stage);
    prog->cuda[stage].forward(args);
}

void pr_cuda_dev_backward(const pr_program *prog, int stage, const pr_bwd_args *args)
{
    enter(stage);
    prog->cuda[stage].backward(args);
}

void pr_cuda_dev_backward_part(const pr_program *prog, int stage, int part, const pr_bwd_args *args)
{
    enter(stage);
    if (part == PR_BACKWARD_B)
        prog->cuda[stage].backward_b(args);
    else
        prog->cuda[stage].backward_w(args);
}

void pr_cuda_dev_adamw(const pr_program *prog, int stage, const pr_adamw_args *args)
{
    enter(stage);
    prog->cuda[stage].adamw(args);
}

void pr_cuda_dev_predict(const pr_program *prog, int stage, const pr_optim_rule *rule, const pr_predict_args *args)
{
    enter(stage);
    prog->cuda[stage].predict(rule, args);
}

/* delay_correction dc-asgd: sum += g + coef g g (w - w_prev) on the compute stream, rounded as
 * the CPU's pr_dc_asgd_add (the kernel's operations are never fused). */
void pr_cuda_dev_dc_asgd_add(int stage, float *sum, const float *g, const float *w, const float *w_prev, int64_t n,
                             float coef)
{
    cuda_stage *cs = enter(stage);
    if (!cs->dc_asgd_add)
        pr_internal("stage %d: delay_correction dc-asgd's kernel was not loaded", stage);
    long count = (long)n;
    void *args[] = {&sum, &g, &w, &w_prev, &count, &coef};
    pr_cuda_launch_function(stage, cs->dc_asgd_add, n, PR_CUDA_SUMSQ_BLOCK, args);
}

void pr_cuda_dev_weight_copy(const pr_program *prog, int stage, const float *params, pr_bf16 *params_h)
{
    enter(stage);
    prog->cuda[stage].weight_copy(params, params_h);
}

/* The host waits for the stage's queued work; the op timings recorded so far are read. */
void pr_cuda_dev_finish(int stage)
{
    cuda_stage *cs = enter(stage);
    pr_cuda_check(stage, drv.cuStreamSynchronize(cs->compute), "cuStreamSynchronize");
    resolve_ops(stage);
}

void pr_cuda_launch(int32_t stage, int32_t kernel, int64_t threads, int32_t block, void **args)
{
    cuda_stage *cs = &stages[stage];
    if (kernel < 0 || kernel >= cs->n_kernels)
        pr_internal("stage %d: launch of kernel %d of %d", stage, kernel, cs->n_kernels);
    if (threads <= 0)
        return;
    int64_t grid = (threads + block - 1) / block;
    pr_cuda_check(stage, drv.cuLaunchKernel(cs->kernels[kernel], (unsigned)grid, 1, 1, (unsigned)block,
                                            1, 1, 0, cs->compute, args, NULL), "cuLaunchKernel");
}

/* A kernel of the stage's unit by name (the runtime's own: compression dgc's); 0 with err
 * when the image has none. */
CUfunction pr_cuda_function(int stage, const char *name, char *err)
{
    CUfunction f = NULL;
    if (drv.cuModuleGetFunction(&f, enter(stage)->module, name) != CUDA_SUCCESS)
        return pr_fail(err, "stage %d: its kernels have no %s (built by an older pacic?)", stage, name), NULL;
    return f;
}

/* As pr_cuda_launch, for a kernel found by pr_cuda_function. */
void pr_cuda_launch_function(int stage, CUfunction f, int64_t threads, int block, void **args)
{
    cuda_stage *cs = enter(stage);
    if (threads <= 0)
        return;
    int64_t grid = (threads + block - 1) / block;
    pr_cuda_check(stage, drv.cuLaunchKernel(f, (unsigned)grid, 1, 1, (unsigned)block, 1, 1, 0, cs->compute,
                                            args, NULL), "cuLaunchKernel");
}

void pr_cuda_zero(int32_t stage, float *dst, int64_t count)
{
    pr_cuda_check(stage, drv.cuMemsetD8Async((CUdeviceptr)(uintptr_t)dst, 0, (size_t)count * sizeof(float),
                                             stages[stage].compute), "cuMemsetD8Async");
}

void pr_cuda_copy(int32_t stage, float *dst, const float *src, int64_t count)
{
    pr_cuda_check(stage, drv.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src,
                                           (size_t)count * sizeof(float), stages[stage].compute),
                  "cuMemcpyAsync");
}

CUstream pr_cuda_compute_stream(int stage)
{
    return stages[stage].compute;
}

