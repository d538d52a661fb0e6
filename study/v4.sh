#!/usr/bin/env bash
# The study, fourth edition: for the same device time, which schedule trains the better model.
# Every configuration of study/configs_v4.txt trains for the baseline's whole replayed run
# (the budget): as many steps as its own replayed step time fits, its lr schedule over those
# steps; its equal-token run trains the baseline's tokens. docs/study/fourth/METHOD.md gives
# the rules; study/analyze_v4.py the tables.
#
#   study/v4.sh [--full] [--configs FILE] [--only "NAME ..."] [--lr M] [--seeds "1337 ..."]
#               [--base-steps N] [--stages P] [--window K] [--evals E] [--dc-lambda L]
#               [--model-args "layers 24; width 32; heads 4"] [--jobs J]
#               [--calibration-steps S] [--replay-steps R] [--gpu-file FILE] [--out DIR]
#               [--check-only] [--resume] [--reproduce "NAME KIND MULTIPLIER SEED"]
#
# The quick edition (the default, `make study`): every line at one lr multiplier (--lr, 2)
# and one seed. The full edition (--full, `make study-full`): each line's multipliers of FILE
# at the first seed, the grid extended by a factor 2 where the best is at an end (twice at
# most), then the best at every seed of --seeds (1337 1338 1339).
#
# 1. Check: every line's file at every multiplier passes `pacic --check` (--check-only stops
#    there, printing each line's optimizer entry).
# 2. Calibration: each line's program trains S steps (default 32) alone, all lines one after
#    another, three times (the second pass in reverse order, so a drifting machine weighs on
#    each alike); the per-stage medians of the instruction costs they measured price the
#    line's schedule in the compiler's simulator, every stage its own device, over R steps in
#    one segment (default: the baseline's steps between two evaluations, so a step's price
#    carries its share of the pipeline fills the runs have; evaluation excluded):
#    step_times.csv, step_s = the replayed R steps / R.
# 3. The plan (study/analyze_v4.py --plan): the budget line is the synchronous line at PACI's
#    memory (1f1b, zb-h1, zb-v, interleaved) with the shortest step; budget = N (--base-steps:
#    quick 512, full 1024) x its step_s;
#    a line trains floor(budget / its step_s) steps (a warm start's steps priced at its
#    synchronous schedule's step), and, for the equal-token runs, the baseline's tokens.
#    --resume goes on with a study that stopped (the machine went down, the session ended): the
#    same options and DIR; its calibration and finished runs are kept, an unfinished run is
#    trained again from its start, and the rest runs as it would have. --reproduce trains one
#    run of a finished study (same options and DIR) again, in a scratch folder, and compares
#    its losses with DIR/losses.csv's rows of that run, text for text.
# 4. The runs, J at once (default 2), the configurations taking turns; then each line's files
#    replayed with its calibration costs (the time axis), each line priced on --gpu-file
#    (examples/gpt2-medium-8.paci) by `pacic --explain` for the GPU projection, and the analysis.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/study/toolchain.sh"  # $toolchain: a private copy of the build; $pacic, $python
source "$root/study/common.sh"     # read_configs, scale_rates, train_run, the pool

configs=$root/study/configs_v4.txt
only=""
full=0
lr=2
seeds=""
base_steps=""
stages=8
window=8
evals=16
dc_lambda=1e4
model_args="layers 24; width 32; heads 4"
jobs_max=2
calibration_steps=32
replay_steps=""
gpu_file=$root/examples/gpt2-medium-8.paci
out=""
check_only=0
resume=0
reproduce=""

while [ $# -gt 0 ]; do
    case $1 in
    --full) full=1; shift; continue ;;
    --check-only) check_only=1; shift; continue ;;
    --resume) resume=1; shift; continue ;;
    --configs) configs=$2 ;;
    --only) only=$2 ;;
    --lr) lr=$2 ;;
    --seeds) seeds=$2 ;;
    --base-steps) base_steps=$2 ;;
    --stages) stages=$2 ;;
    --window) window=$2 ;;
    --evals) evals=$2 ;;
    --dc-lambda) dc_lambda=$2 ;;
    --model-args) model_args=$2 ;;
    --jobs) jobs_max=$2 ;;
    --calibration-steps) calibration_steps=$2 ;;
    --replay-steps) replay_steps=$2 ;;
    --gpu-file) gpu_file=$2 ;;
    --out) out=$2 ;;
    --reproduce) reproduce=$2 ;;
    *) echo "study: unknown option '$1' (see the head of $0)" >&2; exit 2 ;;
    esac
    shift 2
