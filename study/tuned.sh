#!/usr/bin/env bash
# The study (third edition; the second's results in docs/study/tuned): time to accuracy at tuned learning rates. Every configuration of
# study/configs.txt (schedule, pipeline keys, optimizer) is trained at every learning-rate
# multiplier, with the same model, seed, data order and tokens, the configurations taking
# turns; each configuration's schedule is then replayed with the instruction costs its runs
# measured, as if every stage had its own device, and study/analyze_tuned.py picks each
# configuration's best lr and writes the tables and plots.
#
#   study/tuned.sh [--configs FILE] [--only "NAME ..."] [--lrs "0.25 0.5 1 2"] [--stages P]
#                  [--window K] [--micro-batches M] [--evals N] [--target LOSS] [--block B]
#                  [--model-args "layers 8; width 64; heads 4"] [--jobs J] [--calibration-steps S]
#                  [--out DIR] [--check-only] [--replay-only]
#
# Every run sees M micro-batches (M / K optimizer steps) and N validation passes. J runs train
# at once (default 2): a run's stage threads leave part of the CPUs idle (1F1B's bubbles,
# links), which a second run fills; the replay prices instructions in thread CPU time, and
# the configurations take turns, so each configuration's runs meet the same company.
# The replay's costs are not the training runs' own: a machine's speed drifts over the study
# (this VM's doubled within one), and a configuration priced over another stretch of time
# than its baseline carries that into the speed-ups. After the training, every
# configuration's program runs S more optimizer steps (default 64; at most its run's) alone, all
# of them one after another, three times (the second pass in reverse order, so a steady drift
# weighs on each alike, and the median of three drops one pass caught by a change of speed): the calibration, in DIR/calibration/NAME/pass-N/, whose per-stage
# medians the replay uses. --replay-only redoes the calibration, replays and analysis of the
# runs already in DIR, training nothing. --only
# keeps the named configurations of FILE. --check-only has the compiler check every run's
# file, prints each run's optimizer entry and trains nothing. Re-analyse without training:
# study/analyze_tuned.py --target LOSS DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/study/toolchain.sh"  # $toolchain: a private copy of the build; $pacic, $python
source "$root/study/common.sh"     # check_multipliers, scale_rates, train_run, the pool

configs=$root/study/configs.txt
only=""
lrs="0.25 0.5 1 2"
stages=8
window=8
micro_batches=4096  # 4x the first edition's budget (docs/study.md)
evals=8
target=1.9  # a loss the best-tuned 1F1B-flush reaches at about 60% of its run (docs/study.md)
block=32  # micro-batches per block of the time-to-target rule
model_args="layers 8; width 64; heads 4"
out=$root/docs/study/third
check_only=0
replay_only=0
jobs_max=2
calibration_steps=64

while [ $# -gt 0 ]; do
    case $1 in
    --check-only) check_only=1; shift; continue ;;
    --replay-only) replay_only=1; shift; continue ;;
    --calibration-steps) calibration_steps=$2 ;;
    --configs) configs=$2 ;;
    --only) only=$2 ;;
    --lrs) lrs=$2 ;;
    --stages) stages=$2 ;;
    --window) window=$2 ;;
    --micro-batches) micro_batches=$2 ;;
    --evals) evals=$2 ;;
    --target) target=$2 ;;
    --block) block=$2 ;;
    --model-args) model_args=$2 ;;
    --jobs) jobs_max=$2 ;;
    --out) out=$2 ;;
    *) echo "study: unknown option '$1' (see the head of $0)" >&2; exit 2 ;;
    esac
    shift 2
done

[[ $jobs_max =~ ^[1-9][0-9]*$ ]] || { echo "study: --jobs '$jobs_max' is not a positive whole number" >&2; exit 2; }
[[ $calibration_steps =~ ^[1-9][0-9]*$ ]] ||
    { echo "study: --calibration-steps '$calibration_steps' is not a positive whole number" >&2; exit 2; }
if (( micro_batches % (evals * window) != 0 )); then
    echo "study: --micro-batches $micro_batches is not a multiple of evals x window ($evals x $window)" >&2
    exit 2
fi
check_multipliers "" "$lrs"
steps=$((micro_batches / window))
every=$((micro_batches / evals / window))

read_configs "$configs" "$only"

# render NAME MULTIPLIER FILE: the DSL of one run. Each {X} of the optimizer becomes X x M.
render() {
    local name=$1 m=$2 file=$3 optimizer
    optimizer=$(scale_rates "$m" "${optimizer_of[$name]}")
    sed -e "s|@STAGES@|$stages|; s|@SCHEDULE@|${schedule_of[$name]}|; s|@WINDOW@|$window|; s|@STEPS@|$steps|" \
        -e "s|@EVAL@|$every|; s|@DATA@|$root/examples/data|; s|@MODEL@|$model_args|" \
        -e "s|@PIPELINE@|${pipeline_of[$name]}|; s|@OPTIMIZER@|$optimizer|" \
        "$root/study/tuned.paci.in" > "$file"
}

# Every run's file is checked before anything trains: a refused configuration costs seconds.
check=$toolchain/check
mkdir -p "$check"
refused=0
# A configuration's own multipliers (a fifth field) replace --lrs for it.
lrs_for() { echo "${lrs_of[$1]:-$lrs}"; }
for name in "${names[@]}"; do
    for m in $(lrs_for "$name"); do
        render "$name" "$m" "$check/model.paci"
        if ! "$pacic" "$check/model.paci" --check > "$check/check.log" 2>&1; then
            echo "study: configuration '$name' at lr x $m is refused by the compiler:" >&2
            sed 's/^/    /' "$check/check.log" >&2
            refused=1
        elif (( check_only )); then
            printf '%s x%s: %s\n' "$name" "$m" "$(sed -n 's/^ *optimizer //p' "$check/model.paci")"
        fi
    done
