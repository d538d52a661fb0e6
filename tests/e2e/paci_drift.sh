#!/usr/bin/env bash
# PACI at p = 4 trains, and the drift the runtime measures at every stage equals the
# bound ceil((p-s-1)/K), computed here independently of the compiler.
# tier: check
source tests/e2e/lib.sh

p=4
for k in 1 2 3; do
    small_model "paci-$k" $p paci $k 24
    out=$(train "paci-$k" 2>&1) || fail "paci K=$k did not train: $out"
    summary=$(cd "$work/paci-$k" && ./run --steps 24 --no-checkpoint 2>&1 | grep '^drift:') || fail "no drift line"
    for s in $(seq 0 $((p - 1))); do
        bound=$(( (p - s - 1 + k - 1) / k ))
        measured=$(printf '%s\n' "$summary" | sed -n "s/.*stage $s max \([0-9]*\).*/\1/p")
        [ "$measured" = "$bound" ] || fail "K=$k stage $s: measured drift $measured, bound $bound ($summary)"
    done
    first=$(losses "paci-$k" | head -1)
    last=$(losses "paci-$k" | tail -1)
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' \
        || fail "K=$k: loss did not fall ($first -> $last)"
    echo "K=$k: $summary; loss $first -> $last"
done
