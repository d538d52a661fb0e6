#!/usr/bin/env bash
# bench/medium8_bounds.sh: what the predicted PACI bubble of examples/gpt2-medium-8.paci is made
# of. `pacic --explain` simulates the file's schedule; the variants edit the file:
#
#   whole layers:    the best split into whole layers, [3, 3, 3, 3, 4, 4, 4, 0] (the head
#                    alone on stage 7), fp32 messages;
#   half layers:     split points between a layer's attention half (8C^2 + causal attention
#                    per token) and its MLP half (16C^2), the head whole (vocab_split 0);
#   head divided:    the automatic split with the LM head's rows divided between the last
#                    two stages (docs/dsl.md "Dividing the LM head by vocabulary");
#   free links:      the same with links of 450e15 B/s and no latency: the imbalance alone;
#   messages bf16:   the file as shipped (the residual stream between stages in bf16);
#
# and, with stage costs written here as a version 1 profile (`stage S fwd F bwd B step P`,
# the cost model's FLOPs over the file's 989 TFLOP/s; AdamW steps as the model's), bounds no
# split reaches:
#
#   any split, head alone:  stages 0-6 equal (24/7 layers each), the head whole;
#   equal stages:           all 8 equal (the head divided too), fp32 and bf16 messages.
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
# edit FILE SED_EXPR PATTERN: FILE with SED_EXPR applied, which must leave PATTERN in it.
edit() {
    sed "$2" "$file" > "$work/$1.paci"
    grep -q "$3" "$work/$1.paci" || { echo "bench/medium8_bounds.sh: $file changed: '$2' did not apply" >&2; exit 1; }
}
grep -q "^    messages bf16" "$file" || { echo "bench/medium8_bounds.sh: $file no longer sends bf16" >&2; exit 1; }
edit fp32 '/^    messages bf16/d; s/^    window 8 /    window 8; messages fp32 /' "messages fp32"
edit whole '/^    messages bf16/d; s/^    window 8 /    window 8; vocab_split 0; split [3, 3, 3, 3, 4, 4, 4, 0] /' "split \[3, 3"
edit halves '/^    messages bf16/d; s/^    window 8 /    window 8; vocab_split 0 /' "vocab_split 0"
edit free '/^    messages bf16/d; s/bandwidth 450e9/bandwidth 450e15/; s/latency 5e-6/latency 0/' "bandwidth 450e15"

echo "predicted PACI bubble of $file (pacic --explain, steady state):"
row() { printf '  %-56s %s\n' "$1" "$2"; }
row "whole layers [3, 3, 3, 3, 4, 4, 4, 0], fp32 messages" "$(bubble "$work/whole.paci")"
row "half layers, the head whole, fp32 messages" "$(bubble "$work/halves.paci")"
row "half layers, the head divided, fp32 messages" "$(bubble "$work/fp32.paci")"
row "half layers, the head divided, free links" "$(bubble "$work/free.paci")"
row "half layers, the head divided, messages bf16 (the file)" "$(bubble "$file")"
row "bound: any split points, the head whole, fp32 messages" "$(bubble "$work/fp32.paci" --profile "$work/any.txt")"
row "bound: 8 equal stages, fp32 messages" "$(bubble "$work/fp32.paci" --profile "$work/equal.txt")"
row "bound: 8 equal stages, messages bf16" "$(bubble "$file" --profile "$work/equal.txt")"
