#!/usr/bin/env bash
# The batch-scaling study, second edition (study/scale.sh, study/analyze_scale.py) in seconds.
#   1. The analysis on planted runs whose answers are worked out here: equal tokens compare
#      with D = 1 after the same tokens and equal steps after the same steps (each, not the
#      other); the threshold is the one given (1%, and <= counts); a D holds only if every
#      smaller D does; a diverged run never holds; the base lr is bracketed or not; the noise
#      scale is the mean over the last 20% of D = 1's steps (nulls skipped); DGC's coverage
#      counts the warm-up's densities, its bytes are the run's counters x steps; each goal is
#      met or not by the figures.
#   2. Every line of study/scale_optimizers.txt passes the compiler's check at every D.
#   3. The driver end to end on a tiny grid (AdamW at two D = 1 lrs, the best one an edge, so a
#      third is added; D = 2 at equal tokens and steps under both rules; DGC at D = 2 at two
#      densities): every output written; equal tokens in half the steps, equal steps in the
#      same steps at twice the tokens; lr x 2 (linear) or x sqrt 2; DGC writes fewer bytes.
source tests/e2e/lib.sh
python=${PYTHON:-/usr/bin/python3}
analysis=study/analyze_scale.py

# --- 1. planted runs ------------------------------------------------------------------------
# plant FOLDER KIND D STEPS FINAL RULE MULTIPLIER COMPARISON [EXCHANGE] [diverged|NOISE] [DGC]:
# a run folder of the study's shape (micro 4, window 8, context 64, D replicas, STEPS steps),
# 8 evaluations, the last at FINAL, the earlier ones FINAL + 0.5 (k = 1) down to FINAL + 0.5/7
# (k = 7) above it. A diverged run stops halfway. NOISE: the run logs noise_scale 1000 before
# its last 20% of steps and NOISE in them, null at the window's first step. DGC: "DENSITY
# WARMUP", the run's compression block.
plant() {
    local dir=$work/planted/runs/$1 compression=""
    mkdir -p "$dir"
    [ -z "${11:-}" ] || compression="compression dgc { density ${11% *}; warmup_steps ${11#* }; clip 1.0 }"
    printf 'model gpt2 { layers 2; width 16; heads 2; context 64; vocab 256 }\npipeline { stages 1; schedule 1f1b; window 8 }\nparallel { data %d\n %s }\nbatch { micro 4 }\ntrain {\n    steps %d\n    optimizer %s { lr 1e-3 at 32 scale %s }\n}\n' \
        "$3" "$compression" "$4" "$2" "$6" > "$dir/model.paci"
    "$python" - "$dir" "$3" "$4" "$5" "${9:-}" "${10:-}" <<'PY'
import json, sys
folder, d, steps, final, exchange, extra = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]
per_step, every = 4 * 8 * d * 64, steps // 8
diverged, noise = extra == "diverged", float(extra) if extra not in ("", "diverged") else None
last, window_first = (steps // 2 if diverged else steps), steps - steps * 20 // 100 + 1
with open(folder + "/metrics.jsonl", "w") as f:
    for s in range(1, last + 1):
        rec = {"step": s, "loss": final + 1, "lr": 1e-3, "tokens": per_step}
        if noise is not None:
            rec["noise_scale"] = None if s == window_first else noise if s >= window_first else 1000.0
        f.write(json.dumps(rec) + "\n")
        if s % every == 0:
            k = s // every
            f.write(json.dumps({"step": s, "tokens": s * per_step, "val_loss": final if k == 8 else final + 0.5 / k}) + "\n")
    if exchange:
        f.write(json.dumps({"exchange_bytes_per_step": [int(exchange)] * d}) + "\n")
if diverged:
    open(folder + "/diverged.txt", "w").write("step %d: loss is not finite\n" % last)
PY
    echo "${1%%/*},$6,$3,$7,$8,${11:+dgc},$4,runs/$1" >> "$work/planted/grid.csv"
}
mkdir -p "$work/planted"
echo "optimizer,rule,replicas,lr_multiplier,comparison,compression,steps,folder" > "$work/planted/grid.csv"
# Optimizer a (adamw): D = 1 at x0.5, x1, x2 ends 2.1, 2.0, 2.05: base x1, bracketed. Its
# validation loss at step 256 / D was far higher (2.125 at step 128, 2.25 at 64, 2.5 at 32):
# compared there (equal steps), every equal-tokens run would be within.
#   Equal tokens (256 / D steps, against 2.000): linear +0.95%, +0.75%, +1.5%: holds to D = 4;
#   sqrt +1.25% at D = 2: D = 1 only (although D = 4 is within).
#   Equal steps (256 steps, against 2.000): linear -2.5%, -0.5%, +1.000% (<= 1%): D = 8; sqrt
#   +1.2% at D = 2: D = 1 only. Compared after the same tokens instead, D = 1 has no loss there.
#   Noise: 1000 before step 206 (256 - 51 + 1), null at 206, 48 from 207: B_simple 48 against
#   the largest batch at equal tokens, 4 x 32 = 128: x0.375, not within 2x.
plant a/d1-x0.5 adamw 1 256 2.100 both 0.5 both
plant a/d1-x1 adamw 1 256 2.000 both 1 both "" 48
plant a/d1-x2 adamw 1 256 2.050 both 2 both
plant a/linear-d2-tokens adamw 2 128 2.019 linear 1 tokens 100000
plant a/linear-d4-tokens adamw 4 64 2.015 linear 1 tokens 100000
plant a/linear-d8-tokens adamw 8 32 2.030 linear 1 tokens 100000
plant a/sqrt-d2-tokens adamw 2 128 2.025 sqrt 1 tokens 100000
plant a/sqrt-d4-tokens adamw 4 64 2.010 sqrt 1 tokens 100000
plant a/sqrt-d8-tokens adamw 8 32 2.050 sqrt 1 tokens 100000
plant a/linear-d2-steps adamw 2 256 1.950 linear 1 steps 100000
plant a/linear-d4-steps adamw 4 256 1.990 linear 1 steps 100000
plant a/linear-d8-steps adamw 8 256 2.020 linear 1 steps 100000
plant a/sqrt-d2-steps adamw 2 256 2.024 sqrt 1 steps 100000
plant a/sqrt-d4-steps adamw 4 256 1.990 sqrt 1 steps 400000
plant a/sqrt-d8-steps adamw 8 256 1.900 sqrt 1 steps 100000
# DGC at D = 4, 256 steps, warm-up 25, against a/sqrt-d4-steps (1.990, 400,000 bytes a step):
#   0.01: 2.005 (+0.754%), 4,000 bytes a step: 100x (>= 100 counts): both goals met.
#     Sends per weight: sum over t = 1..25 of 0.25 x 0.04^((t-1)/25) = 0.25 (1 - 0.04) /
#     (1 - 0.04^(1/25)) = 1.9866, plus 0.01 x 231 after = 2.31: 4.30 (0.01 x 256 = 2.56
#     without the warm-up's densities); from the bytes, 4,000 x 256 / 400,000 = 2.56.
#   0.001: 2.050 (+3.015%), 500 bytes a step: 800x, the loss goal not met. Sends: 1.2565 +
#     0.231 = 1.49.
plant a/sqrt-d4-dgc0.01 adamw 4 256 2.005 sqrt 1 dgc 4000 "" "0.01 25"
plant a/sqrt-d4-dgc0.001 adamw 4 256 2.050 sqrt 1 dgc 500 "" "0.001 25"
# Optimizer b (lamb): its first D = 1 run, at x2, is worse (2.6) than x1 (2.5): base x1, the
# lowest tried: not bracketed.
#   Equal tokens (against 2.500): sqrt +0.4%, +0.8%, +1.000%: D = 8; linear diverges at D = 2
#   (never within): D = 1 only, although D = 4 and 8 are within.
#   Equal steps: linear -4%, -2%, 0%: D = 8 (the LAMB goal met); sqrt +1.2% at D = 2: 1.
#   Noise 300 against 8 x 32 = 256 (the grid's largest D: censored): x1.17, within 2x.
plant b/d1-x2 lamb 1 256 2.600 both 2 both
plant b/d1-x1 lamb 1 256 2.500 both 1 both "" 300
plant b/linear-d2-tokens lamb 2 128 2.600 linear 1 tokens 100000 diverged
plant b/linear-d4-tokens lamb 4 64 2.510 linear 1 tokens 100000
plant b/linear-d8-tokens lamb 8 32 2.510 linear 1 tokens 100000
plant b/sqrt-d2-tokens lamb 2 128 2.510 sqrt 1 tokens 100000
plant b/sqrt-d4-tokens lamb 4 64 2.520 sqrt 1 tokens 100000
plant b/sqrt-d8-tokens lamb 8 32 2.525 sqrt 1 tokens 100000
plant b/linear-d2-steps lamb 2 256 2.400 linear 1 steps 100000
plant b/linear-d4-steps lamb 4 256 2.450 linear 1 steps 100000
plant b/linear-d8-steps lamb 8 256 2.500 linear 1 steps 100000
plant b/sqrt-d2-steps lamb 2 256 2.530 sqrt 1 steps 100000
plant b/sqrt-d4-steps lamb 4 256 2.400 sqrt 1 steps 100000
plant b/sqrt-d8-steps lamb 8 256 2.400 sqrt 1 steps 100000
"$python" "$analysis" --threshold 1 "$work/planted" > "$work/planted.log" || fail "the analysis failed on the planted runs: $(tail -3 "$work/planted.log")"
expected="optimizer,kind,base_lr_multiplier,multipliers_tried,bracketed,d1_final_val_loss,base_batch,largest_replicas_tokens_linear,largest_replicas_tokens_sqrt,largest_replicas_steps_linear,largest_replicas_steps_sqrt,largest_replicas_tokens,largest_replicas_steps,b_simple,b_simple_min,b_simple_max,noise_first_step,noise_last_step
a,adamw,1,0.5 1 2,yes,2.000000,32,4,1,8,1,4,8,48.00,48.00,48.00,206,256
b,lamb,1,1 2,no,2.500000,32,1,8,8,1,8,8,300.00,300.00,300.00,206,256"
[ "$(cat "$work/planted/summary.csv")" = "$expected" ] ||
    fail "planted runs: summary.csv is
