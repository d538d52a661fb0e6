#!/usr/bin/env bash
# The generated code of a tiny GPT-2 (p = 1, untied and tied) against the same model in
# PyTorch (float64), with both attention forms, built as pacic builds it (vectorised dot
# products): loss, every gradient, and two AdamW steps (tests/numeric/torch_ref.py).
set -eu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc=${CC:-cc}
python=
for candidate in python3 /usr/bin/python3; do
    if "$candidate" -c 'import torch, numpy' 2>/dev/null; then python=$candidate; break; fi
done
[ -n "$python" ] || { echo "no python3 with torch and numpy" >&2; exit 1; }
[ -f build/obj/libpacic.a ] || { echo "build/obj/libpacic.a missing: run make first" >&2; exit 1; }
$cc -std=c11 -D_GNU_SOURCE -O2 -Icompiler tests/numeric/gen_stages.c build/obj/libpacic.a -lm \
    -o "$work/gen_stages"
for case in "untied 2 16 2 8 32 2 1 0 flash" "matmul 2 16 2 8 32 2 1 0 matmul" "tied 2 16 2 8 32 2 1 1 flash"; do
    # shellcheck disable=SC2086
    set -- $case
    name=$1
    shift
    "$work/gen_stages" "$work/$name" "$@"
    $cc -std=c11 -O2 -fopenmp-simd -DPR_OMP_SIMD -Iruntime tests/numeric/gradcheck.c "$work/$name"/*.c \
        -o "$work/$name/gradcheck" -lopenblas -lm
    echo "== $name"
    "$work/$name/gradcheck" --dump "$work/$name/dump.bin" >/dev/null
    "$python" tests/numeric/torch_ref.py "$work/$name/dump.bin"
done
