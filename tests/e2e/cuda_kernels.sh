#!/usr/bin/env bash
# The GPU-only kernels (the fused classifier, the bias gradient's block reduction, LayerNorm's
# backward reduced per block) against the CPU path's kernels of the same generated stage file,
# one kernel at a time: tests/cuda_emu/kernel_check.c runs the generated CUDA under the
# emulator (tests/cuda_emu/simt.h) on random inputs and prints each comparison with its
# tolerance (fp32: 1e-5 relative, to rounding, 2e-5 for dlogits; bf16 dlogits: half a bf16
# step). The model's
# shapes put the edges in reach: width 48 (lanes past C in a warp's row), vocabulary 300
# (padded rows of VP 320), BT = 72 rows (a last LayerNorm block of 8 rows of 64).
# CUDA_KERNELS_SED='sed script' edits stages.cu first: how the mutants in docs/gpu.md were
# planted (never set in `make test`).
# Skips (exit 77) where the emulator cannot run (need_cuda_emu) or pacic writes no stages.cu.
# tier: check
source tests/e2e/lib.sh
need_cuda_emu
export PACIC_CACHE=$work/cache
emu=$root/tests/cuda_emu
cat > "$work/k.paci" <<DSL
model gpt2 { layers 1; width 48; heads 2; context 24; vocab 300 }
pipeline { stages 1; schedule paci; window 1 }
batch { micro 3 }
train {
    data "$data/tiny_train.bin"
    steps 1
    optimizer adamw { lr 3e-3 }
}
DSL
"$pacic" "$work/k.paci" --emit c -o "$work/gen" || fail "pacic --emit c"
[ -f "$work/gen/stages.cu" ] || skip "pacic --emit c wrote no stages.cu (no NVRTC here?)"
[ -z "${CUDA_KERNELS_SED:-}" ] || sed -i -e "$CUDA_KERNELS_SED" "$work/gen/stages.cu"
"$emu/trampolines.sh" "$work/gen/stages.cu" > "$work/kernels.cpp" || fail "trampolines"
"$CXX" -std=c++17 -O1 -Wall -Wno-unknown-pragmas -include "$emu/simt.h" -c "$work/kernels.cpp" -o "$work/kernels.o" ||
    fail "stages.cu under simt.h"
"${CC:-cc}" -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -Iruntime -c "$emu/emu_device.c" \
    -o "$work/emu_device.o" || fail "emu_device.c does not build"
# the stage file's CPU kernels are static: kernel_check.c includes it (and its GPU half, which
# the emulated device layer links)
"${CC:-cc}" -std=c11 -D_GNU_SOURCE -O1 -Wall -Werror -Wno-unused-function -I "$root/build/include/pacic" -I "$emu" \
    -DSTAGE_FILE="\"$work/gen/stage_0.c\"" "$emu/kernel_check.c" "$work/gen/cuda_images.c" "$work/kernels.o" \
    "$work/emu_device.o" "$root/build/lib/pacic/libpacirt.a" -lstdc++ -lpcre2-8 -ljansson -lopenblas -lpthread -lm -o "$work/kernel_check" ||
    fail "kernel_check does not build"
"$work/kernel_check" || fail "a GPU kernel disagrees with the CPU path"
