/* cublaslt.c: the fake libcublasLt.so.13 of the fake CUDA stack (test tooling, never part of
 * pacic or run).
 *
 * An independent reading of cuBLASLt's documented column-major contract, for fp32 C and D:
 * D = alpha op(A) op(B) + beta C (+ a bias per row of D with CUBLASLT_EPILOGUE_BIAS), checked
 * hard (shapes, leading dimensions, live device ranges on the stream's GPU, the alignments the
 * heuristic's algorithm was chosen for) and computed with OpenBLAS on the stream's worker,
 * asynchronously like the real one. CUBLAS_COMPUTE_32F_FAST_16BF rounds A and B to bf16.
 * A and B may both be CUDA_R_16BF (under CUBLAS_COMPUTE_32F): widened exactly to fp32 first.
 * The heuristic reads BIAS_POINTER too (as documented): a later bias less aligned than the one
 * it saw (up to 16 bytes; NULL counts as 16) is refused with CUBLAS_STATUS_NOT_SUPPORTED.
 * FAKE_CUBLASLT_NO_BIAS=1: the heuristic finds no algorithm for a bias epilogue (success, 0
 * results); =2: the same, reported as CUBLAS_STATUS_NOT_SUPPORTED with 0 results.
 * GELU epilogues: GELU_AUX_BIAS (D = GELU(product + bias), the GELU input into the aux matrix)
 * and DGELU (D = product * GELU'(aux)), GELU in its tanh form; FAKE_CUBLASLT_NO_GELU=1: the
 * heuristic has no algorithm for them (NOT_SUPPORTED); =2: it has, and cublasLtMatmul then
 * refuses them (INVALID_VALUE).
 */
#include <cblas.h>
#include <cublasLt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

enum { DEAD = 0xdeadu, M_HANDLE = 0x17a11u, M_DESC, M_LAYOUT, M_PREF };
#define ALGO_MAGIC 0xfa4ec0b1a5a160ull

struct cublasLtContext { unsigned magic; };
/* gelu: 0; GELU_FORWARD (GELU_AUX_BIAS: D = GELU(product + bias), aux = its input);
 * GELU_BACKWARD (DGELU: D = product * GELU'(aux)). */
enum { GELU_FORWARD = 1, GELU_BACKWARD = 2 };
typedef struct {
    unsigned magic;
    int bf16, ta, tb, bias, gelu;
    const void *bias_ptr, *aux_ptr;
    int64_t aux_ld;
} lt_desc;
typedef struct { unsigned magic; cudaDataType type; uint64_t rows, cols; int64_t ld; } lt_layout;
typedef struct { unsigned magic; uint64_t max_workspace; uint32_t align[4]; } lt_pref;

/* data[] of an algorithm: magic, then what it was chosen for. All eight words are taken, so
 * two hold a pair: AL_BIAS has aux's alignment in bits 32.., AL_KIND A's and B's type. */
enum { AL_MAGIC, AL_A, AL_B, AL_C, AL_D, AL_BIAS, AL_KIND, AL_WORKSPACE };

/* What one product needs on the worker: values copied and pointers translated at call time. */
typedef struct {
    int ta, tb, m, n, k, lda, ldb, ldc, ldd, bf16;
    int in16;           /* A and B hold bf16 (CUDA_R_16BF), not fp32 */
    void *d16;          /* D when it is bf16 (then d is an fp32 m x n scratch, ldd m) */
    float alpha, beta;
    const void *a, *b;  /* of A's and B's type */
    const float *c, *bias;
    float *d, *aux;
    int gelu, ldaux;
    size_t a_len, b_len; /* elements spanned by A and B */
} lt_job;

/* The live object behind an opaque handle. Destroyed objects are marked, never freed, so a
 * later use is caught rather than read from freed memory. */
static void *live(const void *h, unsigned magic, const char *what, const char *call)
{
    if (!h)
        fake_die("%s: %s is NULL", call, what);
    if (fake_is_device(h))
        fake_die("%s: %s %p is a device address", call, what, h);
    unsigned m = *(const unsigned *)h;
    if (m == DEAD)
        fake_die("%s: %s %p was destroyed", call, what, h);
    if (m != magic)
        fake_die("%s: %s %p is not a cuBLASLt %s", call, what, h, what);
    return (void *)h;
}

