#!/usr/bin/env bash
# Stage boundaries inside a layer, between its attention half and its MLP half (`split
# [1.5, ...]`): such programs build without a warning from the C compiler, train under a
# synchronous schedule to the same bits as one stage (losses, model.bin, state.bin, and the
# Hugging Face export), hold lone halves at either end, resume bit for bit under PACI, and a
# checkpoint written with halves resumes under whole layers. The automatic split uses halves
# where they make the slowest stage faster.
source tests/e2e/lib.sh

# model NAME STAGES SCHEDULE SPLIT [EVAL CKPT]: the small model, 20 steps, with SPLIT ("" = automatic).
model() {
    small_model "$1" "$2" "$3" 4 20 0 "${6:-20}"
    if [ -n "$4" ]; then
        sed -i "s/^pipeline { \(.*\) }$/pipeline { \1; split $4 }/" "$work/$1.paci"
        grep -qF "split $4" "$work/$1.paci" || fail "split edit did not apply"
    fi
}

# build NAME: compiles $work/NAME.paci; pacic and the C compiler must print nothing.
build() {
    mkdir -p "$work/$1"
    local out
    out=$("$pacic" "$work/$1.paci" -o "$work/$1/run" 2>&1) || fail "$1: pacic failed: $out"
    [ -z "$out" ] || fail "$1: building printed: $(printf '%s' "$out" | head -5)"
}

# run_it NAME [flags]: runs NAME's program in $work/NAME/ at one BLAS thread a stage.
run_it() {
    local name=$1
    shift
    (cd "$work/$name" && ./run --quiet --blas-threads 1 --metrics metrics.jsonl "$@")
}

# same A B: the same step-20 checkpoint (state.bin but its schedule and stage count, int64
# fields 8 and 9) and the same losses.
same() {
    local a=$work/$1/ckpt/step_00000020 b=$work/$2/ckpt/step_00000020
    cmp -s "$a/model.bin" "$b/model.bin" && cmp -s -n 64 "$a/state.bin" "$b/state.bin" &&
        cmp -s -i 80 "$a/state.bin" "$b/state.bin" && [ "$(losses "$1")" = "$(losses "$2")" ]
}

model one 1 gpipe ""
build one
run_it one
[ "$(losses one | wc -l)" = 20 ] || fail "expected 20 logged steps"
# [1.5, 2, 0.5]: layer 1 split over stages 0 and 1, layer 3's MLP alone with the head;
# [0.5, 1.5, 1.5, 0.5]: layer 0's attention alone with the embedding, and every stage cut
# inside a layer
model halves-1f1b 3 1f1b "[1.5, 2, 0.5]"
model halves-gpipe 4 gpipe "[0.5, 1.5, 1.5, 0.5]"
for name in halves-1f1b halves-gpipe; do
    plan=$("$pacic" "$work/$name.paci" --dump plan)
    grep -q "^stage 1: layers 1b\.\." <<< "$plan" || grep -q "^stage 1: layers 0b\.\." <<< "$plan" ||
        fail "$name: stage 1 does not start with an MLP half: $plan"
    build $name
    run_it $name
    same one $name || fail "$name: weights, optimizer state or losses differ from one stage"
done
grep -q "^stage 0: layers 0a\.\.0a +embed" <<< "$("$pacic" "$work/halves-gpipe.paci" --dump plan)" ||
    fail "[0.5, ...]: stage 0 is not layer 0's attention half with the embedding"
echo "splits inside layers (1f1b [1.5, 2, 0.5], gpipe [0.5, 1.5, 1.5, 0.5]): model.bin, state.bin and losses equal one stage's over 20 steps"

# The Hugging Face export names tensors by layer, whichever stage held which half.
run_it one --export hf hf-one >/dev/null
run_it halves-gpipe --export hf hf-halves >/dev/null
cmp -s "$work/one/hf-one/model.safetensors" "$work/halves-gpipe/hf-halves/model.safetensors" ||
    fail "the export of [0.5, 1.5, 1.5, 0.5] differs from one stage's"
run_it halves-gpipe --init hf-halves --steps 1 >/dev/null || fail "[0.5, 1.5, 1.5, 0.5] cannot start from its own export"
echo "Hugging Face export of [0.5, 1.5, 1.5, 0.5] == one stage's; it loads back into the split"

# Resume under PACI: 20 straight == 10, stop, resume, 10.
model straight 3 paci "[1.5, 1, 1.5]" 0 10
build straight
mkdir -p "$work/resumed"
cp "$work/straight/run" "$work/resumed/run"
run_it straight
run_it resumed --steps 10
(cd "$work/resumed" && ./run --quiet --blas-threads 1 --resume --metrics resumed.jsonl)
for f in model.bin state.bin; do
    cmp -s "$work/straight/ckpt/step_00000020/$f" "$work/resumed/ckpt/step_00000020/$f" ||
        fail "paci [1.5, 1, 1.5]: $f after resume differs from the straight run"
done
[ "$(losses straight | tail -10)" = "$(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$work/resumed/resumed.jsonl")" ] ||
    fail "paci [1.5, 1, 1.5]: losses of steps 11..20 differ after resume"
echo "paci [1.5, 1, 1.5]: 20 straight == 10 + resume + 10 (weights, optimizer state, losses)"

# A checkpoint of halves resumes under whole layers, and the reverse, to the same bits as
# a run that never changed its split (1f1b: synchronous, so any split gives one stage's bits).
model sync-halves 3 1f1b "[1.5, 1, 1.5]" 0 10
model sync-whole 3 1f1b "[1, 2, 1]" 0 10
build sync-halves
build sync-whole
run_it sync-halves --steps 10
cp -r "$work/sync-halves/ckpt" "$work/sync-whole/ckpt"
(cd "$work/sync-whole" && ./run --quiet --blas-threads 1 --resume --metrics metrics.jsonl)
cmp -s "$work/one/ckpt/step_00000020/model.bin" "$work/sync-whole/ckpt/step_00000020/model.bin" ||
    fail "a [1.5, 1, 1.5] checkpoint resumed under [1, 2, 1] does not reach one stage's weights"
echo "a checkpoint written by [1.5, 1, 1.5] resumes under [1, 2, 1] to one stage's weights at step 20"

# Automatic: the small model's 4 layers and its head over 3 stages cannot balance in whole
# layers; with halves it splits [1.5, 1.5, 1].
model auto 3 paci ""
plan=$("$pacic" "$work/auto.paci" --dump plan)
grep -q "^stage 1: layers 1b\.\.2 " <<< "$plan" || fail "the automatic split did not cut inside a layer: $plan"
explain=$("$pacic" "$work/auto.paci" --explain 2>&1)
grep -qE "^ +1  [0-9]+b-" <<< "$explain" || fail "--explain does not label the halves: $explain"
echo "automatic split: cuts inside a layer where whole layers cannot balance"