done
(( refused == 0 )) || exit 1
(( check_only == 0 )) || exit 0

# calibrate_and_replay: the calibration (see the head of this file), then each configuration's
# replay with its medians, then the analysis.
calibrate_and_replay() {
    local name pass dir first dsl order run_steps
    rm -rf "$out/calibration"
    for pass in 1 2 3; do
        order=("${names[@]}")
        if (( pass == 2 )); then
            order=()
            for (( i = ${#names[@]} - 1; i >= 0; i-- )); do order+=("${names[i]}"); done
        fi
        for name in "${order[@]}"; do
            first=$(awk '{ print $1 }' <<< "$(lrs_for "$name")")
            dsl=$out/runs/$name/lr-x$first/model.paci
            [ -r "$dsl" ] || { echo "study: no run of $name at lr x$first in $out/runs to calibrate" >&2; exit 1; }
            run_steps=$(sed -n 's/^ *steps \([0-9_]*\).*/\1/p' "$dsl" | tr -d _)
            (( run_steps < calibration_steps )) || run_steps=$calibration_steps  # at most the run's own
            dir=$out/calibration/$name/pass-$pass
            mkdir -p "$dir"
            if [ ! -x "$out/calibration/$name/run" ]; then
                "$pacic" "$dsl" -o "$out/calibration/$name/run" 2> "$dir/compile.log" ||
                    { cat "$dir/compile.log" >&2; exit 1; }
            fi
            (cd "$dir" && ../run --no-checkpoint --steps "$run_steps" --profile-out profile.txt \
                > run.log 2> run.err) || { echo "study: the calibration of $name failed:" >&2; cat "$dir/run.err" >&2; exit 1; }
        done
    done
    for name in "${names[@]}"; do
        rm -f "$out/calibration/$name/run"
        first=$(awk '{ print $1 }' <<< "$(lrs_for "$name")")
        dsl=$out/runs/$name/lr-x$first/model.paci
        run_steps=$(sed -n 's/^ *steps \([0-9_]*\).*/\1/p' "$dsl" | tr -d _)
        # The replay: the compiler's simulator over the configuration's schedule table (the
        # same at every lr: the lr changes no instruction's cost) with the calibration's medians.
        "$python" "$root/study/analyze_tuned.py" --median-profile "$out/calibration/$name" > "$out/runs/$name/profile.txt"
        "$pacic" "$dsl" --profile "$out/runs/$name/profile.txt" --emit trace --show-steps "$run_steps" \
            -o "$out/runs/$name/replay.json"
        "$pacic" "$dsl" --explain > "$out/runs/$name/explain.txt"
    done
    "$python" "$root/study/analyze_tuned.py" --target "$target" --block "$block" "$out"
}

if (( replay_only )); then
    [ -s "$out/grid.csv" ] || { echo "study: --replay-only: no study in $out (no grid.csv)" >&2; exit 2; }
    calibrate_and_replay
    exit 0
fi

command_line="study/tuned.sh --configs ${configs#$root/} --lrs \"$lrs\" --stages $stages --window $window --micro-batches $micro_batches --evals $evals --target $target --block $block"
[ -z "$only" ] || command_line="$command_line --only \"$only\""
rm -rf "$out/runs"
mkdir -p "$out/runs"
date -u +%Y-%m-%dT%H:%MZ > "$out/date.txt"
echo "$command_line" > "$out/command.txt"
# grid.csv: what the analysis reads (every run's folder), in the order the runs were started.
echo "config,schedule,lr_multiplier,folder" > "$out/grid.csv"
echo "study: ${#names[@]} configurations x lr multipliers ($lrs, or a configuration's own) at p = $stages, K = $window, $micro_batches micro-batches per run; results in $out"

# one_run NAME MULTIPLIER: compile and train into runs/NAME/lr-xM/ (a diverged run is recorded
# as such: train_run).
one_run() {
    local name=$1 m=$2 dir=$out/runs/$1/lr-x$2
    mkdir -p "$dir"
    render "$name" "$m" "$dir/model.paci"
    train_run "$dir" "$name lr x$m" --profile-out profile.txt
}

# The runs interleave the configurations (every configuration's first lr, then every one's
# second, ...), so that a machine whose speed drifts over the study weighs on their measured
# times (time.txt) alike.
rounds=0
for name in "${names[@]}"; do
    read -r -a own <<< "$(lrs_for "$name")"
    if (( ${#own[@]} > rounds )); then rounds=${#own[@]}; fi
done
# At most jobs_max runs at once; a failed run (one_run exits 1) stops the study and its peers.
trap 'kill $(jobs -p) 2> /dev/null || true; rm -rf "$toolchain"' EXIT  # toolchain.sh's trap, kept
for (( round = 0; round < rounds; round++ )); do
    for name in "${names[@]}"; do
        read -r -a own <<< "$(lrs_for "$name")"
        (( round < ${#own[@]} )) || continue
        echo "${name},${schedule_of[$name]},${own[round]},runs/$name/lr-x${own[round]}" >> "$out/grid.csv"
        pool_start one_run "$name" "${own[round]}"
    done
done
pool_drain
calibrate_and_replay
