#!/usr/bin/env bash
# `warm_start SCHEDULE N` (pipeline): the first N optimizer steps under a synchronous schedule,
# the rest under PACI, in one table that drains the pipeline once, at step N:
#   - warm_start 1f1b 7 at p = 4, 20 steps: steps 1-7 are one stage's to the bit (losses, and
#     the weights and optimizer state of a checkpoint at step 7), as 1f1b's are, every stage's
#     drift is 0 through step 7, and PACI runs after it (the losses part from one stage's,
#     stages 0-2 drift by 1);
#   - so is a zb-h1 warm start over its steps;
#   - a stop inside the warm start, or after it, resumes bit for bit;
#   - 4 processes over TCP give the threads' bits (the warm part clips by the global norm
#     across processes, the PACI part by each stage's own).
source tests/e2e/lib.sh

# warm_model NAME SCHEDULE WARM [CKPT]: the small model at p = 4, window 4, 20 steps, split
# [0.5, 1.5, 1.5, 0.5], `warm_start WARM` when WARM is not empty.
warm_model() {
    split_model "$1" 4 "$2" "[0.5, 1.5, 1.5, 0.5]" 0 "${4:-20}"
    [ -z "$3" ] || with_pipeline "$1" "warm_start $3"
}

# same_step7 A B: A's and B's programs, run for 7 steps (in $work/A-7, $work/B-7), save the
# same weights and optimizer state (state.bin past its schedule fields)
same_step7() {
    local n
    for n in "$1" "$2"; do
        [ ! -d "$work/$n-7" ] || continue
        mkdir -p "$work/$n-7"
        cp "$work/$n/run" "$work/$n-7/run"
        (cd "$work/$n-7" && ./run --quiet --blas-threads 1 --steps 7) || fail "$n: 7 steps did not train"
    done
    local a=$work/$1-7/ckpt/step_00000007 b=$work/$2-7/ckpt/step_00000007
    cmp -s "$a/model.bin" "$b/model.bin" && cmp -s -n 64 "$a/state.bin" "$b/state.bin" &&
        cmp -s -i 80 "$a/state.bin" "$b/state.bin"
}

# the reference: one stage, where every schedule is the same training
small_model sync 1 1f1b 4 20 0 20
train sync --blas-threads 1 || fail "one stage did not train"
warm_model warm paci "1f1b 7"
train warm --blas-threads 1 || fail "paci with warm_start 1f1b 7 did not train"
[ "$(losses warm | head -7)" = "$(losses sync | head -7)" ] || fail "warm_start 1f1b 7: steps 1-7 are not one stage's losses"
same_step7 sync warm || fail "warm_start 1f1b 7: the checkpoint at step 7 is not one stage's"
[ "$(losses warm | sed -n 8,20p)" != "$(losses sync | sed -n 8,20p)" ] || fail "warm_start 1f1b 7: steps 8-20 are one stage's too"
drift() { sed -n "s/.*\"step\": $2,.*\"drift\": \[\([^]]*\)\].*/\1/p" "$work/$1/metrics.jsonl"; }
[ "$(drift warm 7)" = "0, 0, 0, 0" ] || fail "warm_start 1f1b 7: drift through step 7 is [$(drift warm 7)], not 0"
[ "$(drift warm 20)" = "1, 1, 1, 0" ] || fail "warm_start 1f1b 7: drift at step 20 is [$(drift warm 20)], PACI's [1, 1, 1, 0] expected"
echo "warm_start 1f1b 7 at p = 4: steps 1-7 are one stage's bits (losses, weights, optimizer state), drift 0; then PACI (drift 1, 1, 1, 0)"

warm_model zb paci "zb-h1 7"
train zb --blas-threads 1 || fail "paci with warm_start zb-h1 7 did not train"
[ "$(losses zb | head -7)" = "$(losses sync | head -7)" ] && same_step7 sync zb ||
    fail "warm_start zb-h1 7: steps 1-7 are not one stage's bits"
echo "warm_start zb-h1 7: steps 1-7 are one stage's bits"

# resumes: a stop inside the warm start (step 4 of 7) and after it (step 10)
for stop in 4 10; do
    warm_model straight paci "1f1b 7" "$stop"
    build_quiet straight
    mkdir -p "$work/resumed-$stop"
    cp "$work/straight/run" "$work/resumed-$stop/run"
    run_quiet straight >/dev/null
    (cd "$work/resumed-$stop" && ./run --quiet --blas-threads 1 --steps "$stop" --metrics first.jsonl &&
        ./run --quiet --blas-threads 1 --resume --metrics resumed.jsonl) || fail "stop at $stop and resume"
    for f in model.bin state.bin; do
        cmp -s "$work/straight/ckpt/step_00000020/$f" "$work/resumed-$stop/ckpt/step_00000020/$f" ||
            fail "warm_start 1f1b 7, stopped at step $stop: $f after resume differs from the straight run"
    done
    [ "$(losses straight | sed -n "$((stop + 1)),20p")" = \
      "$(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$work/resumed-$stop/resumed.jsonl")" ] ||
        fail "warm_start 1f1b 7, stopped at step $stop: losses after the resume differ"
    rm -rf "$work/straight"
done
echo "warm_start 1f1b 7: stopped at step 4 (inside it) or 10 (after it), resumed: the straight run's bits"

processes_equal_threads warm 4
echo "warm_start 1f1b 7 as 4 processes over TCP: the threaded run's bits"
