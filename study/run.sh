#!/usr/bin/env bash
# The study: one small GPT trained on Tiny Shakespeare under every schedule and window, the
# same seed, data order, hyperparameters and tokens; then each run's schedule is replayed
# with its own measured instruction costs as if every stage had its own device, and
# study/analyze.py writes the CSV, the SVG plots and the table.
#
#   study/run.sh [--stages P] [--windows "1 4 8 16"] [--schedules "gpipe 1f1b pipedream paci"]
#                [--micro-batches M] [--evals N] [--target LOSS] [--wallclock-stages P2]
#                [--wallclock-schedules "1f1b zb-h1 paci"]
#                [--model-args "layers 8; width 64; heads 4"] [--lr PEAK] [--out DIR]
#
# Every run sees M micro-batches (M / K optimizer steps at window K) and N validation passes
# at the same token counts. --wallclock-stages 0 skips the real wall-clock check, which runs
# the --wallclock-schedules at the last window with one core per stage.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/study/toolchain.sh"  # $toolchain: a private copy of the build; $pacic, $python

stages=8
windows="1 4 8 16"
schedules="gpipe 1f1b pipedream paci"
micro_batches=1024
evals=8
target=2.6
wallclock_stages=2
wallclock_schedules="1f1b zb-h1 paci"
model_args="layers 8; width 64; heads 4"
lr=2e-3  # peak at global batch 32, scaled by sqrt(global batch / 32)
out=$root/docs/study

while [ $# -gt 0 ]; do
    case $1 in
    --stages) stages=$2 ;;
    --windows) windows=$2 ;;
    --schedules) schedules=$2 ;;
    --micro-batches) micro_batches=$2 ;;
    --evals) evals=$2 ;;
    --target) target=$2 ;;
    --wallclock-stages) wallclock_stages=$2 ;;
    --wallclock-schedules) wallclock_schedules=$2 ;;
    --model-args) model_args=$2 ;;
    --lr) lr=$2 ;;
    --out) out=$2 ;;
    *) echo "study: unknown option '$1' (see the head of $0)" >&2; exit 2 ;;
    esac
    shift 2
done

# Validation every M/evals micro-batches must be a whole number of steps at every window.
for k in $windows; do
    if (( micro_batches % (evals * k) != 0 )); then
        echo "study: --micro-batches $micro_batches is not a multiple of evals x window ($evals x $k)" >&2
        exit 2
    fi
done

mkdir -p "$out/runs"
command_line="study/run.sh --stages $stages --windows \"$windows\" --schedules \"$schedules\" --micro-batches $micro_batches --evals $evals --target $target --wallclock-stages $wallclock_stages --wallclock-schedules \"$wallclock_schedules\" --lr $lr"

# one_run NAME STAGES SCHEDULE WINDOW [replay]: compile, train, replay into $out/runs/NAME/.
one_run() {
    local name=$1 p=$2 schedule=$3 k=$4 dir=$out/runs/$1
    local steps=$((micro_batches / k)) every=$((micro_batches / evals / k))
    rm -rf "$dir" && mkdir -p "$dir"
    sed -e "s|@STAGES@|$p|; s|@SCHEDULE@|$schedule|; s|@WINDOW@|$k|; s|@STEPS@|$steps|" \
        -e "s|@EVAL@|$every|; s|@DATA@|$root/examples/data|; s|@MODEL@|$model_args|; s|@LR@|$lr|" \
        "$root/study/study.paci.in" > "$dir/model.paci"
    "$pacic" "$dir/model.paci" -o "$dir/run" 2> "$dir/compile.log" || { cat "$dir/compile.log" >&2; exit 1; }
    local start end
    start=$(date +%s.%N)
    (cd "$dir" && ./run --metrics metrics.jsonl --profile-out profile.txt --ckpt-dir ckpt > run.log)
    end=$(date +%s.%N)
    echo "$start $end" > "$dir/wallclock.txt"
    rm -rf "$dir/ckpt" "$dir/run"
    # The replay: the compiler's simulator over the same schedule table, with the costs
    # this run measured (mean thread CPU seconds per instruction, per stage).
    "$pacic" "$dir/model.paci" --profile "$dir/profile.txt" --emit trace --show-steps "$steps" \
        -o "$dir/replay.json" 2>> "$dir/compile.log"
    "$pacic" "$dir/model.paci" --explain > "$dir/explain.txt" 2>> "$dir/compile.log"
    printf '  %-14s %s\n' "$name" "$(grep '^done:' "$dir/run.log")"
}

date -u +%Y-%m-%dT%H:%MZ > "$out/date.txt"
echo "$command_line" > "$out/command.txt"
echo "study: $stages stages, windows $windows, $micro_batches micro-batches per run; results in $out"
for k in $windows; do
    for schedule in $schedules; do
        one_run "$schedule-k$k" "$stages" "$schedule" "$k"
    done
done
# Real wall clock against the replay: a depth with one stage per core.
wallclock_runs=""
if (( wallclock_stages > 0 )); then
    echo "wall-clock check at $wallclock_stages stages (one core per stage):"
    for schedule in $wallclock_schedules; do
        k=$(echo "$windows" | awk '{print $NF}')
        one_run "wall-$schedule-k$k" "$wallclock_stages" "$schedule" "$k"
        wallclock_runs="$wallclock_runs wall-$schedule-k$k"
    done
fi
"$python" "$root/study/analyze.py" --out "$out" --stages "$stages" --windows "$windows" \
    --schedules "$schedules" --target "$target" --wallclock-runs "$wallclock_runs"
