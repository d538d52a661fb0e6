#!/usr/bin/env bash
# The GPU path with stage boundaries inside layers (split [0.5, 1, 0.5] over 2 layers: layer
# 0's attention half with the embedding, layer 0's MLP half and layer 1's attention half, then
# layer 1's MLP half with the head; three fake GPUs, NCCL between them, 1F1B, fp32 and bf16):
# it trains as the CPU path of the same program (tests/e2e/half_layers.sh shows the CPU path
# equal to one stage), to cuda_fake.sh's tolerances. Skips where tests/cuda_emu cannot run
# (need_cuda_emu).
source tests/e2e/lib.sh
need_cuda_emu
export PACIC_CACHE=$work/cache

# halves NAME PRECISION: the 2-layer model over 3 stages, split [0.5, 1, 0.5], with its fake CUDA stack.
halves() {
    small_model "$1" 3 1f1b 2 4 2
    sed -i -e "s/^train {/train {\n    precision $2/" -e "s/layers 4;/layers 2;/" \
        -e "s/^pipeline { \(.*\) }$/pipeline { \1; split [0.5, 1, 0.5] }/" "$work/$1.paci"
    grep -qF "split [0.5, 1, 0.5]" "$work/$1.paci" || fail "split edit did not apply"
    fake_build "$1"
}

# on NAME DIR [run flags...]: runs NAME's program in $work/NAME/DIR on 3 fake GPUs.
on() {
    local name=$1 dir=$2
    shift 2
    mkdir -p "$work/$name/$dir"
    (cd "$work/$name/$dir" && LD_LIBRARY_PATH=$work/$name/lib FAKE_CUDA_GPUS=3 \
        ../run --quiet --threads 1 --metrics metrics.jsonl "$@" 2> err.txt) ||
        { cat "$work/$name/$dir/err.txt" >&2; return 1; }
}

halves fp32 fp32
on fp32 cuda --device cuda || fail "fp32: --device cuda"
on fp32 cpu --device cpu || fail "fp32: --device cpu"
compare_devices "[0.5, 1, 0.5] fp32, three GPUs" "$work/fp32/cuda" "$work/fp32/cpu" 1e-5 1e-4
halves bf16 bf16
on bf16 cuda --device cuda || fail "bf16: --device cuda"
on bf16 cpu --device cpu || fail "bf16: --device cpu"
compare_devices "[0.5, 1, 0.5] bf16, three GPUs" "$work/bf16/cuda" "$work/bf16/cpu" 1e-2 2e-2
