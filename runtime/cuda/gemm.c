/* cuda/gemm.c: pr_gemm's row-major contract on cuBLASLt, per stage, on its compute stream.
 *
 * Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so the operands swap and
 * no data moves. fp32 runs CUBLAS_COMPUTE_32F (the CPU path's arithmetic, to rounding).
 * Under `precision bf16` a product reads the bf16 copies of its operands (A and B of type
 * CUDA_R_16BF, fp32 accumulation and output), or, where an operand has no copy, its fp32
 * operands with CUBLAS_COMPUTE_32F_FAST_16BF (the tensor cores round them). Each shape's
 * descriptors and the heuristic's algorithm are made once and cached, per operand alignment.
 * A product with a bias adds it in cuBLASLt's epilogue (CUBLASLT_EPILOGUE_BIAS); under bf16
 * the generated code also asks for GELU's gradient there (DGELU), and runs GELU's own kernel
 * when cuBLASLt has no algorithm for it. PR_GEMM_BF16_OUT writes D (= C) as CUDA_R_16BF: the
 * LM head's logits under bf16, which the fused classifier turns into dlogits in place.
 */
#include <cublasLt.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "../prt.h"
#include "cuda_layer.h"

enum { GEMM_CACHE = 64 };

/* cuBLASLt is loaded with dlopen when the first stage opens on a GPU: linked, its ~540 MB
 * image was mapped and relocated at every start of `run`, CPU runs and --help included. The
 * soname is the toolkit's major version; the search is LD_LIBRARY_PATH, then run's RUNPATH
 * (the toolkit's lib64 that the build knew, cuda_ldflags), then the system's. */
#define LT_NAME2(major) "libcublasLt.so." #major
#define LT_NAME(major) LT_NAME2(major)
#define CUBLASLT_SONAME LT_NAME(CUBLAS_VER_MAJOR)

/* The cuBLASLt entry points used, typed by cublasLt.h. */
#define CUBLASLT_FUNCTIONS(X)                                                                 \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetStatusString)                           \
    X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) \
    X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)                              \
    X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                      \
    X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul)

static struct {
    int loaded;
#define LT_FIELD(symbol) __typeof__(symbol) *symbol;
    CUBLASLT_FUNCTIONS(LT_FIELD)
#undef LT_FIELD
} lt;

