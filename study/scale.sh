#!/usr/bin/env bash
# The study's batch-scaling edition, second edition (docs/study/scale2/METHOD.md): a small
# model on one pipeline stage, D = 1, 2, 4, 8 replicas (threads) at equal tokens (S / D steps)
# and at equal steps (S steps); every optimizer of study/scale_optimizers.txt tuned at D = 1
# over S steps, then under the linear and the sqrt lr rule (lr x D, lr x sqrt D; the lr
# schedule's warm-up a fixed share of each run's steps); the gradient noise scale read from the
# D = 1 runs' metrics; DGC at each density against dense at one D. study/analyze_scale.py
# writes the tables and the goals.
#
#   study/scale.sh [--optimizers FILE] [--only "NAME ..."] [--replicas "1 2 4 8"]
#                  [--rules "linear sqrt"] [--comparisons "tokens steps"] [--steps S]
#                  [--evals N] [--eval-batches B] [--stages P] [--window K] [--micro M]
#                  [--warmup PCT] [--model-args "layers 2; width 32; heads 2"] [--extend E]
#                  [--dgc-replicas D] [--dgc-densities "0.01 0.001"] [--dgc-rule RULE]
#                  [--dgc-warmup PCT] [--dgc-steps N] [--noise-window PCT] [--threshold PCT]
#                  [--jobs J] [--out DIR] [--check-only]
#
# D = 1 runs S optimizer steps of K micro-batches of M sequences; a run at D has D times the
# global batch and S / D steps (equal tokens) or S steps (equal steps); every run evaluates N
# times (B micro-batches each), the last at its end. First the D = 1 runs: every optimizer at
# each multiplier of its line; the multiplier whose run ends with the lowest validation loss is
# the optimizer's base lr, and while that is the lowest or the highest multiplier tried, the
# next one out (the edge's spacing) runs too, at most E times a side, so the best is bracketed
# where E allows. Then every optimizer, rule, comparison and D > 1 at its base lr; then DGC
# (`compression dgc`, each density, its warm-up PCT% of the run's steps) under --dgc-rule at D
# replicas for N steps (default S: the equal-steps length), against the dense run of the same
# optimizer, rule, D and steps (trained here if the grid has none). J runs train at once
# (default 2). --check-only has the compiler check every run's file and trains nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/study/toolchain.sh"  # $toolchain: a private copy of the build; $pacic, $python
source "$root/study/common.sh"     # check_multipliers, scale_rates, train_run, the pool

optimizers=$root/study/scale_optimizers.txt
only=""
replicas="1 2 4 8"
rules="linear sqrt"
comparisons="tokens steps"
steps=3072          # at least the issue's 3000 for the D = 1 line, and a multiple of evals x 8 (docs/study/scale2/METHOD.md, "Size")
evals=8
eval_batches=128    # 16,384 validation tokens a pass: the 1% rule needs a steady measure
stages=1
window=4
micro=2
warmup=5%
model_args="layers 2; width 32; heads 2"
extend=2
dgc_replicas=4
dgc_densities="0.01 0.001"
dgc_rule=sqrt
dgc_warmup=10
dgc_steps=""
noise_window=20
threshold=1
out=$root/docs/study/scale2
check_only=0
jobs_max=2

