#!/usr/bin/env bash
# `recompute full` on the real GPU layer without a GPU (the fake CUDA stack of
# tests/cuda_fake, as tests/e2e/cuda_fake.sh runs it): the slots' inputs, the workspace copies
# and the rerun forwards go through the device table on memory the host cannot read. From
# the same seed, --device cuda trains as --device cpu (cuda_fake.sh's tolerances), for PACI
# on three stages on one GPU (device links) and on three GPUs (NCCL), and PipeDream on one
# (its reruns read the stashed weights); and the GPU run reports the effective drift 0.
# Skips (exit 77) where tests/cuda_emu cannot run (need_cuda_emu) or pacic writes no stages.cu.
source tests/e2e/lib.sh
need_cuda_emu
export PACIC_CACHE=$work/cache
LOSS_TOL=1e-5
WEIGHT_TOL=1e-4

# model NAME SCHEDULE: 3 stages (embedding, one layer, head), 4 steps, recompute full, with
# its fake CUDA stack; the emulated kernels dominate the test's time.
model() {
    small_model "$1" 3 "$2" 2 4
    sed -i -e "s/layers 4;/layers 1;/" -e "s/window 2 }/window 2; split [0, 1, 0]; recompute full }/" "$work/$1.paci"
    grep -q "recompute full" "$work/$1.paci" || fail "model edit did not apply to $1"
    fake_build "$1"
}

# on NAME DIR GPUS [run flags...]: runs NAME's program in $work/NAME/DIR on GPUS fake GPUs,
# its summary in DIR/out.txt.
on() {
    local name=$1 dir=$2 gpus=$3
    shift 3
    mkdir -p "$work/$name/$dir"
    (cd "$work/$name/$dir" && LD_LIBRARY_PATH=$work/$name/lib FAKE_CUDA_GPUS=$gpus \
        ../run --metrics metrics.jsonl "$@" > out.txt 2> err.txt) || { cat "$work/$name/$dir/err.txt" >&2; return 1; }
}

model paci paci
on paci cpu 1 --device cpu || fail "paci: --device cpu"
on paci cuda 1 --device cuda || fail "paci: --device cuda on one GPU"
compare_devices "paci, recompute full, 3 stages on one GPU" "$work/paci/cuda" "$work/paci/cpu" "$LOSS_TOL" "$WEIGHT_TOL"
on paci nccl 3 --device cuda || fail "paci: --device cuda on three GPUs"
compare_devices "paci, recompute full, 3 stages on three GPUs" "$work/paci/nccl" "$work/paci/cpu" "$LOSS_TOL" "$WEIGHT_TOL"
grep -q "^drift: stage 0 max 1 .* effective 0 (recomputed forward)" "$work/paci/cuda/out.txt" ||
    fail "paci on the GPU: expected effective drift 0 on stage 0: $(grep '^drift' "$work/paci/cuda/out.txt")"

