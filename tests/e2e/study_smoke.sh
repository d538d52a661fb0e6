#!/usr/bin/env bash
# The study driver on a tiny grid (seconds): it must produce every output, the table must
# hold every run, the measured memory must follow the schedules' slot and stash counts; run
# again at window 2 alone (1F1B and PACI, no wall-clock check), its losses must be the same
# bytes as the first study's rows of those runs (only measured times may differ).
source tests/e2e/lib.sh

grid=(--stages 2 --micro-batches 16 --evals 2 --target 5.35 --model-args "layers 2; width 16; heads 2")
study/run.sh "${grid[@]}" --windows "1 2" --out "$work/a" > "$work/a.log"
study/run.sh "${grid[@]}" --windows 2 --schedules "1f1b paci" --wallclock-stages 0 --out "$work/b" \
    > "$work/b.log"

for f in losses.csv replay_times.csv summary.csv loss_vs_tokens.svg val_loss_vs_time.svg results.md; do
    [ -s "$work/a/$f" ] || fail "study wrote no $f"
done
# losses.csv: a header, then schedule,window,step,... in the grid's order
window2() { awk -F, 'NR == 1 || ($2 == 2 && ($1 == "1f1b" || $1 == "paci"))' "$1"; }
[ "$(window2 "$work/b/losses.csv" | wc -l)" = $((1 + 2 * 8)) ] || fail "the second study logged no 8 steps of each schedule"
cmp <(window2 "$work/a/losses.csv") <(window2 "$work/b/losses.csv") ||
    fail "the same runs in two studies gave different losses"
rows=$(grep -c '^| \(gpipe\|1f1b\|pipedream\|paci\) |' "$work/a.log") || true
[ "$rows" = 8 ] || fail "the table has $rows runs, expected 8 (4 schedules x 2 windows)"
grep -q "replay / real" "$work/a.log" || fail "no wall-clock check against the replay"
grep -q "as if every stage had its own device" "$work/a.log" || fail "the time axis is not explained"

# Memory measured by the runtime: at K = 2 GPipe keeps both micro-batches at the last stage
# where 1F1B keeps one; PipeDream holds a stashed weight copy more than PACI; PACI = 1F1B.
mib() { awk -F, -v s="$1" -v k="$2" -v col="$3" '$1 == s && $2 == k { print $col }' "$work/a/summary.csv"; }
larger() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }
stage0=8 stage1=9  # summary.csv columns mib_stage0, mib_stage1
larger "$(mib gpipe 2 $stage1)" "$(mib 1f1b 2 $stage1)" || fail "gpipe's last stage is not larger than 1f1b's"
larger "$(mib pipedream 2 $stage0)" "$(mib paci 2 $stage0)" || fail "pipedream's stash does not show in stage 0's memory"
[ "$(mib paci 2 $stage0)" = "$(mib 1f1b 2 $stage0)" ] || fail "paci's stage 0 memory differs from 1f1b's at K = p"
echo "study driver: 8 runs, table, plots, wall-clock check; losses identical in a second study; memory follows the schedules"