done
if (( full )); then
    seeds=${seeds:-1337 1338 1339}
    base_steps=${base_steps:-1024}
    out=${out:-$root/docs/study/fourth}
else
    seeds=${seeds:-1337}
    base_steps=${base_steps:-512}
    out=${out:-$root/docs/study/fourth/quick}
fi

whole() { [[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "study: $1 '$2' is not a positive whole number" >&2; exit 2; }; }
whole --jobs "$jobs_max"; whole --base-steps "$base_steps"; whole --stages "$stages"; whole --window "$window"
whole --evals "$evals"; whole --calibration-steps "$calibration_steps"
replay_steps=${replay_steps:-$(( (base_steps + evals - 1) / evals ))}  # one segment of the baseline's
whole --replay-steps "$replay_steps"
for s in $seeds; do [[ $s =~ ^[0-9]+$ ]] || { echo "study: --seeds: '$s' is not a whole number" >&2; exit 2; }; done
[ -n "$seeds" ] || { echo "study: --seeds is empty" >&2; exit 2; }
[ "$(tr ' ' '\n' <<< "$seeds" | sort | uniq -d)" = "" ] || { echo "study: --seeds names a seed twice: $seeds" >&2; exit 2; }
check_multipliers "--lr: " "$lr"
[[ $dc_lambda =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] || { echo "study: --dc-lambda '$dc_lambda' is not a number" >&2; exit 2; }
[ -r "$gpu_file" ] || { echo "study: cannot read the GPU projection's file $gpu_file" >&2; exit 2; }
read_configs "$configs" "$only"
read -r -a seed_list <<< "$seeds"

# A line's own window (a `window N` among its pipeline keys), its other keys, its warm start.
window_of() { local w; w=$(grep -oE '(^|;)[[:space:]]*window [0-9]+' <<< "${pipeline_of[$1]}" | grep -oE '[0-9]+$' || true); echo "${w:-$window}"; }
keys_of() {  # the pipeline keys without `window N`, with @LAMBDA@ filled
    sed -E -e 's/(^|;)[[:space:]]*window [0-9]+[[:space:]]*(;|$)/\1/' -e "s/@LAMBDA@/$dc_lambda/g" <<< "${pipeline_of[$1]}"
}
warm_of() { grep -oE 'warm_start [a-z0-9-]+ [0-9]+' <<< "${pipeline_of[$1]}" || true; }  # "warm_start SCHEDULE N" or nothing
without_warm() { sed -E 's/(^|;)[[:space:]]*warm_start [a-z0-9-]+ [0-9]+[[:space:]]*(;|$)/\1/' <<< "$1"; }

# A line's steps from plan.csv (COLUMN: steps_time, steps_tokens or steps_half).
steps_of() { awk -F, -v c="$1" -v col="$2" 'NR == 1 { for (i = 1; i <= NF; i++) at[$i] = i } NR > 1 && $1 == c { print $at[col] }' "$out/plan.csv"; }
# render NAME MULTIPLIER SEED STEPS FILE [KEYS] [SCHEDULE]: the DSL of one run; KEYS and
# SCHEDULE replace the line's (the calibration's and replays' variants).
render() {
    local name=$1 m=$2 seed=$3 steps=$4 file=$5 keys=${6-$(keys_of "$1")} schedule=${7:-${schedule_of[$1]}} optimizer every
    optimizer=$(scale_rates "$m" "${optimizer_of[$name]}")
    every=${render_every:-$(( (steps + evals - 1) / evals ))}
    sed -e "s|@STAGES@|$stages|; s|@SCHEDULE@|$schedule|; s|@WINDOW@|$(window_of "$name")|; s|@STEPS@|$steps|" \
        -e "s|@EVAL@|$every|; s|@DATA@|$root/examples/data|; s|@MODEL@|$model_args|; s|@SEED@|$seed|" \
        -e "s|@PIPELINE@|$keys|; s|@OPTIMIZER@|$optimizer|" \
        "$root/study/v4.paci.in" > "$file"
}
# The multipliers a line starts with: FILE's in the full edition, --lr in the quick one.
lrs_for() { if (( full )); then echo "${lrs_of[$1]:-$lr}"; else echo "$lr"; fi; }

# 1. Every run's file is checked before anything trains (at the baseline's length; a warm
# start must fit in it).
check=$toolchain/check
mkdir -p "$check"
refused=0
for name in "${names[@]}"; do
    for m in $(lrs_for "$name"); do
        render "$name" "$m" "${seed_list[0]}" "$base_steps" "$check/model.paci"
        if ! "$pacic" "$check/model.paci" --check > "$check/check.log" 2>&1; then
            echo "study: configuration '$name' at lr x $m is refused by the compiler:" >&2
            sed 's/^/    /' "$check/check.log" >&2
            refused=1
        elif (( check_only )); then
            printf '%s x%s (K = %s): %s | %s\n' "$name" "$m" "$(window_of "$name")" "$(keys_of "$name")" \
                "$(sed -n 's/^ *optimizer //p' "$check/model.paci")"
        fi
    done
done
(( refused == 0 )) || exit 1
(( check_only == 0 )) || exit 0

edition=quick; (( full )) && edition=full
flag=""; (( full == 0 )) || flag=" --full"
command_line="study/v4.sh$flag --configs ${configs#$root/} --seeds \"$seeds\" --base-steps $base_steps --stages $stages --window $window --evals $evals --dc-lambda $dc_lambda --model-args \"$model_args\" --calibration-steps $calibration_steps --replay-steps $replay_steps"
(( full )) || command_line="$command_line --lr $lr"
[ -z "$only" ] || command_line="$command_line --only \"$only\""
if [ -n "$reproduce" ]; then
    read -r r_name r_kind r_m r_seed r_extra <<< "$reproduce"
    [ -n "$r_seed" ] && [ -z "$r_extra" ] && [[ $r_kind =~ ^(time|tokens|half)$ ]] ||
        { echo "study: --reproduce '$reproduce': give NAME KIND MULTIPLIER SEED, KIND time, tokens or half" >&2; exit 2; }
    [ -n "${schedule_of[$r_name]:-}" ] || { echo "study: --reproduce: no line '$r_name' in $configs" >&2; exit 2; }
    [ -s "$out/plan.csv" ] && [ -s "$out/losses.csv" ] && [ -s "$out/command.txt" ] ||
        { echo "study: --reproduce: $out holds no finished study (plan.csv, losses.csv, command.txt)" >&2; exit 2; }
    [ "$(cat "$out/command.txt")" = "$command_line" ] ||
        { echo "study: --reproduce: $out was run as '$(cat "$out/command.txt")', not as '$command_line'" >&2; exit 2; }
    steps=$(steps_of "$r_name" "steps_$r_kind")
    [ -n "$steps" ] || { echo "study: --reproduce: plan.csv gives '$r_name' no $r_kind steps" >&2; exit 2; }
    echo "study: reproducing $r_name $r_kind x$r_m seed $r_seed ($steps steps) at commit $(git -C "$root" rev-parse --short HEAD 2> /dev/null || echo unknown); the study ran at $(cat "$out/commit.txt" 2> /dev/null || echo '?')"
    dir=$toolchain/reproduce
    mkdir -p "$dir"
    render "$r_name" "$r_m" "$r_seed" "$steps" "$dir/model.paci"
    train_run "$dir" "$r_name $r_kind x$r_m seed $r_seed" --profile-out profile.txt
    "$python" "$root/study/analyze_v4.py" --compare "$out" "$dir" "$r_name" "$r_kind" "$r_m" "$r_seed"
    exit
fi
if (( resume )); then
    # Resuming is only sound for the same study: its runs' lengths come from its calibration.
    [ -s "$out/step_times.csv" ] && [ -s "$out/command.txt" ] ||
        { echo "study: --resume: $out holds no calibrated study to go on with (no step_times.csv or command.txt)" >&2; exit 2; }
    [ "$(cat "$out/command.txt")" = "$command_line" ] ||
        { echo "study: --resume: $out was started as '$(cat "$out/command.txt")', not as '$command_line'" >&2; exit 2; }
    rm -rf "$out/gpu"
    commit=$(git -C "$root" rev-parse HEAD 2> /dev/null || echo unknown)
    echo "$(date -u +%Y-%m-%dT%H:%MZ) $commit" >> "$out/resumed.txt"
    echo "study: fourth edition ($edition), resumed: ${#names[@]} configurations, seeds $seeds, the baseline $base_steps steps; results in $out"
else
    # A fresh study replaces whatever the folder held (make study's docs/study/fourth/quick holds
    # the committed one): its plan too, or the budget guard above would price it on the old one.
    rm -rf "$out/runs" "$out/calibration" "$out/gpu" "$out/resumed.txt" "$out/plan.csv" "$out/grid.csv" \
        "$out/losses.csv" "$out/summary.csv" "$out/results.md" "$out/gpu_step_times.csv"
    mkdir -p "$out/runs"
    date -u +%Y-%m-%dT%H:%MZ > "$out/date.txt"
    echo "$command_line" > "$out/command.txt"
    git -C "$root" rev-parse HEAD > "$out/commit.txt" 2> /dev/null || echo unknown > "$out/commit.txt"
    echo "study: fourth edition ($edition): ${#names[@]} configurations, seeds $seeds, the baseline $base_steps steps; results in $out"
fi
trap 'kill $(jobs -p) 2> /dev/null || true; rm -rf "$toolchain"' EXIT  # toolchain.sh's trap, kept

# 2. The calibration: each line's program (a warm start cut to half the steps, so both parts
# are measured) alone, three passes, then its replayed step time(s). A resumed study keeps its
# own, and calibrates only the lines its step_times.csv lacks (lines added to the configurations
# since it started: priced on the same budget, measured later, on the same machine).
uncalibrated=()
for name in "${names[@]}"; do
    (( resume )) && grep -q "^$name," "$out/step_times.csv" || uncalibrated+=("$name")
done
(( resume == 0 || ${#uncalibrated[@]} == 0 )) || echo "study: calibrating the lines added since the study started: ${uncalibrated[*]}"
(( ${#uncalibrated[@]} )) && for pass in 1 2 3; do
    order=("${uncalibrated[@]}")
    if (( pass == 2 )); then
        order=()
        for (( i = ${#uncalibrated[@]} - 1; i >= 0; i-- )); do order+=("${uncalibrated[i]}"); done
    fi
    for name in "${order[@]}"; do
        dir=$out/calibration/$name
        mkdir -p "$dir/pass-$pass"
        if [ ! -x "$dir/run" ]; then
            keys=$(keys_of "$name")
            warm=$(warm_of "$name")
            [ -z "$warm" ] || keys=$(sed -E "s/warm_start ([a-z0-9-]+) [0-9]+/warm_start \1 $((calibration_steps / 2 > 0 ? calibration_steps / 2 : 1))/" <<< "$keys")
            render_every=$calibration_steps render "$name" "$(awk '{ print $1 }' <<< "$(lrs_for "$name")")" "${seed_list[0]}" \
                "$calibration_steps" "$dir/model.paci" "$keys"  # one evaluation, at the end
            "$pacic" "$dir/model.paci" -o "$dir/run" 2> "$dir/compile.log" || { cat "$dir/compile.log" >&2; exit 1; }
        fi
        (cd "$dir/pass-$pass" && ../run --no-checkpoint --profile-out profile.txt > run.log 2> run.err) ||
            { echo "study: the calibration of $name failed:" >&2; cat "$dir/pass-$pass/run.err" >&2; exit 1; }
    done
done
# replay_total FILE PROFILE TRACE: the replayed seconds of FILE's steps (evaluation excluded).
# The files are one segment of R steps (one pipeline fill): by default the baseline's segment
# between two evaluations, so a step's price carries the fills the runs have.
replay_total() {
    "$pacic" "$1" --profile "$2" --emit trace --show-steps "$(sed -n 's/^ *steps \([0-9]*\).*/\1/p' "$1")" -o "$3"
    "$python" "$root/study/analyze_v4.py" --replay-total "$3"
}
render_every=$replay_steps
(( resume )) || echo "config,schedule,window,tokens_per_step,replayed_steps,replayed_s,step_s,warm_schedule,warm_steps,warm_step_s" > "$out/step_times.csv"
for name in ${uncalibrated[@]+"${uncalibrated[@]}"}; do
    dir=$out/calibration/$name
    rm -f "$dir/run"
    "$python" "$root/study/analyze_tuned.py" --median-profile "$dir" > "$dir/profile.txt"
    m=$(awk '{ print $1 }' <<< "$(lrs_for "$name")")
    render "$name" "$m" "${seed_list[0]}" "$replay_steps" "$dir/replay.paci" "$(without_warm "$(keys_of "$name")")"
    total=$(replay_total "$dir/replay.paci" "$dir/profile.txt" "$dir/replay.json")
    warm=$(warm_of "$name") warm_schedule="" warm_steps=0 warm_step=""
    if [ -n "$warm" ]; then
        read -r _ warm_schedule warm_steps <<< "$warm"
        # the warm part: the synchronous schedule alone, without PACI's delay correction
        render "$name" "$m" "${seed_list[0]}" "$replay_steps" "$dir/replay-warm.paci" "" "$warm_schedule"
        warm_total=$(replay_total "$dir/replay-warm.paci" "$dir/profile.txt" "$dir/replay-warm.json")
        warm_step=$(awk -v t="$warm_total" -v n="$replay_steps" 'BEGIN { printf "%.9g", t / n }')
    fi
    k=$(window_of "$name")
    # tokens a step: K x the template's micro-batch (4) x its context (64)
    printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$name" "${schedule_of[$name]}" "$k" "$((k * 4 * 64))" "$replay_steps" "$total" \
        "$(awk -v t="$total" -v n="$replay_steps" 'BEGIN { printf "%.9g", t / n }')" "$warm_schedule" "$warm_steps" "$warm_step" \
        >> "$out/step_times.csv"
done
unset render_every

# 3. The plan: the baseline, the budget and every line's steps (plan.csv).
"$python" "$root/study/analyze_v4.py" --plan "$out" --base-steps "$base_steps"

# 4. The runs. grid.csv: what the analysis reads, in the order the runs were started.
echo "config,schedule,kind,lr_multiplier,seed,steps,folder" > "$out/grid.csv"
# one_run NAME KIND MULTIPLIER SEED STEPS: compile and train into runs/NAME/KIND/lr-xM/seed-S/.
one_run() {
    local name=$1 kind=$2 m=$3 seed=$4 steps=$5 dir=$out/runs/$1/$2/lr-x$3/seed-$4
    mkdir -p "$dir"
    render "$name" "$m" "$seed" "$steps" "$dir/model.paci"
    train_run "$dir" "$name $kind x$m seed $seed" --profile-out profile.txt
}
declare -A recorded
# finished DIR: the run in DIR ended (trained to its end, or diverged), so a resumed study keeps it
finished() { [ -s "$1/diverged.txt" ] || { [ -s "$1/time.txt" ] && grep -q '^done:' "$1/run.log" 2> /dev/null; }; }
start_run() {  # NAME KIND MULTIPLIER SEED: record it in grid.csv and start it in the pool
    local steps folder=runs/$1/$2/lr-x$3/seed-$4
    steps=$(steps_of "$1" "steps_$2")
    [ -z "${recorded[$folder]:-}" ] || return 0  # already run (the grid's extension)
    recorded[$folder]=1
    echo "$1,${schedule_of[$1]},$2,$3,$4,$steps,$folder" >> "$out/grid.csv"
    if (( resume )) && finished "$out/$folder"; then
        printf '  %-24s kept from before the resume\n' "$1 $2 x$3 seed $4"
        return 0
    fi
    rm -rf "${out:?}/$folder"
    mkdir -p "$out/$folder"
    pool_start one_run "$1" "$2" "$3" "$4" "$steps"
}
# round KIND "NAME=M NAME=M ..." SEED...: every listed run at every seed, the configurations
# taking turns (a machine whose speed drifts weighs on their times alike).
round() {
    local kind=$1 pairs=$2 seed pair
    shift 2
    for seed in "$@"; do
        for pair in $pairs; do start_run "${pair%%=*}" "$kind" "${pair#*=}" "$seed"; done
    done
}
declare -A best_of
if (( full )); then
    # The tuning: every line's multipliers at the first seed, the runs of one multiplier rank
    # of every line at a time; then the grid extended where the best is at an end.
    rank=0
    while :; do
        pairs=""
        for name in "${names[@]}"; do
            read -r -a own <<< "$(lrs_for "$name")"
            (( rank < ${#own[@]} )) && pairs="$pairs $name=${own[rank]}"
        done
        [ -n "$pairs" ] || break
        round time "$pairs" "${seed_list[0]}"
        rank=$((rank + 1))
    done
    pool_drain
    for extension in 1 2; do
        pairs=""
        while read -r name m edge; do
            best_of[$name]=$m
            case $edge in
            low) pairs="$pairs $name=$(awk -v m="$m" 'BEGIN { printf "%g", m / 2 }')" ;;
            high) pairs="$pairs $name=$(awk -v m="$m" 'BEGIN { printf "%g", m * 2 }')" ;;
            esac
        done < <("$python" "$root/study/analyze_v4.py" --best "$out")
        [ -n "$pairs" ] || break
        echo "study: extending the lr grid where the best is at an end:$pairs"
        round time "$pairs" "${seed_list[0]}"
        pool_drain
    done
    while read -r name m edge; do best_of[$name]=$m; done < <("$python" "$root/study/analyze_v4.py" --best "$out")
else
    for name in "${names[@]}"; do best_of[$name]=$lr; done
fi
pairs=""
for name in "${names[@]}"; do pairs="$pairs $name=${best_of[$name]}"; done
round time "$pairs" "${seed_list[@]}"
# The equal-token runs: the baseline's tokens at each line's best multiplier, where that is
# another length than its equal-time run's.
pairs=""
for name in "${names[@]}"; do
    [ "$(steps_of "$name" steps_tokens)" = "$(steps_of "$name" steps_time)" ] || pairs="$pairs $name=${best_of[$name]}"
done
round tokens "$pairs" "${seed_list[@]}"
# The full edition's half-budget runs: every line at its best multiplier for half the budget's
# steps, so its lr schedule ends there (reading a whole run halfway reads it before its decay).
if (( full )); then
    pairs=""
    for name in "${names[@]}"; do pairs="$pairs $name=${best_of[$name]}"; done
    round half "$pairs" "${seed_list[@]}"
fi
pool_drain

# The time axis: each line's files replayed with its calibration's costs (the lr and the seed
# change no instruction's cost, so one replay per line and length).
for name in "${names[@]}"; do
    for kind in time tokens; do  # the half-budget runs need no time axis: only their final loss is read
        dsl=$(awk -F, -v c="$name" -v k="$kind" '$1 == c && $3 == k { print $7; exit }' "$out/grid.csv")
        [ -n "$dsl" ] || continue
        "$pacic" "$out/$dsl/model.paci" --profile "$out/calibration/$name/profile.txt" --emit trace \
            --show-steps "$(steps_of "$name" "steps_$kind")" -o "$out/runs/$name/$kind/replay.json"
    done
done

# The GPU projection: each line's schedule, window and keys on a copy of --gpu-file, priced
# by --explain (a warm start's steps at its synchronous schedule's price).
mkdir -p "$out/gpu"
gpu_step() {  # FILE: --explain's predicted step time
    "$pacic" "$1" --explain 2> /dev/null | sed -n 's/^  step time \([0-9.e+-]*\) s.*/\1/p' | head -1
}
echo "config,schedule,window,gpu_step_s,gpu_warm_step_s" > "$out/gpu_step_times.csv"
for name in "${names[@]}"; do
    keys=$(without_warm "$(keys_of "$name")")
    sed -E -e "s/^( *)schedule [a-z0-9-]+/\1schedule ${schedule_of[$name]}/" \
        -e "s/^( *)window [0-9]+(.*)$/\1window $(window_of "$name")\2\n\1$keys/" "$gpu_file" > "$out/gpu/$name.paci"
    step=$(gpu_step "$out/gpu/$name.paci")
    [ -n "$step" ] || { echo "study: pacic --explain gives no step time for $out/gpu/$name.paci:" >&2; "$pacic" "$out/gpu/$name.paci" --explain >&2; exit 1; }
    warm=$(warm_of "$name") warm_step=""
    if [ -n "$warm" ]; then
        read -r _ warm_schedule _ <<< "$warm"
        sed -E -e "s/^( *)schedule [a-z0-9-]+/\1schedule $warm_schedule/" \
            -e "s/^( *)window [0-9]+(.*)$/\1window $(window_of "$name")\2/" "$gpu_file" > "$out/gpu/$name-warm.paci"
        warm_step=$(gpu_step "$out/gpu/$name-warm.paci")
    fi
    echo "$name,${schedule_of[$name]},$(window_of "$name"),$step,$warm_step" >> "$out/gpu_step_times.csv"
done

"$python" "$root/study/analyze_v4.py" "$out"