static lt_layout *layout(cublasLtMatrixLayout_t l, const char *call)
{
    return live(l, M_LAYOUT, "matrix layout", call);
}

static const char *type_name(cudaDataType t)
{
    return t == CUDA_R_32F ? "CUDA_R_32F" : t == CUDA_R_16BF ? "CUDA_R_16BF" : "an unknown type";
}

/* Bytes one element of a layout takes (the types cublasLtMatrixLayoutCreate accepts). */
static size_t elem_bytes(const lt_layout *l) { return l->type == CUDA_R_16BF ? 2 : sizeof(float); }

static void *make(size_t bytes, unsigned magic)
{
    unsigned *p = calloc(1, bytes);
    if (!p)
        fake_die("cublasLt: out of host memory");
    *p = magic;
    return p;
}

static cublasStatus_t destroy(void *h, unsigned magic, const char *what, const char *call)
{
    *(unsigned *)live(h, magic, what, call) = DEAD;
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t bad_size(const char *call, int attr, size_t got, size_t want)
{
    fprintf(stderr, "fake cublasLt: %s: attribute %d takes %zu bytes, not %zu (or a NULL buffer)\n", call, attr,
            want, got);
    return CUBLAS_STATUS_INVALID_VALUE;
}

/* The largest power of two up to `cap` that divides p. */
static uint64_t aligned_to(const void *p, uint64_t cap)
{
    uint64_t a = 1;
    while (a < cap && (uintptr_t)p % (2 * a) == 0)
        a *= 2;
    return a;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    *h = make(sizeof **h, M_HANDLE);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { return destroy(h, M_HANDLE, "handle", "cublasLtDestroy"); }

const char *cublasLtGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "unknown cuBLAS status";
    }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                        cudaDataType_t scale)
{
    if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_16BF)
        fake_die("cublasLtMatmulDescCreate: compute type %d is not supported by the fake (32F, 32F_FAST_16BF)",
                 (int)compute);
    if (scale != CUDA_R_32F)
        fake_die("cublasLtMatmulDescCreate: scale type %d is not CUDA_R_32F", (int)scale);
    lt_desc *d = make(sizeof *d, M_DESC);
    d->bf16 = compute == CUBLAS_COMPUTE_32F_FAST_16BF;
    *desc = (cublasLtMatmulDesc_t)d;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc)
{
    return destroy(desc, M_DESC, "matmul descriptor", "cublasLtMatmulDescDestroy");
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size)
{
    static const char *call = "cublasLtMatmulDescSetAttribute";
    lt_desc *d = live(desc, M_DESC, "matmul descriptor", call);
    int32_t v = 0;
    int pointer = attr == CUBLASLT_MATMUL_DESC_BIAS_POINTER || attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER;
    size_t want = pointer ? sizeof(void *) : attr == CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD ? sizeof(int64_t)
                                                                                       : sizeof(int32_t);
    if (!buf || size != want)
        return bad_size(call, attr, size, want);
    if (want == sizeof(int32_t))
        memcpy(&v, buf, sizeof v);
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
        if (v != CUBLAS_OP_N && v != CUBLAS_OP_T)
            fake_die("%s: transpose %d is neither CUBLAS_OP_N nor CUBLAS_OP_T", call, v);
        *(attr == CUBLASLT_MATMUL_DESC_TRANSA ? &d->ta : &d->tb) = v == CUBLAS_OP_T;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if (v != CUBLASLT_EPILOGUE_DEFAULT && v != CUBLASLT_EPILOGUE_BIAS && v != CUBLASLT_EPILOGUE_GELU_AUX_BIAS &&
            v != CUBLASLT_EPILOGUE_DGELU)
            fake_die("%s: epilogue %d is not supported by the fake (DEFAULT, BIAS, GELU_AUX_BIAS, DGELU)", call, v);
        d->bias = v == CUBLASLT_EPILOGUE_BIAS || v == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
        d->gelu = v == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ? GELU_FORWARD : v == CUBLASLT_EPILOGUE_DGELU ? GELU_BACKWARD : 0;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        memcpy(&d->bias_ptr, buf, sizeof d->bias_ptr);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        memcpy(&d->aux_ptr, buf, sizeof d->aux_ptr);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        memcpy(&d->aux_ld, buf, sizeof d->aux_ld);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
        if (v != CUBLASLT_POINTER_MODE_HOST)
            fake_die("%s: pointer mode %d is not supported by the fake (HOST only)", call, v);
        return CUBLAS_STATUS_SUCCESS;
    default:
        fake_die("%s: attribute %d is not supported by the fake", call, (int)attr);
    }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld)
{
    if (type != CUDA_R_32F && type != CUDA_R_16BF)
        fake_die("cublasLtMatrixLayoutCreate: data type %d is not supported by the fake (CUDA_R_32F, CUDA_R_16BF)",
                 (int)type);
    if (rows > INT_MAX || cols > INT_MAX || ld < 1 || ld > INT_MAX || (uint64_t)ld < rows)
        fake_die("cublasLtMatrixLayoutCreate: %llu x %llu with ld %lld (column-major needs 1, rows <= ld)",
                 (unsigned long long)rows, (unsigned long long)cols, (long long)ld);
    lt_layout *l = make(sizeof *l, M_LAYOUT);
    l->type = type, l->rows = rows, l->cols = cols, l->ld = ld;
    *layout = (cublasLtMatrixLayout_t)l;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout)
{
    return destroy(layout, M_LAYOUT, "matrix layout", "cublasLtMatrixLayoutDestroy");
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    lt_pref *p = make(sizeof *p, M_PREF);
    for (int i = 0; i < 4; i++)
        p->align[i] = 256; // cuBLASLt's documented default for each operand
    *pref = (cublasLtMatmulPreference_t)p;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    return destroy(pref, M_PREF, "matmul preference", "cublasLtMatmulPreferenceDestroy");
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t size)
{
    static const char *call = "cublasLtMatmulPreferenceSetAttribute";
    lt_pref *p = live(pref, M_PREF, "matmul preference", call);
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if (!buf || size != sizeof(uint64_t))
            return bad_size(call, attr, size, sizeof(uint64_t));
        memcpy(&p->max_workspace, buf, sizeof p->max_workspace);
        return CUBLAS_STATUS_SUCCESS;
    }
    if (attr < CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES || attr > CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES)
        fake_die("%s: attribute %d is not supported by the fake", call, (int)attr);
    uint32_t v;
    if (!buf || size != sizeof v)
        return bad_size(call, attr, size, sizeof v);
    memcpy(&v, buf, sizeof v);
    if (v == 0 || (v & (v - 1)))
        fake_die("%s: alignment %u is not a power of two", call, v);
    p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = v;
    return CUBLAS_STATUS_SUCCESS;
}

