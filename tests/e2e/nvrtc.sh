#!/usr/bin/env bash
# The CUDA rendering of every kernel description compiles with NVRTC for sm_80 and sm_90,
# for a tiny model and for the benchmark shape, in fp32 and bf16 (the tiled attention's FMA and
# tensor-core forms), and for a head too wide for any tiling (the row kernels remain). Skips
# (exit 77) when no CUDA toolkit is found.
set -eu
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda/include/nvrtc.h" ] || [ ! -e "$cuda/lib64/libnvrtc.so" ]; then
    echo "skipped: no NVRTC under $cuda (nvrtc.h, libnvrtc.so)"
    exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc=${CC:-cc}
[ -f build/obj/libpacic.a ] || { echo "build/obj/libpacic.a missing: run make first" >&2; exit 1; }
$cc -std=c11 -D_GNU_SOURCE -O2 -Wall -Werror -Icompiler -I"$cuda/include" tests/numeric/nvrtc_check.c \
    build/obj/libpacic.a -L"$cuda/lib64" -Wl,-rpath,"$cuda/lib64" -lnvrtc -lm -o "$work/nvrtc_check"
cd "$work"
for precision in fp32 bf16; do
    echo "== tiny (2 layers, width 16, 2 heads, context 8, vocab 32, micro 2), $precision"
    ./nvrtc_check 2 16 2 8 32 2 $precision
    echo "== benchmark shape (6 layers, width 384, 6 heads, context 256, vocab 256, micro 4), $precision"
    ./nvrtc_check 6 384 6 256 256 4 $precision
done
echo "== a head of 160 (1 layer, width 320, 2 heads, context 64, vocab 64, micro 1), fp32: no tiling fits"
./nvrtc_check 1 320 2 64 64 1 fp32
