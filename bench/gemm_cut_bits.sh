#!/usr/bin/env bash
# bench/gemm_cut_bits.sh: with which OpenBLAS kernels pr_gemm's products, cut into blocks on a
# stage's cores, keep the bits of the product whole on one core (docs/design.md, "Synchronous
# training is exact on the CPU at any thread count"): SHAPES random products at CORES cores
# with each kernel set the CPU can run (SSE3, AVX2 with FMA, AVX-512). Figures only; seconds.
# Environment: CORES (default 2), SHAPES (default 200).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make -s all >/dev/null
cc -O2 -std=c11 -D_GNU_SOURCE -Iruntime -o "$work/gemm_cut_bits" bench/gemm_cut_bits.c \
    build/lib/pacic/libpacirt.a -lpcre2-8 -ljansson -lopenblas -lpthread -lm
kernels="Prescott"
grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && kernels="$kernels Haswell"
grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo && kernels="$kernels SkylakeX"
for k in $kernels; do
    OPENBLAS_CORETYPE=$k "$work/gemm_cut_bits" "${CORES:-2}" "${SHAPES:-200}"
done
echo "and as the library chose: $("$work/gemm_cut_bits" "${CORES:-2}" "${SHAPES:-200}")"
