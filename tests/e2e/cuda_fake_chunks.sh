#!/usr/bin/env bash
# Virtual stages on the GPU path (runtime/cuda/ on the fake CUDA stack, tests/cuda_fake): stage
# s lives on its device's GPU (stage_device), a link between GPUs goes over NCCL and a
# hand-over inside one GPU is a device link. `interleaved` (chunks 2, loop: GPU 1's stage 1
# sends to GPU 0's stage 2) and `zb-v` (chunks 2, V: stages 1 and 2 both on GPU 1) at p = 2
# devices (and at p = 4, below) train as one stage on one GPU does, to the bit (losses, clipping norms, weights),
# and as the CPU path of the same program to cuda_fake.sh's tolerances, in one process (a
# thread a device) and as one process per device (NCCL between the processes, the V's
# hand-over a device link inside rank 1); with data 2, as one stage with data 2 does. The fake stack counts the NCCL sends: one per
# message between GPUs, none for the hand-over.
source tests/e2e/lib.sh
need_cuda_emu
export PACIC_CACHE=$work/cache

# unclipped NAME: clip 100 in NAME's file: the norm never clips, so no step taken on trust is
# rolled back (post-validation, the default) and the NCCL sends counted below are exactly the
# schedule's messages (a rollback sends its window's again; rollbacks with chunks are
# chunks.sh's).
unclipped() {
    sed -i "s/clip 0.5 }/clip 100 }/" "$work/$1.paci"
    grep -q "clip 100 }" "$work/$1.paci" || fail "edit of $1 did not apply"
}

# fake_chunks NAME STAGES SCHEDULE: the small model with 4 layers, window 2, 4 steps, an
# evaluation at step 2, unclipped, its fake CUDA stack.
fake_chunks() {
    small_model "$1" "$2" "$3" 2 4 2
    unclipped "$1"
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
        timeout -k 10 600 ../run --quiet --threads 1 --metrics metrics.jsonl "$@" 2> err.txt) ||
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

# At p = 4 devices (8 layers cut into 8 stages, unevenly, half layers and a cut after the fc
# product included, a GELU piece alone on stage 1; window 4, a
# multiple of p as interleaved needs): interleaved's 7 links all cross GPUs (7 x 2 x 4 x 4 = 224
# messages, 448 + 14 sends), zb-v's 6 of 7 (stages 3 and 4 share GPU 3: 192 messages, 384 + 12).
small_model one8 1 gpipe 4 4 2
unclipped one8
sed -i "s/layers 4;/layers 8;/" "$work/one8.paci"
fake_build one8
gpus 1 one8 cuda --device cuda
reference8=$(weights_and_norms "$work/one8/cuda")
[ "$(echo "$reference8" | wc -l)" = 5 ] || fail "one stage of 8 layers: expected 4 logged steps and the weights"
for case in "interleaved 462" "zb-v 396"; do
    set -- $case
    small_model "$1-p4" 4 "$1" 4 4 2
    unclipped "$1-p4"
    sed -i "s/layers 4;/layers 8;/" "$work/$1-p4.paci"
    set_split "$1-p4" "[1.75, 0.25, 1, 1.5, 0.5, 2, 0.5, 0.5]"
    fake_build "$1-p4"
    gpus 4 "$1-p4" cuda --device cuda
    [ "$(weights_and_norms "$work/$1-p4/cuda")" = "$reference8" ] ||
        fail "$1 on 4 GPUs: losses, norms or weights differ from one stage on one GPU"
    [ "$(calls "$1-p4" cuda ncclSend)" = "$2" ] || fail "$1 on 4 GPUs: $(calls "$1-p4" cuda ncclSend) NCCL sends, expected $2"
    echo "$1 (4 fake GPUs x 2 chunks, split [1.75, 0.25, 1, 1.5, 0.5, 2, 0.5, 0.5], $2 NCCL sends): one stage's bits on one GPU"
done

# procs NAME N DIR: NAME's program as N processes on N fake GPUs (the local rank picks the
# GPU), in $work/NAME/DIR/rankR.
procs() {
    local name=$1 n=$2 dir=$3 r pids=()
    port=$((port + 1))
    for ((r = 0; r < n; r++)); do
        mkdir -p "$work/$name/$dir/rank$r"
        (cd "$work/$name/$dir/rank$r" && RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            LD_LIBRARY_PATH=$work/$name/lib FAKE_CUDA_GPUS=$n FAKE_CUDA_REPORT=1 FAKE_CUDA_JITTER_US=300 \
            timeout -k 10 600 ../../run --quiet --threads 1 --device cuda --metrics metrics.jsonl \
            --connect-timeout 60 --peer-timeout 120 2> err.txt) &
        pids+=($!)
    done
    for ((r = 0; r < n; r++)); do
        wait "${pids[$r]}" || { cat "$work/$name/$dir/rank$r/err.txt" >&2; fail "$name: rank $r of $n processes"; }
    done
}

# One process per device, a GPU each: the one-process run's bits.
for case in "interleaved 1" "zb-v 0"; do
    set -- $case
    procs "$1" 2 mp
    # the rank of the last stage's device logs the losses (device 1 under loop, 0 under V);
    # rank 0 holds the checkpoint
    mkdir -p "$work/$1/joined"
    cp "$work/$1/mp/rank$2/metrics.jsonl" "$work/$1/joined/"
    cp -r "$work/$1/mp/rank0/ckpt" "$work/$1/joined/"
    [ "$(weights_and_norms "$work/$1/joined")" = "$reference" ] ||
        fail "$1 as 2 processes on 2 GPUs: losses, norms or weights differ from one stage on one GPU"
    sends=$(( $(calls "$1" mp/rank0 ncclSend) + $(calls "$1" mp/rank1 ncclSend) ))
    [ "$sends" = "$(calls "$1" cuda ncclSend)" ] || fail "$1: $sends NCCL sends as 2 processes, $(calls "$1" cuda ncclSend) in one"
    echo "$1 as 2 processes, a fake GPU each ($sends NCCL sends): one stage's bits on one GPU"
done

# Replicas (data 2): interleaved as 4 processes (2 devices x 2 replicas; a device's two stages
# reduce one after another in its NCCL group) trains as one stage with data 2 as 2 processes.
for name in one-d2 il-d2; do
    case $name in
        one-d2) small_model $name 1 gpipe 2 4 2 ;;
        il-d2) small_model $name 2 interleaved 2 4 2 ;;
    esac
    echo "parallel { data 2 }" >> "$work/$name.paci"
    fake_build $name
done
procs one-d2 2 mp
procs il-d2 4 mp
mkdir -p "$work/one-d2/joined" "$work/il-d2/joined"
cp "$work/one-d2/mp/rank0/metrics.jsonl" "$work/one-d2/joined/" && cp -r "$work/one-d2/mp/rank0/ckpt" "$work/one-d2/joined/"
cp "$work/il-d2/mp/rank1/metrics.jsonl" "$work/il-d2/joined/" && cp -r "$work/il-d2/mp/rank0/ckpt" "$work/il-d2/joined/"
[ "$(weights_and_norms "$work/il-d2/joined")" = "$(weights_and_norms "$work/one-d2/joined")" ] ||
    fail "interleaved with data 2 as 4 processes: losses, norms or weights differ from one stage with data 2"
[ "$(calls il-d2 mp/rank1 ncclAllReduce)" -gt 0 ] || fail "interleaved with data 2: rank 1 reduced nothing over NCCL"
echo "interleaved with data 2 as 4 processes on 4 fake GPUs: one stage with data 2's bits ($(calls il-d2 mp/rank1 ncclAllReduce) allreduces on rank 1)"
