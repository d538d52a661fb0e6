#!/usr/bin/env bash
# The study (study/tuned.sh) on a tiny grid (seconds): zb-h1, 1f1b and paci at two learning
# rates. Every configuration of study/configs.txt must pass the compiler's check; a second
# study (paci at one of the lrs) must log the same loss bytes; zb-h1 must log 1f1b's; the best
# lr must be the lowest final validation loss of each configuration; zb-h1 must be the
# baseline; the speed-up columns must be the baseline's (and 1f1b's) replayed time to target
# over each configuration's, re-analysed at a target every best run reaches;
# the runs must take turns between the configurations; the replay's costs must be the
# calibration's, and --replay-only must redo them without training; the instruction set and
# BLAS kernels must be pinned where the CPU allows.
source tests/e2e/lib.sh
unset OPENBLAS_CORETYPE PACIC_MARCH # the study's own choices are under test (some machines' images set one)
python=${PYTHON:-/usr/bin/python3}

study/tuned.sh --check-only --lrs "0.5 2" > "$work/check.log" ||
    fail "a line of study/configs.txt is refused by the compiler"
# {X} is X times the multiplier, every rate of a configuration alike (muon's AdamW group too).
# The lines carry their own multipliers, which replace --lrs for them alone.
grep -q '^zb-h1-muon x2: muon { lr 0.04 at 32 scale sqrt;.* adamw { lr 0.004;' "$work/check.log" ||
    fail "the optimizer's learning rates are not scaled by the multiplier: $(grep '^zb-h1-muon x2' "$work/check.log")"
grep -q '^paci-muon-predict x4: ' "$work/check.log" || fail "paci-muon-predict's own multipliers were not used"
! grep -q '^1f1b-muon x2: ' "$work/check.log" || fail "1f1b-muon took a multiplier of another line"

# A grid of its own: AdamW under zb-h1, 1f1b and paci, all at --lrs.
adamw='adamw { lr {2e-3} at 32 scale sqrt; betas 0.9 0.95; weight_decay 0.1; clip 1.0 }'
printf '%s\n' "zb-h1 | zb-h1 | | $adamw" "1f1b | 1f1b | | $adamw" "paci | paci | | $adamw" > "$work/configs.txt"
grid=(--stages 2 --window 2 --micro-batches 16 --evals 2 --lrs "0.5 2" --target 5.35 --block 4
      --model-args "layers 2; width 16; heads 2" --configs "$work/configs.txt")
study/tuned.sh "${grid[@]}" --out "$work/a" > "$work/a.log"
study/tuned.sh "${grid[@]}" --only paci --lrs 2 --out "$work/b" > "$work/b.log"
for f in grid.csv losses.csv lr_table.csv summary.csv lr_curve.svg best_runs.svg results.md; do
    [ -s "$work/a/$f" ] || fail "study wrote no $f"
done
# On a CPU with AVX2 and FMA the study pins the instruction set and the BLAS kernels, so its
# losses are the same bytes on any such machine (study/toolchain.sh).
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
    grep -q "^study: generated C for -march=x86-64-v3.*, OpenBLAS's Haswell kernels$" "$work/a.log" ||
        fail "the study did not pin the instruction set and BLAS kernels: $(grep '^study: generated' "$work/a.log")"
    grep -q "^blas: OpenBLAS, Haswell kernels" "$work/a/runs/paci/lr-x0.5/run.log" ||
        fail "a study run did not use the pinned BLAS kernels: $(grep '^blas:' "$work/a/runs/paci/lr-x0.5/run.log")"
fi
# The replay's costs come from the calibration after the training: every configuration's
# program three times, one after another (not from the training runs, made over other stretches of
# time); --replay-only redoes it on the same runs without training.
for c in 1f1b paci; do
    for pass in 1 2 3; do
        [ -s "$work/a/calibration/$c/pass-$pass/profile.txt" ] || fail "$c: no calibration pass $pass"
    done
    grep -q "measured by pass-1 pass-2 pass-3 " "$work/a/runs/$c/profile.txt" ||
        fail "$c: the replay's costs are not the calibration's: $(head -1 "$work/a/runs/$c/profile.txt")"
