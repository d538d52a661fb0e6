#!/usr/bin/env bash
# One process per stage on loopback (torchrun-style variables, TCP bootstrap and TCP links)
# trains bit-identically to the threaded run: 1f1b at p = 2 and paci at p = 3, same losses,
# weights and optimizer state. A peer that stops answering or dies ends the other process
# with the stages named; a bad launch is refused with the variable named.
# tier: check
source tests/e2e/lib.sh


# ranks NAME P [run flags...]: runs NAME's program as P processes in $work/NAME-mp/rankR.
ranks() {
    local name=$1 p=$2 pids=() rc=0
    shift 2
    port=$((port + 1))
    for ((r = 0; r < p; r++)); do
        mkdir -p "$work/$name-mp/rank$r"
        (cd "$work/$name-mp/rank$r" && RANK=$r WORLD_SIZE=$p MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            "$work/$name/run" --metrics metrics.jsonl --connect-timeout 60 "$@" >out.txt) &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    return $rc
}

for case in "1f1b 2" "paci 3"; do
    set -- $case
    name=$1-$2
    small_model "$name" "$2" "$1" 4 20 10
    train "$name" # (quiet) builds $work/NAME/run; run again for the summary's memory line
    (cd "$work/$name" && ./run --steps 1 --ckpt-dir once >out.txt)
    ranks "$name" "$2" || fail "$name: a rank failed"
    last=$(($2 - 1))
    [ "$(losses "$name" | wc -l)" = 20 ] || fail "$name: expected 20 logged steps"
    [ "$(losses "$name")" = "$(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$work/$name-mp/rank$last/metrics.jsonl")" ] \
        || fail "$name: the last rank's losses differ from the threaded run's"
    for f in model.bin state.bin; do
        cmp "$work/$name/ckpt/step_00000020/$f" "$work/$name-mp/rank0/ckpt/step_00000020/$f" \
            || fail "$name: $f differs from the threaded run's"
    done
    [ "$(grep val_loss "$work/$name/metrics.jsonl")" = "$(grep val_loss "$work/$name-mp/rank0/metrics.jsonl")" ] \
        || fail "$name: validation losses differ"
    # The last rank holds its own stage exactly as the threaded run does, and nothing else.
    mine=$(sed -n "s/^memory:.* stage $last \([0-9.]*\) MiB.*/\1/p" "$work/$name/out.txt")
    [ -n "$mine" ] || fail "$name: no memory line in the threaded run's summary"
    [ "$(grep '^memory:' "$work/$name-mp/rank$last/out.txt")" = "memory: stage $last $mine MiB (this process: $mine MiB)" ] \
        || fail "$name: rank $last holds more than its stage: $(grep '^memory:' "$work/$name-mp/rank$last/out.txt")"
done
# The comparison must be able to fail: another schedule at the same p trains differently.
cmp -s "$work/1f1b-2/ckpt/step_00000020/model.bin" "$work/paci-3-mp/rank0/ckpt/step_00000020/model.bin" \
    && fail "1f1b at p = 2 and paci at p = 3 gave the same weights: the comparison is blind"

# A bad launch names the variable.
small_model bad 2 1f1b 4 20
mkdir -p "$work/bad"
"$pacic" "$work/bad.paci" -o "$work/bad/run"
out=$(cd "$work/bad" && RANK=0 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 ./run 2>&1) && fail "world 3 for 2 stages ran"
[ "$out" = "run: error: WORLD_SIZE=3, but the program has 2 stages: start one process per stage (2), or one process for all" ] \
    || fail "unexpected message: $out"
out=$(cd "$work/bad" && RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((port + 99)) ./run --quiet --connect-timeout 1 2>&1) \
    && fail "rank 1 ran without rank 0"
case "$out" in
    "run: error: rank 1: cannot reach rank 0 at 127.0.0.1:$((port + 99)) within 1 s"*) ;;
    *) fail "unexpected message: $out" ;;
esac

