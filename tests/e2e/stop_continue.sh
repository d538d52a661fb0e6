#!/usr/bin/env bash
# A run stopped (SIGSTOP, as Ctrl-Z or a job scheduler stops it) for longer than
# --peer-timeout, then continued, goes on and ends as an uninterrupted run does: its waits for
# a neighbour, whose deadline passed while every thread was stopped, start again. Threads (p =
# 3 in one process; two replicas of p = 2) and processes (one a stage, over sockets, all
# stopped and continued together); a neighbour that is truly gone still ends the run after
# --peer-timeout.
# pool: waits
source tests/e2e/lib.sh
timeout=3  # seconds; the stop lasts 3 times that
small_model stop 3 1f1b 2 400
mkdir -p "$work/stop"
"$pacic" "$work/stop.paci" -o "$work/stop/run" 2> "$work/compile.log" || fail "compile: $(cat "$work/compile.log")"

# stopped_for SECONDS PID...: stops the PIDs, waits, continues them; fails if one had ended first
stopped_for() {
    local seconds=$1 pid
    shift
    kill -STOP "$@" || fail "a run ended before it could be stopped: make it longer"
    sleep "$seconds"
    for pid in "$@"; do kill -0 "$pid" 2> /dev/null || fail "process $pid ended while stopped"; done
    kill -CONT "$@"
}

# threaded_stop NAME WHAT: NAME's program (in $work/NAME) run in one process, stopped once it has
# logged a step, continued after three timeouts; it must train its 400 steps.
threaded_stop() {
    local dir=$work/$1 pid
    (cd "$dir" && exec ./run --no-checkpoint --peer-timeout $timeout > out.txt 2> err.txt) &
    pid=$!
    await_step "$dir/out.txt" $pid || fail "$2 logged no step: $(cat "$dir/err.txt")"
    stopped_for $((3 * timeout)) $pid
    wait $pid || fail "$2 failed after the stop: $(grep error "$dir/err.txt")"
    grep -q '^done: 400 steps' "$dir/out.txt" || fail "$2 did not train its 400 steps"
}

# Threads.
threaded_stop stop "the threaded run"

# Threads with data parallelism (two replicas of p = 2): the replicas' barrier waits start again too.
small_model stopdp 2 1f1b 2 400
echo "parallel { data 2 }" >> "$work/stopdp.paci"
mkdir -p "$work/stopdp"
"$pacic" "$work/stopdp.paci" -o "$work/stopdp/run" 2> "$work/compile.log" || fail "compile: $(cat "$work/compile.log")"
threaded_stop stopdp "the threaded replicas"

# Processes: every rank stopped and continued together.
pids=()
for r in 0 1 2; do
    mkdir -p "$work/mp/rank$r"
    (cd "$work/mp/rank$r" && RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        exec "$work/stop/run" --no-checkpoint --peer-timeout $timeout --connect-timeout 60 > out.txt 2> err.txt) &
    pids+=($!)
done
await_step "$work/mp/rank2/out.txt" "${pids[2]}" || fail "the 3-process run logged no step: $(cat "$work/mp/rank2/err.txt")"
stopped_for $((3 * timeout)) "${pids[@]}"
for r in 0 1 2; do
    wait "${pids[$r]}" || fail "rank $r failed after the stop: $(grep -h error "$work"/mp/rank*/err.txt)"
done
grep -q '^done: 400 steps' "$work/mp/rank2/out.txt" || fail "the 3-process run did not train its 400 steps"

# A neighbour stopped alone is gone as far as the others can tell: they end after the timeout.
pids=()
for r in 0 1 2; do
    (cd "$work/mp/rank$r" && RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((port + 1)) \
        exec "$work/stop/run" --no-checkpoint --peer-timeout $timeout --connect-timeout 60 > out2.txt 2> err2.txt) &
    pids+=($!)
done
await_step "$work/mp/rank2/out2.txt" "${pids[2]}" || fail "the second 3-process run logged no step"
kill -STOP "${pids[1]}"
if wait "${pids[0]}"; then fail "rank 0 went on although rank 1 stopped answering"; fi
grep -Eq "(stage|rank) 1 .*for $timeout s" "$work/mp/rank0/err2.txt" ||
    fail "rank 0 did not say that stage 1 went quiet: $(cat "$work/mp/rank0/err2.txt")"
kill -KILL "${pids[1]}" 2> /dev/null || true
wait "${pids[1]}" "${pids[2]}" 2> /dev/null || true
echo "stopped for $((3 * timeout)) s (--peer-timeout $timeout): threads and processes went on; a rank stopped alone ends its neighbours"
