#!/usr/bin/env bash
# bench/cpu_prediction.sh (make bench-predict): --explain's predicted tokens/s for
# examples/tiny.paci, priced as this machine's CPU (pacic calibrate-cpu, measured first),
# against what a run of it measures (the median of steps 6-24, every core as `make train`
# runs it), and the ratio; also how much other work on the machine stretched the run's
# compute (wall over CPU seconds), since the prediction is of a machine with its cores to
# itself. Figures only, no assertions (tests/e2e/cpu_prediction.sh checks the per-stage times,
# which a busy machine does not change).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd) pacic=$(pwd)/${PACI_BUILD:-build}/bin/pacic data=$(pwd)/examples/data
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "bench/cpu_prediction.sh: $*" >&2; exit 1; }
"$pacic" "$root/examples/tiny.paci" -o "$work/run" 2>"$work/build.txt" || fail "tiny does not build: $(cat "$work/build.txt")"
"$pacic" calibrate-cpu -o "$work/cpu.txt" >/dev/null || fail "pacic calibrate-cpu failed"
export PACIC_CPU_CALIBRATION=$work/cpu.txt
explain=$("$pacic" "$root/examples/tiny.paci" --explain 2>/dev/null)
grep -q "^priced on: this machine's CPU" <<< "$explain" || fail "tiny is not priced as this machine's CPU: $(head -n 1 <<< "$explain")"
predicted=$(sed -n 's/^  step time [0-9.e+-]* s, \([0-9.e+-]*\) tokens\/s, .*/\1/p' <<< "$explain")
[ -n "$predicted" ] || fail "--explain predicts no tokens/s"
"$pacic" "$root/examples/tiny.paci" --emit costs -o "$work/costs.txt" 2>/dev/null || fail "--emit costs failed"

steps=24 window=4
rm -f "$work/metrics.jsonl" "$work/profile.txt"
(cd "$work" && ./run --steps $steps --no-checkpoint --quiet --metrics metrics.jsonl --profile-out profile.txt \
    --data "$data/tiny_train.bin" --val "$data/tiny_val.bin") || fail "tiny's run failed"
# 1. per stage: predicted forward + backward against the measured (thread CPU seconds)
for s in 0 1; do
    model=$(awk -v s=$s '$1 == "stage" && $2 == s { print $4 + $6 }' "$work/costs.txt")
    cpu=$(awk -v s=$s '$1 == "stage" && $2 == s { print $4 + $6 }' "$work/profile.txt")
    r=$(awk -v a="$cpu" -v b="$model" 'BEGIN { printf "%.3f", a / b }')
    echo "stage $s: predicted $model s a micro-batch (forward + backward), measured $cpu (CPU clock): $r"
done
# 2. tokens/s, where the run had its cores
stretch=$(awk -v n=$steps -v k=$window '$1 == "stage" { cpu += n * k * ($4 + $6) + n * $8 }
    $1 == "compute" { wall += $3 } END { printf "%.3f", wall / cpu }' "$work/profile.txt")
measured=$(sed -n 's/.*"step": \([0-9]*\),.*"tokens_per_s": \([0-9.]*\),.*/\1 \2/p' "$work/metrics.jsonl" |
    awk '$1 >= 6 { print $2 }' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }')
[ -n "$measured" ] || fail "no steady steps in the run's metrics"
ratio=$(awk -v m="$measured" -v p="$predicted" 'BEGIN { printf "%.3f", m / p }')
echo "tiny: predicted $predicted tokens/s, measured $measured (median of steps 6-$steps): measured/predicted $ratio;" \
     "the run's compute took $stretch x its CPU seconds (measured x that: $(awk -v m="$measured" -v x="$stretch" \
     'BEGIN { printf "%.0f", m * x }') tokens/s)"