/* Loads cuBLASLt once; 0, or -1 with the reason (the library and dlerror's words) in err. */
static int load_cublaslt(char *err)
{
    if (lt.loaded)
        return 0;
    void *lib = dlopen(CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return pr_fail(err, "cuBLASLt is needed on the GPU, and %s does not load (%s)", CUBLASLT_SONAME,
                       dlerror());
#define LT_LOAD(symbol)                                                                       \
    if (!(*(void **)&lt.symbol = dlsym(lib, #symbol)))                                          \
        return pr_fail(err, "%s lacks %s (too old?)", CUBLASLT_SONAME, #symbol);
    CUBLASLT_FUNCTIONS(LT_LOAD)
#undef LT_LOAD
    lt.loaded = 1;
    return 0;
}

/* What cuBLASLt's epilogue adds to a product. */
enum { EPI_PLAIN, EPI_BIAS, EPI_DGELU };

typedef struct gemm_plan {
    int used, inputs, trans_a, trans_b, m, n, k, lda, ldb, ldc; /* inputs: enum pr_gemm_inputs */
    int epilogue;               /* EPI_*; its pointers (bias, aux) set per call */
    int align_a, align_b, align_c, align_bias, align_aux; /* bytes each pointer is aligned to, up to 256 */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} gemm_plan;

typedef struct gemm_stage {
    const pr_device *memory;    /* the device layer's memory calls (handed in: no call back into device.c) */
    CUstream stream;            /* the stage's compute stream */
    cublasLtHandle_t handle;
    void *workspace;
    float *ones;  /* a column of ones for adding a bias as a rank-1 product, when needed */
    int ones_len;
    gemm_plan plans[GEMM_CACHE];
} gemm_stage;

static gemm_stage gemm_stages[PACI_MAX_STAGES];

static void check_lt(int stage, cublasStatus_t status, const char *call)
{
    if (status != CUBLAS_STATUS_SUCCESS)
        pr_internal("stage %d: %s failed: %s (cuBLASLt status %d)", stage, call,
                    lt.cublasLtGetStatusString(status), (int)status);
}

int pr_cuda_gemm_open(int stage, int gpu, CUstream stream, const pr_device *memory, char *err)
{
    gemm_stage *gs = &gemm_stages[stage];
    memset(gs, 0, sizeof *gs);
    gs->memory = memory;
    gs->stream = stream;
    if (load_cublaslt(err) != 0)
        return -1;
    if (lt.cublasLtCreate(&gs->handle) != CUBLAS_STATUS_SUCCESS)
        return pr_fail(err, "stage %d: cuBLASLt does not initialise on GPU %d", stage, gpu);
    gs->workspace = memory->alloc(stage, (size_t)PR_CUDA_WORKSPACE_BYTES);
    return 0;
}

void pr_cuda_gemm_close(int stage)
{
    gemm_stage *gs = &gemm_stages[stage];
    for (int i = 0; i < GEMM_CACHE && gs->plans[i].used; i++) {
        gemm_plan *p = &gs->plans[i];
        lt.cublasLtMatrixLayoutDestroy(p->a);
        lt.cublasLtMatrixLayoutDestroy(p->b);
        lt.cublasLtMatrixLayoutDestroy(p->c);
        lt.cublasLtMatmulDescDestroy(p->desc);
    }
    if (gs->workspace)
        gs->memory->release(stage, gs->workspace);
    if (gs->ones)
        gs->memory->release(stage, gs->ones);
    if (gs->handle)
        lt.cublasLtDestroy(gs->handle);
    memset(gs, 0, sizeof *gs);
}

/* The largest power of two up to 256 that divides the address: cuBLASLt's heuristic assumes
 * 256-byte operands unless told less, and an algorithm chosen so fails on a pointer that is
 * not (the per-head products of matmul attention start at h * HS floats). */
static int alignment(const void *p)
{
    int bytes = 1;
    while (bytes < 256 && (uintptr_t)p % (uintptr_t)(2 * bytes) == 0)
        bytes *= 2;
    return bytes;
}

/* The cached plan of this shape, epilogue and alignment of its operands (d: the output;
 * bias, aux: the epilogue's vectors or matrix, or NULL), made on first use (column-major
 * view, operands swapped); NULL for an epilogue cuBLASLt has no algorithm for (the caller
 * computes it apart). */
static gemm_plan *plan_for(int stage, int inputs, int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc,
                           int epilogue, const void *a, const void *b, const float *d, const float *bias,
                           const float *aux)
{
    int align_a = alignment(a), align_b = alignment(b), align_c = alignment(d);
    int align_bias = bias ? alignment(bias) : 0, align_aux = aux ? alignment(aux) : 0;
    gemm_stage *gs = &gemm_stages[stage];
    int i = 0;
    for (; i < GEMM_CACHE && gs->plans[i].used; i++) {
        gemm_plan *p = &gs->plans[i];
        if (p->inputs == inputs && p->trans_a == ta && p->trans_b == tb && p->m == m && p->n == n &&
            p->k == k && p->lda == lda && p->ldb == ldb && p->ldc == ldc && p->epilogue == epilogue &&
            p->align_a == align_a && p->align_b == align_b && p->align_c == align_c &&
            p->align_bias == align_bias && p->align_aux == align_aux)
            return p->used == 1 ? p : NULL;
    }
    if (i == GEMM_CACHE)
        pr_internal("stage %d: more than %d matrix shapes", stage, GEMM_CACHE);
    gemm_plan *p = &gs->plans[i];
    *p = (gemm_plan){.used = 1, .inputs = inputs, .trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k,
                     .lda = lda, .ldb = ldb, .ldc = ldc, .epilogue = epilogue, .align_a = align_a,
                     .align_b = align_b, .align_c = align_c, .align_bias = align_bias, .align_aux = align_aux};
    if (inputs < PR_GEMM_FP32 || inputs > PR_GEMM_BF16_OUT || (inputs == PR_GEMM_BF16_OUT && epilogue != EPI_PLAIN))
        pr_internal("stage %d: product inputs %d with epilogue %d", stage, inputs, epilogue);
    cublasComputeType_t compute = inputs == PR_GEMM_FP32_TC ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
    cudaDataType in_type = inputs >= PR_GEMM_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cudaDataType out_type = inputs == PR_GEMM_BF16_OUT ? CUDA_R_16BF : CUDA_R_32F;
    check_lt(stage, lt.cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
    cublasOperation_t op_first = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_lt(stage, lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                                   sizeof op_first), "set TRANSA");
    check_lt(stage, lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                                   sizeof op_second), "set TRANSB");
    if (epilogue != EPI_PLAIN) {
        // Column-major D is n x m, so a vector over D's rows is one value per output feature;
        // the GELU input matrix (aux) has D's shape, with our ldc.
        static const cublasLtEpilogue_t kinds[] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS,
                                                   CUBLASLT_EPILOGUE_DGELU};
        check_lt(stage, lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &kinds[epilogue],
                                                       sizeof kinds[epilogue]), "set EPILOGUE");
        // The heuristic reads the pointers' alignment from here (cublasLt.h), so the plan is
        // keyed on them as on the operands'.
        if (bias)
            check_lt(stage, lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                           sizeof bias), "set BIAS_POINTER");
        if (aux) {
            int64_t aux_ld = ldc;
            check_lt(stage, lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                           &aux, sizeof aux), "set EPILOGUE_AUX_POINTER");
            check_lt(stage, lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                           &aux_ld, sizeof aux_ld), "set EPILOGUE_AUX_LD");
        }
    }
    // First operand: row-major B seen column-major; second: row-major A; result n x m.
    check_lt(stage, lt.cublasLtMatrixLayoutCreate(&p->a, in_type, tb ? k : n, tb ? n : k, ldb), "layout B");
    check_lt(stage, lt.cublasLtMatrixLayoutCreate(&p->b, in_type, ta ? m : k, ta ? k : m, lda), "layout A");
    check_lt(stage, lt.cublasLtMatrixLayoutCreate(&p->c, out_type, n, m, ldc), "layout C");
    cublasLtMatmulPreference_t pref;
    check_lt(stage, lt.cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    uint64_t workspace = (uint64_t)PR_CUDA_WORKSPACE_BYTES;
    check_lt(stage, lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &workspace, sizeof workspace), "set workspace");
    // cuBLASLt's A is our B and its B our A (the swap above); C and D are the same matrix.
    uint32_t first = (uint32_t)align_b, second = (uint32_t)align_a, out = (uint32_t)align_c;
    check_lt(stage, lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                         &first, sizeof first), "set A alignment");
    check_lt(stage, lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                         &second, sizeof second), "set B alignment");
    check_lt(stage, lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                         &out, sizeof out), "set C alignment");
    check_lt(stage, lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                         &out, sizeof out), "set D alignment");
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasStatus_t status = lt.cublasLtMatmulAlgoGetHeuristic(gs->handle, p->desc, p->a, p->b, p->c, p->c, pref, 1,
                                                           &result, &found);
    lt.cublasLtMatmulPreferenceDestroy(pref);
    // No algorithm comes back as NOT_SUPPORTED or as success with none found.
    if (status == CUBLAS_STATUS_NOT_SUPPORTED)
        found = 0;
    else
        check_lt(stage, status, "cublasLtMatmulAlgoGetHeuristic");
    if (found >= 1 && result.state != CUBLAS_STATUS_SUCCESS)
        found = 0;
    if (found < 1 && epilogue != EPI_PLAIN) {
        p->used = 2; // known to have no algorithm: asked once, then skipped
        return NULL;
    }
    if (found < 1)
        pr_internal("stage %d: cuBLASLt has no algorithm for %s%dx%dx%d (trans %d %d, alignment %d %d %d)",
                    stage, inputs == PR_GEMM_BF16_OUT ? "bf16-out " : inputs == PR_GEMM_BF16 ? "bf16 " : inputs == PR_GEMM_FP32_TC ? "fast-bf16 " : "", m, n,
                    k, ta, tb, align_a, align_b, align_c);
    p->algo = result.algo;
    return p;
}

