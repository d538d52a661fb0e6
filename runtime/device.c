/* device.c: the CPU device layer and the choice of device for a run.
 *
 * The CPU layer is the reference: stage memory is host memory and stage code is the
 * generated C. The CUDA layer (runtime/cuda/device.c, in libpacirt_cuda.a) reaches the run
 * only through pr_program.cuda_device, so libpacirt.a never depends on CUDA.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prt.h"

/* The CPU is always there: one "device" holding every stage. */
static int cpu_probe(char *err)
{
    (void)err;
    return 1;
}

static int cpu_open_stage(const pr_program *prog, int stage, char *err)
{
    (void)prog, (void)stage, (void)err;
    return 0;
}

/* The stages share the host's memory: together they must fit in what the kernel says is
 * available (MemAvailable in /proc/meminfo). Where that cannot be read, nothing is checked
 * ahead, and pr_alloc names a shortfall when it happens. */
static int cpu_check_memory(const pr_program *prog, const int64_t *stage_bytes, char *err)
{
    int64_t need = 0;
    for (int s = 0; s < prog->stages; s++)
        need += stage_bytes[s];
    long long available_kib = -1;
    char line[256];
    FILE *f = fopen("/proc/meminfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &available_kib) == 1)
            break;
    if (f)
        fclose(f);
    if (available_kib >= 0 && need / 1024 > available_kib)
        return pr_fail(err, "the stages need %.2f GiB of host memory, %.2f GiB is available "
                       "(MemAvailable in /proc/meminfo)", (double)need / (1 << 30),
                       (double)available_kib / (1 << 20));
    return 0;
}

static void *cpu_alloc(int stage, size_t bytes)
{
    (void)stage;
    return pr_alloc(bytes);
}

static void cpu_release(int stage, void *p)
{
    (void)stage;
    free(p);
}

/* Upload, download and copy are one memcpy on the host. */
static void cpu_copy(int stage, void *dst, const void *src, size_t bytes)
{
    (void)stage;
    memcpy(dst, src, bytes);
}

static void cpu_zero(int stage, void *dst, size_t bytes)
{
    (void)stage;
    memset(dst, 0, bytes);
}

static void cpu_sumsq(int stage, const float *base, const pr_tensor *tensors, int n, double *sums)
{
    (void)stage;
    for (int i = 0; i < n; i++)
        sums[i] = pr_sumsq(base + tensors[i].offset, tensors[i].size);
}

static void cpu_forward(const pr_program *prog, int stage, const pr_fwd_args *args)
{
    prog->stage[stage].forward(args);
}

static void cpu_backward_part(const pr_program *prog, int stage, int part, const pr_bwd_args *args)
{
    if (part == PR_BACKWARD_B)
        prog->stage[stage].backward_b(args);
    else
        prog->stage[stage].backward_w(args);
}

static void cpu_backward(const pr_program *prog, int stage, const pr_bwd_args *args)
{
    prog->stage[stage].backward(args);
}

static void cpu_adamw(const pr_program *prog, int stage, const pr_adamw_args *args)
{
    prog->stage[stage].adamw(args);
}

static void cpu_predict(const pr_program *prog, int stage, const pr_optim_rule *rule, const pr_predict_args *a)
{
    const pr_stage_code *sc = &prog->stage[stage];
    for (int k = 0; k < sc->n_tensors; k++)
        pr_optim_predict(rule, &sc->tensors[k], a->params, a->m, a->v, a->steps_done, a->lr, a->d, a->out);
}

static void cpu_dc_asgd_add(int stage, float *sum, const float *g, const float *w, const float *w_prev, int64_t n,
                            float coef)
{
    (void)stage;
    pr_dc_asgd_add(sum, g, w, w_prev, n, coef);
}

static void cpu_close_stage(int stage)
{
    (void)stage;
}

const pr_device pr_device_cpu = {
    .name = "cpu",
    .host_memory = 1,
    .probe = cpu_probe,
    .open_stage = cpu_open_stage,
    .check_memory = cpu_check_memory,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sumsq = cpu_sumsq,
    .forward = cpu_forward,
    .backward = cpu_backward,
    .backward_part = cpu_backward_part,
    .adamw = cpu_adamw,
    .predict = cpu_predict,
    .dc_asgd_add = cpu_dc_asgd_add,
    .close_stage = cpu_close_stage,
    .op_timer = &pr_cpu_op_timer,
};

/* cuda when asked for or (by default) when the program has the GPU path and a GPU answers;
 * asking for cuda where it cannot run is an error, never a silent fall back. */
int pr_device_select(const pr_program *prog, const char *requested, const char *work,
                     const pr_device **out, char *err)
{
    *out = &pr_device_cpu;
    if (requested && strcmp(requested, "cpu") == 0)
        return 0;
    if (requested && strcmp(requested, "cuda") != 0)
        return pr_fail(err, "--device %s: unknown device (cpu or cuda)", requested);
    const pr_device *cuda = prog->cuda_device;
    if (!cuda || !prog->cuda) {
        if (requested)
            return pr_fail(err, "--device cuda: this run was built without the GPU path (pacic "
                           "found no CUDA toolkit when it compiled %s)", prog->source);
        return 0;
    }
    char why[PR_ERR_LEN] = "";
    int gpus = cuda->probe(why);
    if (gpus >= 1) {
        *out = cuda;
        return 0;
    }
    if (requested)
        return pr_fail(err, "--device cuda: no usable GPU: %s", why);
    if (work)
        fprintf(stderr, "run: note: no GPU (%s); %s on the CPU\n", why, work);
    return 0;
}
