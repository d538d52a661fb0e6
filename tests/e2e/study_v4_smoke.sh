#!/usr/bin/env bash
# The study's fourth edition (study/v4.sh) on a tiny grid (seconds): every line of
# study/configs_v4.txt must pass the compiler's check at every multiplier of both editions;
# a micro study (zb-v and paci, p = 2, two seeds) must train each line for the steps its
# replayed step time fits in the budget (recomputed here from step_times.csv: budget = the
# baseline's steps x the shortest synchronous step, N = floor(budget / step)), the equal-token
# runs for the baseline's tokens, every seed under its own seed and the shuffled data order,
# and summary.csv's spread must be the seeds' sample standard deviation of the final
# validation losses in losses.csv; the full edition must extend a line's lr grid until its best
# is inside (or it has grown twice) and run the best at every seed, and half-budget runs of their
# own; a resumed study takes lines added to its configurations without moving its budget, and
# a fresh one into a finished study's folder starts afresh.
source tests/e2e/lib.sh
unset OPENBLAS_CORETYPE PACIC_MARCH # the study's own choices (study/toolchain.sh)

# Every line at every multiplier: the quick edition's one and the full edition's grid.
study/v4.sh --check-only > "$work/quick.log" || fail "a line of study/configs_v4.txt is refused by the compiler (quick edition)"
study/v4.sh --full --check-only > "$work/full.log" || fail "a line of study/configs_v4.txt is refused by the compiler (full edition)"
lines=$(grep -cv '^\s*\(#\|$\)' study/configs_v4.txt)
[ "$(grep -c ' x2 (K = ' "$work/quick.log")" = "$lines" ] || fail "the quick edition did not check its $lines lines at x2: $(cat "$work/quick.log")"
grep -q '^paci-muon-predict-k16 x0.5 (K = 16):  *delay_correction predict |' "$work/full.log" ||
    fail "a line's own window did not become its window: $(grep k16 "$work/full.log" | head -1)"
grep -q '^zb-h2-k16 x4 (K = 16): ' "$work/full.log" || fail "the full edition did not check zb-h2-k16 at x4"

adamw='adamw { lr {2e-3} at 32 scale sqrt; betas 0.9 0.95; weight_decay 0.1; clip 1.0 }'
printf '%s\n' "zb-v | zb-v | | $adamw" "paci | paci | | $adamw" > "$work/configs.txt"
base_steps=24  # evaluations at steps 8, 16 and 24 of the baseline
study/v4.sh --configs "$work/configs.txt" --stages 2 --window 2 --base-steps $base_steps --evals 3 \
    --model-args "layers 2; width 16; heads 2" --seeds "1337 1338" --calibration-steps 4 --replay-steps 8 \
    --out "$work/s" > "$work/s.log" || fail "the micro study failed: $(tail -5 "$work/s.log")"
s=$work/s
for f in step_times.csv plan.csv grid.csv losses.csv summary.csv gpu_step_times.csv results.md; do
    [ -s "$s/$f" ] || fail "the study wrote no $f"
done
col() {  # col FILE CONFIG COLUMN-NAME [KIND]: the value in CONFIG's row (and KIND's, for grid.csv)
    awk -F, -v c="$2" -v name="$3" -v k="${4:-}" 'NR == 1 { for (i = 1; i <= NF; i++) at[$i] = i; next }
        $1 == c && (k == "" || $3 == k) { print $at[name]; exit }' "$1"
}

# Equal time: the budget and every line's steps, from step_times.csv alone.
base_step=$(awk -F, 'NR > 1 && $2 ~ /^(1f1b|zb-h1|zb-v|interleaved)$/ && $9 == 0 && (b == "" || $7 < b) { b = $7 } END { print b }' "$s/step_times.csv")
for c in zb-v paci; do
    step=$(col "$s/step_times.csv" $c step_s)
    want=$(awk -v n=$base_steps -v b="$base_step" -v t="$step" 'BEGIN { printf "%d", n * b / t + 1e-9 }')
    [ "$(col "$s/plan.csv" $c steps_time)" = "$want" ] ||
        fail "$c: plan.csv gives $(col "$s/plan.csv" $c steps_time) equal-time steps, but floor($base_steps x $base_step / $step) = $want"
    trained=$(awk -F, -v c=$c '$1 == c && $2 == "time" && $5 > n { n = $5 } END { print n }' "$s/losses.csv")
    [ "$trained" = "$want" ] || fail "$c: its equal-time runs logged $trained steps, not $want"
    [ "$(col "$s/summary.csv" $c steps_equal_time)" = "$want" ] || fail "$c: summary.csv's steps are not $want"
