#!/usr/bin/env bash
# The zero-bubble schedules (zb-h1, zb-h2): every backward as B (the gradients of the stage's
# input) and W (its weights'), W deferred into what would be bubbles. They are synchronous:
#   - at p = 4 with an uneven split ([0.5, 1.5, 1.5, 0.5]), 20 steps, on CPU threads, they give
#     one stage's bits (model.bin, state.bin past the schedule's fields, losses), as 1f1b does;
#     zb-h2 at window 8 (its own order needs K >= 2p - 1; below that it runs zb-h1's), against
#     one stage at window 8; so do zb-h2 with the vocabulary split and messages bf16 against
#     1f1b with the same split (bf16 messages round, so the reference is the pipeline, not one
#     stage), and zb-h1 as 4 processes over TCP against its threads;
#   - under precision bf16 on CPU threads (ln1, ln2, GELU's and attention's outputs kept in bf16
#     and widened for the products, W's as the whole backward's), the same shapes: zb-h1 and
#     zb-h2 give one bf16 stage's bits, as 1f1b does;
#   - on four fake GPUs (the real GPU layer, kernels under the emulator, NCCL between stages)
#     zb-h1 and zb-h2, the same shapes and 20 steps, train as their CPU path to cuda_fake.sh's
#     tolerances, and log one stage's losses to 1e-5;
#   - under precision bf16 on fake GPUs (the products read bf16 copies; W's bias kernels write
#     the copies of the gradients B kept, B's keep of d fc the copy its product fused with
#     GELU's gradient did not): zb-h1 and zb-h2 (flash attention) and zb-h1 (matmul) at p = 2
#     split [0.5, 1.5] (a trailing attention half, a leading MLP half, a whole layer), and
#     zb-h1 with the vocabulary split at p = 3, train as 1f1b on the same GPUs, to the bit
#     (weights, losses);
#   - the table shows the split: the last stage defers its W's to the window's end;
#   - run --profile-out measures a W apart from its B (the replay's price of W).
# Skips the GPU part (not the rest) where tests/cuda_emu cannot run.
source tests/e2e/lib.sh

split="[0.5, 1.5, 1.5, 0.5]"
# window_8 NAME: NAME's window 4 becomes 8 (zb-h2's own order at p = 4 needs at least 7).
window_8() {
    sed -i "s/; window 4/; window 8/" "$work/$1.paci"
    grep -q "; window 8" "$work/$1.paci" || fail "window edit of $1 did not apply"
}
split_model one 1 1f1b ""
split_model one8 1 1f1b ""
window_8 one8
for run in one one8; do train "$run" --blas-threads 1 || fail "$run (one stage) did not train"; done
for schedule in 1f1b zb-h1 zb-h2; do
    split_model "$schedule" 4 "$schedule" "$split"
    reference=one
    [ "$schedule" != zb-h2 ] || { window_8 zb-h2; reference=one8; }
    train "$schedule" --blas-threads 1 || fail "$schedule did not train"
    same_step20 "$reference" "$schedule" || fail "$schedule, split $split: not one stage's bits"
done
[ "$(losses zb-h1 | wc -l)" = 20 ] || fail "zb-h1 logged $(losses zb-h1 | wc -l) steps, 20 expected"
echo "1f1b and zb-h1 (window 4), zb-h2 (window 8) at p = 4, split $split, 20 steps: one stage's model, optimizer state and losses, to the bit"

# The listing: B's and W's; the last stage runs its B's as the gradients come and its W's at the end.
listing=$("$pacic" "$work/zb-h1.paci" --emit schedule 2> /dev/null)
last=$(sed -n '/stage 3:/,$p' <<< "$listing" | tr '\n' ' ')
[[ "$last" == *"F3 B3 sg3 W0 W1 W2 W3 S"* ]] || fail "zb-h1's last stage does not defer its W's: $last"
# zb-h2 at window 8 runs its own order: stage 0 warms up with 2p - 1 = 7 forwards (zb-h1: 4).
listing=$("$pacic" "$work/zb-h2.paci" --emit schedule 2> /dev/null)
first=$(sed -n '/stage 0:/,/stage 1:/p' <<< "$listing" | tr '\n' ' ' | tr -s ' ')
[[ "$first" == *"F6 sa6 rg0 B0 W0 F7"* ]] || fail "zb-h2's first stage does not warm up with 7 forwards: $first"

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
    window_8 "vs-$schedule"
    with_pipeline "vs-$schedule" "vocab_split 128; messages bf16"
    train "vs-$schedule" --blas-threads 1 || fail "vs-$schedule did not train"
done
same_step20 vs-1f1b vs-zb-h2 || fail "zb-h2 with vocab_split and messages bf16 differs from 1f1b's"
echo "zb-h2 with vocab_split 128 and messages bf16, split [1, 2, 1, 0]: 1f1b's bits"

# processes: four ranks over TCP give the threads' bits
processes_equal_threads zb-h1 4
echo "zb-h1 as 4 processes over TCP: the threaded run's bits"