$(cat "$work/planted/summary.csv")
expected
$expected"
gap() { awk -F, -v f="runs/$1" '$18 == f { print $13 }' "$work/planted/runs.csv"; }
[ "$(gap a/linear-d8-tokens)" = 1.500 ] && [ "$(gap a/sqrt-d4-tokens)" = 0.500 ] && [ "$(gap b/sqrt-d8-tokens)" = 1.000 ] &&
    [ "$(gap a/linear-d2-steps)" = -2.500 ] && [ "$(gap a/linear-d8-steps)" = 1.000 ] ||
    fail "planted gaps: a/linear-d8-tokens $(gap a/linear-d8-tokens), a/sqrt-d4-tokens $(gap a/sqrt-d4-tokens), b/sqrt-d8-tokens $(gap b/sqrt-d8-tokens), a/linear-d2-steps $(gap a/linear-d2-steps), a/linear-d8-steps $(gap a/linear-d8-steps)"
expected="optimizer,first_step,last_step,b_simple,b_simple_min,b_simple_max,base_batch,largest_batch_equal_tokens,ratio,censored,within_2x
a,206,256,48.00,48.00,48.00,32,128,0.375,0,0
b,206,256,300.00,300.00,300.00,32,256,1.172,1,1"
[ "$(cat "$work/planted/noise.csv")" = "$expected" ] || fail "planted noise.csv is
$(cat "$work/planted/noise.csv")
expected
$expected"
expected="optimizer,rule,replicas,steps,density,warmup_steps,sends_per_weight,sends_after_warmup,sends_per_weight_from_bytes,dense_final_val_loss,dgc_final_val_loss,loss_cost_pct,dense_bytes,dgc_bytes,bytes_saved_x,bytes_goal,loss_goal
a,sqrt,4,256,0.01,25,4.30,2.31,2.56,1.990000,2.005000,0.754,102400000,1024000,100.0,met,met
a,sqrt,4,256,0.001,25,1.49,0.23,0.32,1.990000,2.050000,3.015,102400000,128000,800.0,met,not met"
[ "$(cat "$work/planted/dgc.csv")" = "$expected" ] || fail "planted dgc.csv is
$(cat "$work/planted/dgc.csv")
expected
$expected"
goal() { grep -F -- "- $1" "$work/planted/results.md" | grep -o '\*\*[a-z ]*\*\*'; }
[ "$(goal "DGC sends at least 100x")" = "**met**" ] && [ "$(goal "the measured noise scale")" = "**not met**" ] &&
    [ "$(goal "LAMB or LANS holds")" = "**met**" ] || fail "planted goals: $(grep -F -- '- ' "$work/planted/results.md" | head -3)"
