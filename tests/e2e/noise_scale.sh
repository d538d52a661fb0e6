#!/usr/bin/env bash
# The gradient noise scale (docs/run.md, "The gradient noise scale") across a resume, processes
# and devices:
#   - a run stopped at a checkpoint and resumed logs the straight run's noise_scale on every
#     step after the resume, to the bit (run.txt carries each stage's averages), at p = 1 and
#     p = 2; a checkpoint without them (an older pacic's run.txt) resumes, restarts the
#     averages and says so in one line, so the values after it differ (a damaged line too);
#   - one process per stage (p = 2) logs, prints and records the threads' values (below).
# On the GPU (the fake CUDA stack) it is checked against the CPU in tests/e2e/cuda_fake.sh.
source tests/e2e/lib.sh

# noise_of FILE: "step value" of every step line of a metrics file, the value as written.
noise_of() {
    python3 - "$1" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    rec = json.loads(line)
    if "loss" in rec:
        print(rec["step"], json.dumps(rec.get("noise_scale", "absent")))
PY
}

# --- a resume continues the averages ----------------------------------------------------------
for stages in 1 2; do
    name=resume-p$stages
    small_model "$name" "$stages" 1f1b 4 20 0 10
    train "$name" --blas-threads 1 || fail "$name did not train"
    mkdir -p "$work/$name-cut"
    cp "$work/$name/run" "$work/$name-cut/run"
    run_quiet "$name-cut" --steps 10 || fail "$name: the first 10 steps"
    cp -r "$work/$name-cut" "$work/$name-old"
    (cd "$work/$name-cut" && ./run --quiet --blas-threads 1 --resume --metrics resumed.jsonl 2>err.txt) ||
        fail "$name: the resume"
    [ ! -s "$work/$name-cut/err.txt" ] || fail "$name: the resume said: $(cat "$work/$name-cut/err.txt")"
    straight=$(noise_of "$work/$name/metrics.jsonl" | tail -n 10)
    resumed=$(noise_of "$work/$name-cut/resumed.jsonl")
    [ "$(echo "$straight" | grep -c '[0-9]$')" = 10 ] || fail "$name: steps 11..20 logged no noise scale: $straight"
    [ "$straight" = "$resumed" ] ||
        fail "$name: the noise scale after the resume differs from the straight run's:
$(diff <(echo "$straight") <(echo "$resumed") | head -6)"
    # an older pacic's checkpoint: run.txt without the averages
    sed -i '/^noise_scale /d' "$work/$name-old/ckpt/step_00000010/run.txt"
    (cd "$work/$name-old" && ./run --quiet --blas-threads 1 --resume --metrics resumed.jsonl 2>err.txt) ||
        fail "$name: the resume of a checkpoint without the averages"
    note="run: note: ckpt/step_00000010/run.txt records no noise-scale averages, so the noise scale's averages start afresh"
    [ "$(cat "$work/$name-old/err.txt")" = "$note" ] ||
        fail "$name: without the averages the resume said '$(cat "$work/$name-old/err.txt")', not the note"
    [ "$(noise_of "$work/$name-old/resumed.jsonl")" != "$straight" ] ||
        fail "$name: restarted averages log the straight run's values: the comparison is blind"
    # a damaged line: the resume (at the run's end: nothing left to train) says it restarts them
    sed -i 's/^\(noise_scale stage 0 g2\) [^ ]*/\1 banana/' "$work/$name-cut/ckpt/step_00000020/run.txt"
    grep -q '^noise_scale stage 0 g2 banana' "$work/$name-cut/ckpt/step_00000020/run.txt" || fail "$name: no line to damage"
    (cd "$work/$name-cut" && ./run --quiet --blas-threads 1 --resume 2>err.txt >/dev/null) ||
        fail "$name: a damaged line stopped the resume: $(cat "$work/$name-cut/err.txt")"
    note="run: note: ckpt/step_00000020/run.txt has an unreadable noise_scale line, so the noise scale's averages start afresh"
    grep -qxF "$note" "$work/$name-cut/err.txt" || fail "$name: a damaged line: $(cat "$work/$name-cut/err.txt")"
    echo "p = $stages: 10 + resume + 10 logs the straight run's noise_scale on steps 11..20 to the bit" \
        "($(echo "$straight" | tail -n 1)); without the averages in run.txt: one note, other values; a damaged line: its note"
