#!/usr/bin/env bash
# Virtual stages (issue 37): a device runs several stages of the model. Under `interleaved`
# (chunks 2 and 3, loop placement) and `zb-v` (chunks 2, V placement) at p = 4 devices with an
# uneven split, training equals one stage to the bit over 20 steps (weights, optimizer state,
# losses, clipping norms):
#   - as threads in one process (one thread a device; the loop placement links device 3 to
#     device 0, the V placement hands over inside device 3, stages 3 and 4);
#   - as one process per device over TCP (torchrun-style variables), the threaded run's bits;
#   - stopped at step 10 and resumed, the unbroken run's bits;
# a resume with another chunk count or placement is refused naming both, the checkpoints left
# as they were (but the lock, which every run takes); sampling draws one stage's text;
# replicas (data 2), as threads and as
# processes, equal one stage's replicas; --trace draws one row a device and names each event's
# stage.
# tier: check
source tests/e2e/lib.sh

# chunked NAME STAGES SCHEDULE CHUNKS SPLIT: the small model with 12 layers, window 4, 20
# steps, a checkpoint every 10, `chunks CHUNKS` (none when 0) and `split SPLIT` (none when "").
chunked() {
    small_model "$1" "$2" "$3" 4 20 0 10
    sed -i "s/layers 4;/layers 12;/" "$work/$1.paci"
    [ "$4" = 0 ] || with_pipeline "$1" "chunks $4"
    [ -z "$5" ] || set_split "$1" "$5"
}

# same A B: A's and B's step-20 checkpoints hold the same bits (model.bin; state.bin but the
# schedule and stage count in its header, int64 fields 8 and 9) and their metrics the same
# losses and clipping norms.
same() {
    local a=$work/$1/ckpt/step_00000020 b=$work/$2/ckpt/step_00000020
    cmp -s "$a/model.bin" "$b/model.bin" &&
        cmp -s -n 64 "$a/state.bin" "$b/state.bin" &&
        cmp -s -i 80 "$a/state.bin" "$b/state.bin" &&
        [ "$(norms "$1")" = "$(norms "$2")" ]
}
# run_bounded NAME [run flags...]: train's work (compile, run in $work/NAME) with a time limit,
# so a run that hangs (a barrier waiting for a thread that never comes) fails instead.
run_bounded() {
    local name=$1
    shift
    mkdir -p "$work/$name"
    [ -x "$work/$name/run" ] || "$pacic" "$work/$name.paci" -o "$work/$name/run"
    (cd "$work/$name" && timeout -k 10 600 ./run --quiet --metrics metrics.jsonl "$@") || fail "$name: run failed or hung ($?)"
}
# norms NAME: each step's loss and clipping norm, from $work/NAME/metrics.jsonl.
norms() {
    sed -n 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2/p' "$work/$1/metrics.jsonl"
}

chunked one 1 gpipe 0 ""
run_bounded one --blas-threads 1
[ "$(norms one | wc -l)" = 20 ] || fail "expected 20 logged steps"
chunked il2 4 interleaved 2 "[0, 2, 1, 2, 1, 2, 3, 1]"
chunked il3 4 interleaved 3 "[0, 1, 1, 2, 1, 1, 1, 1, 1, 1, 2, 0]"
chunked zbv 4 zb-v 0 "[1, 2, 1, 1, 2, 1, 3, 1]"
for name in il2 il3 zbv; do
    run_bounded $name --blas-threads 1
    same one $name || fail "$name: weights, optimizer state, losses or norms differ from one stage"
done
echo "interleaved (chunks 2, 3) and zb-v at 4 devices, uneven splits, as threads: one stage's bits over 20 steps"
# Sampling goes through the stages one after another: the same weights draw the same text.
one_text=$(cd "$work/one" && timeout -k 10 600 ./run --quiet --sample 64 --seed 7 | od -c)
[ "$(echo "$one_text" | wc -l)" -ge 5 ] || fail "one stage: --sample 64 printed too little: $one_text"
for name in il2 zbv; do
    [ "$(cd "$work/$name" && timeout -k 10 600 ./run --quiet --sample 64 --seed 7 | od -c)" = "$one_text" ] ||
        fail "$name: --sample 64 --seed 7 draws other text than one stage"