done
[ "$(col "$s/plan.csv" zb-v budget_line)" = 1 ] || fail "zb-v (the only synchronous line) is not the budget line"
# The time axis: zb-v (two stages a device) fills and drains every step, so half its budget is
# the end of its step 12, halfway between its evaluations at steps 8 and 16 (the mean over the
# two seeds).
half=$(awk -F, '$1 == "zb-v" && $2 == "time" && ($5 == 8 || $5 == 16) { s += $8 } END { printf "%.4f", s / 4 }' "$s/losses.csv")
said=$(col "$s/summary.csv" zb-v half_budget_val_loss)
awk -v a="$half" -v b="$said" 'BEGIN { exit !(a - b < 2e-4 && b - a < 2e-4) }' ||
    fail "zb-v's loss at half the budget is $said in summary.csv, but its steps 8 and 16 give $half"
# Equal tokens: the baseline's tokens (both at K = 2: the baseline's steps), where that is another length.
tokens_steps=$(col "$s/grid.csv" paci steps tokens)
if [ "$(col "$s/plan.csv" paci steps_time)" != $base_steps ]; then
    [ "$tokens_steps" = $base_steps ] || fail "paci's equal-token runs train $tokens_steps steps, not the baseline's $base_steps"
fi

# Seeds: every seed its own run, differing from the other seed's in the seed alone, built with
# the shuffled order keyed by it; their losses differ.
for seed in 1337 1338; do
    dsl=$s/runs/paci/time/lr-x2/seed-$seed/model.paci
    grep -q "^ *seed $seed\$" "$dsl" || fail "the run of seed $seed does not train with seed $seed"
    "$pacic" "$dsl" --emit c -o "$work/c-$seed" 2> /dev/null
    grep -q '\.data_order = 1,' "$work/c-$seed/program.c" || fail "the run of seed $seed does not shuffle its data order by the seed"
done
diff "$s/runs/paci/time/lr-x2/seed-1337/model.paci" "$s/runs/paci/time/lr-x2/seed-1338/model.paci" > "$work/seed.diff" || true
[ "$(grep -c '^[<>]' "$work/seed.diff")" = 2 ] && grep -q '^> *seed 1338' "$work/seed.diff" ||
    fail "the two seeds' runs differ in more than the seed: $(cat "$work/seed.diff")"
seed_losses() { awk -F, -v s="$1" '$1 == "paci" && $2 == "time" && $4 == s { print $5, $7 }' "$s/losses.csv"; }
[ "$(seed_losses 1337)" != "$(seed_losses 1338)" ] || fail "seeds 1337 and 1338 logged the same losses"

# Spread: the sample standard deviation (n - 1) of the seeds' final validation losses.
for c in zb-v paci; do
    want=$(awk -F, -v c=$c '$1 == c && $2 == "time" && $8 != "" { if ($5 > last[$4]) { last[$4] = $5; v[$4] = $8 } }
        END { for (s in v) { n++; sum += v[s]; sq += v[s] * v[s] } m = sum / n;
              printf "%.4f %.4f", m, sqrt((sq - n * m * m) / (n - 1)) }' "$s/losses.csv")
    said="$(col "$s/summary.csv" $c equal_time_val_loss) $(col "$s/summary.csv" $c equal_time_spread)"
    awk -v a="$want" -v b="$said" 'BEGIN { split(a, x, " "); split(b, y, " ");
        exit !(x[1] - y[1] < 2e-4 && y[1] - x[1] < 2e-4 && x[2] - y[2] < 2e-4 && y[2] - x[2] < 2e-4) }' ||
        fail "$c: summary.csv gives mean and spread $said, the seeds' final losses give $want (sample sd)"
done

for column in schedule speedup_vs_baseline gap_vs_baseline_pct equal_time_val_loss equal_time_spread; do
    head -1 "$s/summary.csv" | tr , '\n' | grep -qx "$column" || fail "summary.csv has no column $column"
