#!/usr/bin/env bash
# bench/medium8_bounds.sh: how low partitioning alone can bring the predicted PACI bubble of
# examples/gpt2-medium-8.paci. `pacic --explain` simulates the file's schedule with stage
# costs written here as a version 1 profile (`stage S fwd F bwd B step P`, the cost model's
# FLOPs over the file's 989 TFLOP/s; AdamW steps as the model's, links as the file's):
#
#   whole layers:  the best split into whole layers, [3, 3, 3, 3, 4, 4, 4, 0] (the head
#                  alone on stage 7), costs from the model;
#   automatic:     what pacic chooses, with split points between a layer's attention half
#                  (8C^2 + causal attention per token) and its MLP half (16C^2);
#   any split:     stages 0-6 equal (24/7 layers each), the head alone (indivisible);
#   equal stages:  all 8 equal, as if the head could be divided too;
#   equal stages, half the message time: the same with 900 GB/s links (or bf16 messages).
#
# Figures only, no assertions; instant.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
pacic=$root/build/bin/pacic
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make -s all >/dev/null
file=examples/gpt2-medium-8.paci

# bubble [pacic flags]: the predicted steady-state bubble of the file.
bubble() {
    "$pacic" "$@" --explain 2>/dev/null | sed -n 's/.*bubble \([0-9.]*%\) (steady state.*/\1/p'
}

# Per micro-batch seconds (C 1024, T 1024, B 16, V 50257): the attention and MLP halves of a
# layer and the head, forward; backward twice that. AdamW: 0.5 ms a stage per optimizer
# step, the model's figure for a stage of 4 layers or the head (0.9 ms on stage 0 with the
# embedding), against about 37 ms of compute a stage per step.
awk 'BEGIN {
    C = 1024; T = 1024; B = 16; V = 50257; N = B * T; F = 989e12
    att = (8 * C * C * N + 2 * B * T * T * C) / F; mlp = 16 * C * C * N / F; head = 2 * V * C * N / F
    layer = att + mlp
    for (s = 0; s < 7; s++)
        printf "stage %d fwd %.6g bwd %.6g step 0.0005\n", s, 24 / 7 * layer, 48 / 7 * layer > "'"$work"'/any.txt"
    printf "stage 7 fwd %.6g bwd %.6g step 0.0005\n", head, 2 * head > "'"$work"'/any.txt"
    m = (24 * layer + head) / 8
    for (s = 0; s < 8; s++)
        printf "stage %d fwd %.6g bwd %.6g step 0.0005\n", s, m, 2 * m > "'"$work"'/equal.txt"
}'
sed 's/^    window 8 /    window 8; split [3, 3, 3, 3, 4, 4, 4, 0] /' "$file" > "$work/whole.paci"
grep -q "split \[3, 3" "$work/whole.paci" || { echo "bench/medium8_bounds.sh: the window line moved in $file" >&2; exit 1; }
sed 's/bandwidth 450e9/bandwidth 900e9/' "$file" > "$work/fast.paci"
grep -q "bandwidth 900e9" "$work/fast.paci" || { echo "bench/medium8_bounds.sh: the links line moved in $file" >&2; exit 1; }

echo "predicted PACI bubble of $file (pacic --explain, steady state):"
printf '  %-46s %s\n' "whole layers, [3, 3, 3, 3, 4, 4, 4, 0]" "$(bubble "$work/whole.paci")"
printf '  %-46s %s\n' "the automatic split (inside layers)" "$(bubble "$file")"
printf '  %-46s %s\n' "any split points, head alone (indivisible)" "$(bubble "$file" --profile "$work/any.txt")"
printf '  %-46s %s\n' "8 equal stages (the head divided too)" "$(bubble "$file" --profile "$work/equal.txt")"
printf '  %-46s %s\n' "8 equal stages, half the message time" "$(bubble "$work/fast.paci" --profile "$work/equal.txt")"
