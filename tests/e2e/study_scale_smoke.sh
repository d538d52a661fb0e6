#!/usr/bin/env bash
# The batch-scaling study (study/scale.sh, study/analyze_scale.py) in seconds.
#   1. The analysis on planted runs whose answers are worked out here: the reference is D = 1
#      at equal tokens (not at equal steps), the threshold is the one given (1%, and <= counts),
#      a batch holds only if every smaller D does, a diverged run never holds, DGC's loss cost
#      and bytes saved are against dense at the same optimizer, rule and D.
#   2. Every line of study/scale_optimizers.txt passes the compiler's check at every D.
#   3. The driver end to end on a tiny grid (AdamW at two D = 1 lrs, D = 2 under both rules,
#      DGC at D = 2): every output written; the base lr is the D = 1 run with the lowest final
#      loss; every run sees the same tokens in 1 / D the steps, at lr x D (linear) or x sqrt D;
#      the gaps are the final losses' ratio; DGC writes fewer bytes; every run is replayed.
source tests/e2e/lib.sh
python=${PYTHON:-/usr/bin/python3}
analysis=study/analyze_scale.py

# --- 1. planted runs ------------------------------------------------------------------------
# plant FOLDER D STEPS FINAL [EXCHANGE] [diverged]: a run folder of the study's shape (micro 4,
# window 8, context 64, D replicas, STEPS steps), 8 evaluations, the last at FINAL; the earlier
# ones FINAL + 0.5 (k = 1) down to FINAL + 0.5/7 (k = 7) above it. A diverged run stops halfway.
plant() {
    local dir=$work/planted/runs/$1
    mkdir -p "$dir"
    printf 'model gpt2 { layers 2; width 16; heads 2; context 64; vocab 256 }\npipeline { stages 2; schedule 1f1b; window 8 }\nparallel { data %d }\nbatch { micro 4 }\ntrain {\n    steps %d\n    optimizer adamw { lr 1e-3 at 32 scale sqrt }\n}\n' \
        "$2" "$3" > "$dir/model.paci"
    "$python" - "$dir" "$2" "$3" "$4" "${5:-}" "${6:-}" <<'PY'
import json, sys
folder, d, steps, final, exchange, diverged = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]
per_step, every = 4 * 8 * d * 64, steps // 8
last = steps // 2 if diverged else steps
with open(folder + "/metrics.jsonl", "w") as f:
    for s in range(1, last + 1):
        f.write(json.dumps({"step": s, "loss": final + 1, "lr": 1e-3, "tokens": per_step}) + "\n")
        if s % every == 0:
            k = s // every
            f.write(json.dumps({"step": s, "tokens": s * per_step, "val_loss": final if k == 8 else final + 0.5 / k}) + "\n")
    if exchange:
        f.write(json.dumps({"exchange_bytes_per_step": [int(exchange)] * d}) + "\n")
if diverged:
    open(folder + "/diverged.txt", "w").write("step %d: loss is not finite\n" % last)
