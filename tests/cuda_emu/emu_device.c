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

static void emu_backward_part(const pr_program *prog, int stage, int part, const pr_bwd_args *args)
{
    if (part == PR_BACKWARD_B)
        prog->cuda[stage].backward_b(args);
    else
        prog->cuda[stage].backward_w(args);
}

static void emu_adamw(const pr_program *prog, int stage, const pr_adamw_args *args)
{
    prog->cuda[stage].adamw(args);
}

static void emu_predict(const pr_program *prog, int stage, const pr_optim_rule *rule, const pr_predict_args *args)
{
    prog->cuda[stage].predict(rule, args);
}

static void emu_weight_copy(const pr_program *prog, int stage, const float *params, pr_bf16 *params_h)
{
    prog->cuda[stage].weight_copy(params, params_h);
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
    .backward_part = emu_backward_part,
    .adamw = emu_adamw,
    .predict = emu_predict,
    .close_stage = emu_close_stage,
    .op_timer = &pr_cpu_op_timer,
    .weight_copy = emu_weight_copy,
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

/* A rows x cols (leading dimension ld) row-major operand as fp32 for the BLAS: bf16 inputs
 * widened exactly (PR_GEMM_BF16, PR_GEMM_BF16_OUT), or fp32 ones rounded to bf16 to nearest even as the tensor
 * cores do (PR_GEMM_FP32_TC); NULL for fp32 arithmetic, which reads x as it is. */
static float *operand_fp32(int32_t inputs, const void *x, int rows, int cols, int ld)
{
    if (inputs == PR_GEMM_FP32)
        return NULL;
    float *out = pr_alloc((size_t)rows * (size_t)ld * sizeof(float));
    for (int i = 0; i < rows; i++) {
        for (int j = 0; j < cols; j++) {
            size_t at = (size_t)i * (size_t)ld + (size_t)j;
            uint32_t bits;
            if (inputs == PR_GEMM_BF16 || inputs == PR_GEMM_BF16_OUT) {
                bits = (uint32_t)((const pr_bf16 *)x)[at] << 16;
            } else {
                bits = (uint32_t)pr_to_bf16(((const float *)x)[at]) << 16;
            }
            memcpy(&out[at], &bits, sizeof bits);
        }
    }
    return out;
}

void pr_cuda_gemm(int32_t stage, int32_t inputs, int trans_a, int trans_b, int m, int n, int k,
                  float alpha, const void *a, int lda, const void *b, int ldb, float beta,
                  float *c, int ldc)
{
    float *ra = trans_a ? operand_fp32(inputs, a, k, m, lda) : operand_fp32(inputs, a, m, k, lda);
    float *rb = trans_b ? operand_fp32(inputs, b, n, k, ldb) : operand_fp32(inputs, b, k, n, ldb);
    // a bf16 output: the fp32 product, rounded to nearest even as cuBLASLt's D conversion
    float *out = c;
    if (inputs == PR_GEMM_BF16_OUT) {
        if (beta != 0.0f)
            pr_internal("stage %d: a product with a bf16 output takes beta 0, not %g", stage, (double)beta);
        out = pr_alloc((size_t)m * (size_t)n * sizeof(float));
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, ra ? ra : a, lda, rb ? rb : b, ldb, beta, out, out == c ? ldc : n);
    if (out != c) {
        pr_bf16 *ch = (pr_bf16 *)c;
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                ch[(size_t)i * (size_t)ldc + (size_t)j] = pr_to_bf16(out[(size_t)i * (size_t)n + (size_t)j]);
        free(out);
    }
    free(ra);
    free(rb);
}

/* cuBLASLt's bias epilogue takes beta 0; the sum is taken in the CPU path's order. */
void pr_cuda_gemm_bias(int32_t stage, int32_t inputs, int trans_a, int trans_b, int m, int n, int k,
                       float alpha, const void *a, int lda, const void *b, int ldb, float beta,
                       float *c, int ldc, const float *bias)
{
    if (beta != 0.0f)
        pr_internal("stage %d: pr_cuda_gemm_bias takes beta 0, not %g", stage, (double)beta);
    for (int i = 0; i < m; i++)
        memcpy(c + (size_t)i * (size_t)ldc, bias, (size_t)n * sizeof(float));
    pr_cuda_gemm(stage, inputs, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 1.0f, c, ldc);
}

/* No fused GELU here: the generated code then runs GELU's kernels, as the CPU path does. */
int pr_cuda_gemm_dgelu(int32_t stage, int32_t inputs, int trans_a, int trans_b, int m, int n, int k,
                       float alpha, const void *a, int lda, const void *b, int ldb, float beta,
                       float *c, int ldc, const float *pre)
{
    (void)stage, (void)inputs, (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a;
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