/* Checks op(A) m x k, op(B) k x n, C and D m x n; dies naming the first mismatch. */
static void shapes(const lt_desc *d, const lt_layout *a, const lt_layout *b, const lt_layout *c,
                   const lt_layout *dd, const char *call, int *m, int *n, int *k)
{
    uint64_t am = d->ta ? a->cols : a->rows, ak = d->ta ? a->rows : a->cols;
    uint64_t bk = d->tb ? b->cols : b->rows, bn = d->tb ? b->rows : b->cols;
    if (ak != bk)
        fake_die("%s: op(A) is %llux%llu but op(B) is %llux%llu (inner dimensions differ)", call,
                 (unsigned long long)am, (unsigned long long)ak, (unsigned long long)bk, (unsigned long long)bn);
    const lt_layout *out[2] = {c, dd};
    for (int i = 0; i < 2; i++)
        if (out[i]->rows != am || out[i]->cols != bn)
            fake_die("%s: %c is %llux%llu but op(A) op(B) is %llux%llu", call, "CD"[i],
                     (unsigned long long)out[i]->rows, (unsigned long long)out[i]->cols, (unsigned long long)am,
                     (unsigned long long)bn);
    *m = (int)am, *n = (int)bn, *k = (int)ak;
}

/* C and D fp32, or both bf16 for bf16 A and B under CUBLAS_COMPUTE_32F with no epilogue (D
 * rounded from the fp32 result, beta 0: the LM head's logits). cuBLASLt has more combinations;
 * the fake dies on them rather than guess what the real one would do. */
