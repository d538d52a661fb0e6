#!/usr/bin/env bash
# `checkpoint { keep N }`: a save leaves the run's N newest checkpoints (2 when not written:
# the new one and the one before it). A resume is the same run, so its saves prune what the
# run wrote before it; another run's checkpoint stays whatever N is.
# tier: check
source tests/e2e/lib.sh

# keep_model NAME KEEP: the small model, 20 steps, a checkpoint every 4; KEEP "": no `keep`.
keep_model() {
    small_model "$1" 1 1f1b 1 20 0 4
    if [ -n "$2" ]; then
        sed -i "s/checkpoint { every 4;/checkpoint { every 4; keep $2;/" "$work/$1.paci"
        grep -q "keep $2" "$work/$1.paci" || fail "the keep edit did not apply"
    fi
}
# left NAME: the checkpoint folders in $work/NAME/ckpt, on one line.
left() { (cd "$work/$1/ckpt" && echo step_*); }
# expect NAME FOLDERS: they are what is left, and `latest` names step 20.
expect() {
    [ "$(left "$1")" = "$2" ] || fail "$1: left $(left "$1"), expected $2"
    [ "$(cat "$work/$1/ckpt/latest")" = step_00000020 ] || fail "$1: latest is $(cat "$work/$1/ckpt/latest")"
}

keep_model default ""
train default > /dev/null
expect default "step_00000016 step_00000020"
keep_model one 1
train one > /dev/null
expect one "step_00000020"
keep_model three 3
train three > /dev/null
expect three "step_00000012 step_00000016 step_00000020"
echo "a run of 20 steps, a checkpoint every 4: keep 2 (default) leaves 16 and 20, keep 1 leaves 20, keep 3 12, 16 and 20"

# keep 1 over a resume: the first stretch's checkpoint goes; another run's (planted before
# the resumed step: run.txt names another run) stays.
keep_model resumed 1
train resumed --steps 8 > /dev/null
[ "$(left resumed)" = "step_00000008" ] || fail "resumed: after 8 steps, left $(left resumed)"
cp -r "$work/resumed/ckpt/step_00000008" "$work/resumed/ckpt/step_00000002"
sed -i 's/^run .*/run another-run/' "$work/resumed/ckpt/step_00000002/run.txt"
train resumed --resume > /dev/null
expect resumed "step_00000002 step_00000020"
echo "keep 1 across --steps 8 and --resume: 20 is left, and another run's checkpoint"
