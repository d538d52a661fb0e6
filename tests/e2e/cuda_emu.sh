#!/usr/bin/env bash
# The generated CUDA code, run without a GPU: pacic's stages.cu compiled as C++ under the
# emulator tests/cuda_emu/simt.h (blocks in turn, threads as coroutines, barriers and warp
# shuffles), and the generated GPU host half linked with tests/cuda_emu/emu_device.c in place
# of libpacirt_cuda.a (host memory, OpenBLAS for cuBLASLt). First the emulator's primitives on
# their own (tests/cuda_emu/simt_test.cpp, and three misuses it must refuse), and the tiled
# attention kernels against the row kernels (tests/cuda_emu/attention_check.cpp); then small models
# at p = 1 under `attention flash`, `matmul` and `stored`, and at p = 2 under flash, train from the same seed with
# --device cuda (emulated) and --device cpu in one binary, and the losses per step, the
# validation losses and the final weights must agree: losses to LOSS_TOL relative and weights
# to WEIGHT_TOL absolute (the row kernels' warp reductions sum in another order than the CPU
# loops, so the final weights differ in their last bits, about 1e-6; a wrong index exceeds the
# tolerances by orders of magnitude, see docs/gpu.md). For flash at p = 1, --sample must also
# draw the same tokens on both devices (the GPU's head leaves dlogits, not probabilities).
# CUDA_EMU_SED='sed script' edits every generated stages.cu before it is compiled: a way to
# show that a broken kernel fails this test (never set in `make test`).
# Skips (exit 77) without libpacirt_cuda.a, without a C++ compiler (g++ or clang++), when pacic
# writes no stages.cu, and under the sanitizer builds (the coroutines switch stacks with
# ucontext and siglongjmp, which ASan does not follow; the plain build runs this test).
source tests/e2e/lib.sh
need_cuda_emu
export PACIC_CACHE=$work/cache
emu=$root/tests/cuda_emu
LOSS_TOL=1e-5
WEIGHT_TOL=1e-4
cxxflags="-std=c++17 -O1 -Wall -Wno-unknown-pragmas -include $emu/simt.h"

# The primitives: the handwritten kernels pass, and the misuses abort with simt's message.
"$CXX" $cxxflags -x c++ "$emu/simt_test.cpp" -pthread -o "$work/simt_test" || fail "simt_test does not build"
"$work/simt_test" > "$work/simt.txt" || { cat "$work/simt.txt" >&2; fail "simt primitives"; }
grep "^simt: " "$work/simt.txt"
for misuse in deadlock exited partial; do
    set +e
    { (ulimit -c 0; "$work/simt_test" $misuse) > "$work/misuse.txt" 2>&1; } 2> /dev/null
    status=$?
    set -e
    [ "$status" -ne 0 ] && grep -q "^simt: " "$work/misuse.txt" || { cat "$work/misuse.txt" >&2; fail "misuse '$misuse' not refused"; }
    echo "refused ($misuse): $(grep "^simt: " "$work/misuse.txt")"
done

# The tiled attention kernels against the row kernels the CPU runs, one generated unit each
# (tests/cuda_emu/attention_check.cpp, on peaked softmaxes, context 80: not a multiple of any
# tile): fp32 to ATT_FP32_TOL, bf16 on the emulated tensor cores to ATT_BF16_TOL, relative to
# each tensor's largest value (measured: 1.3e-6 and 8.8e-3, see docs/gpu.md); head sizes 24
# (padded to 32) and 64 (GPT-2's), so every tiling branch of the forward and backward runs.
ATT_FP32_TOL=1e-5
ATT_BF16_TOL=3e-2
[ -f build/obj/libpacic.a ] || fail "build/obj/libpacic.a missing: run make first"
"${CC:-cc}" -std=c11 -D_GNU_SOURCE -O2 -Wall -Werror -Icompiler "$emu/emit_stage_cu.c" build/obj/libpacic.a -lm \
    -o "$work/emit_stage_cu" || fail "emit_stage_cu does not build"
