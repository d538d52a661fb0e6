/* emit_cuda.c: the GPU path of a stage, in two halves.
 *
 * Device half: the same kernel descriptions as CUDA C, one __global__ function per
 * description with one thread (or warp) per index of its iteration space, or a block per
 * index for the tiled attention (how attention is lowered for the GPU, and the device
 * functions its kernels call: attention_gpu.c). NVRTC compiles it when pacic runs (nvrtc.c)
 * and the images are embedded in `run` (cuda_images.c).
 * Host half: the same op lists (ops.c) as the C emitter, walked by the same skeleton
 * (emit_common.c), rendered as launches through the runtime's CUDA layer (pr_cuda_launch
 * with the grid from the shapes, pr_cuda_gemm on cuBLASLt), appended to the stage's C file
 * so it shares the layout constants.
 */
#include <stdlib.h>
#include <string.h>

#include "pacic.h"
#include "../runtime/pacirt.h"
#include "../runtime/paci_dgc.h"

enum { CUDA_BLOCK = 256, /* threads per block of every 1-D launch */
       CUDA_WARP = 32 };  /* lanes of a row kernel */

/* Threads per index of k on the GPU: 1, or a warp for a row kernel; a block kernel's
 * threads per block. */
static int kernel_lanes(const KernelDesc *k)
{
    if (k->blocks) {
        if (k->lanes % CUDA_WARP != 0 || k->lanes > 1024)
            ICE("block kernel %s: %d threads per block", k->name, k->lanes);
        return k->lanes;
    }
    bool row_macros = strstr(k->body, "ROW_") || strstr(k->body, "LEAD");
    if (k->lanes == CUDA_WARP)
        return CUDA_WARP;
    if (row_macros || k->lanes > 1)
        ICE("kernel %s: ROW_ macros need lanes %d, it has %d", k->name, CUDA_WARP, k->lanes);
    return 1;
}

/* A tiled kernel (attention_gpu.c): a block per index; an empty body where its tiling does not
 * fit the model, since the module still names it. */
static void emit_cuda_tiled_kernel(StrBuf *sb, const Config *cfg, const KernelDesc *k)
{
    emit_line(sb, "/* %s */", k->doc);
    bool fits = attention_gpu_fits(cfg);
    emit_line(sb, "extern \"C\" __global__ void __launch_bounds__(%d) %s(%s)", fits ? attention_gpu_block_threads(cfg, k) : 32,
              k->name, k->params);
    emit_line(sb, "{");
    sb->indent++;
    if (fits) {
        emit_line(sb, "long %s = blockIdx.x;", k->index);
        emit_line(sb, "if (%s >= %s)", k->index, k->extent);
        emit_line(sb, "    return;");
        emit_kernel_body(sb, k);
    } else {
        emit_line(sb, "/* never launched: no tiling of this head size fits a block's shared memory */");
    }
    emit_close(sb, "");
    sb_puts(sb, "\n");
}

static void emit_cuda_kernel(StrBuf *sb, const Config *cfg, const KernelDesc *k)
{
    if (k->tiled) {
        emit_cuda_tiled_kernel(sb, cfg, k);
        return;
    }
    emit_line(sb, "/* %s */", k->doc);
    emit_line(sb, "extern \"C\" __global__ void __launch_bounds__(%d) %s(%s)", k->blocks ? k->lanes : CUDA_BLOCK,
              k->name, k->params);
    emit_line(sb, "{");
    sb->indent++;
    if (k->blocks) { // the body indexes threads and blocks itself
        emit_kernel_body(sb, k);
        emit_close(sb, "");
        sb_puts(sb, "\n");
        return;
    }
    if (kernel_lanes(k) == CUDA_WARP) {
        // The whole warp leaves together: a block is whole warps, and the test is per warp.
        emit_line(sb, "long %s = ((long)blockIdx.x * blockDim.x + threadIdx.x) / %d;", k->index, CUDA_WARP);
        emit_line(sb, "int lane = threadIdx.x %% %d;", CUDA_WARP);
    } else {
        emit_line(sb, "long %s = (long)blockIdx.x * blockDim.x + threadIdx.x;", k->index);
    }
    emit_line(sb, "if (%s >= %s)", k->index, k->extent);
    emit_line(sb, "    return;");
    emit_kernel_body(sb, k);
    emit_close(sb, "");
    sb_puts(sb, "\n");
}

/* The runtime's own kernel (runtime/pacirt.h, PR_CUDA_SUMSQ_KERNEL): per-block sums of squares
 * in double, combined by a tree in shared memory, so the result depends only on n and the grid. */
static void emit_sumsq_kernel(StrBuf *sb)
{
    emit_line(sb, "/* The runtime's: block b's sum of squares of x (grid-stride), in double, into partial[b]. */");
    emit_line(sb, "extern \"C\" __global__ void __launch_bounds__(%d) %s(const float *RESTRICT x, long n, "
              "double *RESTRICT partial)", PR_CUDA_SUMSQ_BLOCK, PR_CUDA_SUMSQ_KERNEL);
    emit_line(sb, "{");
    emit_line(sb, "    __shared__ double lanes[%d];", PR_CUDA_SUMSQ_BLOCK);
    emit_line(sb, "    double sum = 0.0;");
    emit_line(sb, "    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)");
    emit_line(sb, "        sum += (double)x[i] * (double)x[i];");
    emit_line(sb, "    lanes[threadIdx.x] = sum;");
    emit_line(sb, "    __syncthreads();");
    emit_line(sb, "    for (unsigned half = %d; half > 0; half /= 2) {", PR_CUDA_SUMSQ_BLOCK / 2);
    emit_line(sb, "        if (threadIdx.x < half)");
    emit_line(sb, "            lanes[threadIdx.x] += lanes[threadIdx.x + half];");
    emit_line(sb, "        __syncthreads();");
    emit_line(sb, "    }");
    emit_line(sb, "    if (threadIdx.x == 0)");
    emit_line(sb, "        partial[blockIdx.x] = lanes[0];");
    emit_line(sb, "}");
}

/* compression dgc's kernels (runtime/pacirt.h, PR_CUDA_DGC_KERNELS; runtime/cuda/dgc.c launches
 * them): every step is integer arithmetic on the magnitudes' bits or a rounded add in a fixed
 * order, so the pairs and the sum do not depend on the schedule of the threads. */