PY
    echo "${1%%/*},$7,$2,1,$8,runs/$1" >> "$work/planted/grid.csv"
}
mkdir -p "$work/planted"
echo "optimizer,rule,replicas,lr_multiplier,compression,folder" > "$work/planted/grid.csv"
# Optimizer a, D = 1 at 2.000 after 256 steps; at D's own step count 256 / D it was far higher
# (2.5 at step 32, 2.25 at step 64, 2.1667 at 96, 2.125 at 128): compared there (equal
# steps), every run would be within. Linear: +0.95%, +0.75%, +1.5%: holds up to D = 4. Sqrt:
# +1.25% at D = 2, so D = 1 only, although D = 4 (+0.5%) is within. At a threshold of 10% both
# would hold up to D = 8.
plant a/d1-x1 1 256 2.000 "" "" both ""
plant a/linear-d2 2 128 2.019 100000 "" linear ""
plant a/linear-d4 4 64 2.015 100000 "" linear ""
plant a/linear-d8 8 32 2.030 100000 "" linear ""
plant a/sqrt-d2 2 128 2.025 100000 "" sqrt ""
plant a/sqrt-d4 4 64 2.010 100000 "" sqrt ""
plant a/sqrt-d8 8 32 2.050 100000 "" sqrt ""
plant a/sqrt-d4-dgc 4 64 2.050 1000 "" sqrt dgc
# Optimizer b: its first D = 1 run, at x2, is worse (2.6) than its second, so x1 is the base;
# sqrt holds to D = 8 (+1.000% there: at the threshold is within); linear diverges at D = 2
# (never within, so D = 1 only, although D = 4 and 8 are).
plant b/d1-x2 1 256 2.600 "" "" both ""
sed -i '$ s/,1,,runs/,2,,runs/' "$work/planted/grid.csv"
plant b/d1-x1 1 256 2.500 "" "" both ""
plant b/linear-d2 2 128 2.600 100000 diverged linear ""
plant b/linear-d4 4 64 2.510 100000 "" linear ""
plant b/linear-d8 8 32 2.510 100000 "" linear ""
plant b/sqrt-d2 2 128 2.510 100000 "" sqrt ""
plant b/sqrt-d4 4 64 2.520 100000 "" sqrt ""
plant b/sqrt-d8 8 32 2.525 100000 "" sqrt ""
"$python" "$analysis" --threshold 1 "$work/planted" > "$work/planted.log" || fail "the analysis failed on the planted runs"
expected="optimizer,base_lr_multiplier,d1_final_val_loss,largest_replicas_linear,largest_replicas_sqrt,largest_replicas,largest_global_batch,rule
a,1,2.000000,4,1,4,128,linear
b,1,2.500000,1,8,8,256,sqrt"
[ "$(cat "$work/planted/summary.csv")" = "$expected" ] ||
    fail "planted runs: summary.csv is
$(cat "$work/planted/summary.csv")
expected
$expected"
gap() { awk -F, -v f="runs/$1" '$16 == f { print $11 }' "$work/planted/runs.csv"; }
[ "$(gap a/linear-d8)" = 1.500 ] && [ "$(gap a/sqrt-d4)" = 0.500 ] && [ "$(gap b/sqrt-d8)" = 1.000 ] ||
    fail "planted gaps: a/linear-d8 $(gap a/linear-d8), a/sqrt-d4 $(gap a/sqrt-d4), b/sqrt-d8 $(gap b/sqrt-d8)"
[ "$(sed -n 2p "$work/planted/dgc.csv")" = "a,sqrt,4,2.010000,2.050000,1.990,100000,1000,100.0" ] ||
    fail "planted DGC row: $(sed -n 2p "$work/planted/dgc.csv")"
grep -q '^| a | x1: .* | 128 (D = 4, linear rule) | 4 | 1 |$' "$work/planted/results.md" ||
    fail "results.md does not give a's largest batch: $(grep '^| a | x1' "$work/planted/results.md")"
echo "planted runs: the 1% rule at equal tokens gives a 128 (D = 4, linear), b 256 (D = 8, sqrt); DGC +1.99%, 100x fewer bytes"

# --- 2. every optimizer of the study compiles at every D -------------------------------------
study/scale.sh --check-only > "$work/check.log" || fail "a line of study/scale_optimizers.txt is refused by the compiler"
grep -q '^muon x1 linear at D = 8: muon { lr 0.08 at 32 scale linear;.* adamw { lr 0.008;' "$work/check.log" ||
    fail "muon's D = 8 entry: $(grep '^muon x1 linear at D = 8' "$work/check.log")"
grep -q '^lars x1 sqrt at D = 4, dgc: ' "$work/check.log" || fail "no DGC run of lars at D = 4 checked"

# --- 3. the driver on a tiny grid ------------------------------------------------------------
echo 'adamw | adamw { lr {2e-3} at @BASE@ scale @RULE@; clip 1.0 } | 1 4 | planted for the test' > "$work/opt.txt"
study/scale.sh --optimizers "$work/opt.txt" --replicas "1 2" --dgc-replicas 2 --micro-batches 16 --evals 2 \
    --stages 2 --window 2 --model-args "layers 2; width 16; heads 2" --out "$work/s" > "$work/s.log" ||
    fail "the driver failed: $(tail -5 "$work/s.log")"
