#!/usr/bin/env bash
# Virtual stages on the GPU path (runtime/cuda/ on the fake CUDA stack, tests/cuda_fake): stage
# s lives on its device's GPU (stage_device), a link between GPUs goes over NCCL and a
# hand-over inside one GPU is a device link. `interleaved` (chunks 2, loop: GPU 1's stage 1
# sends to GPU 0's stage 2) and `zb-v` (chunks 2, V: stages 1 and 2 both on GPU 1) at p = 2
# devices train as one stage on one GPU does, to the bit (losses, clipping norms, weights),
# and as the CPU path of the same program to cuda_fake.sh's tolerances. The fake stack counts
# the NCCL sends: one per message between GPUs, none for the V's hand-over inside GPU 1.
source tests/e2e/lib.sh
need_cuda_emu
export PACIC_CACHE=$work/cache

# fake_chunks NAME STAGES SCHEDULE: the small model with 4 layers, window 2, 4 steps, an
# evaluation at step 2, its fake CUDA stack.
fake_chunks() {
    small_model "$1" "$2" "$3" 2 4 2
    fake_build "$1"
}

# weights_and_norms DIR: the losses, norms and final weights of a run in DIR, for cmp.
weights_and_norms() {
    sed -n 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2/p' "$1/metrics.jsonl"
    md5sum < "$(ls -d "$1"/ckpt/step_* | tail -n 1)/model.bin"
}

# gpus N NAME DIR [run flags...]: NAME's program in $work/NAME/DIR on N fake GPUs, with the
# fake stack's call counts in DIR/err.txt and a time limit (a hang fails).
gpus() {
    local n=$1 name=$2 dir=$3
    shift 3
    mkdir -p "$work/$name/$dir"
    (cd "$work/$name/$dir" && LD_LIBRARY_PATH=$work/$name/lib FAKE_CUDA_GPUS=$n FAKE_CUDA_REPORT=1 \
        timeout 600 ../run --quiet --threads 1 --metrics metrics.jsonl "$@" 2> err.txt) ||
        { cat "$work/$name/$dir/err.txt" >&2; fail "$name on $n fake GPUs ($dir)"; }
}
# calls NAME DIR WHAT: how many times the fake stack counted WHAT in that run (0 if never).
calls() {
    sed -n "s/^fake cuda: calls:.* $3 \([0-9]*\).*/\1/p" "$work/$1/$2/err.txt" | head -n 1 | grep . || echo 0
}

fake_chunks one 1 gpipe
gpus 1 one cuda --device cuda
reference=$(weights_and_norms "$work/one/cuda")
[ "$(echo "$reference" | wc -l)" = 5 ] || fail "one stage: expected 4 logged steps and the weights"
# NCCL sends: a message between GPUs is two (its floats, its micro-batch), and each link warms
# up with one; 4 steps of window 2, both directions. Loop's 3 pairs of stages all cross GPUs:
# 3 x 2 x 2 x 4 = 48 messages, 96 + 6 sends; the V's 2 of 3 (stages 1 and 2 share GPU 1):
# 32 messages, 64 + 4 sends.
for case in "interleaved 102" "zb-v 68"; do
    set -- $case
    fake_chunks "$1" 2 "$1"
    gpus 2 "$1" cuda --device cuda
    [ "$(weights_and_norms "$work/$1/cuda")" = "$reference" ] ||
        fail "$1 on 2 GPUs: losses, norms or weights differ from one stage on one GPU"
    [ "$(calls "$1" cuda "context created")" = 2 ] || fail "$1: expected both GPUs in use"
    [ "$(calls "$1" cuda ncclSend)" = "$2" ] || fail "$1: $(calls "$1" cuda ncclSend) NCCL sends, expected $2"
    gpus 2 "$1" cpu --device cpu
    compare_devices "$1, 2 GPUs" "$work/$1/cuda" "$work/$1/cpu" 1e-5 1e-4
    echo "$1 (2 chunks on each of 2 fake GPUs, $2 NCCL sends): one stage's bits on one GPU; the CPU path's to 1e-5"
done