static const char dgc_kernels[] =
    "/* A float's magnitude as an unsigned integer: ordered as the magnitudes are (NaN above inf). */\n"
    "__device__ __forceinline__ unsigned pr_dgc_key(float x)\n"
    "{\n"
    "    return __float_as_uint(x) & 0x7fffffffu;\n"
    "}\n"
    "/* The runtime's pr_dgc_round: a sent value as bf16, to nearest even; a finite value too large\n"
    " * for bf16 saturates at its largest, so that the value less its bf16 stays a float. */\n"
    "__device__ __forceinline__ unsigned pr_dgc_round(float v)\n"
    "{\n"
    "    unsigned u = __float_as_uint(v), h = pr_to_bf16(v);\n"
    "    if ((u & 0x7f800000u) != 0x7f800000u && (h & 0x7fffu) == 0x7f80u)\n"
    "        h = ((u >> 16) & 0x8000u) | 0x7f7fu;\n"
    "    return h;\n"
    "}\n"
    "/* The runtime's: acc += g (error feedback) or u = mu u + g, acc += u (momentum correction),\n"
    " * g the gradient times the local clipping scale; rounded as the CPU's dgc.c, never fused. */\n"
    "extern \"C\" __global__ void pr_gpu_dgc_accumulate(const float *RESTRICT grad, float *RESTRICT acc, "
    "float *RESTRICT u, long n, float scale, float mu)\n"
    "{\n"
    "    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i >= n)\n"
    "        return;\n"
    "    float g = scale == 1.0f ? grad[i] : __fmul_rn(grad[i], scale);\n"
    "    if (u) {\n"
    "        float v = __fadd_rn(__fmul_rn(mu, u[i]), g);\n"
    "        u[i] = v;\n"
    "        acc[i] = __fadd_rn(acc[i], v);\n"
    "    } else {\n"
    "        acc[i] = __fadd_rn(acc[i], g);\n"
    "    }\n"
    "}\n"
    "/* The runtime's: one pass of the radix select, the histogram of the next 8 bits (at shift)\n"
    " * of the keys that match the threshold's bits found so far (integer atomics: exact). */\n"
    "extern \"C\" __global__ void pr_gpu_dgc_histogram(const float *RESTRICT acc, long n, unsigned *RESTRICT state, "
    "int shift)\n"
    "{\n"
    "    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i >= n)\n"
    "        return;\n"
    "    unsigned key = pr_dgc_key(acc[i]);\n"
    "    if ((key & state[PR_DGC_MASK]) == state[PR_DGC_PREFIX])\n"
    "        atomicAdd(&state[PR_DGC_STATE_WORDS + ((key >> shift) & 255u)], 1u);\n"
    "}\n"
    "/* The runtime's, one thread: the bin holding the wanted-th largest key, from the top; the\n"
    " * threshold gains its 8 bits, the wanted count loses the keys above the bin; the histogram\n"
    " * is cleared for the next pass. After the last pass (shift 0) the prefix is the k-th\n"
    " * largest key and `wanted` the number of entries equal to it to take. */\n"
    "extern \"C\" __global__ void pr_gpu_dgc_pick(unsigned *RESTRICT state, int shift)\n"
    "{\n"
    "    unsigned *bins = state + PR_DGC_STATE_WORDS, wanted = state[PR_DGC_WANTED], above = 0, bin = 0;\n"
    "    for (int b = 255; b >= 0; b--) {\n"
    "        if (above + bins[b] >= wanted) {\n"
    "            bin = (unsigned)b;\n"
    "            break;\n"
    "        }\n"
    "        above += bins[b];\n"
    "    }\n"
    "    state[PR_DGC_PREFIX] |= bin << shift;\n"
    "    state[PR_DGC_MASK] |= 255u << shift;\n"
    "    state[PR_DGC_WANTED] = wanted - above;\n"
    "    for (int b = 0; b < 256; b++)\n"
    "        bins[b] = 0;\n"
    "}\n"
    "/* The runtime's: per chunk of PR_DGC_CHUNK entries, the keys above the threshold and equal to it. */\n"
    "extern \"C\" __global__ void pr_gpu_dgc_count(const float *RESTRICT acc, long n, const unsigned *RESTRICT state, "
    "unsigned *RESTRICT above, unsigned *RESTRICT equal)\n"
    "{\n"
    "    long c = (long)blockIdx.x * blockDim.x + threadIdx.x, from = c * PR_DGC_CHUNK;\n"
    "    if (from >= n)\n"
    "        return;\n"
    "    long to = from + PR_DGC_CHUNK < n ? from + PR_DGC_CHUNK : n;\n"
    "    unsigned t = state[PR_DGC_PREFIX], a = 0, e = 0;\n"
    "    for (long i = from; i < to; i++) {\n"
    "        unsigned key = pr_dgc_key(acc[i]);\n"
    "        a += key > t;\n"
    "        e += key == t;\n"
    "    }\n"
    "    above[c] = a;\n"
    "    equal[c] = e;\n"
    "}\n"
    "/* The runtime's, one thread: the chunks' counts become, in index order, each chunk's first\n"
    " * pair (above) and the ties before it (equal); the ties taken are the first ones. A block\n"
    " * of the list is PR_DGC_BLOCK_CHUNKS chunks: its running count is the first pair of the\n"
    " * next block's first chunk (the last block's, all pairs). */\n"
    "extern \"C\" __global__ void pr_gpu_dgc_scan(unsigned *RESTRICT above, unsigned *RESTRICT equal, long chunks, "
    "unsigned *RESTRICT state, unsigned *RESTRICT ends, long blocks)\n"
    "{\n"
    "    unsigned ties = state[PR_DGC_WANTED], out = 0, seen = 0;\n"
    "    for (long c = 0; c < chunks; c++) {\n"
    "        if (c > 0 && c % PR_DGC_BLOCK_CHUNKS == 0)\n"
    "            ends[c / PR_DGC_BLOCK_CHUNKS - 1] = out;\n"
    "        unsigned a = above[c], e = equal[c];\n"
    "        unsigned left = ties > seen ? ties - seen : 0;\n"
    "        above[c] = out;\n"
    "        equal[c] = seen;\n"
    "        out += a + (left < e ? left : e);\n"
    "        seen += e;\n"
    "    }\n"
    "    ends[blocks - 1] = out;\n"
    "    state[PR_DGC_WRITTEN] = out;\n"
    "}\n"
    "/* The runtime's: per chunk, its pairs in index order at its place (the bf16 value high, the\n"
    " * offset in its block low); acc keeps the rounding error (exact), u is zeroed. */\n"
    "extern \"C\" __global__ void pr_gpu_dgc_compact(float *RESTRICT acc, float *RESTRICT u, long n, "
    "const unsigned *RESTRICT state, const unsigned *RESTRICT first, const unsigned *RESTRICT ties_before, "
    "unsigned *RESTRICT pairs)\n"
    "{\n"
    "    long c = (long)blockIdx.x * blockDim.x + threadIdx.x, from = c * PR_DGC_CHUNK;\n"
    "    if (from >= n)\n"
    "        return;\n"
    "    long to = from + PR_DGC_CHUNK < n ? from + PR_DGC_CHUNK : n;\n"
    "    unsigned t = state[PR_DGC_PREFIX], ties = state[PR_DGC_WANTED], at = first[c], tie = ties_before[c];\n"
    "    for (long i = from; i < to; i++) {\n"
    "        unsigned key = pr_dgc_key(acc[i]);\n"
    "        if (key > t || (key == t && tie++ < ties)) {\n"
    "            float v = acc[i];\n"
    "            unsigned h = pr_dgc_round(v);\n"
    "            pairs[at++] = h << 16 | (unsigned)(i % PR_DGC_BLOCK);\n"
    "            acc[i] = (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u ? __fadd_rn(v, -__uint_as_float(h << 16)) : 0.0f;\n"
    "            if (u)\n"
    "                u[i] = 0.0f;\n"
    "        }\n"
    "    }\n"
    "}\n"
    "/* The runtime's: one replica's list of k pairs decoded into the sum (distinct indices: no two\n"
    " * threads meet); the first replica's as they are, the others' added, one launch per replica\n"
    " * in order. blocks 0: the list is all n values as floats; else pair j's block is the first\n"
    " * whose running count passes j (a binary search over the blocks' counts). */\n"
    "extern \"C\" __global__ void pr_gpu_dgc_scatter(float *RESTRICT sum, const unsigned *RESTRICT list, long k, "
    "long blocks, int first)\n"
    "{\n"
    "    long j = (long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (j >= k)\n"
    "        return;\n"
    "    long i = j;\n"
    "    float v = __uint_as_float(list[j]);\n"
    "    if (blocks > 0) {\n"
    "        long lo = 0, hi = blocks - 1;\n"
    "        while (lo < hi) {\n"
    "            long mid = (lo + hi) / 2;\n"
    "            if ((long)list[mid] > j)\n"
    "                hi = mid;\n"
    "            else\n"
    "                lo = mid + 1;\n"
    "        }\n"
    "        unsigned w = list[blocks + j];\n"
    "        i = lo * PR_DGC_BLOCK + (long)(w & 0xffffu);\n"
    "        v = __uint_as_float(w & 0xffff0000u);\n"
    "    }\n"
    "    sum[i] = first ? v : __fadd_rn(sum[i], v);\n"
    "}\n";

/* delay_correction dc-asgd's kernel (PR_CUDA_DC_ASGD_KERNEL; runtime/cuda/device.c launches it):
 * runtime/dc_asgd.c's pr_dc_asgd_add, in its order of operations, each rounded, never fused. */
static const char dc_asgd_kernel[] =
    "/* delay_correction dc-asgd: sum += g + coef g g (w - w_prev), as the CPU's pr_dc_asgd_add\n"
    " * (runtime/dc_asgd.c) rounds it: never fused. */\n"
    "extern \"C\" __global__ void pr_gpu_dc_asgd_add(float *RESTRICT sum, const float *RESTRICT g, "
    "const float *RESTRICT w, const float *RESTRICT w_prev, long n, float coef)\n"
    "{\n"
    "    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i >= n)\n"
    "        return;\n"
    "    float x = g[i];\n"
    "    float correction = __fmul_rn(__fmul_rn(__fmul_rn(coef, x), x), __fsub_rn(w[i], w_prev[i]));\n"
    "    sum[i] = __fadd_rn(sum[i], __fadd_rn(x, correction));\n"
    "}\n";

