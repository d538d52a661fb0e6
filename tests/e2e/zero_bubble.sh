#!/usr/bin/env bash
# The zero-bubble schedules (zb-h1, zb-h2): every backward as B (the gradients of the stage's
# input) and W (its weights'), W deferred into what would be bubbles. They are synchronous:
#   - at p = 4 with an uneven split ([0.5, 1.5, 1.5, 0.5]), 20 steps, on CPU threads, they give
#     one stage's bits (model.bin, state.bin past the schedule's fields, losses), as 1f1b does;
#     so do zb-h2 with the vocabulary split and messages bf16 against 1f1b with the same
#     split (bf16 messages round, so the reference is the pipeline, not one stage), and zb-h1
#     as 4 processes over TCP against its threads;
#   - on four fake GPUs (the real GPU layer, kernels under the emulator, NCCL between stages)
#     zb-h1 trains as its CPU path, to cuda_fake.sh's tolerances;
#   - the table shows the split: the last stage defers its W's to the window's end;
#   - run --profile-out measures a W apart from its B (the replay's price of W).
# Skips the GPU part (not the rest) where tests/cuda_emu cannot run.
source tests/e2e/lib.sh

split="[0.5, 1.5, 1.5, 0.5]"
split_model one 1 1f1b ""
train one --blas-threads 1 || fail "one stage did not train"
for schedule in 1f1b zb-h1 zb-h2; do
    split_model "$schedule" 4 "$schedule" "$split"
    train "$schedule" --blas-threads 1 || fail "$schedule did not train"
    same_step20 one "$schedule" || fail "$schedule, split $split: not one stage's bits"
done
[ "$(losses zb-h1 | wc -l)" = 20 ] || fail "zb-h1 logged $(losses zb-h1 | wc -l) steps, 20 expected"
echo "zb-h1, zb-h2 and 1f1b at p = 4, split $split, 20 steps: one stage's model, optimizer state and losses, to the bit"

# The listing: B's and W's; the last stage runs its B's as the gradients come and its W's at the end.
listing=$("$pacic" "$work/zb-h1.paci" --emit schedule 2> /dev/null)
last=$(sed -n '/stage 3:/,$p' <<< "$listing" | tr '\n' ' ')
[[ "$last" == *"F3 B3 sg3 W0 W1 W2 W3 S"* ]] || fail "zb-h1's last stage does not defer its W's: $last"

# The profile prices W apart (a stage line's `w`, under its whole backward), which pacic reads;
# a schedule without W's writes none.
for schedule in zb-h1 1f1b; do
    (cd "$work/$schedule" && ./run --quiet --no-checkpoint --steps 4 --profile-out profile.txt) ||
        fail "$schedule --profile-out"
done
stages_with_w=$(awk '/^stage / && $9 == "w" && $10 > 0 && $10 < $5' "$work/zb-h1/profile.txt" | wc -l)
[ "$stages_with_w" = 4 ] || fail "zb-h1's profile prices W on $stages_with_w of 4 stages: $(grep '^stage' "$work/zb-h1/profile.txt")"
! grep -q '^stage .* w ' "$work/1f1b/profile.txt" || fail "1f1b's profile has W's: $(grep '^stage' "$work/1f1b/profile.txt")"
"$pacic" "$work/zb-h1.paci" --profile "$work/zb-h1/profile.txt" --explain > /dev/null ||
    fail "pacic does not read zb-h1's profile"
echo "zb-h1's profile gives every stage's W its own measured seconds; 1f1b's none"

# the vocabulary split and bf16 messages: against 1f1b, which rounds its messages alike
for schedule in 1f1b zb-h2; do
    split_model "vs-$schedule" 4 "$schedule" "[1, 2, 1, 0]"
    with_pipeline "vs-$schedule" "vocab_split 128; messages bf16"
    train "vs-$schedule" --blas-threads 1 || fail "vs-$schedule did not train"
done
same_step20 vs-1f1b vs-zb-h2 || fail "zb-h2 with vocab_split and messages bf16 differs from 1f1b's"
echo "zb-h2 with vocab_split 128 and messages bf16, split [1, 2, 1, 0]: 1f1b's bits"

# processes: four ranks over TCP give the threads' bits
processes_equal_threads zb-h1 4
echo "zb-h1 as 4 processes over TCP: the threaded run's bits"

# Refused where B and W are not built: bf16, recompute full, accumulate pairwise.
small_model refused 2 zb-h1 2 4
sed -i "s/^train {/train {\n    precision bf16/" "$work/refused.paci"
out=$("$pacic" "$work/refused.paci" -o "$work/refused.run" 2>&1) && fail "zb-h1 under bf16 compiled"
grep -q "error: zb-h1 runs under precision fp32 only for now" <<< "$out" || fail "zb-h1 under bf16: $out"

# The GPU path on the fake stack: zb-h1 at p = 4 on four fake GPUs against its CPU path.
if [ "${PACI_BUILD:-build}" = build ] && [ -f build/lib/pacic/libpacirt_cuda.a ] &&
    command -v "${CXX:-g++}" > /dev/null; then
    need_cuda_emu
    export PACIC_CACHE=$work/cache
    small_model gpu 4 zb-h1 4 6 3
    sed -i "s/layers 4;/layers 2;/" "$work/gpu.paci"
    set_split gpu "[0, 0.5, 1.5, 0]"
    fake_build gpu
    on_fake_gpus 4 gpu cuda --device cuda || fail "zb-h1 on four fake GPUs"
    on_fake_gpus 4 gpu cpu --device cpu || fail "zb-h1 on the CPU"
    compare_devices "zb-h1, split [0, 0.5, 1.5, 0], four fake GPUs" "$work/gpu/cuda" "$work/gpu/cpu" 1e-5 1e-4
else
    skip_part "no CUDA toolkit, C++ compiler or plain build: zb-h1 on the fake GPUs"
fi
