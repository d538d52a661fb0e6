#!/usr/bin/env bash
# The vocabulary split (`vocab_split N`, docs/dsl.md): the LM head's rows [0, N) and the final
# LayerNorm on the stage before the last, rows [N, V) alone on the last. Under a synchronous
# schedule it trains as one stage does, to rounding (the softmax is summed in two parts); it
# resumes bit for bit under PACI; one process per stage trains as the threads do (its links
# carry the split's own messages); a checkpoint of one stage exports through it to the same
# Hugging Face file; sampling sees the whole vocabulary; the automatic split uses it where
# the head costs more than a stage's share. The GPU path is checked in cuda_fake_vocab.sh.
source tests/e2e/lib.sh

split_model one 1 1f1b ""
build_quiet one
run_quiet one

# 1F1B over 3 stages at 128 rows, and over 4 with the stage before the last holding only
# the LayerNorm and 64 rows ([2, 2, 0, 0]): one stage's losses and weights, to rounding.
split_model vs3 3 1f1b ""
with_pipeline vs3 "vocab_split 128"
split_model vs4 4 1f1b "[2, 2, 0, 0]"
with_pipeline vs4 "vocab_split 64"
plan=$("$pacic" "$work/vs3.paci" --dump plan)
grep -q "^stage 1: layers .* +headA " <<< "$plan" && grep -q "^stage 2: layers none +headB " <<< "$plan" ||
    fail "vocab_split 128 over 3 stages: not headA on stage 1 and headB alone on stage 2: $plan"
grep -q "^stage 2: layers none +headB params 4096 " <<< "$plan" || fail "stage 2 does not hold rows [128, 256): $plan"
for name in vs3 vs4; do
    build_quiet $name
    run_quiet $name
    compare_devices "$name 1f1b with vocab_split vs one stage" "$work/$name" "$work/one" 1e-5 5e-5
done
echo "1f1b with vocab_split 128 (3 stages) and 64 ([2, 2, 0, 0]): one stage's losses and weights to rounding"

# The comparison must be able to fail: another learning rate gives other weights.
split_model other 3 1f1b ""
with_pipeline other "vocab_split 128"
sed -i "s/lr 3e-3/lr 2e-3/" "$work/other.paci"
build_quiet other
run_quiet other
(compare_devices "blind?" "$work/other" "$work/one" 1e-5 5e-5) >/dev/null 2>&1 &&
    fail "another learning rate passed the comparison: it is blind"

# Recompute full keeps the back stage's input, which is the split's message: the same bits.
split_model vs3-rc 3 1f1b ""
with_pipeline vs3-rc "vocab_split 128"
with_pipeline vs3-rc "recompute full"
build_quiet vs3-rc
run_quiet vs3-rc
same_step20 vs3 vs3-rc || fail "recompute full with vocab_split: not the bits of the run without"
echo "recompute full with vocab_split 128: the same bits as without"

# One process per stage: the links carry the split's messages over TCP; the same bits.
processes_equal_threads vs3 3
echo "vocab_split over 3 processes (TCP links): the threaded run's bits"

# PACI: 20 steps straight == 10, stop, resume, 10.
split_model straight 3 paci "" 0 10
with_pipeline straight "vocab_split 192"
resumes_bit_for_bit "paci with vocab_split 192"

# One stage's checkpoint, exported through the split program: the same file, the head's
# rows gathered from both stages; sampling from it gives one stage's text.
run_quiet one --export hf hf-one >/dev/null
mkdir -p "$work/vs3/from-one"
cp -r "$work/one/ckpt" "$work/vs3/from-one/ckpt"
(cd "$work/vs3/from-one" && ../run --quiet --export hf hf >/dev/null) || fail "the split program cannot export"
cmp -s "$work/one/hf-one/model.safetensors" "$work/vs3/from-one/hf/model.safetensors" ||
    fail "one stage's checkpoint exported through vocab_split differs from one stage's export"
one_text=$(cd "$work/one" && ./run --sample 40 --seed 1 2>&1) || fail "one stage cannot sample: $one_text"
split_text=$(cd "$work/vs3/from-one" && ../run --sample 40 --seed 1 2>&1) || fail "vocab_split cannot sample: $split_text"
[ "$one_text" = "$split_text" ] || fail "sampling under vocab_split differs: '$split_text' vs '$one_text'"
echo "one stage's checkpoint through vocab_split: the same Hugging Face export, the same samples"

# Automatic: GPT-2 Medium's head over 12 stages is divided (the kernel cost model, which the
# split balances by, prices it at 2.9 layers, more than a stage's share of 2.2); over the 8
# stages of examples/gpt2-medium-8.paci (3.4 layers a stage) it is not; the small model's over
# 3 is not.
sed 's/^    stages 8$/    stages 12/' "$root/examples/gpt2-medium-8.paci" > "$work/medium-12.paci"
grep -q "stages 12" "$work/medium-12.paci" || fail "stages 12 edit did not apply"
explain=$("$pacic" "$work/medium-12.paci" --explain 2>/dev/null)
grep -qE "^ +10  [0-9abfgpt-]+\+hA " <<< "$explain" && grep -qE "^ +11  headB " <<< "$explain" ||
    fail "gpt2-medium over 12 stages: the automatic split does not divide the head: $explain"
grep -q "^vocabulary split (automatic" <<< "$explain" || fail "gpt2-medium over 12 stages: --explain does not state the split"
grep -qE "\+hA |headB" <<< "$("$pacic" "$root/examples/gpt2-medium-8.paci" --explain 2>/dev/null)" &&
    fail "gpt2-medium-8's head, lighter than a stage, was divided"
sed 's/stages 1/stages 3/' "$work/one.paci" > "$work/auto.paci"
grep -q "head[AB]" <<< "$("$pacic" "$work/auto.paci" --dump plan)" && fail "the small model's cheap head was divided over 3 stages"
sed 's/^    window 8 .*$/    window 8; vocab_split 0/' "$work/medium-12.paci" > "$work/medium-whole.paci"
grep -q "vocab_split 0" "$work/medium-whole.paci" || fail "vocab_split 0 edit did not apply"
grep -qE "\+hA |headB" <<< "$("$pacic" "$work/medium-whole.paci" --explain 2>/dev/null)" &&
    fail "vocab_split 0 still divides the head"
echo "automatic: gpt2-medium's head divided over the last two of 12 stages, not of 8; vocab_split 0 keeps it whole"