static void emit_dgc_kernels(StrBuf *sb)
{
    emit_line(sb, "/* compression dgc: the selection's state words and chunk (runtime/pacirt.h). */");
    emit_line(sb, "#define PR_DGC_CHUNK %d", PR_CUDA_DGC_CHUNK);
    emit_line(sb, "#define PR_DGC_BLOCK %d /* entries a block of a pair list: a 16-bit offset (runtime/paci_dgc.h) */",
              PACI_DGC_BLOCK);
    emit_line(sb, "#define PR_DGC_BLOCK_CHUNKS %d", PACI_DGC_BLOCK / PR_CUDA_DGC_CHUNK);
    emit_line(sb, "#define PR_DGC_PREFIX %d", PR_DGC_PREFIX);
    emit_line(sb, "#define PR_DGC_MASK %d", PR_DGC_MASK);
    emit_line(sb, "#define PR_DGC_WANTED %d", PR_DGC_WANTED);
    emit_line(sb, "#define PR_DGC_WRITTEN %d", PR_DGC_WRITTEN);
    emit_line(sb, "#define PR_DGC_STATE_WORDS %d", PR_DGC_STATE_WORDS);
    sb_puts(sb, dgc_kernels);
}

/* Every kernel of the model, specialised to cfg's shapes (the stage decides which it
 * launches); no #include, so NVRTC needs no headers. */
void emit_cuda_stage(StrBuf *sb, const Config *cfg, const Lowered *low, int s)
{
    const StagePlan *sp = low->stage[s].plan;
    char *what = xasprintf("Stage %d of %d, CUDA kernels (layers [%d, %d)%s%s): one thread per index, "
                           "%d threads per block.", s, low->stages, sp->first_layer,
                           sp->first_layer + sp->n_layers,
                           sp->lead_mlp ? ", after an MLP half" : sp->lead_gelu ? ", after a GELU piece" : "",
                           sp->tail_fc ? ", then an attention half and an fc piece"
                           : sp->tail_attn ? ", then an attention half" : "", CUDA_BLOCK);
    emit_banner(sb, cfg, what);
    free(what);
    emit_shape_constants(sb, cfg);
    bool group = cfg->optimizer == PR_OPT_MUON; // the adamw kernel serves Muon's AdamW group
    emit_line(sb, "#define ADAMW_BETA1 ((float)%.9g)", group ? cfg->group_beta1 : cfg->beta1);
    emit_line(sb, "#define ADAMW_BETA2 ((float)%.9g)", group ? cfg->group_beta2 : cfg->beta2);
    emit_line(sb, "#define ADAMW_EPS ((float)%.9g)", group ? cfg->group_eps : cfg->eps);
    emit_line(sb, "/* Indices run concurrently: accumulation shared between them is atomic. */");
    emit_line(sb, "#define RESTRICT __restrict__");
    emit_line(sb, "#define ATOMIC_ADD(ptr, value) atomicAdd((ptr), (value))");
    emit_line(sb, "/* Loops over a thread's local arrays unroll fully, so the arrays live in registers. */");
    emit_line(sb, "#define UNROLL _Pragma(\"unroll\")");
    emit_line(sb, "#define SIMD_SUM(...) /* a hint for the C compiler */");
    emit_line(sb, "#define SIMD_MAX(x) /* a hint for the C compiler */");
    emit_line(sb, "/* Row kernels: a warp per row; lane l takes elements l, l + 32, ... (adjacent lanes read");
    emit_line(sb, " * adjacent floats), and sums and maxima combine over the warp by butterfly shuffles. */");
    emit_line(sb, "#define ROW_LOOP(i, from, to) for (int i = (from) + lane; i < (to); i += %d)", CUDA_WARP);
    emit_line(sb, "#define ROW_SUM(x) warp_sum(x)");
    emit_line(sb, "#define ROW_MAX(x) warp_max(x)");
    emit_line(sb, "#define LEAD (lane == 0)");
    emit_line(sb, "/* bf16 copies of product operands: the upper half of a float, rounded to nearest even. */");
    emit_line(sb, "typedef unsigned short pr_bf16;");
    emit_line(sb, "__device__ __forceinline__ pr_bf16 pr_to_bf16(float x)");
    emit_line(sb, "{");
    emit_line(sb, "    unsigned u = __float_as_uint(x);");
    emit_line(sb, "    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN stays NaN */");
    emit_line(sb, "        return (pr_bf16)((u >> 16) | 0x40u);");
    emit_line(sb, "    return (pr_bf16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);");
    emit_line(sb, "}");
    emit_line(sb, "__device__ __forceinline__ float pr_from_bf16(pr_bf16 h)");
    emit_line(sb, "{");
    emit_line(sb, "    return __uint_as_float((unsigned)h << 16);");
    emit_line(sb, "}");
    emit_line(sb, "__device__ __forceinline__ float warp_sum(float v)");
    emit_line(sb, "{");
    emit_line(sb, "    for (int offset = %d; offset > 0; offset /= 2)", CUDA_WARP / 2);
    emit_line(sb, "        v += __shfl_xor_sync(0xffffffffu, v, offset);");
    emit_line(sb, "    return v;");
    emit_line(sb, "}");
    emit_line(sb, "__device__ __forceinline__ float warp_max(float v)");
    emit_line(sb, "{");
    emit_line(sb, "    for (int offset = %d; offset > 0; offset /= 2)", CUDA_WARP / 2);
    emit_line(sb, "        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));");
    emit_line(sb, "    return v;");
    emit_line(sb, "}");
    sb_puts(sb, "\n");
    emit_attention_gpu_device(sb, cfg);
    for (int i = 0; i < kernel_desc_count; i++)
        emit_cuda_kernel(sb, cfg, &kernel_descs[i]);
    emit_sumsq_kernel(sb);
    if (cfg->dgc_density > 0)
        emit_dgc_kernels(sb);
    if (cfg->delay_correction == DELAY_DC_ASGD)
        sb_puts(sb, dc_asgd_kernel);
}

/* "const float *RESTRICT wte" -> type "const float *" and name "wte". */
static void param_type_name(const char *param, char *type, char *name)
{
    const char *last = param + strlen(param);
    while (last > param && (last[-1] == '_' || (last[-1] >= 'a' && last[-1] <= 'z') ||
                            (last[-1] >= 'A' && last[-1] <= 'Z') || (last[-1] >= '0' && last[-1] <= '9')))
        last--;
    strcpy(name, last);
    size_t len = (size_t)(last - param);
    memcpy(type, param, len);
    type[len] = '\0';
    char *restrict_word = strstr(type, "RESTRICT");
    if (restrict_word)
        memmove(restrict_word, restrict_word + 8, strlen(restrict_word + 8) + 1);
}

/* A kernel launch: each argument in a variable of the parameter's type (cuLaunchKernel
 * takes their addresses), the grid covering the extent, which is a shape expression or
 * one of the parameters. A kernel with a GPU form that fits launches that instead (the tiled
 * attention, with the same arguments), a block per index. */
