#!/usr/bin/env bash
# --explain prices a CPU program as this machine's CPU. For examples/tiny.paci (no hardware
# block), with this machine's rates measured by pacic calibrate-cpu, each stage's predicted
# seconds per micro-batch (forward + backward, --emit costs) is within 2x of what a run
# measured on the stage thread's CPU clock (run --profile-out): both are times of a core to
# itself, so a busy machine changes neither. The prediction's tokens/s against a run's is a
# measurement of wall time, which a busy machine changes: bench/cpu_prediction.sh prints it
# (make bench-predict), no test asserts it.
source tests/e2e/lib.sh

"$pacic" "$root/examples/tiny.paci" -o "$work/run" 2>"$work/build.txt" || fail "tiny does not build: $(cat "$work/build.txt")"
"$pacic" calibrate-cpu -o "$work/cpu.txt" >/dev/null || fail "pacic calibrate-cpu failed"
export PACIC_CPU_CALIBRATION=$work/cpu.txt
explain=$("$pacic" "$root/examples/tiny.paci" --explain 2>/dev/null)
grep -q "^priced on: this machine's CPU" <<< "$explain" || fail "tiny is not priced as this machine's CPU: $(head -n 1 <<< "$explain")"
predicted=$(sed -n 's/^  step time [0-9.e+-]* s, \([0-9.e+-]*\) tokens\/s, .*/\1/p' <<< "$explain")
[ -n "$predicted" ] || fail "--explain predicts no tokens/s"
"$pacic" "$root/examples/tiny.paci" --emit costs -o "$work/costs.txt" 2>/dev/null || fail "--emit costs failed"

steps=8
(cd "$work" && ./run --steps $steps --no-checkpoint --quiet --profile-out profile.txt \
    --data "$data/tiny_train.bin" --val "$data/tiny_val.bin") || fail "tiny's run failed"
for s in 0 1; do
    model=$(awk -v s=$s '$1 == "stage" && $2 == s { print $4 + $6 }' "$work/costs.txt")
    cpu=$(awk -v s=$s '$1 == "stage" && $2 == s { print $4 + $6 }' "$work/profile.txt")
    r=$(awk -v a="$cpu" -v b="$model" 'BEGIN { printf "%.3f", a / b }')
    echo "stage $s: predicted $model s a micro-batch (forward + backward), measured $cpu (CPU clock): $r"
    awk -v r="$r" 'BEGIN { exit !(r >= 0.5 && r <= 2) }' || fail "stage $s: measured/predicted $r, not within 2x"
done
