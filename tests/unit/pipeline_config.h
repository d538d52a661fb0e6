/* pipeline_config.h: the Config the schedule, simulation and link tests build by hand (no
 * DSL): a small GPT-2 where only the pipeline's numbers matter. Included by tests only. */
#ifndef PIPELINE_CONFIG_H
#define PIPELINE_CONFIG_H

#include "pacic.h"

/* The schedules that run one stage a device: every kind before interleaved (those with chunks,
 * interleaved and zb-v, come last; test_chunks.c tests them). */
enum { ONE_STAGE_SCHEDULES = PACI_SCHED_INTERLEAVED };
_Static_assert(PACI_SCHED_ZBV == PACI_SCHED_COUNT - 1, "the schedules with chunks come last");

static inline Config pipeline_config(int kind, int stages, int window, long steps, int layers)
{
    Config cfg = {0};
    cfg.layers = layers;
    cfg.width = 64;
    cfg.heads = 4;
    cfg.context = 32;
    cfg.vocab = 256;
    cfg.stages = stages;
    cfg.schedule = kind;
    cfg.window = window;
    cfg.micro = 2;
    cfg.global_batch = 2L * window;
    cfg.steps = steps;
    cfg.precision = PREC_FP32;
    cfg.device_flops = 1e12;
    cfg.link_bandwidth = 1e9;
    cfg.device_memory = 1e15;
    cfg.memory_bandwidth = 3.35e12;
    return cfg;
}

#endif