grep -q '1 of 2 optimizers: a B_simple 48.0 against 128 (x0.38); b B_simple 300.0 against 256 or more (x1.17)' "$work/planted/results.md" ||
    fail "results.md's noise goal: $(grep -F -- '- the measured noise' "$work/planted/results.md")"
grep -q '^| a | x1: .* | x0.5 x1 x2 (yes) | 2.0000 | 4 (128 sequences, linear rule) | 8 (256 sequences, linear rule) | 48.0 (48.0 to 48.0) |$' "$work/planted/results.md" ||
    fail "results.md does not give a's row: $(grep '^| a | x1' "$work/planted/results.md")"
echo "planted runs: a holds to D = 4 at equal tokens, 8 at equal steps; b 8 and 8; noise 1 of 2 within 2x; DGC 0.01 met (100x, +0.75%; 4.30 sends a weight with the warm-up), 0.001 not (+3.02%)"

# --- 2. every optimizer of the study compiles at every D -------------------------------------
study/scale.sh --check-only > "$work/check.log" || fail "a line of study/scale_optimizers.txt is refused by the compiler"
grep -q '^muon x1 linear at D = 8, equal steps: muon { lr [0-9.e-]* at 8 scale linear;.* adamw { lr ' "$work/check.log" ||
    fail "muon's D = 8 entry: $(grep '^muon x1 linear at D = 8' "$work/check.log")"
