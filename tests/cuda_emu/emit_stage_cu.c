/* emit_stage_cu: writes to stdout the CUDA unit (stages.cu) pacic generates for a one-layer
 * model of the given shape, without NVRTC, for tests/cuda_emu/attention_check.cpp. Test
 * tooling, never part of pacic or run.
 *
 *   emit_stage_cu WIDTH HEADS CONTEXT MICRO fp32|bf16
 */
#include <stdlib.h>
#include <string.h>

#include "pacic.h"

int main(int argc, char **argv)
{
    if (argc != 6 || (strcmp(argv[5], "fp32") != 0 && strcmp(argv[5], "bf16") != 0)) {
        fprintf(stderr, "usage: %s WIDTH HEADS CONTEXT MICRO fp32|bf16\n", argv[0]);
        return 2;
    }
    static const Source src = {.path = "tests/cuda_emu (hand-built config)", .text = "", .len = 0};
    Config cfg = {.src = &src, .layers = 1, .width = atoi(argv[1]), .heads = atoi(argv[2]),
                  .context = atoi(argv[3]), .vocab = 64, .micro = atoi(argv[4]), .stages = 1,
                  .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                  .precision = strcmp(argv[5], "bf16") == 0 ? PREC_BF16 : PREC_FP32};
    if (cfg.width <= 0 || cfg.heads <= 0 || cfg.width % cfg.heads != 0 || cfg.context <= 0 || cfg.micro <= 0) {
        fprintf(stderr, "emit_stage_cu: a width that the heads divide, and a positive context and micro-batch\n");
        return 2;
    }
    Plan plan;
    plan_layout(&cfg, &plan); // one stage: embedding, every layer and the head
    Lowered low;
    lower_build(&cfg, &plan, &low);
    StrBuf sb = {0};
    emit_cuda_stage(&sb, &cfg, &low, 0);
    lower_free(&low);
    fwrite(sb.data, 1, sb.len, stdout);
    sb_free(&sb);
    return ferror(stdout) ? 1 : 0;
}
