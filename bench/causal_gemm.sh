#!/usr/bin/env bash
# bench/causal_gemm.sh: CPU time of the matmul attention's causal products (the generated C's
# causal_gemm_nt, _nn, _tn) against the full OpenBLAS products they replace, at bench/gpt6.paci's
# shapes (T 256, HS 64), best of 7 rounds in one process (bench/causal_gemm.c): a figure that
# holds on a shared machine, where wall-clock times do not. MARCH (default native): the
# -march to build them for (x86-64-v3: the study's pin). No assertions: figures only.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make -s all >/dev/null
build/bin/pacic bench/gpt6.paci --emit c -o "$work/gen"
# the functions, from their opening comment to the next definition's
sed -n '/^\/\* The matrix products of the matmul attention/,/^\/\* The bases a parallel loop/p' \
    "$work/gen/stage_0.c" | sed '$d' > "$work/causal_gemm.h"
cc -O3 -march="${MARCH:-native}" -fno-math-errno -std=c11 -D_GNU_SOURCE -I"$work" -o "$work/causal_gemm" \
    bench/causal_gemm.c -lopenblas -lm
"$work/causal_gemm"
