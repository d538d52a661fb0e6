#!/usr/bin/env bash
# compression dgc (runtime/replicas.c, tcp_dgc) with one process per stage and replica, on
# loopback, p = 2, 1f1b, window 2 (tests/e2e/dgc.sh has the threads' own checks):
#   - processes over TCP (torchrun-style variables) give the threaded run's bits at density
#     0.001 with warm-up and local clipping: AdamW (error feedback) at data 4, 8 processes, and
#     LARS (momentum correction, its velocities saved too) at data 2: losses, model.bin,
#     state.bin, and dgc.bin, which rank 0 gathers from every rank (the pairs are summed in
#     replica order everywhere: at data 4 another order gives other bits, at data 2 not);
#   - data 2 over TCP: density 1 is the dense exchange, bit for bit;
#   - data 2, density 0.001: every process killed with SIGKILL after the first checkpoint, then
#     all started again with --resume (each rank reads its own part of dgc.bin): the threaded
#     run's bits; and the resumed run's steps wrote at least 500x fewer bytes a step than dense
#     on every rank (counted by the transport where it writes: the head, and each pair list's
#     head and words), exactly the 32-byte head, the 16-byte list head and the list: 4 bytes
#     a block of 65536 and 4 a pair (lib.sh dgc_list_bytes);
#   - under mpirun (where run has MPI; MPI starts the processes, the pairs still go over TCP):
#     the threaded run's bits;
#   - a peer whose pair list says another count than the step's k (a shim corrupts it) is
#     refused with the count and the peer named, before a pair is read; one whose last pair's
#     16-bit offset lies past the stage, with the pair and its block named.
source tests/e2e/lib.sh
# Unoptimised programs (unless a sanitizer build sets its flags): the C compiler's -O3 would
# take most of this test's time, and both sides of each comparison run one binary.
export PACIC_CFLAGS=${PACIC_CFLAGS:--O0}

# dgc_program NAME D OPTIMIZER STEPS CKPT COMPRESSION: the small model, p = 2, window 2, data D,
# built into $work/NAME/run.
dgc_program() {
    small_model "$1" 2 1f1b 2 "$4" 0 "$5"
    sed -i "s/optimizer adamw { lr 3e-3; clip 0.5 }/optimizer $3/" "$work/$1.paci"
    echo "parallel { data $2${6:+; $6} }" >> "$work/$1.paci"
    build_quiet "$1"
}

# start_ranks NAME WORLD DIR [run flags...]: NAME's program as WORLD processes, rank R in
# DIR/rankR, all saving to and resuming from DIR/ckpt; their ids in $pids.
start_ranks() {
    local name=$1 world=$2 dir=$3 r
    shift 3
    port=$((port + 1))
    pids=()
    for ((r = 0; r < world; r++)); do
        mkdir -p "$dir/rank$r"
        (cd "$dir/rank$r" && exec env RANK=$r WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            "$work/$name/run" --quiet --blas-threads 1 --metrics metrics.jsonl --ckpt-dir ../ckpt \
            --connect-timeout 60 "$@" > out.txt 2> err.txt) &
        pids+=($!)
    done
}

# ranks NAME WORLD DIR [run flags...]: start_ranks, then waits for every rank; 1 if one failed.
ranks() {
    local pid rc=0
    start_ranks "$@"
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    [ $rc = 0 ] || cat "$3"/rank*/err.txt >&2
    return $rc
}

# same_bits A_CKPT B_CKPT STEP FILES...: the two checkpoint folders' FILES of STEP are equal.
same_bits() {
    local a=$1/step_$(printf %08d "$3") b=$2/step_$(printf %08d "$3") f
    shift 3
    for f in "$@"; do cmp -s "$a/$f" "$b/$f" || { echo "$f differs" >&2; return 1; }; done
}

# exchange DIR RANK: the bytes a step that rank's transport wrote (--metrics' last line).
exchange() { sed -n 's/.*"exchange_bytes_per_step": \[\([0-9]*\)\].*/\1/p' "$1/rank$2/metrics.jsonl"; }