/* d = op(a) op(b) (+ the plan's epilogue) on the stage's compute stream; the epilogue's
 * pointers are attributes of the cached descriptor, set per call (one thread drives a stage).
 * A fused epilogue cuBLASLt refuses at the call (it queued nothing then) returns 0 and marks
 * the plan unusable, with one notice: the caller computes the epilogue apart, so a library
 * that advertises an algorithm it then rejects costs speed, not the run. */
static int run_plan(int stage, gemm_plan *p, float alpha, const void *a, const void *b, float beta, float *d,
                    const float *bias, const float *aux, const char *what)
{
    gemm_stage *gs = &gemm_stages[stage];
    if (bias)
        check_lt(stage, lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                       sizeof bias), "set BIAS_POINTER");
    if (aux)
        check_lt(stage, lt.cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                       sizeof aux), "set EPILOGUE_AUX_POINTER");
    cublasStatus_t status = lt.cublasLtMatmul(gs->handle, p->desc, &alpha, b, p->a, a, p->b, &beta, d, p->c, d, p->c,
                                           &p->algo, gs->workspace, (size_t)PR_CUDA_WORKSPACE_BYTES,
                                           (cudaStream_t)gs->stream);
    if (status != CUBLAS_STATUS_SUCCESS && p->epilogue != EPI_PLAIN &&
        (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE)) {
        fprintf(stderr, "run: note: stage %d: cuBLASLt refused %s for %dx%dx%d (%s); computing the epilogue "
                "apart\n", stage, what, p->m, p->n, p->k, lt.cublasLtGetStatusString(status));
        p->used = 2;
        return 0;
    }
    check_lt(stage, status, what);
    return 1;
}

