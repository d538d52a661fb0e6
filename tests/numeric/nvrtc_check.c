/* nvrtc_check: compiles the generated CUDA kernels of a model with NVRTC for sm_80 and
 * sm_90 (cubin) and prints ptxas's spill report, and the registers and shared memory of the
 * tiled attention kernels; exits 1 if a unit does not compile, keeping its source in the
 * current folder.
 *
 *   nvrtc_check LAYERS WIDTH HEADS CONTEXT VOCAB MICRO [fp32|bf16]
 */
#include <nvrtc.h>
#include <stdlib.h>
#include <string.h>

#include "pacic.h"

static bool compile_for(const char *source, const char *arch)
{
    nvrtcProgram prog;
    if (nvrtcCreateProgram(&prog, source, "stage_0.cu", 0, NULL, NULL) != NVRTC_SUCCESS) {
        fprintf(stderr, "nvrtcCreateProgram failed\n");
        return false;
    }
    char *arch_opt = xasprintf("--gpu-architecture=%s", arch);
    const char *opts[] = {arch_opt, "--std=c++17", "--ptxas-options=--verbose"};
    nvrtcResult res = nvrtcCompileProgram(prog, 3, opts);
    size_t log_size = 0;
    nvrtcGetProgramLogSize(prog, &log_size);
    char *log = xmalloc(log_size + 1);
    nvrtcGetProgramLog(prog, log);
    log[log_size] = '\0';
    int spills = 0;
    for (const char *p = log; (p = strstr(p, "bytes spill stores")); p++) {
        const char *q = p;
        while (q > log && q[-1] == ' ')
            q--;
        while (q > log && q[-1] >= '0' && q[-1] <= '9')
            q--;
        if (atoi(q) != 0)
            spills++;
    }
    size_t cubin_size = 0;
    if (res == NVRTC_SUCCESS)
        nvrtcGetCUBINSize(prog, &cubin_size);
    printf("%s: %s, cubin %zu bytes, %d kernel(s) with spill stores\n", arch,
           res == NVRTC_SUCCESS ? "compiled" : nvrtcGetErrorString(res), cubin_size, spills);
    // ptxas: "Compiling entry function 'NAME'" ... "Used N registers, ..., M bytes smem"
    for (const char *p = log; (p = strstr(p, "Compiling entry function 'flash_")); p++) {
        const char *name = p + strlen("Compiling entry function '"), *end = strchr(name, '\'');
        const char *used = strstr(p, "Used ");
        if (!end || !used)
            break;
        const char *eol = strchr(used, '\n');
        printf("  %.*s: %.*s\n", (int)(end - name), name, eol ? (int)(eol - used) : (int)strlen(used), used);
    }
    if (res != NVRTC_SUCCESS)
        fprintf(stderr, "%s\n", log);
    free(log);
    free(arch_opt);
    nvrtcDestroyProgram(&prog);
    return res == NVRTC_SUCCESS;
}

int main(int argc, char **argv)
{
    if (argc != 7 && !(argc == 8 && (strcmp(argv[7], "fp32") == 0 || strcmp(argv[7], "bf16") == 0))) {
        fprintf(stderr, "usage: %s LAYERS WIDTH HEADS CONTEXT VOCAB MICRO [fp32|bf16]\n", argv[0]);
        return 2;
    }
    static const Source src = {.path = "tests/numeric (hand-built config)", .text = "", .len = 0};
    Config cfg = {.src = &src, .layers = atoi(argv[1]), .width = atoi(argv[2]),
                  .heads = atoi(argv[3]), .context = atoi(argv[4]), .vocab = atoi(argv[5]),
                  .micro = atoi(argv[6]), .stages = 1, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                  .precision = argc == 8 && strcmp(argv[7], "bf16") == 0 ? PREC_BF16 : PREC_FP32};
    Plan plan;
    plan_layout(&cfg, &plan); // one stage: embedding, every layer and the head
    Lowered low;
    lower_build(&cfg, &plan, &low);
    StrBuf sb = {0};
    emit_cuda_stage(&sb, &cfg, &low, 0);
    lower_free(&low);
    bool ok = compile_for(sb.data, "sm_80") & compile_for(sb.data, "sm_90");
    if (!ok && write_file_atomic("stage_0.cu", sb.data, sb.len) == 0)
        fprintf(stderr, "source kept in stage_0.cu\n");
    sb_free(&sb);
    return ok ? 0 : 1;
}
