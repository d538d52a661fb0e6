#!/usr/bin/env bash
# The study's second edition (study/tuned.sh) on a tiny grid (seconds): 1f1b and paci at two
# learning rates. Every configuration of study/configs.txt must pass the compiler's check; a
# second study (paci at one of the lrs) must log the same loss bytes; the best lr must be the lowest final
# validation loss of each configuration; the speed-up column must be the baseline's replayed
# time to target over each configuration's, re-analysed at a target every best run reaches;
# the runs must take turns between the configurations; the replay's costs must be the
# calibration's, and --replay-only must redo them without training; the instruction set and
# BLAS kernels must be pinned where the CPU allows.
source tests/e2e/lib.sh
unset OPENBLAS_CORETYPE PACIC_MARCH # the study's own choices are under test (some machines' images set one)
python=${PYTHON:-/usr/bin/python3}

study/tuned.sh --check-only --lrs "0.5 2" > "$work/check.log" ||
    fail "a line of study/configs.txt is refused by the compiler"
# {X} is X times the multiplier, every rate of a configuration alike (muon's AdamW group too).
# Muon's lines carry their own multipliers (0.5 or 1 .. 4 or 8), which replace --lrs for them alone.
grep -q '^1f1b-muon x2: muon { lr 0.04 at 32 scale sqrt;.* adamw { lr 0.004;' "$work/check.log" ||
    fail "the optimizer's learning rates are not scaled by the multiplier: $(grep '^1f1b-muon x2' "$work/check.log")"
grep -q '^paci-muon x4: ' "$work/check.log" || fail "paci-muon's own multipliers were not used"
! grep -q '^paci x4: ' "$work/check.log" || fail "paci took a multiplier of another line"
grep -q '^paci x0.5: ' "$work/check.log" || fail "paci did not take --lrs"

# 1f1b and paci of configs.txt, both at --lrs (1f1b's own multipliers dropped).
{ grep '^1f1b ' study/configs.txt | sed 's/ | [0-9. ]*$//'; grep '^paci ' study/configs.txt; } > "$work/configs.txt"
[ "$(grep -c 'adamw {' "$work/configs.txt")" = 2 ] || fail "no 1f1b and paci lines in configs.txt"
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
[ "$order" = "1f1b x0.5 paci x0.5 1f1b x2 paci x2 " ] ||
    fail "the runs were made in the order $order, not one lr of every configuration at a time"
paci_rows() { awk -F, 'NR == 1 || ($1 == "paci" && $2 == 2)' "$1"; }
[ "$(paci_rows "$work/b/losses.csv" | wc -l)" = $((1 + 8)) ] || fail "the second study logged no 8 steps"
cmp <(paci_rows "$work/a/losses.csv") <(paci_rows "$work/b/losses.csv") ||
    fail "the same runs in two studies gave different losses"
rows=$(grep -c '^| \(1f1b\|paci\) | x' "$work/a.log") || true
[ "$rows" = 6 ] || fail "the tables have $rows rows, expected 2 configurations + 2 x 2 runs"

# Best lr: recomputed here from every run's final validation loss (lr_table.csv).
best_lr() { awk -F, -v c="$1" 'NR > 1 && $1 == c && $3 != "" && (b == "" || $3 < v) { v = $3; b = $2 } END { print b }' \
    "$work/a/lr_table.csv"; }
summary() { awk -F, -v c="$1" -v col="$2" '$1 == c { print $col }' "$work/a/summary.csv"; }
for c in 1f1b paci; do
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
base=$(summary 1f1b 7)
[ -n "$base" ] || fail "the baseline reaches no target $target"
for c in 1f1b paci; do
    own=$(summary $c 7) said=$(summary $c 8)
    [ -n "$own" ] && [ -n "$said" ] || fail "$c: no time to target or speed-up at target $target"
    awk -v b="$base" -v o="$own" -v s="$said" 'BEGIN { d = b / o / s - 1; exit !(d < 1e-3 && d > -1e-3) }' ||
        fail "$c: speed-up $said, but the baseline's $base s over its $own s is $(awk -v b="$base" -v o="$own" 'BEGIN { print b / o }')"
done
[ "$(summary 1f1b 5)" = 0.000 ] || fail "the baseline's loss gap to itself is $(summary 1f1b 5)"
echo "tuned study: every configuration compiles, losses identical in a second study, best lr and speed-up as recomputed (target $target)"