done
[ "$(col "$s/summary.csv" zb-v gap_vs_baseline_pct)" = 0.000 ] || fail "the baseline's gap to itself is not 0"
[ -n "$(col "$s/summary.csv" zb-v gpu_step_s)" ] && [ -n "$(col "$s/summary.csv" paci gpu_projected_val_loss)" ] ||
    fail "no GPU projection in summary.csv"
grep -q '^| paci | paci | 2 | x2 | ' "$s/results.md" || fail "results.md's table has no paci row"
grep -q '^[123]\. \*\*\(met\|not met\|not judged\)\*\*: ' "$s/results.md" || fail "results.md does not state the goals"
# --resume: a study cut short (one run killed mid-way: no time.txt, no done line) goes on with
# the same calibration, keeps the finished runs, retrains the unfinished one from its start, and
# ends with the grid and losses an uninterrupted study wrote; other options are refused.
micro_args=(--configs "$work/configs.txt" --stages 2 --window 2 --base-steps $base_steps --evals 3
    --model-args "layers 2; width 16; heads 2" --seeds "1337 1338" --calibration-steps 4 --replay-steps 8 --out "$s")
cp "$s/grid.csv" "$work/grid.before"; cp "$s/losses.csv" "$work/losses.before"; cp "$s/step_times.csv" "$work/steps.before"
cut=$s/runs/paci/time/lr-x2/seed-1338
: > "$cut/time.txt"; sed -i '/^done:/d' "$cut/run.log"; rm -f "$s/losses.csv" "$s/summary.csv"
study/v4.sh "${micro_args[@]}" --resume > "$work/resume.log" || fail "the resumed study failed: $(tail -5 "$work/resume.log")"
kept=$(grep -c 'kept from before the resume' "$work/resume.log" || true)
runs=$(($(wc -l < "$work/grid.before") - 1))
[ "$kept" = $((runs - 1)) ] || fail "the resume kept $kept of $runs runs, not all but the one cut short: $(cat "$work/resume.log")"
grep -q '^done:' "$cut/run.log" || fail "the resume did not retrain the run cut short"
cmp -s "$work/grid.before" "$s/grid.csv" || fail "the resumed study's grid.csv differs: $(diff "$work/grid.before" "$s/grid.csv")"
cmp -s "$work/steps.before" "$s/step_times.csv" || fail "the resume calibrated again"
cmp -s "$work/losses.before" "$s/losses.csv" || fail "the resumed study's losses differ from the uninterrupted one's"
[ -s "$s/resumed.txt" ] && grep -q '^resumed ' "$s/results.md" || fail "results.md does not say the study was resumed"
if study/v4.sh "${micro_args[@]}" --seeds 1337 --resume > "$work/resume2.log" 2>&1; then
    fail "a resume with other seeds than the study's was accepted"
fi
grep -q 'was started as' "$work/resume2.log" || fail "the refused resume does not say why: $(cat "$work/resume2.log")"

# --reproduce: one run trained again in a scratch folder gives its losses.csv rows text for text;
# a study whose row differs (one loss's last digit) is reported, with a non-zero exit.
study/v4.sh "${micro_args[@]}" --reproduce "paci time 2 1338" > "$work/repro.log" ||
    fail "the rerun of paci time x2 seed 1338 did not reproduce its rows: $(tail -3 "$work/repro.log")"
grep -q '^paci,time,2,1338: all [0-9]* rows of losses.csv reproduced to the bit' "$work/repro.log" ||
    fail "the reproduction does not say what it compared: $(tail -2 "$work/repro.log")"
cp -r "$s" "$work/s-changed"
awk -F, -v OFS=, '$1 == "paci" && $2 == "time" && $4 == 1338 && !done { $7 = sprintf("%.6f", $7 + 1e-6); done = 1 } { print }' \
    "$s/losses.csv" > "$work/s-changed/losses.csv"
changed_args=("${micro_args[@]}"); changed_args[-1]=$work/s-changed
if study/v4.sh "${changed_args[@]}" --reproduce "paci time 2 1338" > "$work/repro2.log" 2>&1; then
    fail "a losses.csv row 1e-6 off was reported as reproduced"
fi
grep -q 'differs' "$work/repro2.log" || fail "the failed reproduction does not name the row: $(tail -3 "$work/repro2.log")"