while [ $# -gt 0 ]; do
    case $1 in
    --check-only) check_only=1; shift; continue ;;
    --optimizers) optimizers=$2 ;;
    --only) only=$2 ;;
    --replicas) replicas=$2 ;;
    --rules) rules=$2 ;;
    --comparisons) comparisons=$2 ;;
    --steps) steps=$2 ;;
    --evals) evals=$2 ;;
    --eval-batches) eval_batches=$2 ;;
    --stages) stages=$2 ;;
    --window) window=$2 ;;
    --micro) micro=$2 ;;
    --warmup) warmup=$2 ;;
    --model-args) model_args=$2 ;;
    --extend) extend=$2 ;;
    --dgc-replicas) dgc_replicas=$2 ;;
    --dgc-densities) dgc_densities=$2 ;;
    --dgc-rule) dgc_rule=$2 ;;
    --dgc-warmup) dgc_warmup=$2 ;;
    --dgc-steps) dgc_steps=$2 ;;
    --noise-window) noise_window=$2 ;;
    --threshold) threshold=$2 ;;
    --jobs) jobs_max=$2 ;;
    --out) out=$2 ;;
    *) echo "study: unknown option '$1' (see the head of $0)" >&2; exit 2 ;;
    esac
    [ $# -ge 2 ] || { echo "study: option '$1' needs a value" >&2; exit 2; }
    shift 2
done
dgc_steps=${dgc_steps:-$steps}

whole() {  # whole OPTION VALUE: VALUE a positive whole number, else exit 2
    [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "study: $1 '$2' is not a positive whole number" >&2; exit 2; }
}
for pair in "--jobs $jobs_max" "--steps $steps" "--evals $evals" "--eval-batches $eval_batches" \
    "--stages $stages" "--window $window" "--micro $micro" "--dgc-replicas $dgc_replicas" "--dgc-steps $dgc_steps"; do
    whole $pair
done
[[ $extend =~ ^[0-9]+$ ]] || { echo "study: --extend '$extend' is not a whole number" >&2; exit 2; }
for pct in "--dgc-warmup $dgc_warmup" "--noise-window $noise_window"; do
    set -- $pct
    [[ $2 =~ ^[0-9]+$ ]] && (( $2 <= 100 )) || { echo "study: $1 '$2' is not a whole percentage" >&2; exit 2; }
done
(( noise_window > 0 )) || { echo "study: --noise-window 0 leaves no steps to read the noise scale from" >&2; exit 2; }
(( window > 1 )) || { echo "study: --window 1 gives D = 1 no second batch size: no noise scale (docs/run.md)" >&2; exit 2; }
for rule in $rules $dgc_rule; do
    [[ $rule == linear || $rule == sqrt ]] || { echo "study: lr rule '$rule' is neither linear nor sqrt" >&2; exit 2; }
done
for c in $comparisons; do
    [[ $c == tokens || $c == steps ]] || { echo "study: comparison '$c' is neither tokens nor steps" >&2; exit 2; }
done
for f in $dgc_densities; do
    awk -v f="$f" 'BEGIN { exit !(f ~ /^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/ && f > 0 && f < 1) }' ||
        { echo "study: DGC density '$f' is not a number in (0, 1)" >&2; exit 2; }
done
[[ " $replicas " == *" 1 "* ]] || { echo "study: --replicas '$replicas' has no 1: D = 1 is every comparison's reference" >&2; exit 2; }
# Every run has whole steps and whole evaluation intervals: S a multiple of N D (equal tokens)
# and of N (equal steps); the DGC runs' N steps a multiple of N.
for d in $replicas; do
    whole "replica count" "$d"
    if (( steps % (evals * d) != 0 )); then
        echo "study: --steps $steps is not a multiple of evals x D ($evals x $d): D = $d's equal-tokens run would not end on an evaluation" >&2
        exit 2
    fi
done
(( dgc_steps % evals == 0 )) || { echo "study: --dgc-steps $dgc_steps is not a multiple of --evals $evals" >&2; exit 2; }
base_batch=$((micro * window))  # the global batch at D = 1, where both rules give the stated lr

# The optimizers: NAME | OPTIMIZER | MULTIPLIERS AT D = 1 | WHERE ITS LR COMES FROM.
[ -r "$optimizers" ] || { echo "study: cannot read the optimizers file $optimizers" >&2; exit 2; }
names=() ; declare -A optimizer_of lrs_of source_of
while IFS= read -r line; do
    line=${line%%#*}
    [[ $line =~ ^[[:space:]]*$ ]] && continue
    IFS='|' read -r name optimizer own_lrs source extra <<< "$line"
    name=$(trim "$name") optimizer=$(trim "$optimizer") own_lrs=$(trim "$own_lrs") source=$(trim "$source")
    if [ -n "$extra" ] || [ -z "$own_lrs" ] || [ -z "$source" ] || ! [[ $name =~ ^[A-Za-z0-9._-]+$ ]]; then
        echo "study: $optimizers: expected 'NAME | OPTIMIZER | MULTIPLIERS | SOURCE', NAME of letters, digits, '.', '_', '-', in: $line" >&2
        exit 2
    fi
    [[ $optimizer == *"{"*[0-9]*"}"*"@BASE@"*"@RULE@"* ]] ||
        { echo "study: $optimizers: optimizer '$name' needs 'lr {X} at @BASE@ scale @RULE@'" >&2; exit 2; }
    [ -z "${optimizer_of[$name]+x}" ] || { echo "study: $optimizers: optimizer '$name' is declared twice" >&2; exit 2; }
    check_multipliers "$optimizers: optimizer '$name': " "$own_lrs"
    names+=("$name"); optimizer_of[$name]=$optimizer lrs_of[$name]=$own_lrs source_of[$name]=$source
done < "$optimizers"
if [ -n "$only" ]; then
    for name in $only; do
        [ -n "${optimizer_of[$name]+x}" ] || { echo "study: --only names '$name', which $optimizers does not declare (it has: ${names[*]})" >&2; exit 2; }
    done
    names=($only)
fi

# render NAME MULTIPLIER RULE D STEPS COMPRESSION FILE: the DSL of one run.
render() {
    local name=$1 m=$2 rule=$3 d=$4 n=$5 compression=$6 file=$7 optimizer
    optimizer=$(scale_rates "$m" "${optimizer_of[$name]}")
    optimizer=${optimizer//@BASE@/$base_batch}
    optimizer=${optimizer//@RULE@/$rule}
    sed -e "s|@STAGES@|$stages|; s|@WINDOW@|$window|; s|@MICRO@|$micro|; s|@REPLICAS@|$d|; s|@COMPRESSION@|$compression|" \
        -e "s|@STEPS@|$n|; s|@EVAL@|$((n / evals))|; s|@EVAL_BATCHES@|$eval_batches|; s|@WARMUP@|$warmup|" \
        -e "s|@DATA@|$root/examples/data|; s|@MODEL@|$model_args|; s|@OPTIMIZER@|$optimizer|" \
        "$root/study/scale.paci.in" > "$file"
}
# steps_of COMPARISON D: a run's steps (equal tokens: S / D; equal steps: S).
steps_of() { if [ "$1" = tokens ]; then echo $((steps / $2)); else echo "$steps"; fi; }
# dgc_block DENSITY: the compression entry of a DGC run (its warm-up a share of its steps).
dgc_block() {
    echo "compression dgc { density $1; warmup_steps $((dgc_steps * dgc_warmup / 100)); clip 1.0 }"
}

# Every run's file is checked before anything trains: a refused optimizer costs seconds.
check=$toolchain/check
mkdir -p "$check"
refused=0
check_one() {  # check_one LABEL NAME MULTIPLIER RULE D STEPS COMPRESSION
    local label=$1
    shift
    render "$@" "$check/model.paci"
    if ! "$pacic" "$check/model.paci" --check > "$check/check.log" 2>&1; then
        echo "study: $label is refused by the compiler:" >&2
        sed 's/^/    /' "$check/check.log" >&2
        refused=1
    elif (( check_only )); then
        printf '%s: %s\n' "$label" "$(sed -n 's/^ *optimizer //p' "$check/model.paci")"
    fi
}
for name in "${names[@]}"; do
    for m in ${lrs_of[$name]}; do check_one "$name x$m at D = 1" "$name" "$m" sqrt 1 "$steps" ""; done
    for rule in $rules; do
        for c in $comparisons; do
            for d in $replicas; do
                (( d > 1 )) && check_one "$name x1 $rule at D = $d, equal $c" "$name" 1 "$rule" "$d" "$(steps_of "$c" "$d")" ""
            done
        done
    done
    for f in $dgc_densities; do
        check_one "$name x1 $dgc_rule at D = $dgc_replicas, dgc $f" "$name" 1 "$dgc_rule" "$dgc_replicas" "$dgc_steps" "$(dgc_block "$f")"
    done
done
(( refused == 0 )) || exit 1
(( check_only == 0 )) || exit 0

command_line="study/scale.sh --optimizers ${optimizers#$root/} --replicas \"$replicas\" --rules \"$rules\" --comparisons \"$comparisons\" --steps $steps --evals $evals --eval-batches $eval_batches --stages $stages --window $window --micro $micro --warmup $warmup --model-args \"$model_args\" --extend $extend --dgc-replicas $dgc_replicas --dgc-densities \"$dgc_densities\" --dgc-rule $dgc_rule --dgc-warmup $dgc_warmup --dgc-steps $dgc_steps --noise-window $noise_window --threshold $threshold"
[ -z "$only" ] || command_line="$command_line --only \"$only\""
rm -rf "$out/runs"
mkdir -p "$out/runs"
date -u +%Y-%m-%dT%H:%MZ > "$out/date.txt"
echo "$command_line" > "$out/command.txt"
# grid.csv: what the analysis reads, in the order the runs were started.
echo "optimizer,rule,replicas,lr_multiplier,comparison,compression,steps,folder" > "$out/grid.csv"
echo "study: ${names[*]} at D = $replicas ($rules rules; equal $comparisons), D = 1 at $steps steps of $base_batch x 64 tokens, p = $stages, K = $window; results in $out"

# one_run NAME MULTIPLIER RULE D STEPS COMPRESSION FOLDER: render and train (one BLAS thread
# a replica at every D: threaded products round differently).
one_run() {
    local dir=$out/runs/$7
    mkdir -p "$dir"
    local rule=$3
    [ "$rule" != both ] || rule=sqrt  # D = 1: x1 under either rule, the same program
    render "$1" "$2" "$rule" "$4" "$5" "$6" "$dir/model.paci"
    train_run "$dir" "$7" --blas-threads 1
}
start() {  # start NAME MULTIPLIER RULE D STEPS COMPRESSION FOLDER COMPARISON: one run in the pool
    echo "$1,$3,$4,$2,$8,${6:+dgc},$5,runs/$7" >> "$out/grid.csv"
    pool_start one_run "$@"
}
trap 'kill $(jobs -p) 2> /dev/null || true; rm -rf "$toolchain"' EXIT  # toolchain.sh's trap, kept

# D = 1: the optimizers take turns, one multiplier of each at a time.
rounds=0
for name in "${names[@]}"; do
    read -r -a own <<< "${lrs_of[$name]}"
    if (( ${#own[@]} > rounds )); then rounds=${#own[@]}; fi
done
for (( round = 0; round < rounds; round++ )); do
    for name in "${names[@]}"; do
        read -r -a own <<< "${lrs_of[$name]}"
        (( round < ${#own[@]} )) || continue
        start "$name" "${own[round]}" both 1 "$steps" "" "$name/d1-x${own[round]}" both
    done
done
pool_drain
# Each optimizer's base lr: its D = 1 run with the lowest final validation loss; while that is
# an edge of the multipliers tried, the next one out at the edge's spacing (E a side at most).
declare -A best_of low_added high_added
for name in "${names[@]}"; do low_added[$name]=0 high_added[$name]=0; done
while :; do
    # every optimizer's best first, then the new runs: a run started before a later --best-d1
    # would be in grid.csv unfinished
    declare -A next_of=()
    for name in "${names[@]}"; do
        best_of[$name]=$("$python" "$root/study/analyze_scale.py" --best-d1 "$name" "$out") ||
            { echo "study: no D = 1 run of $name finished: nothing to scale" >&2; exit 1; }
        # the next multiplier out when the best is the lowest or the highest of two or more
        side=$(tr ' ' '\n' <<< "${lrs_of[$name]}" | sort -g | awk -v b="${best_of[$name]}" '
            { m[NR] = $1 } END { if (NR < 2) exit; if (b == m[1]) printf "low %.6g", m[1] * m[1] / m[2]
                                  else if (b == m[NR]) printf "high %.6g", m[NR] * m[NR] / m[NR - 1] }')
        if [ "${side% *}" = low ] && (( low_added[$name] < extend )); then
            next_of[$name]=${side#* } low_added[$name]=$((low_added[$name] + 1))
        elif [ "${side% *}" = high ] && (( high_added[$name] < extend )); then
            next_of[$name]=${side#* } high_added[$name]=$((high_added[$name] + 1))
        fi
    done
    (( ${#next_of[@]} > 0 )) || break
    for name in "${names[@]}"; do
        [ -n "${next_of[$name]:-}" ] || continue
        next=${next_of[$name]}
        echo "  $name: x${best_of[$name]} is the edge of x${lrs_of[$name]// / x}: adding x$next"
        lrs_of[$name]="${lrs_of[$name]} $next"
        check_one "$name x$next at D = 1" "$name" "$next" sqrt 1 "$steps" ""
        (( refused == 0 )) || exit 1
        start "$name" "$next" both 1 "$steps" "" "$name/d1-x$next" both
    done
    pool_drain
done
# sources.csv: where each optimizer's lr comes from, and the multipliers tried.
{ echo "optimizer,lr_multipliers,source"; for name in "${names[@]}"; do
    printf '%s,%s,"%s"\n' "$name" "${lrs_of[$name]}" "${source_of[$name]//\"/\'}"; done; } > "$out/sources.csv"
for name in "${names[@]}"; do
    echo "  $name: base lr x${best_of[$name]} (the lowest final validation loss of x${lrs_of[$name]// / x} at D = 1)"
done
# D > 1, the longest runs first (equal steps, the largest D), the optimizers and rules taking turns.
for c in $(tr ' ' '\n' <<< "$comparisons" | sort); do  # steps before tokens
    for d in $(tr ' ' '\n' <<< "$replicas" | sort -rn); do
        (( d > 1 )) || continue
        for rule in $rules; do
            for name in "${names[@]}"; do
                start "$name" "${best_of[$name]}" "$rule" "$d" "$(steps_of "$c" "$d")" "" "$name/$rule-d$d-$c" "$c"
            done
        done
    done
done
# DGC, and its dense partner where the grid has none (same optimizer, rule, D and steps).
for name in "${names[@]}"; do
    partner=""
    for c in $comparisons; do
        [[ " $rules " == *" $dgc_rule "* && " $replicas " == *" $dgc_replicas "* ]] || continue
        if (( $(steps_of "$c" "$dgc_replicas") == dgc_steps )); then partner=yes; fi
    done
    [ -n "$partner" ] || start "$name" "${best_of[$name]}" "$dgc_rule" "$dgc_replicas" "$dgc_steps" "" \
        "$name/$dgc_rule-d$dgc_replicas-dense$dgc_steps" dense
    for f in $dgc_densities; do
        start "$name" "${best_of[$name]}" "$dgc_rule" "$dgc_replicas" "$dgc_steps" "$(dgc_block "$f")" \
            "$name/$dgc_rule-d$dgc_replicas-dgc$f" dgc
    done
done
pool_drain
"$python" "$root/study/analyze_scale.py" --threshold "$threshold" --noise-window "$noise_window" "$out"
