#!/usr/bin/env bash
# The generated CUDA code, run without a GPU: pacic's stages.cu compiled as C++ under the
# emulator tests/cuda_emu/simt.h (blocks in turn, threads as coroutines, barriers and warp
# shuffles), and the generated GPU host half linked with tests/cuda_emu/emu_device.c in place
# of libpacirt_cuda.a (host memory, OpenBLAS for cuBLASLt). First the emulator's primitives on
# their own (tests/cuda_emu/simt_test.cpp, and three misuses it must refuse); then small models
# at p = 1 and 2 under `attention flash` and `attention matmul` train from the same seed with
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
# swapcontext, which ASan does not follow; the plain build runs this test).
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
    for attention in flash matmul; do
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
                (cd "$work/$name/$device" && ../run --device $device --quiet --sample 16 > sample.txt) ||
                    fail "$name: --sample on --device $device"
            done
            cmp -s "$work/$name/cuda/sample.txt" "$work/$name/cpu/sample.txt" ||
                fail "$name: --sample differs: cuda '$(cat "$work/$name/cuda/sample.txt")', cpu '$(cat "$work/$name/cpu/sample.txt")'"
            echo "$name: --sample 16 draws the same tokens on both devices"
        fi
    done
done
echo "the generated CUDA code under the emulator matches the CPU path (flash and matmul attention, p = 1 and 2)"
