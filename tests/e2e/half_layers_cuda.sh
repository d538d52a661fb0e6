#!/usr/bin/env bash
# The GPU path with stages that hold part of the model only: split [0, 0.5, 1.5, 0] over 2
# layers is an embedding-only stage, layer 0's attention half alone, layer 0's MLP half with
# layer 1, and a head-only stage (four fake GPUs, NCCL between them, 1F1B, fp32 and bf16). It
# trains as the CPU path of the same program (tests/e2e/half_layers.sh and end_stages.sh show
# the CPU path equal to one stage), to cuda_fake.sh's tolerances; and [0.25, 1.5, 0.25, 0],
# cut after layer 0's attention kernel and after layer 1's fc product, alike. Skips where
# tests/cuda_emu
# cannot run (need_cuda_emu).
source tests/e2e/lib.sh
need_cuda_emu
export PACIC_CACHE=$work/cache

fake_split_devices "[0, 0.5, 1.5, 0]"
# and both cuts inside a layer: layer 0's att piece with the embedding; its proj piece, MLP half
# and layer 1 up to its fc product; layer 1's GELU piece; the head alone
fake_split_devices "[0.25, 1.5, 0.25, 0]" cuts-

# replicas_train_as_cpu NAME SPLIT STAGE0 STAGE1 WHAT: `parallel { data 2 }` at p = 2 with
# `split SPLIT`, as four processes with a fake GPU each, trains as the CPU runs the same program
# with its replicas as threads, with STAGE0 and STAGE1 allreduces over its 6 steps (a range of
# gradients each as the window's last backward finishes it, and the step's one for the loss).
replicas_train_as_cpu() {
    port=$((port + 1))
    fake_replicas_model "$1" "$2"
    fake_replicas_run "$1"
    compare_devices "$2, data 2 x 2 stages, four GPUs" "$work/$1/joined" "$work/$1/cpu" 1e-5 1e-4
    expect_allreduces "$1" "$3" "$4"
    echo "data 2 with split $2 on four fake GPUs: an allreduce per range, $5; trains as the CPU"
}

# Halves, [1.5, 0.5]: stage 0 reports layer 1's attention half, layer 0 and the embeddings
# (3 ranges + the loss), stage 1 the head and layer 1's MLP half (2 + 1).
replicas_train_as_cpu dp "[1.5, 0.5]" 24 18 "halves included"
# A cut after the fc product, [1.75, 0.25]: stage 0 reports layer 1's fc piece, its attention
# half, layer 0 and the embeddings apart (4 + 1), stage 1 the head and layer 1's GELU piece.
replicas_train_as_cpu dpfc "[1.75, 0.25]" 30 18 "the fc piece's apart"
# A cut after attention, [1.25, 0.75]: stage 0 reports layer 1's att piece, layer 0 and the
# embeddings apart (3 + 1), stage 1 the head, layer 1's MLP half and its proj piece (3 + 1).
replicas_train_as_cpu dpatt "[1.25, 0.75]" 24 24 "the proj piece's apart"
