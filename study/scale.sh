#!/usr/bin/env bash
# The study's batch-scaling edition (docs/study/batch-scaling.md): the study's model under
# 1F1B-flush with D = 1, 2, 4, 8 replicas (threads), the same tokens for every run (steps =
# base steps / D), the global batch growing with D; every optimizer of study/scale_optimizers.txt
# under the linear and the sqrt lr rule (lr x D, lr x sqrt D; the lr schedule's warmup a fixed
# share of the run, so of its tokens); DGC against dense at the larger D. Each run's time is
# the replay of its program with the instruction costs its optimizer's D = 1 run measured;
# study/analyze_scale.py writes the tables and plots.
#
#   study/scale.sh [--optimizers FILE] [--only "NAME ..."] [--replicas "1 2 4 8"]
#                  [--rules "linear sqrt"] [--micro-batches M] [--evals N] [--stages P]
#                  [--window K] [--warmup PCT] [--model-args "layers 8; width 64; heads 4"]
#                  [--dgc-replicas "4 8"] [--dgc-density F] [--dgc-rule RULE]
#                  [--dgc-warmup PCT] [--threshold PCT] [--jobs J] [--out DIR] [--check-only]
#
# Every run sees M micro-batches, M / (K D) optimizer steps of K D micro-batches, and N
# validation passes at the same token counts. First the D = 1 runs: every optimizer at each
# multiplier of its line (an optimizer with no tuned lr is tuned here, at D = 1 only); the
# multiplier whose run ends with the lowest validation loss is the optimizer's base lr, and
# D = 1 is the same run under both rules. Then every optimizer, rule and D > 1 at that lr, and
# DGC (`compression dgc`, density F, its warm-up PCT% of the run's steps) under --dgc-rule at
# each of --dgc-replicas. J runs train at once (default 2). --check-only has the compiler check
# every run's file (the D = 1 multipliers, every D at x1) and trains nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/study/toolchain.sh"  # $toolchain: a private copy of the build; $pacic, $python
source "$root/study/common.sh"     # check_multipliers, scale_rates, train_run, the pool

optimizers=$root/study/scale_optimizers.txt
only=""
replicas="1 2 4 8"
rules="linear sqrt"
micro_batches=2048  # half the third edition's budget: 42 runs in about 15 minutes of 2 idle cores (docs/study/batch-scaling.md)
evals=8
stages=8
window=8
warmup=5%           # the study's lr schedule, under which AdamW's and Muon's lrs were tuned
model_args="layers 8; width 64; heads 4"
dgc_replicas="4 8"
dgc_density=0.001
dgc_rule=sqrt
dgc_warmup=25
threshold=1
out=$root/docs/study/scale
check_only=0
jobs_max=2
micro=4             # sequences per micro-batch: study/scale.paci.in's

while [ $# -gt 0 ]; do
    case $1 in
    --check-only) check_only=1; shift; continue ;;
    --optimizers) optimizers=$2 ;;
    --only) only=$2 ;;
    --replicas) replicas=$2 ;;
    --rules) rules=$2 ;;
    --micro-batches) micro_batches=$2 ;;
    --evals) evals=$2 ;;
    --stages) stages=$2 ;;
    --window) window=$2 ;;
    --warmup) warmup=$2 ;;
    --model-args) model_args=$2 ;;
    --dgc-replicas) dgc_replicas=$2 ;;
    --dgc-density) dgc_density=$2 ;;
    --dgc-rule) dgc_rule=$2 ;;
    --dgc-warmup) dgc_warmup=$2 ;;
    --threshold) threshold=$2 ;;
    --jobs) jobs_max=$2 ;;
    --out) out=$2 ;;
    *) echo "study: unknown option '$1' (see the head of $0)" >&2; exit 2 ;;
    esac
    shift 2
done