static void emit_cuda_launch(StrBuf *sb, const Config *cfg, const KernelDesc *k, const char *op_args)
{
    const char *gpu_form = attention_gpu_kernel(cfg, k);
    if (gpu_form) {
        const KernelDesc *replaced = k;
        k = kernel_find(gpu_form);
        if (strcmp(k->params, replaced->params) != 0)
            ICE("kernel %s takes other parameters than %s, which it replaces", k->name, replaced->name);
    }
    char params[16][128], args[16][128];
    int n_params = split_list(k->params, params, 16), n_args = split_list(op_args, args, 16);
    if (n_params != n_args)
        ICE("kernel %s takes %d arguments, the op gives %d", k->name, n_params, n_args);
    emit_open_block(sb);
    const char *extent = k->extent;
    char extent_var[16] = "";
    for (int i = 0; i < n_params; i++) {
        char type[128], name[128];
        param_type_name(params[i], type, name);
        emit_line(sb, "%sarg%d = %s; /* %s */", type, i, args[i], name);
        if (!k->blocks && strcmp(name, k->extent) == 0)
            snprintf(extent_var, sizeof extent_var, "arg%d", i);
    }
    if (extent_var[0])
        extent = extent_var;
    StrBuf list = {0};
    for (int i = 0; i < n_params; i++)
        sb_printf(&list, "%s&arg%d", i ? ", " : "", i);
    emit_line(sb, "void *args[] = {%s};", list.data ? list.data : "");
    sb_free(&list);
    if (k->blocks) { // the grid from the parameters the expression names, as they are called there
        for (int i = 0; i < n_params; i++) {
            char type[128], name[128];
            param_type_name(params[i], type, name);
            if (strstr(k->blocks, name))
                emit_line(sb, "%s%s = arg%d;", type, name, i);
        }
        emit_line(sb, "pr_cuda_launch(CUDA_STAGE, K_%s, (int64_t)(%s) * %d, %d, args); /* blocks of %d threads */",
                  k->name, k->blocks, k->lanes, k->lanes, k->lanes);
    } else if (k->tiled)
        emit_line(sb, "pr_cuda_launch(CUDA_STAGE, K_%s, (int64_t)%ld * %d, %d, args); /* tiled: a block per index */",
                  k->name, attention_gpu_blocks(cfg, k), attention_gpu_block_threads(cfg, k), attention_gpu_block_threads(cfg, k));
    else if (kernel_lanes(k) == CUDA_WARP)
        emit_line(sb, "pr_cuda_launch(CUDA_STAGE, K_%s, (int64_t)(%s) * %d, CUDA_BLOCK, args); /* a warp per index */",
                  k->name, extent, CUDA_WARP);
    else
        emit_line(sb, "pr_cuda_launch(CUDA_STAGE, K_%s, (int64_t)(%s), CUDA_BLOCK, args);", k->name, extent);
    emit_close(sb, "");
}

/* A product's arguments for the GPU: "inputs, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c,
 * ldc" with a and b its bf16 copies when it has them under bf16 (enum pr_gemm_inputs). */
static char *gemm_args(const Op *op, bool bf16)
{
    const char *op_args = op->gpu_args ? op->gpu_args : op->args;
    const char *copies_h = op->gpu_args ? op->gpu_operands_h : op->operands_h;
    if (bf16 && op->out_h && !copies_h)
        ICE("a product with a bf16 output and fp32 operands");
    if (!bf16 || !copies_h)
        return xasprintf("CUDA_INPUTS, %s", op_args);
    char args[16][128], copies[2][128];
    int n = split_list(op_args, args, 16);
    if (n != 13 || split_list(copies_h, copies, 2) != 2)
        ICE("a product with %d arguments and bf16 operands '%s'", n, copies_h);
    snprintf(args[6], sizeof args[6], "%s", copies[0]);
    snprintf(args[8], sizeof args[8], "%s", copies[1]);
    if (op->out_h && strcmp(args[10], "0.0f") != 0)
        ICE("a product with a bf16 output and beta %s", args[10]);
    StrBuf sb = {0};
    sb_puts(&sb, op->out_h ? "PR_GEMM_BF16_OUT" : "PR_GEMM_BF16");
    for (int i = 0; i < n; i++)
        sb_printf(&sb, ", %s", args[i]);
    return sb.data;
}

/* One op; a timed op (number `index` of the section, as in the CPU half) is wrapped in
 * OP_BEGIN/OP_END, which record CUDA events on the compute stream while profiling. */
static void emit_cuda_op(StrBuf *sb, const Config *cfg, const Op *op, const char *section, int index, bool bf16)
{
    emit_line(sb, "/* %s */", op->comment);
    if (op->gpu_skip) { // numbered still, so that the profile's ops are the CPU path's
        emit_line(sb, "/* (nothing here on the GPU: done by an earlier op) */");
        return;
    }
    if (emit_loop_op(sb, op)) /* the host loops, queueing one launch per iteration */
        return;
    emit_op_begin(sb, section, index);
    switch (op->kind) {
    case OP_KERNEL:
        emit_cuda_launch(sb, cfg, op->gpu_kernel ? op->gpu_kernel : op->kernel, op->gpu_args ? op->gpu_args : op->args);
        break;
    case OP_GEMM: {
        char *args = gemm_args(op, bf16);
        if (op->bias)
            emit_line(sb, "pr_cuda_gemm_bias(CUDA_STAGE, %s, %s);", args, op->bias);
        else
            emit_line(sb, "pr_cuda_gemm(CUDA_STAGE, %s);", args);
        free(args);
        break;
    }
    case OP_ZERO:
        emit_line(sb, "pr_cuda_zero(CUDA_STAGE, %s);", op->args);
        break;
    case OP_COPY:
        emit_line(sb, "pr_cuda_copy(CUDA_STAGE, %s);", op->args);
        break;
    case OP_LOOP:
    case OP_END:
        unreachable();
    }
    emit_op_end(sb, section, index);
}

/* The kernels runtime/cuda/optim.c launches for the optimizer rules and the prediction. */
static void emit_optim_kernels(StrBuf *sb)
{
    emit_line(sb, "/* The kernels runtime/cuda/optim.c launches for the optimizer rules and the prediction. */");
    emit_line(sb, "static const pr_optim_kernels optim_kernels = {");
    sb->indent++;
    emit_line(sb, ".momentum = K_optim_momentum, .scale_add = K_scale_add, .muon_apply = K_muon_apply,");
    emit_line(sb, ".lamb_direction = K_lamb_direction, .lars_apply = K_lars_apply, .adamw = K_adamw,");
    emit_line(sb, ".to_bf16 = K_to_bf16, .nadam_apply = K_nadam_apply, .optim_predict = K_optim_predict,");
    emit_line(sb, ".wide_copy = K_wide_copy, .lans_direction = K_lans_direction, .block = CUDA_BLOCK,");
    sb->indent--;
    emit_line(sb, "};");
    sb_puts(sb, "\n");
}

/* delay_correction predict on the device: the runtime passes the rule (AdamW's from the
 * program's constants, the others' from the stage file). */
static void emit_cuda_predict(StrBuf *sb, int s)
{
    emit_line(sb, "/* delay_correction predict: the weights a forward runs on, extrapolated along the rule's");
    emit_line(sb, " * update direction (runtime/cuda/optim.c, as the CPU's pr_optim_predict). */");
    emit_line(sb, "void pr_stage_%d_cuda_predict(const pr_optim_rule *rule, const pr_predict_args *args)", s);
    emit_open_block(sb);
    emit_open(sb, "for (int i = 0; i < (int)(sizeof pr_stage_%d_tensors / sizeof pr_stage_%d_tensors[0]); i++)", s, s);
    emit_line(sb, "pr_cuda_optim_predict(rule, &pr_stage_%d_tensors[i], args, CUDA_STAGE, &optim_kernels);", s);
    emit_close(sb, "");
    emit_close(sb, "");
    sb_puts(sb, "\n");
}

/* A launch of to_bf16, the bf16 copy of count floats at src where no kernel writes it: the
 * statements of a block the caller opens. */
static void emit_to_bf16(StrBuf *sb, const char *src, const char *dst, const char *count)
{
    emit_line(sb, "const float *x = %s;", src);
    emit_line(sb, "pr_bf16 *out = (pr_bf16 *)(%s);", dst);
    emit_line(sb, "long n = %s;", count);
    emit_line(sb, "void *args[] = {&x, &out, &n};");
    emit_line(sb, "pr_cuda_launch(CUDA_STAGE, K_to_bf16, n, CUDA_BLOCK, args);");
}

/* messages bf16: the conversion of a message, in a block of its own, with what it is for. */
static void emit_message_bf16(StrBuf *sb, bool narrow, const char *src, const char *dst, const char *count,
                              const char *why)
{
    emit_line(sb, "/* %s */", why);
    emit_open_block(sb);
    if (narrow) {
        emit_to_bf16(sb, src, dst, count);
    } else {
        emit_line(sb, "const pr_bf16 *x = (const pr_bf16 *)(%s);", src);
        emit_line(sb, "float *out = %s;", dst);
        emit_line(sb, "long n = %s;", count);
        emit_line(sb, "void *args[] = {&x, &out, &n};");
        emit_line(sb, "pr_cuda_launch(CUDA_STAGE, K_from_bf16, n, CUDA_BLOCK, args);");
    }
    emit_close(sb, "");
}