# --- the threads' bits: AdamW at data 4 (8 processes), LARS at data 2 (4) -------------------
for case in "4 adamw { lr 3e-3; clip 0.5 }" "2 lars { lr 0.5; momentum 0.9 }"; do
    D=${case%% *} opt=${case#* }
    name=${opt%% *}-d$D
    dgc_program "$name" "$D" "$opt" 12 6 "compression dgc { density 0.001; warmup_steps 3; clip 1 }"
    run_quiet "$name" || fail "$name: the threaded run failed"
    ranks "$name" $((2 * D)) "$work/$name-tcp" || fail "$name: a rank of $((2 * D)) processes failed"
    for step in 6 12; do
        same_bits "$work/$name/ckpt" "$work/$name-tcp/ckpt" $step model.bin state.bin dgc.bin ||
            fail "$name: $((2 * D)) processes over TCP differ from the threads at step $step"
    done
    [ "$(losses "$name")" = "$(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$work/$name-tcp/rank1/metrics.jsonl")" ] ||
        fail "$name: the last stage of replica 0 logged other losses than the threaded run"
    echo "$name, density 0.001, warm-up 3: $((2 * D)) processes over TCP == threads (losses, model.bin, state.bin, dgc.bin)"
done

# --- data 2: density 1 over TCP is dense over TCP ----------------------------------------------
dgc_program dense 2 "adamw { lr 3e-3; clip 0.5 }" 16 4 ""
dgc_program full 2 "adamw { lr 3e-3; clip 0.5 }" 16 4 "compression dgc { density 1 }"
ranks dense 4 "$work/dense-tcp" || fail "dense: a rank of 4 processes failed"
ranks full 4 "$work/full-tcp" || fail "density 1: a rank of 4 processes failed"
same_bits "$work/dense-tcp/ckpt" "$work/full-tcp/ckpt" 16 model.bin state.bin ||
    fail "density 1 over TCP differs from dense over TCP"
echo "density 1 over TCP == dense over TCP (model.bin, state.bin)"

# --- SIGKILL every process after the first checkpoint, then --resume -------------------------------
dgc_program sparse 2 "adamw { lr 3e-3; clip 0.5 }" 16 4 "compression dgc { density 0.001 }"
run_quiet sparse || fail "sparse: the threaded run failed"
start_ranks sparse 4 "$work/killed"
until [ -f "$work/killed/ckpt/latest" ]; do
    kill -0 "${pids[0]}" 2>/dev/null || fail "rank 0 ended before its first checkpoint: $(cat "$work/killed/rank0/err.txt")"
    sleep 0.02
done
kill -KILL "${pids[@]}" 2>/dev/null || true
for pid in "${pids[@]}"; do { wait "$pid"; } 2>/dev/null || true; done
from=$(cat "$work/killed/ckpt/latest")
[ "$from" != step_00000016 ] || fail "the run ended before the kill: nothing to resume"
ranks sparse 4 "$work/killed" --resume || fail "the resume after SIGKILL failed"
same_bits "$work/sparse/ckpt" "$work/killed/ckpt" 16 model.bin state.bin dgc.bin ||
    fail "killed at $from and resumed: not the threaded run's bits"
echo "4 processes killed (SIGKILL) after $from, resumed: model.bin, state.bin, dgc.bin == threads"

# --- density 0.001 writes >= 500x fewer bytes a step than dense (the resumed run's steps) ----------
for r in 0 1 2 3; do
    dense_bytes=$(exchange "$work/dense-tcp" $r) sparse_bytes=$(exchange "$work/killed" $r)
    [ -n "$dense_bytes" ] && [ -n "$sparse_bytes" ] || fail "rank $r: no exchange_bytes_per_step in the metrics"
    [ $((dense_bytes)) -ge $((500 * sparse_bytes)) ] ||
        fail "rank $r: density 0.001 writes $sparse_bytes bytes a step against dense $dense_bytes: not 500x less"
    want=$((32 + 16 + $(dgc_list_bytes "$work/killed/ckpt/step_00000016/dgc.bin" 0.001 $((r % 2)))))
    [ "$sparse_bytes" = "$want" ] ||
        fail "rank $r: density 0.001 writes $sparse_bytes bytes a step, the heads and the list are $want"
    echo "rank $r (stage $((r % 2)) of replica $((r / 2))): a step writes $dense_bytes bytes dense," \
         "$sparse_bytes at density 0.001 ($((dense_bytes / sparse_bytes))x less; heads 48, list $((want - 48)))"
done

# --- mpirun: MPI starts the processes, the pairs go over TCP --------------------------------------
if command -v mpirun >/dev/null && [ -f "${PACI_BUILD:-build}/lib/pacic/libpacirt_mpi.a" ]; then
    mkdir -p "$work/sparse-mpi"
    (cd "$work/sparse-mpi" && unset MASTER_ADDR MASTER_PORT RANK WORLD_SIZE &&
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe \
        --mca btl_vader_single_copy_mechanism none -np 4 "$work/sparse/run" --quiet --blas-threads 1 \
        --connect-timeout 60 --master-port $((port + 50))) > "$work/mpi.txt" 2>&1 ||
        fail "sparse under mpirun failed: $(tail -5 "$work/mpi.txt")"
    same_bits "$work/sparse/ckpt" "$work/sparse-mpi/ckpt" 16 model.bin state.bin dgc.bin ||
        fail "mpirun's 4 processes differ from the threads"
    echo "mpirun -np 4 == threads (model.bin, state.bin, dgc.bin)"
else
    skip_part "no mpirun, or run was built without MPI: the mpirun case"
fi

# --- a corrupt pair count, or a corrupt pair, is refused, naming it and the peer ---------------------
${CC:-cc} -shared -fPIC -O1 -o "$work/corrupt_pairs.so" tests/e2e/corrupt_pairs.c -ldl
# corrupt_rank2 DIR VAR=VALUE: the sparse program as 4 processes, rank 2's lists corrupted by
# the shim (VAR: CORRUPT_PAIRS_COUNT or CORRUPT_PAIRS_OFFSET); rank 0's exit status in $rc.
corrupt_rank2() {
    local dir=$1 how=$2 r preload
    port=$((port + 1))
    pids=()
    for r in 0 1 2 3; do
        mkdir -p "$work/$dir/rank$r"
        preload=()
        [ $r != 2 ] || preload=("$how" LD_PRELOAD="$work/corrupt_pairs.so"
                                ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0")
        (cd "$work/$dir/rank$r" && exec env "${preload[@]}" RANK=$r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 \
            MASTER_PORT=$port "$work/sparse/run" --quiet --blas-threads 1 --no-checkpoint --peer-timeout 20 \
            --connect-timeout 60 > out.txt 2> err.txt) &
        pids+=($!)
    done
    rc=0
    wait "${pids[0]}" || rc=$?
    for r in 1 2 3; do { wait "${pids[$r]}"; } 2>/dev/null || true; done
}
corrupt_rank2 corrupt CORRUPT_PAIRS_COUNT=1099511627776
[ $rc = 1 ] || fail "rank 0 exited $rc on a corrupt pair count: $(cat "$work/corrupt/rank0/err.txt")"
line=$(tail -n 1 "$work/corrupt/rank0/err.txt")
grep -Eqx "run: error: stage 0 of replica 0 \(rank 0\): replica 1 of stage 0 \(rank 2\) sent a list of 1099511627776 pairs for replica 1, step 1's compression sends [0-9]+ \(corrupt, or another program\) \(the gradient reduction of step 1\)" <<< "$line" ||
    fail "unexpected message on a corrupt pair count: $(cat "$work/corrupt/rank0/err.txt")"
echo "corrupt count: $line"
# the rank that sent it then finds rank 0 gone, and says so
grep -q "the run is stuck on rank 0 (stage 0 of replica 0): its process is gone" "$work/corrupt/rank2/err.txt" ||
    fail "rank 2 after rank 0 refused its pairs: $(cat "$work/corrupt/rank2/err.txt")"
# the last pair's 16-bit offset past the stage (one block, smaller than 65536)
corrupt_rank2 corrupt-offset CORRUPT_PAIRS_OFFSET=65535
[ $rc = 1 ] || fail "rank 0 exited $rc on a corrupt offset: $(cat "$work/corrupt-offset/rank0/err.txt")"
line=$(tail -n 1 "$work/corrupt-offset/rank0/err.txt")
grep -Eqx "run: error: stage 0 of replica 0 \(rank 0\): replica 1 of stage 0 \(rank 2\) sent replica 1's list of ([0-9]+) pairs with pair [0-9]+ at offset 65535 of block 0, not ascending below its [0-9]+ entries \(corrupt\) \(the gradient reduction of step 1\)" <<< "$line" ||
    fail "unexpected message on a corrupt offset: $(cat "$work/corrupt-offset/rank0/err.txt")"
echo "corrupt offset: $line"
