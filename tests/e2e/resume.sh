#!/usr/bin/env bash
# Resume contract: checkpoints are written only where the schedule drains, so 2N steps
# straight equal N steps, stop, resume, N steps, bit for bit, for every schedule (the
# asynchronous ones included: nothing is in flight at a drain). PipeDream's weight
# stashes are exercised here too.
source tests/e2e/lib.sh

for schedule in gpipe 1f1b pipedream paci; do
    small_model "$schedule-straight" 3 $schedule 2 20 0 10
    train "$schedule-straight"
    mkdir -p "$work/$schedule-resumed"
    cp "$work/$schedule-straight/run" "$work/$schedule-resumed/" # the same program, stopped at 10
    (cd "$work/$schedule-resumed" && ./run --quiet --steps 10)
    [ -d "$work/$schedule-resumed/ckpt/step_00000020" ] && fail "--steps 10 ran past step 10"
    (cd "$work/$schedule-resumed" && ./run --quiet --resume --metrics resumed.jsonl)
    for f in model.bin state.bin; do
        cmp "$work/$schedule-straight/ckpt/step_00000020/$f" "$work/$schedule-resumed/ckpt/step_00000020/$f" \
            || fail "$schedule: $f after resume differs from the straight run"
    done
    straight=$(losses "$schedule-straight" | tail -10)
    resumed=$(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$work/$schedule-resumed/resumed.jsonl")
    [ "$straight" = "$resumed" ] || fail "$schedule: losses of steps 11..20 differ after resume"
    echo "$schedule: 20 straight == 10 + resume + 10 (weights, optimizer state, losses)"
done