for name in adamw muon lamb lans lars; do
    grep -q "^$name x1 sqrt at D = 4, dgc 0.001: " "$work/check.log" || fail "no DGC run of $name at D = 4 checked"
done

# --- 3. the driver on a tiny grid ------------------------------------------------------------
# x1 and x2 at D = 1: whichever wins is an edge, so the driver adds x0.5 or x4 (--extend 1),
# and no more.
echo 'adamw | adamw { lr {2e-3} at @BASE@ scale @RULE@; clip 1.0 } | 1 2 | planted for the test' > "$work/opt.txt"
study/scale.sh --optimizers "$work/opt.txt" --replicas "1 2" --steps 16 --evals 2 --eval-batches 2 --window 2 \
    --micro 2 --model-args "layers 2; width 16; heads 2" --extend 1 --dgc-replicas 2 --dgc-densities "0.1 0.01" \
    --dgc-warmup 25 --out "$work/s" > "$work/s.log" || fail "the driver failed: $(tail -5 "$work/s.log")"
for f in grid.csv runs.csv summary.csv dgc.csv noise.csv losses.csv results.md sources.csv \
    final_loss_vs_batch_tokens.svg final_loss_vs_batch_steps.svg; do
    [ -s "$work/s/$f" ] || fail "the study wrote no $f"
done
col() { awk -F, -v f="runs/adamw/$1" -v c="$2" '$18 == f { print $c }' "$work/s/runs.csv"; }
number() { [[ $1 =~ ^-?[0-9]+(\.[0-9]+)?$ ]] || fail "$2: '$1' is not a number"; }
# The edge: a third multiplier beyond the better of x1 and x2, and no fourth.
tried=$(awk -F, 'NR == 2 { print $4 }' "$work/s/summary.csv")
[ "$tried" = "0.5 1 2" ] || [ "$tried" = "1 2 4" ] || fail "multipliers tried: '$tried', not x1 x2 and one beyond the edge"
for m in $tried; do number "$(col d1-x$m 11)" "x$m's final validation loss"; done
base=$(awk -F, 'NR == 2 { print $3 }' "$work/s/summary.csv")
best=$(for m in $tried; do echo "$(col d1-x$m 11) $m"; done | sort -g | head -1 | cut -d' ' -f2)
[ "$base" = "$best" ] || fail "base lr x$base, but x$best has the lowest D = 1 loss"
d1=d1-x$base
for run in linear-d2-tokens sqrt-d2-tokens linear-d2-steps sqrt-d2-steps sqrt-d2-dgc0.1 sqrt-d2-dgc0.01; do
    number "$(col $run 11)" "$run's final validation loss"
    [ "$(col $run 7)" = "$base" ] || fail "$run ran at x$(col $run 7), not the base x$base"
done
# Equal tokens: half the steps, the same tokens; equal steps: the same steps, twice the tokens.
last_tokens() { awk -F, -v f="runs/adamw/$1" '$1 == f { t = $3 } END { print t }' "$work/s/losses.csv"; }
[ "$(last_tokens linear-d2-tokens)" = "$(last_tokens $d1)" ] && [ "$(col linear-d2-tokens 6)" = 8 ] &&
    [ "$(last_tokens sqrt-d2-steps)" = $((2 * $(last_tokens $d1))) ] && [ "$(col sqrt-d2-steps 6)" = 16 ] ||
    fail "tokens: D = 1 $(last_tokens $d1), equal tokens $(last_tokens linear-d2-tokens) in $(col linear-d2-tokens 6) steps, equal steps $(last_tokens sqrt-d2-steps) in $(col sqrt-d2-steps 6)"