for shape in "48 2 80 1" "128 2 80 1"; do
    for precision in fp32 bf16; do
        unit=$work/attention-${shape// /-}-$precision
        "$work/emit_stage_cu" $shape $precision > "$unit.cu" || fail "emit_stage_cu $shape $precision"
        [ -z "${CUDA_EMU_SED:-}" ] || sed -i -e "$CUDA_EMU_SED" "$unit.cu"
        "$CXX" $cxxflags -DSTAGES_CU="\"$unit.cu\"" "$emu/attention_check.cpp" -o "$unit" \
            || fail "attention_check does not build for $shape $precision"
        tol=$ATT_FP32_TOL
        [ $precision = fp32 ] || tol=$ATT_BF16_TOL
        "$unit" $tol || fail "the tiled attention ($shape, $precision) disagrees with the row kernels"
    done
done

"${CC:-cc}" -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -Iruntime -c "$emu/emu_device.c" \
    -o "$work/emu_device.o" || fail "emu_device.c does not build"

# build_emu NAME: $work/NAME/run from $work/NAME.paci, the emulated GPU in place of CUDA's
# (tests/cuda_emu/build_run.sh).
build_emu() {
    local name=$1 status=0
    mkdir -p "$work/$name"
    PACIC=$pacic CXX=$CXX CUDA_EMU_OBJ=$work/emu_device.o "$emu/build_run.sh" "$work/$name.paci" "$work/$name/run" || status=$?
    [ "$status" -ne 77 ] || skip "pacic --emit c wrote no stages.cu (no NVRTC here?)"
    [ "$status" -eq 0 ] || fail "$name: the emulated build"
}

for p in 1 2; do
    [ -z "${TILES_ONLY:-}" ] || break
    for attention in flash matmul stored; do
        # matmul's and stored's kernels are the same at p = 2 as at p = 1; flash covers the stage boundary
        [ "$p" = 1 ] || [ "$attention" = flash ] || continue
        name=$attention-$p
        small_model "$name" $p paci 2 6 3
        sed -i "s/^train {/train {\n    attention $attention/" "$work/$name.paci"
        build_emu "$name"
        for device in cuda cpu; do
            mkdir -p "$work/$name/$device"
            (cd "$work/$name/$device" && ../run --device $device --quiet --metrics metrics.jsonl) \
                || fail "$name: --device $device did not train"
        done
        [ "$(grep -c '"loss"' "$work/$name/cuda/metrics.jsonl")" -eq 6 ] || fail "$name: expected 6 steps"
        compare_devices "$name" "$work/$name/cuda" "$work/$name/cpu" "$LOSS_TOL" "$WEIGHT_TOL"
        if [ "$name" = flash-1 ]; then
            # The GPU's forward leaves dlogits where the CPU's leaves probabilities: sampling
            # from the trained weights must still draw the same tokens on both.
            for device in cuda cpu; do
                (cd "$work/$name/$device" && ../run --device $device --quiet --sample 16 --seed 1 > sample.txt) ||
                    fail "$name: --sample on --device $device"
            done
            cmp -s "$work/$name/cuda/sample.txt" "$work/$name/cpu/sample.txt" ||
                fail "$name: --sample differs: cuda '$(cat "$work/$name/cuda/sample.txt")', cpu '$(cat "$work/$name/cpu/sample.txt")'"
            echo "$name: --sample 16 draws the same tokens on both devices"
        fi
    done
done

# The tiled attention (compiler/attention_gpu.c) over several tiles: context 80 is not a multiple
# of the tiles (64 queries per forward block, 32 keys or queries streamed by the backward: the
# online softmax rescales, the causal skip and the partial last tiles all run), and head size 24
# pads to 32 (two 16-wide steps of each product). fp32 (FMAs from shared memory) must match the
# CPU to rounding, as above, over 2 steps. bf16 (WMMA, emulated: operands and probabilities
# rounded to bf16, fp32 sums) runs 1 step: its loss and gradient norm must agree to
# BF16_LOSS_TOL relative (measured 8.3e-5); its weights are not compared (WEIGHT_TOL 1), since
# AdamW's first step moves every weight by lr times the sign of its gradient, so a tiny gradient
# of the other sign differs by 2 lr however close the gradients are. TILES_ONLY=fp32 or bf16 runs
# only that part (to show a planted bug fails it quickly; never set in `make test`).
BF16_LOSS_TOL=1e-3
for precision in fp32 bf16; do
    [ -z "${TILES_ONLY:-}" ] || [ "$TILES_ONLY" = $precision ] || continue
    name=tiles-$precision
    steps=2
    [ $precision = fp32 ] || steps=1
    cat > "$work/$name.paci" <<DSL
model gpt2 { layers 1; width 48; heads 2; context 80; vocab 256 }
pipeline { stages 1; schedule paci; window 2 }
batch { micro 2 }
train {
    data "$data/tiny_train.bin"
    steps $steps
    precision $precision
    optimizer adamw { lr 3e-3 }
    checkpoint { every $steps; dir "ckpt" }
}
DSL
    build_emu "$name"
    grep -q "K_flash_attention_backward_key, " "$work/$name/run.emu/gen/stage_0.c" || fail "$name: the tiled attention is not launched"
    for device in cuda cpu; do
        mkdir -p "$work/$name/$device"
        (cd "$work/$name/$device" && ../run --device $device --quiet --metrics metrics.jsonl) \
            || fail "$name: --device $device did not train"
    done
    if [ $precision = fp32 ]; then
        compare_devices "$name" "$work/$name/cuda" "$work/$name/cpu" "$LOSS_TOL" "$WEIGHT_TOL"
    else
        compare_devices "$name" "$work/$name/cuda" "$work/$name/cpu" "$BF16_LOSS_TOL" 1
    fi
done
[ -z "${TILES_ONLY:-}" ] || exit 0
echo "the generated CUDA code under the emulator matches the CPU path (flash, matmul and stored attention, p = 1 and 2; tiled attention in fp32 and bf16)"
