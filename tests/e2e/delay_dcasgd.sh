#!/usr/bin/env bash
# `delay_correction dc-asgd` end to end (PACI at p = 4, K = 2: delays of 1 and 2 steps):
# dc_lambda 0 trains as plain PACI to the bit (losses, weights, optimizer state); dc_lambda
# > 0 runs the correction (another run), the loss falls, and it resumes bit for bit. The
# formula itself, per backward, against a float64 reference: tests/unit/test_dcasgd.c. On
# the GPU path (the fake CUDA stack of tests/cuda_fake) it is refused, naming the way out.
source tests/e2e/lib.sh

# The listing marks each delayed forward with the d its backward is corrected for.
small_model listing 4 paci 2 12 0 6
with_pipeline listing "delay_correction dc-asgd; dc_lambda 0.5"
"$pacic" "$work/listing.paci" --emit schedule 2>/dev/null > "$work/listing.txt"
grep -q "its gradient is corrected for them (delay_correction dc-asgd)" "$work/listing.txt" || fail "no dc-asgd note in the listing"
grep -q "body x.*F3+1 sa3 rg0 B0 F4+2" "$work/listing.txt" || fail "stage 0's delays: $(grep -m1 'body' "$work/listing.txt")"

# --explain counts the two weight copies on each stage with a delayed forward (not the last).
"$pacic" "$work/listing.paci" --explain 2>/dev/null > "$work/explain.txt"
grep -q "delay correction: dc-asgd (DC-ASGD, Zheng et al. 2017, constant lambda 0.5)" "$work/explain.txt" ||
    fail "no dc-asgd section in --explain"
grep -q "stage 0: +[0-9.]* MiB, 2 of 2 backwards per step corrected (d <= 2)" "$work/explain.txt" ||
    fail "stage 0's cost: $(grep 'stage 0: +' "$work/explain.txt")"
grep -q "stage 3: +0.00 MiB, 0 of 2 backwards per step corrected (d <= 0)" "$work/explain.txt" ||
    fail "stage 3's cost: $(grep 'stage 3: +' "$work/explain.txt")"

# dc_lambda 0 is plain PACI, bit for bit.
small_model plain 4 paci 2 12 0 6
small_model zero 4 paci 2 12 0 6
with_pipeline zero "delay_correction dc-asgd; dc_lambda 0"
train plain 2>/dev/null
train zero 2>/dev/null
for f in model.bin state.bin; do
    cmp "$work/plain/ckpt/step_00000012/$f" "$work/zero/ckpt/step_00000012/$f" ||
        fail "dc_lambda 0: $f differs from plain PACI's"
done
[ "$(losses plain)" = "$(losses zero)" ] || fail "dc_lambda 0: the losses differ from plain PACI's"
echo "paci K=2 dc-asgd dc_lambda 0 == plain PACI (weights, optimizer state, 12 losses)"

# dc_lambda > 0: the correction runs (another run than plain PACI's), the loss falls, and a
# stop at the checkpoint resumes bit for bit (W_prev is refreshed by a step of the run before
# any backward reads it, so it is not checkpoint state).
small_model lambda 4 paci 2 12 0 6
with_pipeline lambda "delay_correction dc-asgd; dc_lambda 2"
train lambda 2>/dev/null
cmp -s "$work/plain/ckpt/step_00000012/model.bin" "$work/lambda/ckpt/step_00000012/model.bin" &&
    fail "dc_lambda 2 trained the same weights as plain PACI"
first=$(losses lambda | head -1)
last=$(losses lambda | tail -1)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.8) }' || fail "dc_lambda 2: loss fell too little ($first -> $last)"
mkdir -p "$work/lambda-resumed"
cp "$work/lambda/run" "$work/lambda-resumed/run"
(cd "$work/lambda-resumed" && ./run --quiet --steps 6 && ./run --quiet --resume)
for f in model.bin state.bin; do
    cmp "$work/lambda/ckpt/step_00000012/$f" "$work/lambda-resumed/ckpt/step_00000012/$f" ||
        fail "dc_lambda 2: $f after resume differs from the straight run"