done

# --- one process per stage: the threads' values -------------------------------------------
# Each process holds its own stage's averages: they ride on the clipping sums' exchange of every
# step (the metrics lines) and are gathered at each segment's end (the summary, the checkpoint).
# 1F1B at p = 2 as 2 processes logs the threaded run's noise_scale on every step, prints its
# summary line, and its checkpoint records the same averages, all to the bit; so does a resume
# of the processes. Under PACI (asynchronous: no common step to exchange at) the processes' lines
# have none, and the summary and checkpoint still have every stage's.
# procs NAME DIR [run flags...]: NAME's program as 2 processes in $work/NAME/DIR/rankR, saving
# to and resuming from $work/NAME/DIR/ckpt.
procs() {
    local name=$1 dir=$2 r pids=() rc=0
    shift 2
    port=$((port + 1))
    for r in 0 1; do
        mkdir -p "$work/$name/$dir/rank$r"
        (cd "$work/$name/$dir/rank$r" && RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            ../../run --blas-threads 1 --device cpu --metrics metrics.jsonl --ckpt-dir ../ckpt --connect-timeout 60 "$@" >out.txt 2>err.txt) &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    [ "$rc" = 0 ] || { cat "$work/$name/$dir"/rank*/err.txt >&2; fail "$name: a process of $dir failed"; }
}
# recorded FILE: the noise_scale lines of a checkpoint's run.txt.
recorded() { grep '^noise_scale ' "$1" || true; }
for schedule in 1f1b paci; do
    name=procs-$schedule
    small_model "$name" 2 "$schedule" 4 20 0 10
    train "$name" --blas-threads 1 > /dev/null || fail "$name did not train"
    (cd "$work/$name" && ./run --blas-threads 1 --device cpu --no-checkpoint > out.txt) || fail "$name: the summary run"
    procs "$name" straight
    threads=$(noise_of "$work/$name/metrics.jsonl")
    processes=$(noise_of "$work/$name/straight/rank1/metrics.jsonl")
    if [ "$schedule" = 1f1b ]; then
        [ "$threads" = "$processes" ] || fail "$name: 2 processes log other noise scales than the threads:
$(diff <(echo "$threads") <(echo "$processes") | head -6)"
    else
        [ -z "$(echo "$processes" | grep -v '"absent"$')" ] || fail "$name: the processes' asynchronous lines carry one"
    fi
    line=$(grep '^noise scale: ' "$work/$name/out.txt") || fail "$name: the threads printed no noise scale"
    [ "$(grep '^noise scale: ' "$work/$name/straight/rank1/out.txt")" = "$line" ] ||
        fail "$name: the processes' summary says '$(grep '^noise scale' "$work/$name/straight/rank1/out.txt")', the threads' '$line'"
    for step in 10 20; do
        want=$(recorded "$work/$name/ckpt/step_000000$step/run.txt")
        [ "$(echo "$want" | wc -l)" = 2 ] || fail "$name: the threads' checkpoint $step records '$want'"
        [ "$(recorded "$work/$name/straight/ckpt/step_000000$step/run.txt")" = "$want" ] ||
            fail "$name: the processes' checkpoint $step records other averages than the threads'"
    done
    echo "$name: 2 processes == threads: $([ $schedule = 1f1b ] && echo "noise_scale on all 20 lines, " ||
        echo "no noise_scale on the asynchronous lines, ")the summary ($line), both checkpoints' averages"
done
# the processes resumed: the straight run's lines after the resume
name=procs-1f1b
procs "$name" cut --steps 10
procs "$name" cut --resume
[ "$(noise_of "$work/$name/cut/rank1/metrics.jsonl" | tail -n 10)" = "$(noise_of "$work/$name/metrics.jsonl" | tail -n 10)" ] ||
    fail "$name: 2 processes resumed log other noise scales than the straight run"
[ ! -s "$work/$name/cut/rank0/err.txt" ] && [ ! -s "$work/$name/cut/rank1/err.txt" ] || fail "$name: the resume said: $(cat "$work/$name/cut"/rank*/err.txt)"
echo "$name: 2 processes, 10 steps + resume + 10: the straight run's noise_scale on steps 11..20"