/* A product (op `index`) and GELU's backward op after it, in one cuBLASLt call with the GELU
 * gradient in the epilogue when cuBLASLt has an algorithm for it (pr_cuda_gemm_dgelu returns
 * 0 without one, having queued nothing: then both ops run apart). The GELU kernel writes the
 * bf16 copy of its result; after a fused product the bias gradient's kernel, which reads the
 * fp32 result next, writes it on the way (ops.c gives it the copy). */
static void emit_fused_gelu(StrBuf *sb, const Config *cfg, const Op *gemm, const Op *gelu, const char *section, int index)
{
    if (gelu->kind != OP_KERNEL || strcmp(gelu->kernel->name, "gelu_backward") != 0 || gemm->bias)
        ICE("a GELU epilogue that is not a product followed by gelu_backward");
    emit_line(sb, "/* %s; the next op in cuBLASLt's epilogue where it fuses */", gemm->comment);
    emit_op_begin(sb, section, index);
    char *args = gemm_args(gemm, true);
    emit_line(sb, "int fused_%d = pr_cuda_gemm_dgelu(CUDA_STAGE, %s, %s);", index, args, gemm->epilogue_arg);
    emit_line(sb, "if (!fused_%d)", index);
    emit_line(sb, "    pr_cuda_gemm(CUDA_STAGE, %s);", args);
    free(args);
    emit_op_end(sb, section, index);
    emit_open(sb, "if (!fused_%d)", index);
    emit_cuda_op(sb, cfg, gelu, section, index + 1, true);
    emit_close(sb, "");
}

/* What emit_cuda_op needs besides the op. */
typedef struct CudaOpContext {
    const Config *cfg;
    bool bf16;
} CudaOpContext;

/* Op i of a section. Under bf16 a product marked with the GELU gradient's epilogue fuses with
 * the op after it (fp32 keeps them apart: the CPU's GELU is what fp32 runs must match to 1e-5). */
static int emit_cuda_section_op(StrBuf *sb, const OpList *l, int i, const char *section, int index, const void *ctx)
{
    const CudaOpContext *c = ctx;
    const Op *op = &l->ops[i];
    if (c->bf16 && op->kind == OP_GEMM && op->epilogue != EPI_NONE) {
        if (i + 1 == l->n)
            ICE("a GELU epilogue on the last op of %s", section);
        emit_fused_gelu(sb, c->cfg, op, &l->ops[i + 1], section, index);
        return 2;
    }
    emit_cuda_op(sb, c->cfg, op, section, index, c->bf16);
    return 1;
}

/* A section of the CPU half as `static void cuda_name(params)`, the same ops numbered the
 * same way; under bf16 it also takes the weights' bf16 copy where its products read them. */
static void emit_cuda_section(StrBuf *sb, const Config *cfg, const StageSection *section, bool bf16)
{
    char *params = section_params(section, bf16);
    emit_line(sb, "static void cuda_%s(%s)", section->name, params);
    free(params);
    emit_open_block(sb);
    emit_section_prelude(sb, section, bf16);
    CudaOpContext ctx = {cfg, bf16};
    emit_section_ops(sb, section->ops, section->name, emit_cuda_section_op, &ctx);
    emit_close(sb, "");
    sb_puts(sb, "\n");
}

/* The arguments of the bf16 weight copies a host section takes after its weights under bf16
 * (none in fp32): a layer's, the stage block's, the leading MLP half's, the trailing attention
 * half's. */
typedef struct WeightCopies {
    const char *layer, *stage, *lead, *tail, *lead_gelu, *tail_fc, *first_layer; /* first_layer: layer 0's */
    const char *lead_proj;
} WeightCopies;

static WeightCopies weight_copies(bool bf16)
{
    if (!bf16)
        return (WeightCopies){"", "", "", "", "", "", "", ""};
    return (WeightCopies){"args->params_h + PARAM_LAYERS + l * PARAM_PER_LAYER, ", "args->params_h, ",
                          "args->params_h + PARAM_LEAD_MLP, ", "args->params_h + PARAM_TAIL_ATTN, ",
                          "args->params_h + PARAM_LEAD_GELU, ", "args->params_h + PARAM_TAIL_ATTN + P_MLP, ",
                          "args->params_h + PARAM_LAYERS, ", "args->params_h + PARAM_LEAD_PROJ, "};
}

/* The host file's constants: the stage, the block size, the products' inputs, the kernels' indices. */
static void emit_cuda_host_constants(StrBuf *sb, int s, bool bf16)
{
    sb_puts(sb, "/* ---- The GPU path: the same sections as launches on the stage's compute stream; every\n"
                " * pointer is device memory. Kernels are indexed in the module's list (cuda_images.c). */\n\n");
    emit_line(sb, "enum { CUDA_STAGE = %d, CUDA_BLOCK = %d, CUDA_INPUTS = %s };", s, CUDA_BLOCK,
              bf16 ? "PR_GEMM_FP32_TC" : "PR_GEMM_FP32");
    if (bf16) {
        emit_line(sb, "/* Products read bf16 copies where they have them (ph, params_h: the weights'); the");
        emit_line(sb, " * kernels that produce an operand write its copy too. */");
        emit_line(sb, "#undef BF16_COPY");
        emit_line(sb, "#define BF16_COPY(p) ((pr_bf16 *)(p))");
    }
    StrBuf names = {0};
    for (int i = 0; i < kernel_desc_count; i++)
        sb_printf(&names, "%sK_%s", i ? ", " : "", kernel_descs[i].name);
    emit_line(sb, "enum { %s };", names.data ? names.data : "");
    sb_free(&names);
    sb_puts(sb, "\n");
}

/* atty's B T C values from `from` to `to` across the cut after attention: the received fp32 to
 * the proj piece's stored copy (`to_stored`), or the stored activation to the message's fp32;
 * bf16 where atty_stored_bf16. */
static void emit_cuda_atty_copy(StrBuf *sb, const Config *cfg, bool to_stored, const char *from, const char *to,
                                const char *why)
{
    if (atty_stored_bf16(cfg))
        emit_message_bf16(sb, to_stored, from, to, "(long)BT * C", why);
    else
        emit_line(sb, "pr_cuda_copy(CUDA_STAGE, %s, %s, (int64_t)BT * C); /* %s */", to, from, why);
}