done
echo "paci K=2 dc-asgd dc_lambda 2: loss $first -> $last, not plain PACI's weights; 12 straight == 6 + resume + 6"

# Under a synchronous schedule it only warns and compiles the same table as none.
small_model sync 3 1f1b 2 4
"$pacic" "$work/sync.paci" --emit schedule > "$work/sync-none.txt"
with_pipeline sync "delay_correction dc-asgd; dc_lambda 1"
"$pacic" "$work/sync.paci" --emit schedule > "$work/sync-dc.txt" 2> "$work/warning.txt"
grep -q "delay_correction dc-asgd does nothing under the synchronous schedule 1f1b" "$work/warning.txt" ||
    fail "no warning for 1f1b: $(cat "$work/warning.txt")"
cmp "$work/sync-none.txt" "$work/sync-dc.txt" || fail "1f1b with dc-asgd compiles to another table"
echo "1f1b dc-asgd: warned, the same table as none"

# On the GPU path (the fake CUDA stack, as tests/e2e/cuda_fake.sh builds it: a part skipped
# without it) the correction is the device's kernel: from the same seed, --device cuda trains
# as --device cpu does (cuda_fake.sh's tolerances), PACI on three stages on one GPU (device
# links) and on three (NCCL), and both stay far from plain PACI's run.
CXX=${CXX:-$(command -v g++ || command -v clang++ || true)}
if [ "${PACI_BUILD:-build}" != build ] || [ ! -f build/lib/pacic/libpacirt_cuda.a ] || [ -z "$CXX" ]; then
    skip_part "the fake CUDA stack cannot run here (sanitizer build, no libpacirt_cuda.a or no C++ compiler)"
else
    export CXX FAKE_CACHE=$work/fake-cache PACIC_CACHE=$work/cache
    # on NAME DIR GPUS [run flags...]: NAME's program in $work/NAME/DIR on GPUS fake GPUs.
    on() {
        local name=$1 dir=$2 gpus=$3
        shift 3
        mkdir -p "$work/$name/$dir"
        (cd "$work/$name/$dir" && LD_LIBRARY_PATH=$work/$name/lib FAKE_CUDA_GPUS=$gpus \
            ../run --metrics metrics.jsonl "$@" > out.txt 2> err.txt) || { cat "$work/$name/$dir/err.txt" >&2; return 1; }
    }
    for name in gpu gpu-plain; do
        small_model "$name" 3 paci 2 4
        sed -i "s/layers 4;/layers 1;/" "$work/$name.paci"
        with_pipeline "$name" "split [0, 1, 0]"
    done
    with_pipeline gpu "delay_correction dc-asgd; dc_lambda 50"
    fake_build gpu
    fake_build gpu-plain
    on gpu cpu 1 --device cpu || fail "dc-asgd: --device cpu"
    on gpu cuda 1 --device cuda || fail "dc-asgd: --device cuda on one GPU"
    compare_devices "dc-asgd, 3 stages on one GPU" "$work/gpu/cuda" "$work/gpu/cpu" 1e-5 1e-4
    on gpu nccl 3 --device cuda || fail "dc-asgd: --device cuda on three GPUs"
    compare_devices "dc-asgd, 3 stages on three GPUs" "$work/gpu/nccl" "$work/gpu/cpu" 1e-5 1e-4
    on gpu-plain cpu 1 --device cpu || fail "plain PACI: --device cpu"
    (compare_devices "dc-asgd against plain PACI" "$work/gpu/cuda" "$work/gpu-plain/cpu" 1e-5 1e-4) > "$work/plain.txt" 2>&1 &&
        fail "dc_lambda 50 on the GPU trains as plain PACI does, to the tolerances: $(cat "$work/plain.txt")"
    echo "dc-asgd on the (fake) GPU == its CPU run to the tolerances, and not plain PACI's"
fi
