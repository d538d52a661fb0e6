/* gen_stages: writes the generated sources of a tiny GPT-2 for the numeric tests: lowers a
 * hand-built Config and the planner's layer split and calls codegen_write (no DSL, no
 * schedule: the table is empty, the harness runs the stages itself).
 *
 *   gen_stages DIR LAYERS WIDTH HEADS CONTEXT VOCAB MICRO STAGES TIED [flash|matmul|stored]
 */
#include <stdlib.h>
#include <string.h>

#include "pacic.h"

int main(int argc, char **argv)
{
    if (argc != 10 && argc != 11) {
        fprintf(stderr, "usage: %s DIR LAYERS WIDTH HEADS CONTEXT VOCAB MICRO STAGES TIED [flash|matmul|stored]\n",
                argv[0]);
        return EXIT_USER;
    }
    static const Source src = {.path = "tests/numeric (hand-built config)", .text = "", .len = 0};
    Config cfg = {
        .src = &src,
        .layers = atoi(argv[2]), .width = atoi(argv[3]), .heads = atoi(argv[4]),
        .context = atoi(argv[5]), .vocab = atoi(argv[6]), .micro = atoi(argv[7]),
        .stages = atoi(argv[8]), .tied = atoi(argv[9]) != 0,
        .schedule = PACI_SCHED_ONEF1B, .window = 1, .global_batch = atoi(argv[7]),
        .steps = 1, .lr_base = 1e-3, .lr_base_batch = atoi(argv[7]), .lr = 1e-3,
        .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .grad_clip = 0,
        .min_lr_ratio = 0.1, .eval_batches = 1, .seed = 1337,
        .attention = argc < 11                          ? ATTN_FLASH
                     : strcmp(argv[10], "matmul") == 0 ? ATTN_MATMUL
                     : strcmp(argv[10], "stored") == 0 ? ATTN_STORED
                                                       : ATTN_FLASH,
    };
    if (cfg.layers < cfg.stages || cfg.stages < 1 || cfg.stages > PACI_MAX_STAGES) {
        fprintf(stderr, "gen_stages: need 1 <= stages <= layers\n");
        return EXIT_USER;
    }
    Plan plan;
    plan_layout(&cfg, &plan); // the planner's split and sizes, which codegen checks its layout against
    paci_table table = {.schedule = cfg.schedule, .stages = cfg.stages, .window = 1,
                        .total_steps = 1, .segment_steps = 1, .n_programs = 1,
                        .program = {{.schedule = cfg.schedule, .steps = 1}}};
    Lowered low;
    lower_build(&cfg, &plan, &low);
    return codegen_write(&cfg, &low, &table, argv[1]) ? 0 : EXIT_INTERNAL;
}
