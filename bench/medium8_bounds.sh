#!/usr/bin/env bash
# bench/medium8_bounds.sh: what the predicted PACI bubble of examples/gpt2-medium-8.paci (and
# gpt2-medium-4) is made of. `pacic --explain` simulates the file's schedule with every stage
# priced by the kernel cost model (compiler/costs.c), the model the automatic split balances
# by (compiler/plan.c); the variants edit the file:
#
#   automatic:       the file as shipped (the split balanced by the kernel model; both
#                    files send the residual stream in bf16);
#   free links:      the same with links of 450e15 B/s and no latency: the imbalance alone;
#   FLOPs split:     the split the partitioner chose when it balanced FLOPs alone (3.5
#                    layers a stage, the head's rows divided at 2112), written out;
#   slack beside:    medium-4 with its slowest stage (7 layers) moved beside lighter ones
#                    (`split [6.5, 6.5, 7, 4]`): the same slowest stage as the automatic
#                    split's two, but the messages between two equally loaded neighbours
#                    no longer lie on the critical path;
#
# and, with stage costs written here as a version 1 profile (`stage S fwd F bwd B step P`:
# each stage the mean of the automatic split's per-stage times that --explain prints), every
# stage equal: no imbalance left, the messages' share alone (with the wider messages across the
# cuts inside layers on each link, it is not a bound on the split).
#
# Figures only, no assertions; a few seconds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
pacic=$root/build/bin/pacic
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make -s all >/dev/null

# bubble FILE [pacic flags]: the predicted steady-state bubble of the file.
bubble() {
    "$pacic" "$@" --explain 2>/dev/null | sed -n 's/.*bubble \([0-9.]*%\) (steady state.*/\1/p' | head -1
}
# equal_stages FILE: a profile whose every stage costs the mean of FILE's stages under the model.
equal_stages() {
    "$pacic" "$1" --explain 2>/dev/null | awk '
        /stage  layers +forward  backward  optimizer/ { on = 1; next }
        on && $1 ~ /^[0-9]+$/ { f += $3; b += $4; o += $5; n++; next }
        on { exit }
        END { for (s = 0; s < n; s++) printf "stage %d fwd %.6g bwd %.6g step %.6g\n", s, f / n / 1e3, b / n / 1e3, o / n / 1e3 }'
}
# edit NAME FILE SED_EXPR PATTERN: FILE with SED_EXPR applied, which must leave PATTERN in it.
edit() {
    sed "$3" "$2" > "$work/$1.paci"
    grep -q "$4" "$work/$1.paci" || { echo "bench/medium8_bounds.sh: $2 changed: '$3' did not apply" >&2; exit 1; }
}
row() { printf '  %-66s %s\n' "$1" "$2"; }

for p in 8 4; do
    file=examples/gpt2-medium-$p.paci
    edit free$p "$file" 's/bandwidth 450e9/bandwidth 450e15/; s/latency 5e-6/latency 0/' "bandwidth 450e15"
    equal_stages "$file" > "$work/equal$p.txt"
    echo "predicted PACI bubble of $file (pacic --explain, steady state, kernel cost model):"
    row "the automatic split (the file)" "$(bubble "$file")"
    row "the automatic split, free links" "$(bubble "$work/free$p.paci")"
    if [ "$p" = 8 ]; then
        edit flops8 "$file" 's/^    window 8 /    window 8; vocab_split 2112; split [3.5, 3.5, 3.5, 3.5, 3.5, 3.5, 3, 0] /' "vocab_split 2112"
        row "the FLOPs-balanced split [3.5 x 6, 3, 0], vocab_split 2112" "$(bubble "$work/flops8.paci")"
    else
        edit slack4 "$file" 's/^    window 8 /    window 8; split [6.5, 6.5, 7, 4] /' "split \[6.5"
        row "the slowest stage beside lighter ones: split [6.5, 6.5, 7, 4]" "$(bubble "$work/slack4.paci")"
    fi
    row "$p equal stages (the mean of the automatic split's): messages alone" "$(bubble "$file" --profile "$work/equal$p.txt")"
done