ratio_is() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a / b / r - 1; exit !(d < 1e-4 && d > -1e-4) }'; }
ratio_is "$(col linear-d2-steps 8)" "$(col $d1 8)" 2 || fail "linear rule: peak lr $(col linear-d2-steps 8) at D = 2, $(col $d1 8) at D = 1"
ratio_is "$(col sqrt-d2-tokens 8)" "$(col $d1 8)" 1.41421356 || fail "sqrt rule: peak lr $(col sqrt-d2-tokens 8) at D = 2, $(col $d1 8) at D = 1"
# The gap: D = 2's final loss over D = 1's, recomputed (D = 1's final: the same tokens or steps).
for run in linear-d2-tokens sqrt-d2-steps; do
    [ "$(col $run 12)" = "$(col $d1 11)" ] || fail "$run is compared with $(col $run 12), not D = 1's final $(col $d1 11)"
    want=$(awk -v a="$(col $run 11)" -v b="$(col $d1 11)" 'BEGIN { printf "%.3f", 100 * (a / b - 1) }')
    [ "$(col $run 13)" = "$want" ] || fail "$run: gap $(col $run 13)%, recomputed $want%"
done
# DGC at 16 steps of D = 2 against the equal-steps dense run: fewer bytes, the warm-up's 4 steps.
for f in 0.1 0.01; do
    [ "$(col sqrt-d2-dgc$f 15)" -lt "$(col sqrt-d2-steps 15)" ] ||
        fail "DGC $f wrote $(col sqrt-d2-dgc$f 15) bytes a step, dense $(col sqrt-d2-steps 15)"
done
grep -q 'compression dgc { density 0.01; warmup_steps 4; clip 1.0 }' "$work/s/runs/adamw/sqrt-d2-dgc0.01/model.paci" ||
    fail "DGC block: $(grep compression "$work/s/runs/adamw/sqrt-d2-dgc0.01/model.paci")"
number "$(awk -F, 'NR == 2 { print $4 }' "$work/s/noise.csv")" "the noise scale of D = 1"
grep -q '^- DGC sends at least 100x fewer bytes than dense and ends within 1% of dense: \*\*' "$work/s/results.md" ||
    fail "results.md states no DGC goal"
echo "tiny study: tried x${tried// / x}, base x$base; D = 2 gaps $(col linear-d2-tokens 13)% (tokens, linear) $(col sqrt-d2-steps 13)% (steps, sqrt); DGC $(col sqrt-d2-dgc0.01 15) bytes a step against $(col sqrt-d2-steps 15); B_simple $(awk -F, 'NR == 2 { print $4 }' "$work/s/noise.csv")"

# --- 4. two optimizers; DGC's dense partner, trained when the grid has none -------------------
# Both optimizers' best D = 1 runs are edges: the driver finds both bests before it starts
# either's next run (a run started earlier would be read unfinished). Equal tokens under the
# linear rule only: no dense run of the sqrt rule at D = 2 and 16 steps, so the driver trains
# one, and DGC is compared with it.
{ echo 'adamw | adamw { lr {8e-3} at @BASE@ scale @RULE@; clip 1.0 } | 1 2 | planted for the test'
  echo 'lamb | lamb { lr {8e-3} at @BASE@ scale @RULE@; clip 1.0 } | 1 2 | planted for the test'; } > "$work/opt1.txt"
study/scale.sh --optimizers "$work/opt1.txt" --replicas "1 2" --comparisons tokens --rules linear --steps 16 \
    --evals 2 --eval-batches 2 --window 2 --micro 2 --model-args "layers 2; width 16; heads 2" --dgc-replicas 2 \
    --dgc-densities 0.1 --dgc-warmup 25 --extend 1 --out "$work/p" > "$work/p.log" || fail "the driver failed: $(tail -5 "$work/p.log")"
dense=$(awk -F, '$18 == "runs/adamw/sqrt-d2-dense16" { print $6, $11 }' "$work/p/runs.csv")
[ -n "$dense" ] && [ "$(awk -F, 'NR == 2 { print $4, $10 }' "$work/p/dgc.csv")" = "$dense" ] ||
    fail "DGC's dense partner: runs.csv has '$dense', dgc.csv compares with '$(awk -F, 'NR == 2 { print $4, $10 }' "$work/p/dgc.csv")'"
for name in adamw lamb; do
    [ "$(awk -F, -v n=$name '$1 == n { print split($4, m, " ") }' "$work/p/summary.csv")" = 3 ] ||
        fail "$name: multipliers tried: $(awk -F, -v n=$name '$1 == n { print $4 }' "$work/p/summary.csv")"
done
echo "two optimizers, each bracketed on a third multiplier; DGC's dense partner trained by the driver (steps, final loss): $dense"