static void outputs_supported(const lt_desc *d, const lt_layout *a, const lt_layout *c, const lt_layout *dd,
                              const char *call)
{
    if (c->type == CUDA_R_32F && dd->type == CUDA_R_32F)
        return;
    if (c->type == CUDA_R_16BF && dd->type == CUDA_R_16BF && a->type == CUDA_R_16BF && !d->bf16 && !d->bias &&
        !d->gelu)
        return;
    fake_die("%s: C is %s and D %s (A %s, %s%s): the fake supports CUDA_R_32F C and D, or CUDA_R_16BF ones for "
             "CUDA_R_16BF A and B under CUBLAS_COMPUTE_32F with no epilogue", call, type_name(c->type),
             type_name(dd->type), type_name(a->type), d->bf16 ? "32F_FAST_16BF" : "32F",
             d->bias || d->gelu ? ", an epilogue" : "");
}

/* 1, with the reason on stderr, for input types the real cuBLASLt has no algorithm for (its
 * table of type combinations): A and B of two types, or bf16 ones under 32F_FAST_16BF, which
 * is for fp32 inputs only. The heuristic then answers NOT_SUPPORTED, as the real one. */
static int inputs_unsupported(const lt_desc *d, const lt_layout *a, const lt_layout *b, const char *call)
{
    if (a->type != b->type)
        fprintf(stderr, "fake cublasLt: %s: A is %s but B %s: no algorithm mixes input types\n", call,
                type_name(a->type), type_name(b->type));
    else if (d->bf16 && a->type != CUDA_R_32F)
        fprintf(stderr, "fake cublasLt: %s: CUBLAS_COMPUTE_32F_FAST_16BF takes CUDA_R_32F A and B, not %s\n", call,
                type_name(a->type));
    else
        return 0;
    return 1;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *count)
{
    static const char *call = "cublasLtMatmulAlgoGetHeuristic";
    fake_count(call);
    live(h, M_HANDLE, "handle", call);
    lt_desc *d = live(desc, M_DESC, "matmul descriptor", call);
    lt_pref *p = live(pref, M_PREF, "matmul preference", call);
    lt_layout *la = layout(a, call), *lb = layout(b, call), *lc = layout(c, call), *ld = layout(dd, call);
    int m, n, k;
    shapes(d, la, lb, lc, ld, call, &m, &n, &k);
    outputs_supported(d, la, lc, ld, call);
    if (requested <= 0 || !results || !count)
        return CUBLAS_STATUS_INVALID_VALUE;
    *count = 0;
    if (inputs_unsupported(d, la, lb, call))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    const char *no_bias = getenv("FAKE_CUBLASLT_NO_BIAS"), *no_gelu = getenv("FAKE_CUBLASLT_NO_GELU");
    if (d->bias && !d->gelu && no_bias && (!strcmp(no_bias, "1") || !strcmp(no_bias, "2")))
        return no_bias[0] == '2' ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_SUCCESS;
    if (d->gelu && no_gelu && !strcmp(no_gelu, "1"))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    // cublasLt.h: the GELU input matrix's leading dimension is a multiple of 8, at least D's rows.
    if (d->gelu && (d->aux_ld % 8 != 0 || d->aux_ld < m))
        fake_die("%s: EPILOGUE_AUX_LD %lld for a GELU epilogue must be a multiple of 8 and at least %d", call,
                 (long long)d->aux_ld, m);
    memset(&results[0], 0, sizeof results[0]);
    uint64_t *al = results[0].algo.data;
    al[AL_MAGIC] = ALGO_MAGIC;
    for (int i = 0; i < 4; i++)
        al[AL_A + i] = p->align[i];
    // The heuristic reads the bias pointer's alignment (NULL: any); epilogues load it in 16 bytes.
    al[AL_BIAS] = aligned_to(d->bias_ptr, 16) | aligned_to(d->aux_ptr, 16) << 32;
    // A's type is B's (inputs_unsupported): an algorithm runs on the inputs it was chosen for.
    al[AL_KIND] = (uint64_t)(d->bf16 | d->ta << 1 | d->tb << 2 | d->bias << 3 | d->gelu << 4 |
                             (ld->type == CUDA_R_16BF) << 6) | (uint64_t)(uint32_t)la->type << 32;
    al[AL_WORKSPACE] = p->max_workspace;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *count = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* Device bytes a column-major rows x cols matrix with leading dimension ld (in elements) spans. */
static size_t span(const lt_layout *l)
{
    return l->rows && l->cols ? ((size_t)(l->cols - 1) * (size_t)l->ld + l->rows) * elem_bytes(l) : 0;
}

static void overlap(const void *x, size_t xb, const void *y, size_t yb, const char *what)
{
    if (xb && yb && (const char *)x < (const char *)y + yb && (const char *)y < (const char *)x + xb)
        fake_die("cublasLtMatmul: %s overlap", what);
}

/* A copy of n floats rounded to bf16 (nearest, ties to even); inf and NaN stay so. */
static float *bf16_copy(const float *x, size_t n)
{
    float *y = malloc(n * sizeof *y + 1);
    if (!y)
        fake_die("cublasLtMatmul: out of host memory");
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        if ((u & 0x7f800000u) == 0x7f800000u)
            u |= (u & 0x7fffffu) ? 0x400000u : 0; // a NaN whose payload is all in the low half stays NaN
        else
            u += 0x7fffu + ((u >> 16) & 1u);
        u &= 0xffff0000u;
        memcpy(&y[i], &u, sizeof u);
    }
    return y;
}

