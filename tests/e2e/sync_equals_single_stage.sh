#!/usr/bin/env bash
# Pipelined training under a synchronous schedule (gpipe, 1f1b) at p = 2, 3, 4 gives
# bit-identical losses and weights to p = 1 over 20 optimizer steps; PACI at p = 1 is
# synchronous training too.
source tests/e2e/lib.sh

for schedule in gpipe 1f1b; do
    for p in 1 2 3 4; do
        small_model "$schedule-$p" $p $schedule 4 20
        train "$schedule-$p"
    done
done
small_model paci-1 1 paci 4 20
train paci-1

reference=gpipe-1
[ "$(losses $reference | wc -l)" = 20 ] || fail "expected 20 logged steps"
for run in gpipe-2 gpipe-3 gpipe-4 1f1b-1 1f1b-2 1f1b-3 1f1b-4 paci-1; do
    cmp "$work/$reference/ckpt/step_00000020/model.bin" "$work/$run/ckpt/step_00000020/model.bin" \
        || fail "$run: weights differ from $reference"
    [ "$(losses $run)" = "$(losses $reference)" ] || fail "$run: losses differ from $reference"
done
# The comparison must be able to fail: a different window trains differently.
small_model gpipe-1-w2 1 gpipe 2 20
train gpipe-1-w2
cmp -s "$work/$reference/ckpt/step_00000020/model.bin" "$work/gpipe-1-w2/ckpt/step_00000020/model.bin" \
    && fail "window 2 and window 4 gave the same weights: the comparison is blind"
echo "gpipe and 1f1b at p = 1..4 and paci at p = 1: identical weights and losses over 20 steps"