[[ $jobs_max =~ ^[1-9][0-9]*$ ]] || { echo "study: --jobs '$jobs_max' is not a positive whole number" >&2; exit 2; }
[[ $dgc_warmup =~ ^[0-9]+$ ]] && (( dgc_warmup <= 100 )) ||
    { echo "study: --dgc-warmup '$dgc_warmup' is not a whole percentage" >&2; exit 2; }
for rule in $rules $dgc_rule; do
    [[ $rule == linear || $rule == sqrt ]] || { echo "study: lr rule '$rule' is neither linear nor sqrt" >&2; exit 2; }
done
[[ " $replicas " == *" 1 "* ]] || { echo "study: --replicas '$replicas' has no 1: D = 1 is every comparison's reference" >&2; exit 2; }
# Every D's run must have whole steps and whole evaluation intervals: M a multiple of N K D.
for d in $replicas $dgc_replicas; do
    [[ $d =~ ^[1-9][0-9]*$ ]] || { echo "study: replica count '$d' is not a positive whole number" >&2; exit 2; }
    if (( micro_batches % (evals * window * d) != 0 )); then
        echo "study: --micro-batches $micro_batches is not a multiple of evals x window x D ($evals x $window x $d)" >&2
        exit 2
    fi
done
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

# render NAME MULTIPLIER RULE D COMPRESSION FILE: the DSL of one run.
render() {
    local name=$1 m=$2 rule=$3 d=$4 compression=$5 file=$6 optimizer
    local steps=$((micro_batches / (window * d))) every=$((micro_batches / (evals * window * d)))
    optimizer=$(scale_rates "$m" "${optimizer_of[$name]}")
    optimizer=${optimizer//@BASE@/$base_batch}
    optimizer=${optimizer//@RULE@/$rule}
    sed -e "s|@STAGES@|$stages|; s|@WINDOW@|$window|; s|@REPLICAS@|$d|; s|@COMPRESSION@|$compression|" \
        -e "s|@STEPS@|$steps|; s|@EVAL@|$every|; s|@WARMUP@|$warmup|; s|@DATA@|$root/examples/data|" \
        -e "s|@MODEL@|$model_args|; s|@OPTIMIZER@|$optimizer|" \
        "$root/study/scale.paci.in" > "$file"
}
# dgc_block D: the compression entry of a DGC run at D replicas (its warm-up a share of its steps).
dgc_block() {
    local steps=$((micro_batches / (window * $1)))
    echo "compression dgc { density $dgc_density; warmup_steps $((steps * dgc_warmup / 100)); clip 1.0 }"
}

# Every run's file is checked before anything trains: a refused optimizer costs seconds.
check=$toolchain/check
mkdir -p "$check"
refused=0
check_one() {  # check_one LABEL NAME MULTIPLIER RULE D COMPRESSION
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
    for m in ${lrs_of[$name]}; do check_one "$name x$m at D = 1" "$name" "$m" sqrt 1 ""; done
    for rule in $rules; do
        for d in $replicas; do
            (( d > 1 )) && check_one "$name x1 $rule at D = $d" "$name" 1 "$rule" "$d" ""
        done
    done
    for d in $dgc_replicas; do check_one "$name x1 $dgc_rule at D = $d, dgc" "$name" 1 "$dgc_rule" "$d" "$(dgc_block "$d")"; done
done
(( refused == 0 )) || exit 1
(( check_only == 0 )) || exit 0

command_line="study/scale.sh --optimizers ${optimizers#$root/} --replicas \"$replicas\" --rules \"$rules\" --micro-batches $micro_batches --evals $evals --stages $stages --window $window --warmup $warmup --dgc-replicas \"$dgc_replicas\" --dgc-density $dgc_density --dgc-rule $dgc_rule --dgc-warmup $dgc_warmup --threshold $threshold"
[ -z "$only" ] || command_line="$command_line --only \"$only\""
rm -rf "$out/runs"
mkdir -p "$out/runs"
date -u +%Y-%m-%dT%H:%MZ > "$out/date.txt"
echo "$command_line" > "$out/command.txt"
# grid.csv: what the analysis reads, in the order the runs were started; sources.csv: where
# each optimizer's lr comes from.
echo "optimizer,rule,replicas,lr_multiplier,compression,folder" > "$out/grid.csv"
{ echo "optimizer,lr_multipliers,source"; for name in "${names[@]}"; do
    printf '%s,%s,"%s"\n' "$name" "${lrs_of[$name]}" "${source_of[$name]//\"/\'}"; done; } > "$out/sources.csv"
echo "study: ${names[*]} at D = $replicas ($rules rules), $micro_batches micro-batches of $micro x 64 tokens per run, p = $stages, K = $window; results in $out"

# one_run NAME MULTIPLIER RULE D COMPRESSION FOLDER: render, record in grid.csv, train.
one_run() {
    local dir=$out/runs/$6
    mkdir -p "$dir"
    local rule=$3
    [ "$rule" != both ] || rule=sqrt  # D = 1: x1 under either rule, the same program
    render "$1" "$2" "$rule" "$4" "$5" "$dir/model.paci"
    local flags=()
    (( $4 > 1 )) || flags=(--profile-out profile.txt)  # a D = 1 run measures its optimizer's costs
    train_run "$dir" "$6" "${flags[@]}"
}
start() {  # start NAME MULTIPLIER RULE D COMPRESSION FOLDER: one run in the pool
    echo "$1,$3,$4,$2,${5:+dgc},runs/$6" >> "$out/grid.csv"
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
        start "$name" "${own[round]}" both 1 "" "$name/d1-x${own[round]}"
    done
done
pool_drain
# Each optimizer's base lr: its D = 1 run with the lowest final validation loss.
declare -A best_of
for name in "${names[@]}"; do
    best_of[$name]=$("$python" "$root/study/analyze_scale.py" --best-d1 "$name" "$out") ||
        { echo "study: no D = 1 run of $name finished: nothing to scale" >&2; exit 1; }
    echo "  $name: base lr x${best_of[$name]} (the lowest final validation loss of x${lrs_of[$name]// / x} at D = 1)"
done
# D > 1, the largest first (their runs take longest), the optimizers and rules taking turns;
# then DGC.
for d in $(tr ' ' '\n' <<< "$replicas" | sort -rn); do
    (( d > 1 )) || continue
    for rule in $rules; do
        for name in "${names[@]}"; do
            start "$name" "${best_of[$name]}" "$rule" "$d" "" "$name/$rule-d$d"
        done
    done
done
for d in $dgc_replicas; do
    for name in "${names[@]}"; do
        start "$name" "${best_of[$name]}" "$dgc_rule" "$d" "$(dgc_block "$d")" "$name/$dgc_rule-d$d-dgc"
    done
done
pool_drain

# The replay: the compiler's simulator over each run's program (its replicas' allreduce
# priced at network_bandwidth), with the instruction costs its optimizer's D = 1 run measured
# (a replica runs D = 1's micro-batches; --profile-out measures one pipeline).
for name in "${names[@]}"; do
    profile=$out/runs/$name/d1-x${best_of[$name]}/profile.txt
    for dir in "$out/runs/$name"/*/; do
        dir=${dir%/}
        [ ! -e "$dir/diverged.txt" ] || continue
        [[ $(basename "$dir") == d1-x* && $dir != "$(dirname "$profile")" ]] && continue
        steps=$(sed -n 's/^ *steps \([0-9_]*\).*/\1/p' "$dir/model.paci")
        "$pacic" "$dir/model.paci" --profile "$profile" --emit trace --show-steps "$steps" \
            -o "$dir/replay.json" 2>> "$dir/compile.log"
    done
done
"$python" "$root/study/analyze_scale.py" --threshold "$threshold" "$out"
