/* emu_device.c: an emulated GPU for the CPU, linked into `run` in place of libpacirt_cuda.a,
 * so that the generated GPU host half (pr_stage_S_cuda_forward/backward/adamw) and the
 * generated kernels (stages.cu under tests/cuda_emu/simt.h) run unchanged without a GPU.
 *
 * It defines what run takes from libpacirt_cuda.a: the device table pr_device_cuda and the
 * calls of the generated host code (pr_cuda_launch, pr_cuda_gemm, pr_cuda_gemm_bias,
 * pr_cuda_zero, pr_cuda_copy). "Device" memory is host memory (host_memory = 1: the
 * executor uses the pointers directly, as on the CPU device); a launch runs the kernel's
 * blocks one after another through simt's coroutines; a GEMM is OpenBLAS's sgemm, the bias
 * form in the CPU path's order (bias into C, then the product added with beta 1). There are
 * no streams, cuBLASLt, NCCL or device memory: test tooling, never part of pacic or run.
 */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "prt.h"
#include "simt_table.h"

/* The table tests/cuda_emu/trampolines.sh generates next to the kernels. */

typedef void (*launch_fn)(unsigned grid, unsigned block, void **args);

/* Per stage: the stage's kernel list (pr_cuda_stage.kernel_names) resolved to trampolines. */
static struct {
    int n_kernels;
    launch_fn *launch;
} emu_stages[PACI_MAX_STAGES];

static int emu_probe(char *err)
{
    (void)err;
    return 1;
}

/* Every name the stage's launches index must be a kernel of the compiled unit. */
static int emu_open_stage(const pr_program *prog, int stage, char *err)
{
    const pr_cuda_stage *code = &prog->cuda[stage];
    launch_fn *launch = calloc((size_t)code->n_kernels + 1, sizeof *launch);
    if (!launch)
        return pr_fail(err, "stage %d: out of memory for the kernel table", stage);
    for (int k = 0; k < code->n_kernels; k++) {
        for (int i = 0; i < simt_n_kernels && !launch[k]; i++)
            if (strcmp(simt_kernels[i].name, code->kernel_names[k]) == 0)
                launch[k] = simt_kernels[i].launch;
        if (!launch[k]) {
            free(launch);
            return pr_fail(err, "stage %d: kernel %s is not in the emulated unit", stage,
                           code->kernel_names[k]);
        }
    }
    emu_stages[stage].n_kernels = code->n_kernels;
    emu_stages[stage].launch = launch;
    return 0;
}

static void emu_close_stage(int stage)
{
    free(emu_stages[stage].launch);
    emu_stages[stage].launch = NULL;
    emu_stages[stage].n_kernels = 0;
}

static int emu_check_memory(const pr_program *prog, const int64_t *stage_bytes, char *err)
{
    (void)prog, (void)stage_bytes, (void)err;
    return 0;
}

static void *emu_alloc(int stage, size_t bytes)
{
    (void)stage;
    return pr_alloc(bytes);
}

static void emu_release(int stage, void *p)
{
    (void)stage;
    free(p);
}

static void emu_copy(int stage, void *dst, const void *src, size_t bytes)
{
    (void)stage;
    memcpy(dst, src, bytes);
}

static void emu_zero(int stage, void *dst, size_t bytes)
{
    (void)stage;
    memset(dst, 0, bytes);
}

static void emu_sumsq(int stage, const float *base, const pr_tensor *tensors, int n, double *sums)
{
    pr_device_cpu.sumsq(stage, base, tensors, n, sums);
}

/* The generated GPU host half, as runtime/cuda/device.c calls it (every launch here is
 * synchronous, so there is no stream to wait for). */
static void emu_forward(const pr_program *prog, int stage, const pr_fwd_args *args)
{
    prog->cuda[stage].forward(args);
}

static void emu_backward(const pr_program *prog, int stage, const pr_bwd_args *args)
{
    prog->cuda[stage].backward(args);
}

static void emu_adamw(const pr_program *prog, int stage, const pr_adamw_args *args)
{
    prog->cuda[stage].adamw(args);
}

const pr_device pr_device_cuda = {
    .name = "cuda",
    .host_memory = 1,
    .probe = emu_probe,
    .open_stage = emu_open_stage,
    .check_memory = emu_check_memory,
    .alloc = emu_alloc,
    .release = emu_release,
    .upload = emu_copy,
    .download = emu_copy,
    .copy = emu_copy,
    .zero = emu_zero,
    .sumsq = emu_sumsq,
    .forward = emu_forward,
    .backward = emu_backward,
    .adamw = emu_adamw,
    .close_stage = emu_close_stage,
    .op_timer = &pr_cpu_op_timer,
};

