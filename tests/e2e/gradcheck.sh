#!/usr/bin/env bash
# Finite-difference gradient check of the generated stage code (tests/numeric/gradcheck.c):
# every parameter tensor of a tiny GPT-2 (2-3 layers, width 16, 2 heads, context 8, vocab 32,
# micro 2) at p = 1 untied and tied, with every attention form (flash, matmul, stored), and at p = 3 with dx_in of the middle and last stages.
# The generated sources must also compile without a warning.
set -eu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc=${CC:-cc}
[ -f build/obj/libpacic.a ] || { echo "build/obj/libpacic.a missing: run make first" >&2; exit 1; }
$cc -std=c11 -D_GNU_SOURCE -O2 -Icompiler tests/numeric/gen_stages.c build/obj/libpacic.a -lm \
    -o "$work/gen_stages"
#         name    layers width heads context vocab micro stages tied attention
for case in "p1     2 16 2 8 32 2 1 0 flash" \
            "matmul 2 16 2 8 32 2 1 0 matmul" \
            "matmul6 2 16 2 6 32 2 1 0 matmul" \
            "stored 2 16 2 8 32 2 1 0 stored" \
            "tied   2 16 2 8 32 2 1 1 flash" \
            "p3     3 16 2 8 32 2 3 0 flash"; do
    # shellcheck disable=SC2086
    set -- $case
    name=$1
    shift
    "$work/gen_stages" "$work/$name" "$@"
    $cc -std=c11 -O2 -Wall -Wextra -Werror -Iruntime tests/numeric/gradcheck.c "$work/$name"/*.c \
        -o "$work/$name/gradcheck" -lopenblas -lm
    echo "== $name"
    "$work/$name/gradcheck"
done
