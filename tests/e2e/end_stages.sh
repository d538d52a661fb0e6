#!/usr/bin/env bash
# A pipeline stage may hold no transformer layer: an embedding-only first stage and a
# head-only last stage (`split [0, ..., 0]`). Such a program builds without a warning from
# the C compiler, trains under a synchronous schedule to the same bits as one stage
# (losses, model.bin, state.bin, and the Hugging Face export), resumes bit for bit under
# PACI, and the automatic split gives a head that outweighs the layers a stage of its own;
# `pacic --balance` splits by the costs such a run measured.
source tests/e2e/lib.sh

split_model one 1 gpipe ""
build_quiet one
run_quiet one
[ "$(losses one | wc -l)" = 20 ] || fail "expected 20 logged steps"
split_model ends-gpipe 4 gpipe "[0, 2, 2, 0]"
split_model ends-1f1b 3 1f1b "[0, 4, 0]"
for name in ends-gpipe ends-1f1b; do
    grep -q "layers none" <<< "$("$pacic" "$work/$name.paci" --dump plan)" || fail "$name: no stage without layers in the plan"
    build_quiet $name
    run_quiet $name
    same_step20 one $name || fail "$name: weights, optimizer state or losses differ from one stage"
done
echo "embedding-only and head-only stages (gpipe [0, 2, 2, 0], 1f1b [0, 4, 0]): model.bin, state.bin and losses equal one stage's over 20 steps"

# The Hugging Face export names tensors by layer, whichever stage held them.
export_equals_one ends-gpipe "[0, 2, 2, 0]"

# Resume under PACI: 20 straight == 10, stop, resume, 10.
resume_equals_straight 4 "[0, 2, 2, 0]" --profile-out profile.txt

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
# stages it goes alone on the last; 6 stages over 4 layers would need both end stages empty
# at whole layers, and the partitioner cuts inside layers instead (every stage holds a piece).
split_model auto 3 paci ""
sed -i 's/vocab 256 }/vocab 4096 }/' "$work/auto.paci"
plan=$("$pacic" "$work/auto.paci" --dump plan)
grep -q "^stage 2: layers none +head" <<< "$plan" || fail "the automatic split did not isolate the head: $plan"
split_model six 6 paci ""
sed -i 's/window 4 }/window 6 }/' "$work/six.paci"
plan=$("$pacic" "$work/six.paci" --dump plan)
[ "$(grep -c '^stage [0-5]: layers [0-9]' <<< "$plan")" = 6 ] && grep -q "^stage 0: .* +embed" <<< "$plan" &&
    grep -q "^stage 5: .* +head" <<< "$plan" || fail "6 stages over 4 layers: $plan"
echo "automatic split: the head alone on the last stage at vocabulary 4096; 6 stages over 4 layers, each holding a piece"