done
echo "--sample 64 --seed 7 from il2's and zb-v's checkpoints: one stage's text"

# The comparison can fail: the same model under another window trains otherwise.
small_model w2 1 gpipe 2 20 0 10
sed -i "s/layers 4;/layers 12;/" "$work/w2.paci"
run_bounded w2 --blas-threads 1
same one w2 && fail "window 2 and window 4 gave the same bits: the comparison is blind"

# ranks NAME P: NAME's program as P processes on loopback, in $work/NAME-mp/rankR.
ranks() {
    local name=$1 p=$2 pids=() r rc=0
    port=$((port + 1))
    for ((r = 0; r < p; r++)); do
        mkdir -p "$work/$name-mp/rank$r"
        (cd "$work/$name-mp/rank$r" && RANK=$r WORLD_SIZE=$p MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            timeout -k 10 600 "$work/$name/run" --quiet --blas-threads 1 --metrics metrics.jsonl --connect-timeout 60 \
            --peer-timeout 120 >out.txt 2>err.txt) &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    return $rc
}
# The last stage runs on device 3 under loop, on device 0 under V: that rank logs the losses.
for case in "il2 3" "il3 3" "zbv 0"; do
    set -- $case
    ranks "$1" 4 || { cat "$work/$1-mp"/rank*/err.txt >&2; fail "$1 over 4 processes: a rank failed"; }
    cmp -s "$work/$1/ckpt/step_00000020/model.bin" "$work/$1-mp/rank0/ckpt/step_00000020/model.bin" &&
        cmp -s "$work/$1/ckpt/step_00000020/state.bin" "$work/$1-mp/rank0/ckpt/step_00000020/state.bin" ||
        fail "$1 over 4 processes: weights or optimizer state differ from the threaded run's"
    mkdir -p "$work/$1-last" && cp "$work/$1-mp/rank$2/metrics.jsonl" "$work/$1-last/"
    [ "$(norms "$1")" = "$(norms "$1-last")" ] || fail "$1 over 4 processes: losses or norms differ"
done
echo "il2, il3, zb-v as 4 processes (TCP links, device 3 -> device 0 under loop): the threaded runs' bits"

# Stopped at step 10, resumed: the unbroken run's bits.
for name in il2 zbv; do
    mkdir -p "$work/$name-resumed"
    cp "$work/$name/run" "$work/$name-resumed/"
    (cd "$work/$name-resumed" && timeout -k 10 600 ./run --quiet --blas-threads 1 --steps 10)
    (cd "$work/$name-resumed" && timeout -k 10 600 ./run --quiet --blas-threads 1 --resume --metrics resumed.jsonl)
    for f in model.bin state.bin; do
        cmp -s "$work/$name/ckpt/step_00000020/$f" "$work/$name-resumed/ckpt/step_00000020/$f" ||
            fail "$name: $f after a resume at step 10 differs from the unbroken run's"
    done
    [ "$(norms "$name" | tail -10)" = "$(sed -n 's/.*"loss": \([^,]*\),.*"grad_norm": \([^,]*\),.*/\1 \2/p' \
        "$work/$name-resumed/resumed.jsonl")" ] || fail "$name: losses of steps 11..20 differ after the resume"
done
echo "il2, zb-v: 10 steps, resume, 10 steps == 20 unbroken (weights, optimizer state, losses, norms)"