# Rank 1 up before rank 0, its connection to the master port given to itself (the shim makes
# the kernel's chance certain): it must see that, retry, and train with rank 0 once it comes.
# (Unseen, it reads its own hello as rank 0's reply and waits for the rest until its timeout.)
${CC:-cc} -shared -fPIC -O1 -o "$work/self_connect.so" tests/e2e/self_connect.c -ldl
port=$((port + 1))
mkdir -p "$work/early0" "$work/early1"
(cd "$work/early1" && exec env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    SELF_CONNECT_PORT=$port SELF_CONNECT_MARK="$work/early1/self" LD_PRELOAD="$work/self_connect.so" \
    ../bad/run --quiet --connect-timeout 60 > out.txt 2> err.txt) &
early1=$!
until [ -e "$work/early1/self" ] || ! kill -0 $early1 2>/dev/null; do sleep 0.05; done
[ -e "$work/early1/self" ] || fail "rank 1 never connected to itself: $(cat "$work/early1/err.txt")"
(cd "$work/early0" && exec env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port ../bad/run --quiet \
    --connect-timeout 600 2> err.txt) &
early0=$!
wait $early1 || { kill -KILL $early0; fail "rank 1, once connected to itself, did not train: $(cat "$work/early1/err.txt")"; }
wait $early0 || fail "rank 0 after a self-connected rank 1: $(cat "$work/early0/err.txt")"
echo "rank 1 connected to itself before rank 0 was up, retried, and trained"

# stuck_peer SIGNAL PATTERN TIMEOUT: starts a long 2-process run, sends SIGNAL to rank 0 once
# rank 1 has logged a step, and expects rank 1 (--peer-timeout TIMEOUT) to exit 1 with a line
# matching PATTERN. Rank 0 keeps the default peer timeout (600 s): on a loaded machine a slow
# rank 1 must not make rank 0 give up first.
stuck_peer() {
    local signal=$1 pattern=$2 timeout=$3
    small_model long 2 1f1b 4 4000
    "$pacic" "$work/long.paci" -o "$work/long.run"
    port=$((port + 1))
    # fresh folders: await_step must not find the previous call's steps in out.txt before
    # this run truncates it
    rm -rf "$work/long0" "$work/long1"
    mkdir -p "$work/long0" "$work/long1"
    (cd "$work/long0" && exec env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "$work/long.run" --quiet) &
    local rank0=$!
    (cd "$work/long1" && exec env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "$work/long.run" --peer-timeout "$timeout" >out.txt 2>err.txt) &
    local rank1=$!
    await_step "$work/long1/out.txt" $rank1 || fail "rank 1 ended before logging a step: $(cat "$work/long1/err.txt")"
    kill -"$signal" $rank0
    local rc=0
    wait $rank1 || rc=$?
    kill -KILL $rank0 2>/dev/null || true
    wait $rank0 2>/dev/null || true
    [ $rc = 1 ] || fail "rank 1 exited with $rc after SIG$signal to rank 0"
    grep -Eq "$pattern" "$work/long1/err.txt" || fail "unexpected message: $(cat "$work/long1/err.txt")"
}
# Rank 1 may be waiting on an activation, a credit for a gradient, or rank 0's gradient-norm
# sums (1f1b clips by the global norm) when rank 0 stops: each names the peer and the cause,
# and then the rank the run is stuck on, which rank 1 asked (blame.c).
what='\(((waiting for|sending) micro-batch|gradient-norm sums of step) [0-9]+\)'
stuck_peer STOP "^run: error: stage 1 \\(rank 1\\): (no message from (stage|rank) 0|stage 0 took no message) for 2 s $what; the run is stuck on rank 0 \\(stage 0\\): it does not answer \\(stopped, or hung with all its threads\\), found by rank 1\$" 2
# A dead peer is seen at once (its connection closes): the timeout is only a hang guard here.
stuck_peer KILL "^run: error: stage 1 \\(rank 1\\): (stage|rank) 0 closed the connection $what; the run is stuck on rank 0 \\(stage 0\\): its process is gone \\(killed, or ended on an error of its own\\), found by rank 1\$" 60

echo "one process per stage: 1f1b p = 2 and paci p = 3 identical to threads; stuck and dead peers end rank 1"