done
grep -q "^time axis: .* of its calibration runs" "$work/a/results.md" || fail "results.md does not say the costs are the calibration's"
cp "$work/a/losses.csv" "$work/losses-before.csv"
study/tuned.sh "${grid[@]}" --replay-only --out "$work/a" > "$work/replay.log" || fail "--replay-only failed"
cmp "$work/a/losses.csv" "$work/losses-before.csv" || fail "--replay-only changed the losses"
[ -s "$work/a/runs/paci/replay.json" ] || fail "--replay-only wrote no replay"
# The configurations take turns, so a machine's drift in speed prices them alike.
order=$(awk -F, 'NR > 1 { printf "%s x%s ", $1, $3 }' "$work/a/grid.csv")
[ "$order" = "zb-h1 x0.5 1f1b x0.5 paci x0.5 zb-h1 x2 1f1b x2 paci x2 " ] ||
    fail "the runs were made in the order $order, not one lr of every configuration at a time"
paci_rows() { awk -F, 'NR == 1 || ($1 == "paci" && $2 == 2)' "$1"; }
[ "$(paci_rows "$work/b/losses.csv" | wc -l)" = $((1 + 8)) ] || fail "the second study logged no 8 steps"
cmp <(paci_rows "$work/a/losses.csv") <(paci_rows "$work/b/losses.csv") ||
    fail "the same runs in two studies gave different losses"
rows=$(grep -c '^| \(zb-h1\|1f1b\|paci\) | x' "$work/a.log") || true
[ "$rows" = 9 ] || fail "the tables have $rows rows, expected 3 configurations + 3 x 2 runs"
# zb-h1 trains as 1f1b does: the same losses at every lr (only the replayed time differs)
rows_of() { awk -F, -v c="$1" '$1 == c { $1 = ""; print }' "$work/a/losses.csv"; }
[ -n "$(rows_of zb-h1)" ] && [ "$(rows_of zb-h1)" = "$(rows_of 1f1b)" ] || fail "zb-h1's losses are not 1f1b's"

# Best lr: recomputed here from every run's final validation loss (lr_table.csv).
best_lr() { awk -F, -v c="$1" 'NR > 1 && $1 == c && $3 != "" && (b == "" || $3 < v) { v = $3; b = $2 } END { print b }' \
    "$work/a/lr_table.csv"; }
summary() { awk -F, -v c="$1" -v col="$2" '$1 == c { print $col }' "$work/a/summary.csv"; }
for c in zb-h1 1f1b paci; do
    [ "$(summary $c 3)" = "$(best_lr $c)" ] ||
        fail "$c: best lr x$(summary $c 3) in summary.csv, but x$(best_lr $c) has the lowest final validation loss"
    flagged=$(awk -F, -v c=$c '$1 == c && $8 == 1 { print $2 }' "$work/a/lr_table.csv")
    [ "$flagged" = "$(best_lr $c)" ] || fail "$c: lr_table.csv marks x$flagged as best, not x$(best_lr $c)"
done

# A target both best runs reach (their worse lowest block loss), set by a second analysis of
# the same folders: no retraining, and the speed-up column is then filled.
target=$(awk -F, 'NR > 1 && $8 == 1 && $7 > t { t = $7 } END { printf "%.4f", t + 0.0001 }' "$work/a/lr_table.csv")
"$python" study/analyze_tuned.py --target "$target" --block 4 "$work/a" > "$work/reanalysed.log"
grep -q "^analysis: \`study/analyze_tuned.py --target $target --block 4" "$work/a/results.md" ||
    fail "results.md does not give the analysis command"
base=$(summary zb-h1 7) flush=$(summary 1f1b 7)
[ -n "$base" ] && [ -n "$flush" ] || fail "the baseline or 1f1b reaches no target $target"
grep -q "^target: .* Baseline: \`zb-h1\` at lr" "$work/a/results.md" || fail "results.md does not name zb-h1 the baseline"
# speed_is C COLUMN REFERENCE: summary.csv's COLUMN of C is REFERENCE's time to target over C's
speed_is() {
    local own said
    own=$(summary "$1" 7) said=$(summary "$1" "$2")
    [ -n "$own" ] && [ -n "$said" ] || fail "$1: no time to target or speed-up (column $2) at target $target"
    awk -v b="$3" -v o="$own" -v s="$said" 'BEGIN { d = b / o / s - 1; exit !(d < 1e-3 && d > -1e-3) }' ||
        fail "$1: speed-up $said (column $2), but $3 s over its $own s is $(awk -v b="$3" -v o="$own" 'BEGIN { print b / o }')"
}
for c in zb-h1 1f1b paci; do
    speed_is "$c" 8 "$base"
    speed_is "$c" 10 "$flush"
    [ -n "$(summary "$c" 11)" ] || fail "$c: no loss at the baseline's time"
done
[ "$(summary zb-h1 5)" = 0.000 ] || fail "the baseline's loss gap to itself is $(summary zb-h1 5)"
echo "tuned study: every configuration compiles, losses identical in a second study, best lr and speed-up as recomputed (target $target)"