# The full edition's lr grid: zb-v alone at x0.5 and x1, extended by a factor 2 at the end
# where the best lies (twice at most); the best of the grid at the second seed too.
printf '%s\n' "zb-v | zb-v | | $adamw | 0.5 1" > "$work/configs-full.txt"
study/v4.sh --full --configs "$work/configs-full.txt" --stages 2 --window 2 --base-steps 8 --evals 2 \
    --model-args "layers 2; width 16; heads 2" --seeds "1337 1338" --calibration-steps 4 --out "$work/f" \
    > "$work/f.log" || fail "the full micro study failed: $(tail -5 "$work/f.log")"
tried=$(awk -F, '$3 == "time" && $5 == 1337 { print $4 }' "$work/f/grid.csv" | sort -g | tr '\n' ' ')
best=$(awk -F, '$2 == "time" && $4 == 1337 && $5 == 8 && (b == "" || $8 < v) { v = $8; b = $3 } END { print b }' "$work/f/losses.csv")
read -r -a grid_m <<< "$tried"
[[ " $tried " == *" 0.5 1 "* ]] && (( ${#grid_m[@]} <= 4 )) &&
    awk -v t="$tried" 'BEGIN { n = split(t, m, " "); for (i = 2; i <= n; i++) if (m[i] != 2 * m[i - 1]) exit 1 }' ||
    fail "the lr grid grew as $tried, not by factors of 2 from x0.5 and x1, twice at most"
if (( ${#grid_m[@]} < 4 )) && { [ "$best" = "${grid_m[0]}" ] || [ "$best" = "${grid_m[-1]}" ]; }; then
    fail "the grid $tried stopped with its best (x$best) at an end"
fi
[ "$(col "$work/f/summary.csv" zb-v lr_multiplier)" = "$best" ] || fail "summary.csv's lr is not the grid's best x$best"
[ "$(awk -F, -v b="$best" '$3 == "time" && $4 == b && $5 == 1338' "$work/f/grid.csv" | wc -l)" = 1 ] ||
    fail "the best (x$best) did not run at the second seed: $(cat "$work/f/grid.csv")"
[ "$(awk -F, '$3 == "time" && $5 == 1338' "$work/f/grid.csv" | wc -l)" = 1 ] || fail "more than the best ran at the second seed"
# Half the budget: runs of their own at the best multiplier, every seed, for the steps half the
# budget fits (zb-v, the budget line: half its steps); summary.csv's figure is their final loss.
f=$work/f
[ "$(col "$f/plan.csv" zb-v steps_half)" = 4 ] || fail "plan.csv gives the budget line $(col "$f/plan.csv" zb-v steps_half) steps in half its budget of 8, not 4"
[ "$(awk -F, -v b="$best" '$3 == "half" && $4 == b && $6 == 4' "$f/grid.csv" | wc -l)" = 2 ] ||
    fail "the half-budget runs are not the best (x$best) at both seeds for 4 steps: $(cat "$f/grid.csv")"
final_of() {  # final_of DIR CONFIG KIND: the mean over the seeds of the last logged validation loss
    awk -F, -v c="$2" -v k="$3" '$1 == c && $2 == k && $8 != "" { if ($5 >= last[$4]) { last[$4] = $5; v[$4] = $8 } }
        END { for (s in v) { n++; sum += v[s] } printf "%.4f", sum / n }' "$1/losses.csv"
}
[ "$(col "$f/summary.csv" zb-v half_budget_val_loss)" = "$(final_of "$f" zb-v half)" ] ||
    fail "summary.csv's loss at half the budget ($(col "$f/summary.csv" zb-v half_budget_val_loss)) is not the half-budget runs' ($(final_of "$f" zb-v half))"
grep -q 'at half the budget (runs of their own)' "$f/results.md" || fail "results.md does not say its half-budget figures are runs of their own"

# A line added to the configurations of a finished study: --resume calibrates it alone, keeps
# the budget, the calibration and every run it had, and trains the new line's runs; a line that
# would move the budget (a shorter step than the budget line's) is refused.
cp "$f/step_times.csv" "$work/f-steps.before"; cp "$f/plan.csv" "$work/f-plan.before"; cp "$f/losses.csv" "$work/f-losses.before"
printf '%s\n' "zb-v-k4 | zb-v | window 4 | $adamw | 1" >> "$work/configs-full.txt"
full_args=(--full --configs "$work/configs-full.txt" --stages 2 --window 2 --base-steps 8 --evals 2
    --model-args "layers 2; width 16; heads 2" --seeds "1337 1338" --calibration-steps 4 --out "$f")
study/v4.sh "${full_args[@]}" --resume > "$work/f-add.log" || fail "the resume with an added line failed: $(tail -5 "$work/f-add.log")"
grep -q 'calibrating the lines added since the study started: zb-v-k4$' "$work/f-add.log" ||
    fail "the resume did not calibrate the added line alone: $(head -5 "$work/f-add.log")"
[ "$(head -n "$(wc -l < "$work/f-steps.before")" "$f/step_times.csv")" = "$(cat "$work/f-steps.before")" ] &&
    grep -q '^zb-v-k4,zb-v,4,' "$f/step_times.csv" || fail "the resume changed the old lines' step times or priced no new one"
[ "$(col "$f/plan.csv" zb-v budget_s)" = "$(col "$work/f-plan.before" zb-v budget_s)" ] &&
    [ "$(col "$f/plan.csv" zb-v steps_time)" = "$(col "$work/f-plan.before" zb-v steps_time)" ] || fail "the added line moved the budget"
[ "$(grep -c '^zb-v,' "$f/losses.csv")" = "$(grep -c '^zb-v,' "$work/f-losses.before")" ] &&
    [ "$(grep '^zb-v,' "$f/losses.csv")" = "$(grep '^zb-v,' "$work/f-losses.before")" ] || fail "the resume changed zb-v's losses"
for kind in time half; do
    [ "$(awk -F, -v k=$kind '$1 == "zb-v-k4" && $3 == k' "$f/grid.csv" | wc -l)" = 2 ] || fail "the added line has not its two $kind runs"
done
grep -q '^| zb-v-k4 | ' "$f/results.md" || fail "results.md has no row for the added line"
# Which step is shorter is measured (the added line is calibrated alone, later than the budget
# line), so the check follows step_times.csv: refused if and only if the added line's step is
# below the budget line's. Window 1's step is about 0.8 of window 2's here, which a busy machine
# can turn over (a CI run did): up to three such lines are added until one measures shorter.
budget_step=$(col "$f/step_times.csv" zb-v step_s)
refused=0
for try in 1 2 3; do
    line=zb-v-k1$([ "$try" = 1 ] || echo "-$try")
    printf '%s\n' "$line | zb-v | window 1 | $adamw | 1" >> "$work/configs-full.txt"
    status=0
    study/v4.sh "${full_args[@]}" --resume > "$work/f-move.log" 2>&1 || status=$?
    step=$(col "$f/step_times.csv" "$line" step_s)
    [ -n "$step" ] || fail "the resume did not calibrate $line: $(tail -3 "$work/f-move.log")"
    if awk -v a="$step" -v b="$budget_step" 'BEGIN { exit !(a < b) }'; then
        [ "$status" != 0 ] || fail "$line, measured shorter than the budget line's step ($step s < $budget_step s), was added without a word"
        grep -q 'the budget would move' "$work/f-move.log" || fail "the refused resume does not say the budget would move: $(tail -3 "$work/f-move.log")"
        refused=1
        break
    fi
    [ "$status" = 0 ] || fail "$line, measured no shorter than the budget line's step ($step s >= $budget_step s), was refused: $(tail -3 "$work/f-move.log")"
done
[ "$refused" = 1 ] || fail "three lines of window 1 measured no shorter than the budget line's window 2: the refusal was never exercised"
# Not resumed, the same command starts afresh in that folder (as make study does into the
# committed docs/study/fourth/quick): the old plan neither refuses it nor stays behind.
study/v4.sh "${full_args[@]}" > "$work/f-fresh.log" 2>&1 || fail "a fresh study into a finished study's folder failed: $(tail -3 "$work/f-fresh.log")"
shortest=$(awk -F, 'NR > 1 && (min == "" || $7 < min) { min = $7; line = $1 } END { print line }' "$f/step_times.csv")
[ "$(col "$f/plan.csv" "$shortest" budget_line)" = 1 ] && [ -n "$(col "$f/plan.csv" "$line" budget_line)" ] &&
    [ ! -e "$f/resumed.txt" ] || fail "the fresh study's plan is not its own: its budget line is not $shortest (the shortest step), or $line has no row"

echo "study v4: every line checks; equal-time steps as recomputed from step_times.csv ($(col "$s/plan.csv" zb-v steps_time) and $(col "$s/plan.csv" paci steps_time)); seeds shuffle their order; spread is the sample sd"