# A resume with another chunk count (il3's program on il2's checkpoints) or another placement
# (zb-v's V on il2's loop) is refused, naming both; nothing in the folder changes.
mkdir -p "$work/refused"
cp -r "$work/il2-resumed/ckpt" "$work/refused/"
before=$(cd "$work/refused" && find ckpt -type f ! -name lock | sort | xargs md5sum)
for other in il3 zbv; do
    out=$(cd "$work/refused" && "$work/$other/run" --quiet --resume 2>&1) && fail "$other resumed il2's checkpoint"
    case $other in
        il3) want="written by a run of 2 chunks a device in placement loop, the program runs 3 in placement loop" ;;
        zbv) want="written by a run of 2 chunks a device in placement loop, the program runs 2 in placement v" ;;
    esac
    [[ "$out" == *"$want"* ]] || fail "$other on il2's checkpoint: unexpected message: $out"
    [ "$(cd "$work/refused" && find ckpt -type f ! -name lock | sort | xargs md5sum)" = "$before" ] ||
        fail "$other's refused resume changed the checkpoint folder"
done
echo "a resume with chunks 3 or placement v on a chunks 2, loop checkpoint: refused, the folder untouched"
echo "  $out"

# Replicas: interleaved with data 2 trains as one stage with data 2, to the bit, as threads
# and as 8 processes (4 devices x 2 replicas, the device's stages reduced over its one TCP
# socket, one after another).
chunked one-d2 1 gpipe 0 ""
chunked il2-d2 4 interleaved 2 "[0, 2, 1, 2, 1, 2, 3, 1]"
for name in one-d2 il2-d2; do
    echo "parallel { data 2 }" >> "$work/$name.paci"
    run_bounded $name --blas-threads 1
done
same one-d2 il2-d2 || fail "il2 with data 2: differs from one stage with data 2"
ranks il2-d2 8 || { cat "$work/il2-d2-mp"/rank*/err.txt >&2; fail "il2 with data 2 over 8 processes: a rank failed"; }
cmp -s "$work/il2-d2/ckpt/step_00000020/model.bin" "$work/il2-d2-mp/rank0/ckpt/step_00000020/model.bin" &&
    cmp -s "$work/il2-d2/ckpt/step_00000020/state.bin" "$work/il2-d2-mp/rank0/ckpt/step_00000020/state.bin" ||
    fail "il2 with data 2 over 8 processes: weights or optimizer state differ from the threaded run's"
mkdir -p "$work/il2-d2-last" && cp "$work/il2-d2-mp/rank3/metrics.jsonl" "$work/il2-d2-last/"
[ "$(norms il2-d2)" = "$(norms il2-d2-last)" ] || fail "il2 with data 2 over 8 processes: losses or norms differ"
echo "interleaved with data 2: one stage with data 2's bits, as threads and as 8 processes"
# With compression dgc (whose state is one stage's) as processes: refused before anything runs.
chunked il2-dgc 4 interleaved 2 ""
echo "parallel { data 2; compression dgc { density 0.01 } }" >> "$work/il2-dgc.paci"
mkdir -p "$work/il2-dgc" && "$pacic" "$work/il2-dgc.paci" -o "$work/il2-dgc/run"
out=$(cd "$work/il2-dgc" && RANK=0 WORLD_SIZE=8 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout -k 10 60 ./run --quiet 2>&1) &&
    fail "il2 with compression dgc ran as processes"
[ "$out" = "run: error: rank 0: $work/il2-dgc.paci: 2 chunks a device with parallel { data 2 } and compression dgc run as threads of one process only, for now" ] ||
    fail "il2 with compression dgc as processes: unexpected message: $out"
echo "with compression dgc as processes: refused ($out)"

# --trace: a row a device (4), each event naming its stage (8).
(cd "$work/il2" && timeout -k 10 600 ./run --quiet --blas-threads 1 --steps 2 --ckpt-dir traced --trace trace.json)
rows=$(grep -o '"name": "device [0-9]*"' "$work/il2/trace.json" | sort -u | wc -l)
stages=$(grep -o '"stage": [0-9]*' "$work/il2/trace.json" | sort -u | wc -l)
[ "$rows" = 4 ] && [ "$stages" = 8 ] || fail "--trace: $rows device rows and $stages stages, expected 4 and 8"
echo "--trace: 4 device rows, events of 8 stages"
