#!/usr/bin/env bash
# Stage boundaries inside a layer, between its attention half and its MLP half (`split
# [1.5, ...]`): such programs build without a warning from the C compiler, train under a
# synchronous schedule to the same bits as one stage (losses, model.bin, state.bin, and the
# Hugging Face export), hold lone halves at either end, resume bit for bit under PACI, and a
# checkpoint written with halves resumes under whole layers. The automatic split uses halves
# where they make the slowest stage faster.
source tests/e2e/lib.sh

# trains_as_one START WHAT NAME...: each program's stage 1 starts with WHAT (its --dump plan
# label matching START, e.g. "[01]b"), and it trains to one stage's bits over 20 steps.
trains_as_one() {
    local start=$1 what=$2 name plan
    shift 2
    for name in "$@"; do
        plan=$("$pacic" "$work/$name.paci" --dump plan)
        grep -qE "^stage 1: layers $start\.\." <<< "$plan" || fail "$name: stage 1 does not start with $what: $plan"
        build_quiet "$name"
        run_quiet "$name"
        same_step20 one "$name" || fail "$name: weights, optimizer state or losses differ from one stage"
    done
}

split_model one 1 gpipe ""
build_quiet one
run_quiet one
[ "$(losses one | wc -l)" = 20 ] || fail "expected 20 logged steps"
# [1.5, 2, 0.5]: layer 1 split over stages 0 and 1, layer 3's MLP alone with the head;
# [0.5, 1.5, 1.5, 0.5]: layer 0's attention alone with the embedding, and every stage cut
# inside a layer
split_model halves-1f1b 3 1f1b "[1.5, 2, 0.5]"
split_model halves-gpipe 4 gpipe "[0.5, 1.5, 1.5, 0.5]"
trains_as_one "[01]b" "an MLP half" halves-1f1b halves-gpipe
grep -q "^stage 0: layers 0a\.\.0a +embed" <<< "$("$pacic" "$work/halves-gpipe.paci" --dump plan)" ||
    fail "[0.5, ...]: stage 0 is not layer 0's attention half with the embedding"
echo "splits inside layers (1f1b [1.5, 2, 0.5], gpipe [0.5, 1.5, 1.5, 0.5]): model.bin, state.bin and losses equal one stage's over 20 steps"

# The Hugging Face export names tensors by layer, whichever stage held which half.
export_equals_one halves-gpipe "[0.5, 1.5, 1.5, 0.5]"

# Cuts after a layer's fc product (`split [1.75, ...]`): the stage after starts with its GELU,
# and the message is resid2 and the fc output. [1.75, 2, 0.25]: layer 1's GELU piece on stage
# 1, layer 3's alone with the head; [0.75, 1.25, 1.5, 0.5]: layer 0's attention half and fc
# piece alone with the embedding, beside halves.
split_model fc-1f1b 3 1f1b "[1.75, 2, 0.25]"
split_model fc-gpipe 4 gpipe "[0.75, 1.25, 1.5, 0.5]"
split_model fc-zb 3 zb-h1 "[1.75, 2, 0.25]" # its backward as B and W, each piece's apart
trains_as_one "[01]g" "a GELU piece" fc-1f1b fc-gpipe fc-zb
grep -q "^stage 0: layers 0f\.\.0f +embed" <<< "$("$pacic" "$work/fc-gpipe.paci" --dump plan)" ||
    fail "[0.75, ...]: stage 0 is not layer 0 up to its fc product with the embedding"
echo "splits after the fc product (1f1b and zb-h1 [1.75, 2, 0.25], gpipe [0.75, 1.25, 1.5, 0.5]): model.bin, state.bin and losses equal one stage's over 20 steps"

# Cuts after a layer's attention kernel (`split [1.25, ...]`): the stage after starts with its
# projection, and the message is x and the attention's output. [1.25, 1.5, 1.25]: layer 1's
# proj piece on stage 1, beside an fc cut; [0.25, 1.25, 1.75, 0.75]: layer 0's att piece alone
# with the embedding, beside halves, and layer 3's proj piece with its MLP and the head.
split_model att-1f1b 3 1f1b "[1.25, 1.5, 1.25]"
split_model att-gpipe 4 gpipe "[0.25, 1.25, 1.75, 0.75]"
split_model att-zb 3 zb-h1 "[1.25, 2, 0.75]"
trains_as_one "[01]p" "a proj piece" att-1f1b att-gpipe att-zb
grep -q "^stage 0: layers 0t\.\.0t +embed" <<< "$("$pacic" "$work/att-gpipe.paci" --dump plan)" ||
    fail "[0.25, ...]: stage 0 is not layer 0's att piece with the embedding"
echo "splits after attention (1f1b [1.25, 1.5, 1.25], zb-h1 [1.25, 2, 0.75], gpipe [0.25, 1.25, 1.75, 0.75]): model.bin, state.bin and losses equal one stage's over 20 steps"

# one stage's export exists now (export_equals_one above)
run_quiet fc-gpipe --export hf hf >/dev/null
cmp -s "$work/one/hf-one/model.safetensors" "$work/fc-gpipe/hf/model.safetensors" ||
    fail "the export of [0.75, 1.25, 1.5, 0.5] differs from one stage's"
echo "Hugging Face export of [0.75, 1.25, 1.5, 0.5] == one stage's"
run_quiet att-gpipe --export hf hf >/dev/null
cmp -s "$work/one/hf-one/model.safetensors" "$work/att-gpipe/hf/model.safetensors" ||
    fail "the export of [0.25, 1.25, 1.75, 0.75] differs from one stage's"
echo "Hugging Face export of [0.25, 1.25, 1.75, 0.75] == one stage's"

# Resume under PACI: 20 straight == 10, stop, resume, 10.
resume_equals_straight 3 "[1.5, 1, 1.5]"

# A checkpoint of halves resumes under whole layers, to the same bits as
# a run that never changed its split (1f1b: synchronous, so any split gives one stage's bits).
split_model sync-halves 3 1f1b "[1.5, 1, 1.5]" 0 10
split_model sync-whole 3 1f1b "[1, 2, 1]" 0 10
build_quiet sync-halves
build_quiet sync-whole
run_quiet sync-halves --steps 10
cp -r "$work/sync-halves/ckpt" "$work/sync-whole/ckpt"
(cd "$work/sync-whole" && ./run --quiet --blas-threads 1 --resume --metrics metrics.jsonl)
cmp -s "$work/one/ckpt/step_00000020/model.bin" "$work/sync-whole/ckpt/step_00000020/model.bin" ||
    fail "a [1.5, 1, 1.5] checkpoint resumed under [1, 2, 1] does not reach one stage's weights"
echo "a checkpoint written by [1.5, 1, 1.5] resumes under [1, 2, 1] to one stage's weights at step 20"

# Automatic: the small model's 4 layers and its head over 3 stages cannot balance in whole
# layers; with halves it splits [1.5, 1.5, 1].
split_model auto 3 paci ""
plan=$("$pacic" "$work/auto.paci" --dump plan)
grep -q "^stage 1: layers 1b\.\.2 " <<< "$plan" || fail "the automatic split did not cut inside a layer: $plan"
explain=$("$pacic" "$work/auto.paci" --explain 2>&1)
grep -qE "^ +1  [0-9]+b-" <<< "$explain" || fail "--explain does not label the halves: $explain"
echo "automatic split: cuts inside a layer where whole layers cannot balance"