/* An fp32 copy, in the same layout (n elements spanned), of a column-major rows x cols bf16
 * matrix with leading dimension ld: a bf16 is the upper half of a float, so each widens
 * exactly. Only the matrix's own elements are read: the gaps of a leading dimension past rows
 * are zero in the copy. */
static float *bf16_widen(const void *x, int rows, int cols, int ld, size_t n)
{
    float *y = calloc(n + 1, sizeof *y);
    if (!y)
        fake_die("cublasLtMatmul: out of host memory");
    for (int col = 0; col < cols; col++)
        for (int row = 0; row < rows; row++) {
            size_t i = (size_t)col * (size_t)ld + (size_t)row;
            uint16_t h;
            memcpy(&h, (const unsigned char *)x + i * sizeof h, sizeof h);
            uint32_t u = (uint32_t)h << 16;
            memcpy(&y[i], &u, sizeof u);
        }
    return y;
}

static void run(void *arg)
{
    lt_job *j = arg;
    if (!j->m || !j->n)
        return;
    const float *a = j->a, *b = j->b;
    float *ra = NULL, *rb = NULL;
    if (j->in16 && j->k) // A is k x m stored when transposed (ta), else m x k; B likewise k x n
        a = ra = bf16_widen(j->a, j->ta ? j->k : j->m, j->ta ? j->m : j->k, j->lda, j->a_len),
        b = rb = bf16_widen(j->b, j->tb ? j->n : j->k, j->tb ? j->k : j->n, j->ldb, j->b_len);
    else if (j->bf16 && j->k) // 32F_FAST_16BF: fp32 inputs (the heuristic refuses bf16 ones)
        a = ra = bf16_copy(j->a, j->a_len), b = rb = bf16_copy(j->b, j->b_len);
    if (j->c != j->d && j->beta != 0.0f) // C is not read when beta is 0
        for (int col = 0; col < j->n; col++)
            memcpy(j->d + (size_t)col * j->ldd, j->c + (size_t)col * j->ldc, (size_t)j->m * sizeof(float));
    if (j->k)
        cblas_sgemm(CblasColMajor, j->ta ? CblasTrans : CblasNoTrans, j->tb ? CblasTrans : CblasNoTrans, j->m,
                    j->n, j->k, j->alpha, a, j->lda, b, j->ldb, j->beta, j->d, j->ldd);
    else
        for (int col = 0; col < j->n; col++)
            for (int row = 0; row < j->m; row++) {
                float *x = j->d + (size_t)col * j->ldd + row;
                *x = j->beta == 0.0f ? 0.0f : j->beta * *x;
            }
    if (j->bias)
        for (int col = 0; col < j->n; col++)
            for (int row = 0; row < j->m; row++)
                j->d[(size_t)col * j->ldd + row] += j->bias[row];
    // GELU's tanh form, 0.5 x (1 + tanh(u)) = x sigmoid(2u) with u = sqrt(2/pi) (x + 0.044715 x^3),
    // in the float expressions of pacic's own kernels (compiler/kernels.c), so that a fused run
    // can match the CPU's closely: what the real cuBLASLt computes only a GPU run can show.
    const float k0 = 0.7978845608f, k1 = 0.044715f;
    for (int col = 0; j->gelu && col < j->n; col++)
        for (int row = 0; row < j->m; row++) {
            float *y = &j->d[(size_t)col * j->ldd + row];
            float *aux = &j->aux[(size_t)col * j->ldaux + row];
            float x = j->gelu == GELU_FORWARD ? (*aux = *y) : *aux;
            float u = k0 * (x + k1 * x * x * x), sg = 1.0f / (1.0f + expf(-2.0f * u));
            if (j->gelu == GELU_FORWARD)
                *y = x / (1.0f + expf(-2.0f * u));
            else
                *y *= sg + 2.0f * x * sg * (1.0f - sg) * k0 * (1.0f + 3.0f * k1 * x * x);
        }
    if (j->d16) { // round to nearest even, as bf16_copy
        float *rounded = bf16_copy(j->d, (size_t)j->m * (size_t)j->n);
        for (int col = 0; col < j->n; col++)
            for (int row = 0; row < j->m; row++) {
                uint32_t u;
                memcpy(&u, &rounded[(size_t)col * (size_t)j->m + (size_t)row], sizeof u);
                uint16_t h = (uint16_t)(u >> 16);
                memcpy((unsigned char *)j->d16 + ((size_t)col * (size_t)j->ldc + (size_t)row) * sizeof h, &h, sizeof h);
            }
        free(rounded);
        free(j->d);
    }
    free(ra);
    free(rb);
}

