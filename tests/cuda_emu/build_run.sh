#!/usr/bin/env bash
# build_run.sh PACI_FILE OUT_BINARY: builds OUT_BINARY from PACI_FILE as `pacic PACI_FILE -o
# OUT_BINARY` would, but with the emulated GPU (tests/cuda_emu/emu_device.c, the kernels of
# stages.cu compiled as C++ under simt.h) in place of libpacirt_cuda.a: `--device cuda` then
# runs the generated CUDA code on the CPU. Test tooling for tests/e2e/cuda_emu.sh and the dry
# run of tests/gpu/check.sh (GPU_CHECK_EMULATE=1); never part of pacic or run.
# Scratch files go to OUT_BINARY.emu/ (the generated folder in OUT_BINARY.emu/gen).
# Environment: PACIC (default $PACI_BUILD/bin/pacic, PACI_BUILD default build), CC, CXX
# (default g++, else clang++), PACIC_CFLAGS (default -O3 -march=native, as compiler/build.c),
# CUDA_EMU_SED (a sed script applied to stages.cu before it is compiled), CUDA_EMU_OBJ (a
# prebuilt emu_device.o; built into the scratch folder when unset or missing), FAKE_CACHE (a
# folder where compiled kernels are kept by their content: tests/cuda_emu/kernels.sh).
# Paths may be relative to the current folder. Exit 0: built; 77: pacic wrote no stages.cu (no NVRTC or no
# libpacirt_cuda.a: the caller skips); 1: anything else failed, with a message on stderr.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: build_run.sh PACI_FILE OUT_BINARY" >&2; exit 2; }
paci=$1 out=$2
case $out in /*) ;; *) out=$PWD/$out ;; esac # stages.cu is #included by its path
root=$(cd "$(dirname "$0")/../.." && pwd)
emu=$root/tests/cuda_emu
build=$root/${PACI_BUILD:-build}
pacic=${PACIC:-$build/bin/pacic}
cc=${CC:-cc}
cxx=${CXX:-$(command -v g++ || command -v clang++ || true)}
[ -n "$cxx" ] || { echo "build_run.sh: no C++ compiler (g++ or clang++)" >&2; exit 1; }
scratch=$out.emu
gen=$scratch/gen
die() { echo "build_run.sh: $*" >&2; exit 1; }

mkdir -p "$scratch" "$(dirname "$out")"
obj=${CUDA_EMU_OBJ:-$scratch/emu_device.o}
if [ ! -f "$obj" ]; then
    "$cc" -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -I"$root/runtime" -c "$emu/emu_device.c" -o "$obj" ||
        die "emu_device.c does not build"
fi
"$pacic" "$paci" --emit c -o "$gen" || die "$paci: pacic --emit c"
[ -f "$gen/stages.cu" ] || exit 77
[ -z "${CUDA_EMU_SED:-}" ] || sed -i -e "$CUDA_EMU_SED" "$gen/stages.cu"
"$emu/kernels.sh" "$gen/stages.cu" "$scratch/kernels.o" "$cxx" -O1 -Wall -Wno-unknown-pragmas ||
    die "$paci: stages.cu under simt.h"
# the optimizers' GPU steps: libpacirt_cuda.a's file that calls only what the emulator provides
"$cc" -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -c "$root/runtime/cuda/optim.c" -o "$scratch/optim.o" ||
    die "runtime/cuda/optim.c does not build"
# the generated C as pacic compiles it (compiler/build.c)
# shellcheck disable=SC2086
"$cc" ${PACIC_CFLAGS:--O3 -march=native} -std=c11 -I "$build/include/pacic" "$gen"/*.c "$scratch/kernels.o" \
    "$obj" "$scratch/optim.o" "$build/lib/pacic/libpacirt.a" -lstdc++ -lpcre2-8 -ljansson -lopenblas -lpthread -lm -o "$out" || die "$paci: link"
