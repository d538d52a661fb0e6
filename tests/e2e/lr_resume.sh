#!/usr/bin/env bash
# A resume keeps the lr schedule its run started with, read from --metrics (lr per step):
# - the program recompiled with 30 steps (from 20) and resumed at step 10: steps 11..20 take
#   the 20-step schedule's lrs, steps 21..30 its final one; said in one line; a second resume
#   of that run still keeps it (the checkpoints it writes record the first schedule);
# - recompiled with 15 steps: steps 11..15 take the 20-step schedule's lrs;
# - --reschedule: steps 11..30 take the 30-step schedule's lrs, said;
# - a checkpoint that records no schedule (an older pacic's run.txt) follows the program's,
#   and says so.
source tests/e2e/lib.sh

# program STEPS: $work/bin/sSTEPS, the small model over STEPS steps, a checkpoint every 5.
mkdir -p "$work/bin"
program() {
    small_model "s$1" 1 1f1b 1 "$1" 0 5
    "$pacic" "$work/s$1.paci" -o "$work/bin/s$1" > /dev/null || fail "s$1: pacic failed"
}
program 15
program 20
program 30
# run_in DIR PROGRAM [flags]: PROGRAM run in $work/DIR, stdout into DIR/out.txt, metrics
# appended to DIR/metrics.jsonl.
run_in() {
    local dir=$work/$1 program=$2
    shift 2
    mkdir -p "$dir"
    (cd "$dir" && "$work/bin/$program" --blas-threads 1 --metrics metrics.jsonl "$@" > out.txt 2> err.txt) ||
        fail "$program $* in $1: $(cat "$dir/err.txt")"
}
# lrs DIR FIRST LAST: the lr of steps FIRST..LAST in DIR's metrics (the last line of each step).
lrs() {
    sed -n 's/^{"step": \([0-9]*\), "loss": [^,]*, "lr": \([^,]*\),.*/\1 \2/p' "$work/$1/metrics.jsonl" |
        awk -v a="$2" -v b="$3" '$1 >= a && $1 <= b { lr[$1] = $2 } END { for (s = a; s <= b; s++) print s, lr[s] }'
}
# final DIR STEP FIRST LAST: steps FIRST..LAST each with the lr of DIR's STEP.
final() {
    local lr
    lr=$(lrs "$1" "$2" "$2" | cut -d' ' -f2)
    for ((s = $3; s <= $4; s++)); do echo "$s $lr"; done
}
# stretch DIR: the 20-step program's first 10 steps in DIR.
stretch() { run_in "$1" s20 --steps 10; }

run_in straight20 s20
run_in straight30 s30
[ "$(lrs straight20 20 20)" != "$(lrs straight30 20 20)" ] || fail "the 20- and 30-step schedules agree at step 20"

stretch longer
run_in longer s30 --resume --steps 25
grep -q "^run: resumed from step 10 (checkpoint ckpt/step_00000010)$" "$work/longer/out.txt" ||
    fail "no resume line: $(cat "$work/longer/out.txt")"
grep -q "^run: the lr schedule of the first 20 steps (warmup 1) is kept: after step 20 the lr stays at its final value; --reschedule follows the program's 30 steps (warmup 1) instead$" \
    "$work/longer/out.txt" || fail "the kept schedule is not said: $(cat "$work/longer/out.txt")"
run_in longer s30 --resume
[ "$(lrs longer 11 20)" = "$(lrs straight20 11 20)" ] || fail "steps 11..20 left the 20-step schedule: $(lrs longer 11 20)"
[ "$(lrs longer 21 30)" = "$(final straight20 20 21 30)" ] ||
    fail "steps 21..30 are not at the 20-step schedule's final lr: $(lrs longer 21 30)"
echo "20 -> 30 steps on resume (twice): steps 11..20 on the 20-step lrs, 21..30 at its final $(lrs straight20 20 20 | cut -d' ' -f2)"

stretch shorter
run_in shorter s15 --resume
grep -q "^run: the lr schedule of the first 20 steps (warmup 1) is kept: the program's 15 steps (warmup 1) end before it does; --reschedule follows the program's schedule instead$" \
    "$work/shorter/out.txt" || fail "the kept schedule is not said: $(cat "$work/shorter/out.txt")"
[ "$(lrs shorter 11 15)" = "$(lrs straight20 11 15)" ] || fail "steps 11..15 left the 20-step schedule: $(lrs shorter 11 15)"
echo "20 -> 15 steps on resume: steps 11..15 on the 20-step lrs"

stretch rescheduled
run_in rescheduled s30 --resume --reschedule
grep -q "^run: --reschedule: the lr follows the program's schedule of 30 steps (warmup 1) from step 11; the run started with 20 (warmup 1)$" \
    "$work/rescheduled/out.txt" || fail "--reschedule is not said: $(cat "$work/rescheduled/out.txt")"
[ "$(lrs rescheduled 11 30)" = "$(lrs straight30 11 30)" ] || fail "--reschedule: steps 11..30 are not the 30-step lrs"
echo "--reschedule: steps 11..30 on the 30-step lrs"

stretch old
sed -i '/^lr_schedule /d' "$work/old/ckpt/step_00000010/run.txt"
run_in old s30 --resume
grep -q "^run: the checkpoint does not record the lr schedule its run started with (written by an older pacic): the lr follows the program's, 30 steps$" \
    "$work/old/out.txt" || fail "the unrecorded schedule is not said: $(cat "$work/old/out.txt")"
[ "$(lrs old 11 30)" = "$(lrs straight30 11 30)" ] || fail "an unrecorded schedule: steps 11..30 are not the program's lrs"
echo "a checkpoint without a recorded schedule: the program's lrs, said"
