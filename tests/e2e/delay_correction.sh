#!/usr/bin/env bash
# `delay_correction predict` end to end: PACI at p = 4, K = 2 (delays of 1 and 2 steps) under
# adamw, muon and nadamw trains with it, the loss falls, and it resumes bit for bit; under
# 1f1b it only warns and compiles to the same table as none. The forwards' weights
# themselves (lamb's too), and that prediction changes a PACI run, are checked in
# tests/unit/test_predict.c.
source tests/e2e/lib.sh

# predict NAME: switches NAME.paci's pipeline to delay_correction predict.
predict() { sed -i 's/pipeline { \(.*\) }/pipeline { \1; delay_correction predict }/' "$work/$1.paci"; }

# Stage 0's steady state predicts its two forwards 1 and 2 steps ahead (ceil((p-1)/K) = 2).
small_model listing 4 paci 2 12 0 6
predict listing
grep -q "delay_correction predict" "$work/listing.paci" || fail "the DSL edit did not apply"
"$pacic" "$work/listing.paci" --emit schedule 2>/dev/null > "$work/listing.txt"
grep -q "body x.*F3+1 sa3 rg0 B0 F4+2" "$work/listing.txt" || fail "stage 0's delays: $(grep -m1 'body' "$work/listing.txt")"

# Under each optimizer the prediction is written for (muon: its matrices along their
# orthogonalised momentum, the rest along AdamW's direction): the loss falls, and the program
# stopped at the checkpoint and resumed predicts from the saved state alike, bit for bit.
for opt in "adamw { lr 3e-3; clip 0.5 }" "muon { lr 0.02; clip 0.5; adamw { lr 3e-3 } }" "nadamw { lr 3e-3; clip 0.5 }"; do
    name=${opt%% *}
    small_model "$name" 4 paci 2 12 0 6
    predict "$name"
    sed -i "s/optimizer adamw { lr 3e-3; clip 0.5 }/optimizer $opt/" "$work/$name.paci"
    grep -q "optimizer $name" "$work/$name.paci" || fail "the optimizer edit did not apply"
    train "$name" 2>/dev/null
    first=$(losses "$name" | head -1)
    last=$(losses "$name" | tail -1)
    # Here the three fall by 0.88 to 0.90 in 12 steps; muon predicting its matrices d whole
    # steps of size 1 instead of d lr (a planted mutant) falls by 0.67.
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.8) }' || fail "paci $name predict: loss fell too little ($first -> $last)"
    mkdir -p "$work/$name-resumed"
    cp "$work/$name/run" "$work/$name-resumed/run"
    (cd "$work/$name-resumed" && ./run --quiet --steps 6 && ./run --quiet --resume)
    for f in model.bin state.bin; do
        cmp "$work/$name/ckpt/step_00000012/$f" "$work/$name-resumed/ckpt/step_00000012/$f" \
            || fail "$name predict: $f after resume differs from the straight run"
    done
    echo "paci K=2 $name predict: loss $first -> $last; 12 straight == 6 + resume + 6"
done

small_model sync 3 1f1b 2 4
"$pacic" "$work/sync.paci" --emit schedule > "$work/sync-none.txt"
predict sync
"$pacic" "$work/sync.paci" --emit schedule > "$work/sync-predict.txt" 2> "$work/warning.txt"
grep -q "does nothing under the synchronous schedule 1f1b" "$work/warning.txt" || fail "no warning for 1f1b: $(cat "$work/warning.txt")"
cmp "$work/sync-none.txt" "$work/sync-predict.txt" || fail "1f1b with predict compiles to another table"
echo "1f1b predict: warned, the same table as none"