/* NOT_SUPPORTED, as the real one, when p is less aligned than the algorithm was chosen for. */
static int misaligned(const void *p, uint64_t want, const char *what)
{
    if (aligned_to(p, want) >= want)
        return 0;
    fprintf(stderr, "fake cublasLt: cublasLtMatmul: %s %p is %llu-byte aligned but the algorithm was chosen for "
            "%llu\n", what, p, (unsigned long long)aligned_to(p, want), (unsigned long long)want);
    return 1;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t adesc, const void *B, cublasLtMatrixLayout_t bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t cdesc, void *D,
                              cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t stream)
{
    static const char *call = "cublasLtMatmul";
    fake_count(call);
    live(h, M_HANDLE, "handle", call);
    lt_desc *d = live(desc, M_DESC, "matmul descriptor", call);
    lt_layout *la = layout(adesc, call), *lb = layout(bdesc, call);
    lt_layout *lc = layout(cdesc, call), *ld = layout(ddesc, call);
    lt_job j = {.ta = d->ta, .tb = d->tb, .bf16 = d->bf16, .lda = (int)la->ld, .ldb = (int)lb->ld,
                .ldc = (int)lc->ld, .ldd = (int)ld->ld};
    shapes(d, la, lb, lc, ld, call, &j.m, &j.n, &j.k);
    outputs_supported(d, la, lc, ld, call);
    if (!algo || algo->data[AL_MAGIC] != ALGO_MAGIC)
        fake_die("%s: the algorithm did not come from cublasLtMatmulAlgoGetHeuristic", call);
    const uint64_t *al = algo->data;
    if ((al[AL_KIND] & 0xffffffffu) != (uint64_t)(d->bf16 | d->ta << 1 | d->tb << 2 | d->bias << 3 | d->gelu << 4 |
                                                  (ld->type == CUDA_R_16BF) << 6))
        fake_die("%s: the algorithm was chosen for another compute type, transpose, epilogue or output type", call);
    // The heuristic refuses mixed inputs and bf16 ones under 32F_FAST_16BF, so layouts of the
    // algorithm's input type, under its compute type (just above), are a combination it took.
    cudaDataType in = (cudaDataType)(al[AL_KIND] >> 32);
    if (la->type != in || lb->type != in)
        fake_die("%s: the algorithm was chosen for %s A and B, not %s A and %s B", call, type_name(in),
                 type_name(la->type), type_name(lb->type));
    j.in16 = in == CUDA_R_16BF;
    if (C == D && lc->ld != ld->ld)
        fake_die("%s: in place (C == D) with ldc %lld != ldd %lld", call, (long long)lc->ld, (long long)ld->ld);
    if (!alpha || !beta || fake_is_device(alpha) || fake_is_device(beta))
        fake_die("%s: alpha and beta must be host pointers (pointer mode host)", call);
    if (d->bias && !d->bias_ptr)
        fake_die("%s: epilogue BIAS with a NULL CUBLASLT_MATMUL_DESC_BIAS_POINTER", call);
    if (misaligned(A, al[AL_A], "A") || misaligned(B, al[AL_B], "B") || misaligned(C, al[AL_C], "C") ||
        misaligned(D, al[AL_D], "D") || (d->bias && misaligned(d->bias_ptr, al[AL_BIAS] & 0xffffffffu, "bias")) ||
        (d->gelu && misaligned(d->aux_ptr, al[AL_BIAS] >> 32, "the GELU input (aux)")))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->gelu && !d->aux_ptr)
        fake_die("%s: a GELU epilogue with a NULL CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER", call);
    const char *no_gelu = getenv("FAKE_CUBLASLT_NO_GELU");
    if (d->gelu && no_gelu && !strcmp(no_gelu, "2"))
        return CUBLAS_STATUS_INVALID_VALUE;
    int gpu = fake_stream_gpu((CUstream)stream);
    if (fake_current_gpu() != gpu)
        fake_die("%s: the stream is on GPU %d but the current context is %d", call, gpu, fake_current_gpu());
    memcpy(&j.alpha, alpha, sizeof j.alpha);
    memcpy(&j.beta, beta, sizeof j.beta);
    size_t sa = span(la), sb = span(lb), sc = span(lc), sd = span(ld), sbias = d->bias ? (size_t)j.m * 4 : 0;
    j.a_len = sa / elem_bytes(la), j.b_len = sb / elem_bytes(lb);
    j.a = sa ? fake_device_range((CUdeviceptr)(uintptr_t)A, sa, gpu, "cublasLtMatmul A") : NULL;
    j.b = sb ? fake_device_range((CUdeviceptr)(uintptr_t)B, sb, gpu, "cublasLtMatmul B") : NULL;
    j.c = sc ? fake_device_range((CUdeviceptr)(uintptr_t)C, sc, gpu, "cublasLtMatmul C") : NULL;
    j.d = sd ? fake_device_range((CUdeviceptr)(uintptr_t)D, sd, gpu, "cublasLtMatmul D") : NULL;
    if (sbias)
        j.bias = fake_device_range((CUdeviceptr)(uintptr_t)d->bias_ptr, sbias, gpu, "cublasLtMatmul bias");
    size_t saux = 0;
    if (d->gelu && j.m && j.n) {
        j.gelu = d->gelu, j.ldaux = (int)d->aux_ld;
        saux = ((size_t)(j.n - 1) * (size_t)d->aux_ld + (size_t)j.m) * sizeof(float);
        j.aux = fake_device_range((CUdeviceptr)(uintptr_t)d->aux_ptr, saux, gpu, "cublasLtMatmul GELU input (aux)");
    }
    if (workspace_bytes)
        fake_device_range((CUdeviceptr)(uintptr_t)workspace, workspace_bytes, gpu, "cublasLtMatmul workspace");
    overlap(j.d, sd, j.a, sa, "D and A");
    overlap(j.d, sd, j.b, sb, "D and B");
    overlap(j.d, sd, j.bias, sbias, "D and the bias");
    overlap(j.d, sd, j.aux, saux, "D and the GELU input (aux)");
    if (C != D)
        overlap(j.d, sd, j.c, sc, "D and C (not in place)");
    if (ld->type == CUDA_R_16BF) { // computed in fp32 on the worker, then rounded into D
        if (j.beta != 0.0f)
            fake_die("%s: a bf16 D with beta %g: the fake reads no bf16 C", call, (double)j.beta);
        j.d16 = j.d;
        j.ldc = j.ldd; // D's leading dimension, for the rounding
        j.ldd = j.m;
        j.d = calloc((size_t)j.m * (size_t)j.n + 1, sizeof(float));
        if (!j.d)
            fake_die("%s: out of host memory", call);
    }
    lt_job *q = malloc(sizeof *q);
    if (!q)
        fake_die("%s: out of host memory", call);
    if (d->gelu)
        fake_count(d->gelu == GELU_FORWARD ? "gelu_epilogue" : "dgelu_epilogue");
    *q = j;
    fake_stream_enqueue((CUstream)stream, run, q);
    return CUBLAS_STATUS_SUCCESS;
}