/* pr_stage_S_cuda_forward: the stage's forward sections in order, messages narrowed or widened. */
static void emit_cuda_forward(StrBuf *sb, const Config *cfg, const StagePlan *sp, int s, WeightCopies h)
{
    emit_line(sb, "void pr_stage_%d_cuda_forward(const pr_fwd_args *args)", s);
    emit_open_block(sb);
    if (sp->has_embed)
        emit_line(sb, "cuda_embed_forward(args->params, args->acts, args->tokens);");
    if (receives_residual(cfg, sp))
        emit_message_bf16(sb, false, "args->acts + ACT_INPUT_MSG", "args->acts + ACT_INPUT",
                          sp->lead_gelu   ? "MSG_DFC + 4L * BT * C"
                          : sp->lead_proj ? "MSG_DATTY + (long)BT * C"
                                          : "(long)BT * C",
                          "the message came in bf16");
    if (sp->lead_proj) {
        emit_cuda_atty_copy(sb, cfg, true, "args->acts + ACT_INPUT_ATTY", "args->acts + ACT_LEAD_PROJ + A_ATTY",
                            "the proj piece keeps atty as the att piece stored it");
        emit_line(sb, "cuda_proj_piece_forward(args->params + PARAM_LEAD_PROJ, %sargs->acts + ACT_LEAD_PROJ, "
                      "args->acts + ACT_INPUT);", h.lead_proj);
    }
    if (sp->lead_mlp)
        emit_line(sb, "cuda_mlp_forward(args->params + PARAM_LEAD_MLP, %sargs->acts + ACT_LEAD_MLP, "
                      "args->acts + %s);", h.lead, sp->lead_proj ? "ACT_LEAD_PROJ + A_RESID2" : "ACT_INPUT");
    if (sp->lead_gelu)
        emit_line(sb, "cuda_gelu_piece_forward(args->params + PARAM_LEAD_GELU, %sargs->acts + ACT_LEAD_GELU, "
                      "args->acts + ACT_INPUT, args->acts + ACT_INPUT_FC);", h.lead_gelu);
    emit_open(sb, "for (int l = 0; l < N_LAYERS; l++)");
    emit_line(sb, "cuda_block_forward(args->params + PARAM_LAYERS + l * PARAM_PER_LAYER, %s"
                  "args->acts + ACT_LAYERS + l * ACT_PER_LAYER, layer_input(args->acts, l));", h.layer);
    emit_close(sb, "");
    if (sp->tail_attn)
        emit_line(sb, "cuda_attn_forward(args->params + PARAM_TAIL_ATTN, %sargs->acts + ACT_TAIL_ATTN, "
                      "layer_input(args->acts, N_LAYERS));", h.tail);
    if (sp->tail_fc)
        emit_line(sb, "cuda_fc_piece_forward(args->params + PARAM_TAIL_ATTN + P_MLP, %sargs->acts + ACT_TAIL_ATTN + A_MLP, "
                      "args->acts + ACT_TAIL_ATTN + A_PROJ + A_RESID2);", h.tail_fc);
    if (sp->tail_atty) {
        emit_line(sb, "cuda_att_piece_forward(args->params + PARAM_TAIL_ATTN, %sargs->acts + ACT_TAIL_ATTN, "
                      "layer_input(args->acts, N_LAYERS));", h.tail);
        emit_line(sb, "pr_cuda_copy(CUDA_STAGE, args->acts + ACT_OUTPUT, layer_input(args->acts, N_LAYERS), "
                      "(int64_t)BT * C); /* the message: x, then atty */");
        emit_cuda_atty_copy(sb, cfg, false, "args->acts + ACT_TAIL_ATTN + A_PROJ + A_ATTY",
                            "args->acts + ACT_OUTPUT + MSG_DATTY", "atty goes in fp32");
    }
    if (stage_head_front(sp))
        emit_line(sb, "cuda_head_front_forward(args->params, %sargs->acts, args->acts + ACT_OUTPUT, args->targets);",
                  h.stage);
    else if (stage_head_back(sp))
        emit_line(sb, "cuda_head_back_forward(args->params, %sargs->acts, args->acts + ACT_INPUT, args->targets, "
                      "args->losses);", h.stage);
    else if (sp->has_head)
        emit_line(sb, "cuda_head_forward(args->params, %sargs->acts, args->acts + ACT_OUTPUT, args->targets, "
                      "args->losses);", h.stage);
    if (sends_residual(cfg, sp))
        emit_message_bf16(sb, true, "args->acts + ACT_OUTPUT", "args->acts + ACT_OUTPUT_MSG",
                          sp->tail_fc     ? "MSG_DFC + 4L * BT * C"
                          : sp->tail_atty ? "MSG_DATTY + (long)BT * C"
                                          : "(long)BT * C",
                          "the message goes in bf16");
    emit_close(sb, "");
    sb_puts(sb, "\n");
}

/* The backward's start: the head's sections (and its gradients reported ready), or the
 * gradient from the next stage taken in (widened, and copied to bf16 for the products). `part`
 * is "" for the whole backward, "_b" or "_w" for a zero-bubble B or W (W takes nothing in). */
static void emit_cuda_backward_top(StrBuf *sb, const Config *cfg, const LoweredStage *ls, WeightCopies h,
                                   const char *part)
{
    const StagePlan *sp = ls->plan;
    const StageLayout *lay = &ls->layout;
    bool bf16 = cfg->precision == PREC_BF16, ready = !*part;
    if (stage_head_front(sp)) {
        long head = layout_offset(&lay->params, "PARAM_LNFW");
        emit_line(sb, "cuda_head_front_backward%s(args->params, %sargs->grads, args->acts, args->acts + ACT_OUTPUT, "
                      "args->scratch, args->targets, args->dx_out, args->loss_scale / (float)BT);", part, h.stage);
        if (ready)
            emit_line(sb, "grads_ready(args, PARAM_LNFW, %ldL); /* the final LayerNorm and the head's rows */",
                      lay->params.total - head);
    } else if (stage_head_back(sp)) {
        emit_line(sb, "cuda_head_back_backward%s(args->params, %sargs->grads, args->acts, args->acts + ACT_INPUT, "
                      "args->scratch, args->targets, args->dx_in, args->loss_scale / (float)BT);", part, h.stage);
        if (ready)
            emit_line(sb, "grads_ready(args, 0, %ldL); /* the head's rows */", lay->params.total);
    } else if (sp->has_head) {
        long head = layout_offset(&lay->params, "PARAM_LNFW");
        emit_line(sb, "cuda_head_backward%s(args->params, %sargs->grads, args->acts, args->acts + ACT_OUTPUT, "
                      "args->scratch, args->targets, args->loss_scale / (float)BT);", part, h.stage);
        if (ready)
            emit_line(sb, "grads_ready(args, PARAM_LNFW, %ldL); /* the final LayerNorm%s */", lay->params.total - head,
                      cfg->tied ? "" : " and the head");
    } else if (strcmp(part, "_w") != 0) {
        if (sends_residual(cfg, sp))
            emit_message_bf16(sb, false, "args->dx_out", "args->scratch + S_DRES", "(long)BT * C",
                              "the gradient came in bf16");
        else
            emit_line(sb, "pr_cuda_copy(CUDA_STAGE, args->scratch + S_DRES, args->dx_out, (int64_t)BT * C);");
        if (sp->tail_fc && sends_residual(cfg, sp)) // and d fc, after the residual's share of d(resid2)
            emit_message_bf16(sb, false, "(const pr_bf16 *)args->dx_out + MSG_DFC", "args->scratch + S_DFC",
                              "4L * BT * C", "d fc came in bf16 with it");
        else if (sp->tail_fc)
            emit_line(sb, "pr_cuda_copy(CUDA_STAGE, args->scratch + S_DFC, args->dx_out + MSG_DFC, "
                          "(int64_t)4 * BT * C); /* and d fc, after the residual's share of d(resid2) */");
        if (sp->tail_atty && sends_residual(cfg, sp)) // and d atty, after the residual's share of d x
            emit_message_bf16(sb, false, "(const pr_bf16 *)args->dx_out + MSG_DATTY", "args->scratch + S_DATTY",
                              "(long)BT * C", "d atty came in bf16 with it");
        else if (sp->tail_atty)
            emit_line(sb, "pr_cuda_copy(CUDA_STAGE, args->scratch + S_DATTY, args->dx_out + MSG_DATTY, "
                          "(int64_t)BT * C); /* and d atty, after the residual's share of d x */");
        if (bf16) {
            emit_line(sb, "/* the received gradient's bf16 copy, for the last layer's products */");
            emit_open_block(sb);
            emit_to_bf16(sb, "args->scratch + S_DRES", "args->scratch + S_DRES_H", "(long)BT * C");
            emit_close(sb, "");
        }
    }
}

/* The backward (`part`) of a part of a layer at the stage's either end: section `name` over the
 * parameter block at `block` (its bf16 copy `copy`), its activations and its input; the whole
 * backward (or the late part, stage_late_piece) then reports the block's `count` gradients
 * final (NULL: not yet, a down part's). */
static void emit_part_backward(StrBuf *sb, const char *name, const char *part, const char *block, const char *copy,
                               const char *acts, const char *input, const char *count)
{
    emit_line(sb, "cuda_%s_backward%s(args->params + %s, %sargs->grads + %s, %s,", name, part, block, copy, block, acts);
    emit_line(sb, "    %s, args->scratch);", input);
    if (count && (!*part || strcmp(part, "_late") == 0))
        emit_line(sb, "grads_ready(args, %s, %s);", block, count);
}

/* pr_stage_S_cuda_backward`part`: its sections from the last, each range of gradients reported
 * as it is final (the whole backward only), and the gradient for the previous stage sent on
 * (not by W). */