void pr_cuda_gemm(int32_t stage, int32_t inputs, int trans_a, int trans_b, int m, int n, int k,
                  float alpha, const void *a, int lda, const void *b, int ldb, float beta,
                  float *c, int ldc)
{
    if (inputs == PR_GEMM_BF16_OUT && beta != 0.0f)
        pr_internal("stage %d: a product with a bf16 output takes beta 0, not %g", stage, (double)beta);
    gemm_plan *p = plan_for(stage, inputs, trans_a, trans_b, m, n, k, lda, ldb, ldc, EPI_PLAIN, a, b, c, NULL, NULL);
    run_plan(stage, p, alpha, a, b, beta, c, NULL, NULL, "cublasLtMatmul");
}

void pr_cuda_gemm_bias(int32_t stage, int32_t inputs, int trans_a, int trans_b, int m, int n, int k,
                       float alpha, const void *a, int lda, const void *b, int ldb, float beta,
                       float *c, int ldc, const float *bias)
{
    if (beta != 0.0f)
        pr_internal("pr_cuda_gemm_bias takes beta 0, not %g", (double)beta);
    gemm_plan *p = plan_for(stage, inputs, trans_a, trans_b, m, n, k, lda, ldb, ldc, EPI_BIAS, a, b, c, bias, NULL);
    gemm_stage *gs = &gemm_stages[stage];
    if (!p || !run_plan(stage, p, alpha, a, b, beta, c, bias, NULL, "the bias epilogue")) {
        // no fused algorithm: the product, then C += ones (m x 1) bias (1 x n), exact in fp32
        pr_cuda_gemm(stage, inputs, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc);
        if (gs->ones_len < m) {
            if (gs->ones)
                gs->memory->release(stage, gs->ones);
            float *host = malloc((size_t)m * sizeof(float));
            if (!host)
                pr_internal("stage %d: out of host memory", stage);
            for (int i = 0; i < m; i++)
                host[i] = 1.0f;
            gs->ones = gs->memory->alloc(stage, (size_t)m * sizeof(float));
            gs->memory->upload(stage, gs->ones, host, (size_t)m * sizeof(float));
            free(host);
            gs->ones_len = m;
        }
        pr_cuda_gemm(stage, PR_GEMM_FP32, 0, 0, m, n, 1, 1.0f, gs->ones, 1, bias, n, 1.0f, c, ldc);
    }
}

/* cuBLASLt wants the GELU input matrix's leading dimension a multiple of 8 (cublasLt.h). */
int pr_cuda_gemm_dgelu(int32_t stage, int32_t inputs, int trans_a, int trans_b, int m, int n, int k,
                       float alpha, const void *a, int lda, const void *b, int ldb, float beta,
                       float *c, int ldc, const float *pre)
{
    if (beta != 0.0f)
        pr_internal("pr_cuda_gemm_dgelu takes beta 0, not %g", (double)beta);
    if (ldc % 8 != 0)
        return 0;
    gemm_plan *p = plan_for(stage, inputs, trans_a, trans_b, m, n, k, lda, ldb, ldc, EPI_DGELU, a, b, c, NULL, pre);
    return p && run_plan(stage, p, alpha, a, b, beta, c, NULL, pre, "the GELU gradient epilogue");
}
