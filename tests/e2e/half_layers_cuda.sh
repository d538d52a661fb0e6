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

# Data parallelism with halves: `parallel { data 2 }` at p = 2, split [1.5, 0.5], as four
# processes with a fake GPU each. The window's last backward starts an allreduce per range of
# gradients as it finishes them, halves included (stage 0: layer 1's attention half, layer 0,
# the embeddings; stage 1: the head, layer 1's MLP half), and the step one for the loss: it
# must train as the CPU runs the same program with its replicas as threads.
small_model dp 2 1f1b 2 6 3
sed -i -e "s/^train {/train {\n    attention flash/" -e "s/layers 4;/layers 2;/" \
    -e "s/^pipeline { \(.*\) }$/pipeline { \1; split [1.5, 0.5] }/" "$work/dp.paci"
grep -qF "split [1.5, 0.5]" "$work/dp.paci" || fail "split edit did not apply"
echo "parallel { data 2 }" >> "$work/dp.paci"
fake_build dp
mkdir -p "$work/dp/cpu"
(cd "$work/dp/cpu" && ../run --quiet --device cpu --metrics metrics.jsonl) || fail "data 2: --device cpu"
pids=()
for r in 0 1 2 3; do
    mkdir -p "$work/dp/rank$r"
    (cd "$work/dp/rank$r" && RANK=$r LOCAL_RANK=$r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        LD_LIBRARY_PATH=$work/dp/lib FAKE_CUDA_GPUS=4 FAKE_CUDA_REPORT=1 FAKE_CUDA_JITTER_US=300 \
        ../run --quiet --device cuda --metrics metrics.jsonl --connect-timeout 60 2> err.txt) &
    pids+=($!)
done
for r in 0 1 2 3; do
    wait "${pids[$r]}" || { cat "$work/dp/rank$r/err.txt" >&2; fail "data 2: rank $r"; }
done
mkdir -p "$work/dp/joined"
cp "$work/dp/rank1/metrics.jsonl" "$work/dp/joined/metrics.jsonl"
cp -r "$work/dp/rank0/ckpt" "$work/dp/joined/ckpt"
compare_devices "[1.5, 0.5], data 2 x 2 stages, four GPUs" "$work/dp/joined" "$work/dp/cpu" 1e-5 1e-4
for r in 0 1 2 3; do
    reduces=$(sed -n 's/^fake cuda: calls:.* ncclAllReduce \([0-9]*\).*/\1/p' "$work/dp/rank$r/err.txt" | head -n 1)
    want=$(( r % 2 == 0 ? 24 : 18 )) # 6 steps: (3 ranges + the loss) on stage 0, (2 + 1) on stage 1
    [ "${reduces:-0}" = "$want" ] || fail "rank $r: ${reduces:-no} ncclAllReduce calls, $want expected"
done
echo "data 2 with split [1.5, 0.5] on four fake GPUs: an allreduce per range, halves included; trains as the CPU"