static void emit_cuda_backward_part(StrBuf *sb, const Config *cfg, const LoweredStage *ls, int s, WeightCopies h,
                                    const char *part)
{
    const StagePlan *sp = ls->plan;
    bool ready = !*part, w = strcmp(part, "_w") == 0;
    LatePiece late = *part ? LATE_NONE : stage_late_piece(sp, config_splits_backward(cfg));
    emit_line(sb, "void pr_stage_%d_cuda_backward%s(const pr_bwd_args *args)", s, part);
    emit_open_block(sb);
    emit_cuda_backward_top(sb, cfg, ls, h, part);
    if (sp->tail_fc)
        emit_part_backward(sb, "fc_piece", part, "PARAM_TAIL_ATTN + P_MLP", h.tail_fc, "args->acts + ACT_TAIL_ATTN + A_MLP",
                           "args->acts + ACT_TAIL_ATTN + A_PROJ + A_RESID2", "P_GELU - P_MLP");
    // the first piece's down part under late: its gradients are final after its late part
    if (sp->tail_attn)
        emit_part_backward(sb, "attn", late == LATE_ATTN ? "_down" : part, "PARAM_TAIL_ATTN", h.tail,
                           "args->acts + ACT_TAIL_ATTN", "layer_input(args->acts, N_LAYERS)", late == LATE_ATTN ? NULL : "P_MLP");
    if (sp->tail_atty)
        emit_part_backward(sb, "att_piece", part, "PARAM_TAIL_ATTN", h.tail, "args->acts + ACT_TAIL_ATTN",
                           "layer_input(args->acts, N_LAYERS)", "P_PROJ");
    if (late != LATE_BLOCK || sp->n_layers > 1) { // the block section (ops.c, stage_sections)
        emit_open(sb, "for (int l = N_LAYERS - 1; l >= %d; l--)", late == LATE_BLOCK);
        emit_line(sb, "cuda_block_backward%s(args->params + PARAM_LAYERS + l * PARAM_PER_LAYER, %s"
                      "args->grads + PARAM_LAYERS + l * PARAM_PER_LAYER,", part, h.layer);
        emit_line(sb, "                    %sargs->acts + ACT_LAYERS + l * ACT_PER_LAYER, layer_input(args->acts, l), "
                      "args->scratch);", *part ? "  " : "");
        if (ready)
            emit_line(sb, "grads_ready(args, PARAM_LAYERS + l * PARAM_PER_LAYER, PARAM_PER_LAYER);");
        emit_close(sb, "");
    }
    if (late == LATE_BLOCK)
        emit_part_backward(sb, "block", "_down", "PARAM_LAYERS", h.first_layer, "args->acts + ACT_LAYERS", "layer_input(args->acts, 0)",
                           NULL);
    if (sp->lead_mlp)
        emit_part_backward(sb, "mlp", late == LATE_MLP || late == LATE_PROJ ? "_down" : part, "PARAM_LEAD_MLP", h.lead,
                           "args->acts + ACT_LEAD_MLP",
                           sp->lead_proj ? "args->acts + ACT_LEAD_PROJ + A_RESID2" : "args->acts + ACT_INPUT",
                           late == LATE_MLP || late == LATE_PROJ ? NULL : "PARAM_PER_LAYER - P_MLP");
    if (sp->lead_gelu)
        emit_part_backward(sb, "gelu_piece", late == LATE_GELU ? "_down" : part, "PARAM_LEAD_GELU", h.lead_gelu,
                           "args->acts + ACT_LEAD_GELU", "args->acts + ACT_INPUT_FC",
                           late == LATE_GELU ? NULL : "PARAM_PER_LAYER - P_GELU");
    if (sp->lead_proj)
        emit_part_backward(sb, "proj_piece", late == LATE_PROJ ? "_down" : part, "PARAM_LEAD_PROJ", h.lead_proj,
                           "args->acts + ACT_LEAD_PROJ", "args->acts + ACT_INPUT", late == LATE_PROJ ? NULL : "P_MLP - P_PROJ");
    if (sp->has_embed && ready) {
        emit_line(sb, "cuda_embed_backward(args->grads, args->scratch, args->tokens);");
        emit_line(sb, "grads_ready(args, 0, PARAM_LAYERS); /* the embeddings%s */",
                  sp->has_head && cfg->tied ? ", the head's share of wte included" : "");
    } else if (sp->has_embed) {
        emit_line(sb, w ? "cuda_embed_backward_w(args->grads, args->acts, args->tokens);"
                        : "cuda_embed_backward_b(args->acts, args->scratch);");
    } else if (w) {
        // W sends no message
    } else if (receives_residual(cfg, sp)) {
        emit_message_bf16(sb, true, "args->scratch + S_DRES", "args->dx_in", "(long)BT * C", "the gradient goes in bf16");
        if (sp->lead_gelu)
            emit_message_bf16(sb, true, "args->scratch + S_DFC", "(pr_bf16 *)args->dx_in + MSG_DFC", "4L * BT * C",
                              "and d fc, for the fc piece on the stage before");
        if (sp->lead_proj)
            emit_message_bf16(sb, true, "args->scratch + S_DATTY", "(pr_bf16 *)args->dx_in + MSG_DATTY", "(long)BT * C",
                              "and d atty, for the att piece on the stage before");
    } else if (!stage_head_back(sp)) { /* the split's last stage wrote its message itself */
        emit_line(sb, "pr_cuda_copy(CUDA_STAGE, args->dx_in, args->scratch + S_DRES, (int64_t)BT * C);");
        if (sp->lead_gelu)
            emit_line(sb, "pr_cuda_copy(CUDA_STAGE, args->dx_in + MSG_DFC, args->scratch + S_DFC, (int64_t)4 * BT * C); "
                          "/* and d fc */");
        if (sp->lead_proj)
            emit_line(sb, "pr_cuda_copy(CUDA_STAGE, args->dx_in + MSG_DATTY, args->scratch + S_DATTY, (int64_t)BT * C); "
                          "/* and d atty */");
    }
    if (late != LATE_NONE) {
        emit_line(sb, "if (args->dx_ready) /* the gradient goes back (queued after the work above) while the last "
                      "weight gradients are computed */");
        emit_line(sb, "    args->dx_ready(args->ready_ctx);");
        if (late == LATE_BLOCK)
            emit_part_backward(sb, "block", "_late", "PARAM_LAYERS", h.first_layer, "args->acts + ACT_LAYERS",
                               "layer_input(args->acts, 0)", "PARAM_PER_LAYER");
        else if (late == LATE_ATTN)
            emit_part_backward(sb, "attn", "_late", "PARAM_TAIL_ATTN", h.tail, "args->acts + ACT_TAIL_ATTN",
                               "layer_input(args->acts, N_LAYERS)", "P_MLP");
        else if (late == LATE_MLP)
            emit_part_backward(sb, "mlp", "_late", "PARAM_LEAD_MLP", h.lead, "args->acts + ACT_LEAD_MLP",
                               "args->acts + ACT_INPUT", "PARAM_PER_LAYER - P_MLP");
        else if (late == LATE_PROJ) {
            emit_part_backward(sb, "mlp", "_late", "PARAM_LEAD_MLP", h.lead, "args->acts + ACT_LEAD_MLP",
                               "args->acts + ACT_LEAD_PROJ + A_RESID2", "PARAM_PER_LAYER - P_MLP");
            emit_part_backward(sb, "proj_piece", "_late", "PARAM_LEAD_PROJ", h.lead_proj, "args->acts + ACT_LEAD_PROJ",
                               "args->acts + ACT_INPUT", "P_MLP - P_PROJ");
        } else
            emit_part_backward(sb, "gelu_piece", "_late", "PARAM_LEAD_GELU", h.lead_gelu, "args->acts + ACT_LEAD_GELU",
                               "args->acts + ACT_INPUT_FC", "PARAM_PER_LAYER - P_GELU");
    }
    emit_close(sb, "");
    sb_puts(sb, "\n");
}