/* ceil(threads / block) blocks of `block` threads, as runtime/cuda/device.c launches. */
void pr_cuda_launch(int32_t stage, int32_t kernel, int64_t threads, int32_t block, void **args)
{
    if (stage < 0 || stage >= PACI_MAX_STAGES || !emu_stages[stage].launch)
        pr_internal("emulated launch on stage %d, which is not open", stage);
    if (kernel < 0 || kernel >= emu_stages[stage].n_kernels)
        pr_internal("stage %d: launch of kernel %d of %d", stage, kernel, emu_stages[stage].n_kernels);
    if (block <= 0 || block > 1024)
        pr_internal("stage %d: kernel %d launched with blocks of %d threads", stage, kernel, block);
    if (threads <= 0)
        return;
    int64_t grid = (threads + block - 1) / block;
    if (grid > 0x7fffffff)
        pr_internal("stage %d: kernel %d launched with %lld blocks", stage, kernel, (long long)grid);
    emu_stages[stage].launch[kernel]((unsigned)grid, (unsigned)block, args);
}

/* bf16 inputs (precision bf16): the tensor cores round each operand to bf16, to nearest
 * even; a rounded copy of the rows x cols (leading dimension ld) row-major operand. */
static float *round_bf16(const float *x, int rows, int cols, int ld)
{
    float *out = pr_alloc((size_t)rows * (size_t)ld * sizeof(float));
    for (int i = 0; i < rows; i++) {
        for (int j = 0; j < cols; j++) {
            uint32_t bits;
            memcpy(&bits, &x[(size_t)i * (size_t)ld + (size_t)j], sizeof bits);
            if ((bits & 0x7f800000u) != 0x7f800000u) /* finite: round; inf and NaN stay */
                bits += 0x7fffu + ((bits >> 16) & 1u);
            bits &= 0xffff0000u;
            memcpy(&out[(size_t)i * (size_t)ld + (size_t)j], &bits, sizeof bits);
        }
    }
    return out;
}

void pr_cuda_gemm(int32_t stage, int32_t bf16, int trans_a, int trans_b, int m, int n, int k,
                  float alpha, const float *a, int lda, const float *b, int ldb, float beta,
                  float *c, int ldc)
{
    (void)stage;
    float *ra = NULL, *rb = NULL;
    if (bf16) {
        a = ra = trans_a ? round_bf16(a, k, m, lda) : round_bf16(a, m, k, lda);
        b = rb = trans_b ? round_bf16(b, n, k, ldb) : round_bf16(b, k, n, ldb);
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    free(ra);
    free(rb);
}

/* cuBLASLt's bias epilogue takes beta 0; the sum is taken in the CPU path's order. */
void pr_cuda_gemm_bias(int32_t stage, int32_t bf16, int trans_a, int trans_b, int m, int n, int k,
                       float alpha, const float *a, int lda, const float *b, int ldb, float beta,
                       float *c, int ldc, const float *bias)
{
    if (beta != 0.0f)
        pr_internal("stage %d: pr_cuda_gemm_bias takes beta 0, not %g", stage, (double)beta);
    for (int i = 0; i < m; i++)
        memcpy(c + (size_t)i * (size_t)ldc, bias, (size_t)n * sizeof(float));
    pr_cuda_gemm(stage, bf16, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 1.0f, c, ldc);
}

/* No fused GELU here: the generated code then runs GELU's kernels, as the CPU path does. */
int pr_cuda_gemm_bias_gelu(int32_t stage, int32_t bf16, int trans_a, int trans_b, int m, int n, int k,
                           float alpha, const float *a, int lda, const float *b, int ldb, float beta,
                           float *c, int ldc, const float *bias, float *act)
{
    (void)stage, (void)bf16, (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a;
    (void)lda, (void)b, (void)ldb, (void)beta, (void)c, (void)ldc, (void)bias, (void)act;
    return 0;
}

int pr_cuda_gemm_dgelu(int32_t stage, int32_t bf16, int trans_a, int trans_b, int m, int n, int k,
                       float alpha, const float *a, int lda, const float *b, int ldb, float beta,
                       float *c, int ldc, const float *pre)
{
    (void)stage, (void)bf16, (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a;
    (void)lda, (void)b, (void)ldb, (void)beta, (void)c, (void)ldc, (void)pre;
    return 0;
}

void pr_cuda_zero(int32_t stage, float *dst, int64_t count)
{
    (void)stage;
    memset(dst, 0, (size_t)count * sizeof(float));
}

void pr_cuda_copy(int32_t stage, float *dst, const float *src, int64_t count)
{
    (void)stage;
    memcpy(dst, src, (size_t)count * sizeof(float));
}
