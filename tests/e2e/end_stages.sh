#!/usr/bin/env bash
# A pipeline stage may hold no transformer layer: an embedding-only first stage and a
# head-only last stage (`split [0, ..., 0]`). Such a program builds without a warning from
# the C compiler, trains under a synchronous schedule to the same bits as one stage
# (losses, model.bin, state.bin, and the Hugging Face export), resumes bit for bit under
# PACI, and the automatic split gives a head that outweighs the layers a stage of its own;
# `pacic --balance` splits by the costs such a run measured.
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
model ends-gpipe 4 gpipe "[0, 2, 2, 0]"
model ends-1f1b 3 1f1b "[0, 4, 0]"
for name in ends-gpipe ends-1f1b; do
    grep -q "layers none" <<< "$("$pacic" "$work/$name.paci" --dump plan)" || fail "$name: no stage without layers in the plan"
    build $name
    run_it $name
    same one $name || fail "$name: weights, optimizer state or losses differ from one stage"
done
echo "embedding-only and head-only stages (gpipe [0, 2, 2, 0], 1f1b [0, 4, 0]): model.bin, state.bin and losses equal one stage's over 20 steps"

# The Hugging Face export names tensors by layer, whichever stage held them.
run_it one --export hf hf-one >/dev/null
run_it ends-gpipe --export hf hf-ends >/dev/null
cmp -s "$work/one/hf-one/model.safetensors" "$work/ends-gpipe/hf-ends/model.safetensors" ||
    fail "the export of [0, 2, 2, 0] differs from one stage's"
run_it ends-gpipe --init hf-ends --steps 1 >/dev/null || fail "[0, 2, 2, 0] cannot start from its own export"
echo "Hugging Face export of [0, 2, 2, 0] == one stage's; it loads back into [0, 2, 2, 0]"

# Resume under PACI: 20 straight == 10, stop, resume, 10.
model straight 4 paci "[0, 2, 2, 0]" 0 10
build straight
mkdir -p "$work/resumed"
cp "$work/straight/run" "$work/resumed/run"
run_it straight --profile-out profile.txt
run_it resumed --steps 10
(cd "$work/resumed" && ./run --quiet --blas-threads 1 --resume --metrics resumed.jsonl)
for f in model.bin state.bin; do
    cmp -s "$work/straight/ckpt/step_00000020/$f" "$work/resumed/ckpt/step_00000020/$f" ||
        fail "paci [0, 2, 2, 0]: $f after resume differs from the straight run"
done
[ "$(losses straight | tail -10)" = "$(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$work/resumed/resumed.jsonl")" ] ||
    fail "paci [0, 2, 2, 0]: losses of steps 11..20 differ after resume"
echo "paci [0, 2, 2, 0]: 20 straight == 10 + resume + 10 (weights, optimizer state, losses)"

# --balance: the split from the costs a run measured (its split in the file set aside).
sed 's/; split \[0, 2, 2, 0\]//' "$work/straight.paci" > "$work/measured.paci"
plan=$("$pacic" "$work/measured.paci" --balance "$work/straight/profile.txt" --dump plan) ||
    fail "--balance with run's profile: $plan"
[ "$(grep -c '^stage ' <<< "$plan")" = 4 ] || fail "--balance: $plan"
# (captured first: grep -q stops reading at the match, and under pipefail the writer's SIGPIPE would fail the test)
explain=$("$pacic" "$work/measured.paci" --balance "$work/straight/profile.txt" --explain)
grep -q "compute costs measured (--balance)" <<< "$explain" ||
    fail "--explain does not say its costs were measured"
out=$("$pacic" "$work/measured.paci" --balance "$work/straight/profile.txt" --profile "$work/straight/profile.txt" --explain 2>&1) &&
    fail "--balance with --profile was accepted"
[ "$out" = "pacic: error: --balance and --profile both set the stages' costs: give one" ] || fail "unexpected message: $out"
echo "--balance reads the profile run wrote; with --profile it is refused"

# Automatic: at vocabulary 4096 and width 32 the head costs about 10 layers, so over 3
# stages it goes alone on the last; 6 stages over 4 layers need both end stages empty.
model auto 3 paci ""
sed -i 's/vocab 256 }/vocab 4096 }/' "$work/auto.paci"
plan=$("$pacic" "$work/auto.paci" --dump plan)
grep -q "^stage 2: layers none +head" <<< "$plan" || fail "the automatic split did not isolate the head: $plan"
model six 6 paci ""
sed -i 's/window 4 }/window 6 }/' "$work/six.paci"
plan=$("$pacic" "$work/six.paci" --dump plan)
grep -q "^stage 0: layers none +embed" <<< "$plan" && grep -q "^stage 5: layers none +head" <<< "$plan" ||
    fail "6 stages over 4 layers: $plan"
echo "automatic split: the head alone on the last stage at vocabulary 4096; 6 stages over 4 layers"
