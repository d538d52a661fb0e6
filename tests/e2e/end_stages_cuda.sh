#!/usr/bin/env bash
# The GPU path with an embedding-only first stage and a head-only last stage (split
# [0, 2, 0], three fake GPUs, NCCL between them, 1F1B, fp32 and bf16): it trains as the CPU
# path of the same program (tests/e2e/end_stages.sh shows the CPU path equal to one stage),
# to cuda_fake.sh's tolerances. Skips where tests/cuda_emu cannot run (need_cuda_emu).
source tests/e2e/lib.sh
need_cuda_emu
export PACIC_CACHE=$work/cache

fake_split_devices "[0, 2, 0]"