# precision bf16 on the CPU: one bf16 stage's bits (recompute full and accumulate pairwise are
# refused: tests/golden/err_zb_*.paci)
for run in one one8 1f1b zb-h1 zb-h2; do
    sed "s/^train {/train {\n    precision bf16/" "$work/$run.paci" > "$work/bf16-$run.paci"
    train "bf16-$run" --blas-threads 1 || fail "$run under bf16 did not train"
done
for schedule in 1f1b zb-h1 zb-h2; do
    reference=bf16-one
    [ "$schedule" != zb-h2 ] || reference=bf16-one8
    same_step20 "$reference" "bf16-$schedule" || fail "$schedule under bf16, split $split: not one bf16 stage's bits"
done
cmp -s "$work/one/ckpt/step_00000020/model.bin" "$work/bf16-one/ckpt/step_00000020/model.bin" &&
    fail "precision bf16 trained fp32's bits"
echo "precision bf16: 1f1b and zb-h1 (window 4), zb-h2 (window 8) at p = 4, split $split: one bf16 stage's bits"

# The GPU path on the fake stack: zb-h1 and zb-h2 at p = 4 on four fake GPUs, the shapes
# above, against their CPU path and against one stage's losses (the GPU's kernels round
# otherwise than the CPU's, so to a tolerance, not to the bit).
if [ "${PACI_BUILD:-build}" = build ] && [ -f build/lib/pacic/libpacirt_cuda.a ] &&
    command -v "${CXX:-g++}" > /dev/null; then
    need_cuda_emu
    export PACIC_CACHE=$work/cache
    for schedule in zb-h1 zb-h2; do
        split_model "gpu-$schedule" 4 "$schedule" "$split"
        reference=one
        [ "$schedule" != zb-h2 ] || { window_8 "gpu-$schedule"; reference=one8; }
        fake_build "gpu-$schedule"
        on_fake_gpus 4 "gpu-$schedule" cuda --device cuda || fail "$schedule on four fake GPUs"
        on_fake_gpus 4 "gpu-$schedule" cpu --device cpu || fail "$schedule on the CPU"
        compare_devices "$schedule, split $split, 20 steps, four fake GPUs" \
            "$work/gpu-$schedule/cuda" "$work/gpu-$schedule/cpu" 1e-5 1e-4
        python3 - "$work/gpu-$schedule/cuda/metrics.jsonl" "$work/$reference/metrics.jsonl" "$schedule" <<'PY' ||
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, open(path)) if "loss" in r}
gpu, one = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(gpu) == sorted(one) == list(range(1, 21)), "steps %s against %s" % (sorted(gpu), sorted(one))
worst = max(abs(gpu[s] - one[s]) / abs(one[s]) for s in one)
assert worst <= 1e-5, "largest relative difference %.3g" % worst
print("%s on four fake GPUs against one stage on the CPU: 20 losses, largest relative difference %.3g" % (sys.argv[3], worst))
PY
            fail "$schedule on four fake GPUs does not log one stage's losses"
    done
    # bf16 on fake GPUs: against 1f1b's run on them (the GPU's bf16 products round otherwise
    # than the CPU's), to the bit. gpu_bf16 NAME STAGES SCHEDULE ATTENTION KEYS: the 2-layer
    # model, window 4, 6 steps, with the pipeline keys KEYS, run on STAGES fake GPUs.
    gpu_bf16() {
        small_model "$1" "$2" "$3" 4 6 3
        sed -i -e "s/^train {/train {\n    precision bf16\n    attention $4/" -e "s/layers 4;/layers 2;/" "$work/$1.paci"
        with_pipeline "$1" "$5"
        fake_build "$1"
        FAKE_CUDA_REPORT=1 on_fake_gpus "$2" "$1" cuda --device cuda || fail "$1 on $2 fake GPUs"
    }
    for schedule in 1f1b zb-h1 zb-h2; do
        gpu_bf16 "bf16-flash-$schedule" 2 "$schedule" flash "split [0.5, 1.5]"
    done
    for schedule in 1f1b zb-h1; do
        gpu_bf16 "bf16-matmul-$schedule" 2 "$schedule" matmul "split [0.5, 1.5]"
        gpu_bf16 "bf16-vocab-$schedule" 3 "$schedule" flash "split [1, 1, 0]; vocab_split 128"
    done
    grep -q "^fake cuda: calls:.* dgelu_epilogue [1-9]" "$work/bf16-flash-zb-h1/cuda/err.txt" ||
        fail "zb-h1 under bf16: GELU's gradient did not fuse into its product"
    for run in flash-zb-h1 flash-zb-h2 matmul-zb-h1 vocab-zb-h1; do
        compare_devices "$run under bf16 against 1f1b on the same fake GPUs" "$work/bf16-$run/cuda" \
            "$work/bf16-${run%-zb-h*}-1f1b/cuda" 0 0
    done
else
    skip_part "no CUDA toolkit, C++ compiler or plain build: zb-h1 and zb-h2 on the fake GPUs"
fi
