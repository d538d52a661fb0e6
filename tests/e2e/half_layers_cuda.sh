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

# Data parallelism with halves: `parallel { data 2 }` at p = 2, split [1.5, 0.5], as four
# processes with a fake GPU each. The window's last backward starts an allreduce per range of
# gradients as it finishes them, halves included (stage 0: layer 1's attention half, layer 0,
# the embeddings; stage 1: the head, layer 1's MLP half), and the step one for the loss: it
# must train as the CPU runs the same program with its replicas as threads.
fake_replicas_model dp "[1.5, 0.5]"
fake_replicas_run dp
compare_devices "[1.5, 0.5], data 2 x 2 stages, four GPUs" "$work/dp/joined" "$work/dp/cpu" 1e-5 1e-4
# 6 steps: (3 ranges + the loss) on stage 0, (2 + 1) on stage 1
expect_allreduces dp 24 18
echo "data 2 with split [1.5, 0.5] on four fake GPUs: an allreduce per range, halves included; trains as the CPU"

# The same with a cut after the fc product, [1.75, 0.25]: stage 0 reports layer 1's fc piece,
# its attention half, layer 0 and the embeddings apart, stage 1 the head and layer 1's GELU piece.
port=$((port + 1))
fake_replicas_model dpfc "[1.75, 0.25]"
fake_replicas_run dpfc
compare_devices "[1.75, 0.25], data 2 x 2 stages, four GPUs" "$work/dpfc/joined" "$work/dpfc/cpu" 1e-5 1e-4
# 6 steps: (4 ranges + the loss) on stage 0, (2 + 1) on stage 1
expect_allreduces dpfc 30 18
echo "data 2 with split [1.75, 0.25] on four fake GPUs: an allreduce per range, the fc piece's apart; trains as the CPU"

# And a cut after attention, [1.25, 0.75]: stage 0 reports layer 1's att piece, layer 0 and the
# embeddings apart, stage 1 the head, layer 1's MLP half and its proj piece.
port=$((port + 1))
fake_replicas_model dpatt "[1.25, 0.75]"
fake_replicas_run dpatt
compare_devices "[1.25, 0.75], data 2 x 2 stages, four GPUs" "$work/dpatt/joined" "$work/dpatt/cpu" 1e-5 1e-4
# 6 steps: (3 ranges + the loss) on each stage
expect_allreduces dpatt 24 24
echo "data 2 with split [1.25, 0.75] on four fake GPUs: an allreduce per range, the proj piece's apart; trains as the CPU"
