/* emit_cuda.c: renders the same kernel descriptions as CUDA C, one __global__ function per
 * description with one thread per index of its iteration space.
 *
 * This is the device half of a stage's CUDA translation unit: NVRTC compiles it (see
 * tests/e2e/nvrtc.sh); the host half (launches in op-list order, GEMMs through cuBLASLt)
 * renders the same op lists and belongs to the CUDA runtime.
 */
#include <stdlib.h>

#include "pacic.h"

enum { CUDA_BLOCK = 256 }; /* threads per block of every 1-D launch */

static void emit_cuda_kernel(StrBuf *sb, const KernelDesc *k)
{
    emit_line(sb, "/* %s */", k->doc);
    emit_line(sb, "extern \"C\" __global__ void __launch_bounds__(%d) %s(%s)", CUDA_BLOCK, k->name, k->params);
    emit_line(sb, "{");
    sb->indent++;
    emit_line(sb, "long %s = (long)blockIdx.x * blockDim.x + threadIdx.x;", k->index);
    emit_line(sb, "if (%s >= %s)", k->index, k->extent);
    emit_line(sb, "    return;");
    emit_kernel_body(sb, k);
    emit_close(sb, "");
    sb_puts(sb, "\n");
}

/* Every kernel of the model, specialised to cfg's shapes (the stage decides which it
 * launches); no #include, so NVRTC needs no headers. */
void emit_cuda_stage(StrBuf *sb, const Config *cfg, const Plan *plan, int s)
{
    const StagePlan *sp = &plan->stage[s];
    char *what = xasprintf("Stage %d of %d, CUDA kernels (layers [%d, %d)): one thread per index, "
                           "%d threads per block.", s, plan->stages, sp->first_layer,
                           sp->first_layer + sp->n_layers, CUDA_BLOCK);
    emit_banner(sb, cfg, what);
    free(what);
    emit_line(sb, "enum { B = %d, T = %d, C = %d, NH = %d, HS = %d, V = %d, BT = B * T };", cfg->micro,
              cfg->context, cfg->width, cfg->heads, cfg->width / cfg->heads, cfg->vocab);
    emit_line(sb, "#define ADAMW_BETA1 %.9gf", cfg->beta1);
    emit_line(sb, "#define ADAMW_BETA2 %.9gf", cfg->beta2);
    emit_line(sb, "#define ADAMW_EPS %.9gf", cfg->eps);
    emit_line(sb, "/* Indices run concurrently: accumulation shared between them is atomic. */");
    emit_line(sb, "#define RESTRICT __restrict__");
    emit_line(sb, "#define ATOMIC_ADD(ptr, value) atomicAdd((ptr), (value))");
    sb_puts(sb, "\n");
    for (int i = 0; i < kernel_desc_count; i++)
        emit_cuda_kernel(sb, &kernel_descs[i]);
}