/* grads_ready, then the backward: whole, or (zero-bubble) B, W and the whole as B then W. */
static void emit_cuda_backward(StrBuf *sb, const Config *cfg, const LoweredStage *ls, int s, WeightCopies h)
{
    emit_line(sb, "/* Replicas: grads[offset, offset + count) is final for this backward, so its allreduce may");
    emit_line(sb, " * start while the backward goes on (pr_bwd_args.grads_ready; NULL outside the window's");
    emit_line(sb, " * last backward). */");
    emit_line(sb, "static void grads_ready(const pr_bwd_args *args, long offset, long count)");
    emit_open_block(sb);
    emit_open(sb, "if (args->grads_ready)");
    emit_line(sb, "args->grads_ready(args->ready_ctx, offset, count);");
    emit_close(sb, "");
    emit_close(sb, "");
    sb_puts(sb, "\n");
    if (!config_splits_backward(cfg)) {
        emit_cuda_backward_part(sb, cfg, ls, s, h, "");
        return;
    }
    emit_cuda_backward_part(sb, cfg, ls, s, h, "_b");
    emit_cuda_backward_part(sb, cfg, ls, s, h, "_w");
    emit_line(sb, "void pr_stage_%d_cuda_backward(const pr_bwd_args *args)", s);
    emit_open_block(sb);
    emit_line(sb, "pr_stage_%d_cuda_backward_b(args);", s);
    emit_line(sb, "pr_stage_%d_cuda_backward_w(args);", s);
    emit_close(sb, "");
    sb_puts(sb, "\n");
}

/* pr_stage_S_cuda_adamw: the optimizer on the device, AdamW's kernel per tensor, or the other
 * rules through runtime/cuda/optim.c (with the prediction's launches where it predicts). */
static void emit_cuda_step(StrBuf *sb, const Config *cfg, int s)
{
    bool bf16 = cfg->precision == PREC_BF16, predicts = cfg->delay_correction == DELAY_PREDICT;
    if (cfg->optimizer != PR_OPT_ADAMW || predicts)
        emit_optim_kernels(sb);
    if (predicts)
        emit_cuda_predict(sb, s);
    if (cfg->optimizer != PR_OPT_ADAMW) {
        emit_line(sb, "/* The optimizer per tensor on the device (runtime/cuda/optim.c), with the constants of");
        emit_line(sb, " * the CPU step above. */");
        emit_line(sb, "void pr_stage_%d_cuda_adamw(const pr_adamw_args *args)", s);
        emit_open_block(sb);
        emit_open(sb, "for (int i = 0; i < (int)(sizeof pr_stage_%d_tensors / sizeof pr_stage_%d_tensors[0]); i++)", s, s);
        emit_line(sb, "OP_BEGIN(OPS_adamw);");
        emit_line(sb, "pr_cuda_optim_step(&pr_stage_%d_optim_rule, &pr_stage_%d_tensors[i], args, CUDA_STAGE, &optim_kernels);",
                  s, s);
        emit_line(sb, "OP_END(OPS_adamw);");
        emit_close(sb, "");
        emit_close(sb, "");
        sb_puts(sb, "\n");
        return;
    }
    emit_line(sb, "/* AdamW per tensor on the device: fp32 weights and moments%s (see docs/gpu.md). */",
              bf16 ? ", and the weights' bf16 copy written back" : "");
    emit_line(sb, "void pr_stage_%d_cuda_adamw(const pr_adamw_args *args)", s);
    emit_open_block(sb);
    // The same doubles as the CPU AdamW, so both paths use the same corrections.
    emit_line(sb, "float beta1_correction = (float)(1.0 - pow(%.17g, (double)args->t));", cfg->beta1);
    emit_line(sb, "float beta2_correction = (float)(1.0 - pow(%.17g, (double)args->t));", cfg->beta2);
    emit_open(sb, "for (int i = 0; i < (int)(sizeof pr_stage_%d_tensors / sizeof pr_stage_%d_tensors[0]); i++)", s, s);
    emit_line(sb, "const pr_tensor *t = &pr_stage_%d_tensors[i];", s);
    emit_line(sb, "float *param = args->params + t->offset, *m = args->m + t->offset, *v = args->v + t->offset;");
    emit_line(sb, "const float *grad = args->grads + t->offset;");
    emit_line(sb, "pr_bf16 *param_h = args->params_h ? args->params_h + t->offset : NULL;");
    emit_line(sb, "long n = (long)t->size;");
    emit_line(sb, "float lr = args->lr, weight_decay = t->decay ? ADAMW_WEIGHT_DECAY : 0.0f, "
                  "grad_scale = args->grad_scale;");
    emit_line(sb, "void *launch_args[] = {&param, &grad, &m, &v, &n, &lr, &weight_decay, &grad_scale, "
                  "&beta1_correction, &beta2_correction, &param_h};");
    emit_line(sb, "OP_BEGIN(OPS_adamw);");
    emit_line(sb, "pr_cuda_launch(CUDA_STAGE, K_adamw, n, CUDA_BLOCK, launch_args);");
    emit_line(sb, "OP_END(OPS_adamw);");
    emit_close(sb, "");
    emit_close(sb, "");
    sb_puts(sb, "\n");
}

void emit_cuda_host(StrBuf *sb, const Config *cfg, const Lowered *low, int s)
{
    const LoweredStage *ls = &low->stage[s];
    bool bf16 = cfg->precision == PREC_BF16;
    WeightCopies h = weight_copies(bf16);
    emit_cuda_host_constants(sb, s, bf16);
    for (int i = 0; i < ls->n_sections; i++)
        if (ls->sections[i].ops)
            emit_cuda_section(sb, cfg, &ls->sections[i], bf16);
    emit_cuda_forward(sb, cfg, ls->plan, s, h);
    emit_cuda_backward(sb, cfg, ls, s, h);
    emit_cuda_step(sb, cfg, s);

    long weights = ls->layout.params.total;
    emit_line(sb, "/* params_h = the %ld weights of the block in bf16, after they change other than by AdamW. */",
              weights);
    emit_line(sb, "void pr_stage_%d_cuda_weight_copy(const float *params, pr_bf16 *params_h)", s);
    emit_open_block(sb);
    char count[32];
    snprintf(count, sizeof count, "%ldL", weights);
    emit_to_bf16(sb, "params", "params_h", count);
    emit_close(sb, "");
}

/* A byte array as C: a string literal of octal escapes, 32 bytes a line. The array has the
 * data's exact size, so the literal's closing NUL is not stored (C11 6.7.9p14). A C compiler
 * reads a string in a fraction of the time it takes for as many integer initializers: a
 * program's images are about a megabyte, which cost a second of its build as integers. */
static void emit_bytes(StrBuf *sb, const char *name, const unsigned char *data, size_t size)
{
    sb_printf(sb, "static const unsigned char %s[%zu] =%s", name, size, size ? "" : " \"\"");
    for (size_t i = 0; i < size; i += 32) {
        sb_puts(sb, "\n    \"");
        for (size_t j = i; j < size && j < i + 32; j++)
            sb_printf(sb, "\\%03o", data[j]);
        sb_puts(sb, "\"");
    }
    sb_puts(sb, ";\n");
}

void emit_cuda_images(StrBuf *sb, const Config *cfg, const CudaImage *images, int n)
{
    emit_banner(sb, cfg, "The stages' CUDA kernels compiled by NVRTC: one image per architecture "
                         "(cubins, and PTX the driver compiles for newer GPUs), and the kernel names "
                         "every stage's launches index.");
    sb_puts(sb, "#include \"pacirt.h\"\n\n");
    for (int i = 0; i < n; i++) {
        char *name = xasprintf("image_%s", images[i].arch);
        emit_bytes(sb, name, images[i].data, images[i].size);
        free(name);
    }
    sb_printf(sb, "\nconst pr_cuda_image pr_cuda_images[%d] = {\n", n);
    for (int i = 0; i < n; i++)
        sb_printf(sb, "    {\"%s\", image_%s, %zu},\n", images[i].arch, images[i].arch, images[i].size);
    sb_puts(sb, "};\n\n");
    sb_printf(sb, "const char *const pr_cuda_kernel_names[%d] = {\n", kernel_desc_count);
    for (int i = 0; i < kernel_desc_count; i++)
        sb_printf(sb, "    \"%s\",\n", kernel_descs[i].name);
    sb_puts(sb, "};\n");
}