for f in grid.csv runs.csv summary.csv dgc.csv losses.csv results.md final_loss_vs_batch.svg val_loss_vs_tokens.svg; do
    [ -s "$work/s/$f" ] || fail "the study wrote no $f"
done
col() { awk -F, -v f="runs/adamw/$1" -v c="$2" '$16 == f { print $c }' "$work/s/runs.csv"; }
number() { [[ $1 =~ ^-?[0-9]+(\.[0-9]+)?$ ]] || fail "$2: '$1' is not a number"; }
for run in d1-x1 d1-x4 linear-d2 sqrt-d2 sqrt-d2-dgc; do
    number "$(col $run 9)" "$run's final validation loss"
done
# The base lr: the D = 1 run with the lowest final validation loss.
base=x4
awk -v a="$(col d1-x1 9)" -v b="$(col d1-x4 9)" 'BEGIN { exit !(a < b) }' && base=x1
[ "$(awk -F, 'NR == 2 { print "x" $2 }' "$work/s/summary.csv")" = $base ] ||
    fail "base lr $(awk -F, 'NR == 2 { print $2 }' "$work/s/summary.csv"), but $base has the lower D = 1 loss"
d1=d1-$base
for run in $d1 linear-d2 sqrt-d2 sqrt-d2-dgc; do
    number "$(col $run 14)" "$run's replayed seconds"  # the base's and every D > 1's
done
[ "$(col linear-d2 6)" = "${base#x}" ] || fail "D = 2 ran at x$(col linear-d2 6), not the base $base"
# The same tokens in half the steps; lr x 2 (linear), x sqrt 2 (sqrt).
last_tokens() { awk -F, -v f="runs/adamw/$1" '$1 == f { t = $3 } END { print t }' "$work/s/losses.csv"; }
[ "$(last_tokens linear-d2)" = "$(last_tokens $d1)" ] && [ "$(last_tokens sqrt-d2-dgc)" = "$(last_tokens $d1)" ] ||
    fail "unequal tokens: D = 1 $(last_tokens $d1), D = 2 $(last_tokens linear-d2), DGC $(last_tokens sqrt-d2-dgc)"
[ "$(col linear-d2 5)" = $(($(col $d1 5) / 2)) ] || fail "D = 2 ran $(col linear-d2 5) steps, D = 1 $(col $d1 5)"
ratio_is() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a / b / r - 1; exit !(d < 1e-4 && d > -1e-4) }'; }
ratio_is "$(col linear-d2 7)" "$(col $d1 7)" 2 || fail "linear rule: peak lr $(col linear-d2 7) at D = 2, $(col $d1 7) at D = 1"
ratio_is "$(col sqrt-d2 7)" "$(col $d1 7)" 1.41421356 || fail "sqrt rule: peak lr $(col sqrt-d2 7) at D = 2, $(col $d1 7) at D = 1"
# The gap: D = 2's final loss over D = 1's, recomputed.
for run in linear-d2 sqrt-d2; do
    [ "$(col $run 10)" = "$(col $d1 9)" ] || fail "$run is compared with $(col $run 10), not D = 1's final $(col $d1 9)"
    want=$(awk -v a="$(col $run 9)" -v b="$(col $d1 9)" 'BEGIN { printf "%.3f", 100 * (a / b - 1) }')
    [ "$(col $run 11)" = "$want" ] || fail "$run: gap $(col $run 11)%, recomputed $want%"
done
[ "$(col sqrt-d2-dgc 13)" -lt "$(col sqrt-d2 13)" ] ||
    fail "DGC wrote $(col sqrt-d2-dgc 13) bytes a step, dense $(col sqrt-d2 13)"
grep -q "^| adamw | sqrt | 2 | " "$work/s/results.md" || fail "results.md has no DGC table row"
echo "tiny study: base lr $base, D = 2 at equal tokens in half the steps, gaps $(col linear-d2 11)% (linear) $(col sqrt-d2 11)% (sqrt), DGC $(col sqrt-d2-dgc 13) bytes a step against $(col sqrt-d2 13)"
