#!/usr/bin/env bash
# --explain prices a CPU program as this machine's CPU. For examples/tiny.paci (no hardware
# block), with this machine's rates measured by pacic calibrate-cpu:
#  1. each stage's predicted seconds per micro-batch (forward + backward, --emit costs) is
#     within 2x of what a run measured on the stage thread's CPU clock (run --profile-out):
#     both are times of a core to itself, so a busy machine changes neither;
#  2. the predicted tokens/s is within 2x of what the run measures (the median of the steady
#     steps' tokens/s, steps 6-24 of 24, every core as `make train` runs it). That holds on a
#     machine with its cores to spare; a run whose compute the machine's other work stretched
#     (wall over CPU seconds in its compute above 1.25) measures the load instead, so such an
#     attempt does not count, and after three this part is reported skipped. The ratio is
#     printed either way: run this script alone as the benchmark of the prediction.
source tests/e2e/lib.sh

"$pacic" "$root/examples/tiny.paci" -o "$work/run" 2>"$work/build.txt" || fail "tiny does not build: $(cat "$work/build.txt")"
"$pacic" calibrate-cpu -o "$work/cpu.txt" >/dev/null || fail "pacic calibrate-cpu failed"
export PACIC_CPU_CALIBRATION=$work/cpu.txt
explain=$("$pacic" "$root/examples/tiny.paci" --explain 2>/dev/null)
grep -q "^priced on: this machine's CPU" <<< "$explain" || fail "tiny is not priced as this machine's CPU: $(head -n 1 <<< "$explain")"
predicted=$(sed -n 's/^  step time [0-9.e+-]* s, \([0-9.e+-]*\) tokens\/s, .*/\1/p' <<< "$explain")
[ -n "$predicted" ] || fail "--explain predicts no tokens/s"
"$pacic" "$root/examples/tiny.paci" --emit costs -o "$work/costs.txt" 2>/dev/null || fail "--emit costs failed"

steps=24 window=4
for attempt in 1 2 3; do
    rm -f "$work/metrics.jsonl" "$work/profile.txt"
    (cd "$work" && ./run --steps $steps --no-checkpoint --quiet --metrics metrics.jsonl --profile-out profile.txt \
        --data "$data/tiny_train.bin" --val "$data/tiny_val.bin") || fail "tiny's run failed"
    # 1. per stage: predicted forward + backward against the measured (thread CPU seconds)
    for s in 0 1; do
        model=$(awk -v s=$s '$1 == "stage" && $2 == s { print $4 + $6 }' "$work/costs.txt")
        cpu=$(awk -v s=$s '$1 == "stage" && $2 == s { print $4 + $6 }' "$work/profile.txt")
        r=$(awk -v a="$cpu" -v b="$model" 'BEGIN { printf "%.3f", a / b }')
        echo "stage $s: predicted $model s a micro-batch (forward + backward), measured $cpu (CPU clock): $r"
        awk -v r="$r" 'BEGIN { exit !(r >= 0.5 && r <= 2) }' || fail "stage $s: measured/predicted $r, not within 2x"
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
    if awk -v x="$stretch" 'BEGIN { exit !(x > 1.25) }'; then
        echo "attempt $attempt: the machine's other work stretched the run's compute ${stretch}x: not counted"
        continue
    fi
    awk -v r="$ratio" 'BEGIN { exit !(r >= 0.5 && r <= 2) }' ||
        fail "tiny's measured tokens/s is not within 2x of --explain's prediction (ratio $ratio)"
    exit 0
done
skip_part "tokens/s against the prediction: in 3 runs the machine's other work stretched the compute above 1.25x"
