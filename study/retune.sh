#!/usr/bin/env bash
# Choosing the window for a new depth, before training: measure the stage costs once with a
# short run at that depth, then ask the compiler, for every candidate window, what PACI's
# drift bound is and what throughput the measured costs predict for PACI and 1F1B-flush.
#
#   study/retune.sh [--stages P] [--windows "1 2 3 4 8"] [--model-args "..."]
#
# The rule it applies: the smallest window with drift bound <= 1 at every stage (K >= p-1);
# a larger window only shrinks PACI's lead over 1F1B-flush, (K+p-1)/K, and grows the batch.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
stages=4
windows="1 2 3 4 8"
model_args="layers 8; width 64; heads 4"
while [ $# -gt 0 ]; do
    case $1 in
    --stages) stages=$2 ;;
    --windows) windows=$2 ;;
    --model-args) model_args=$2 ;;
    *) echo "retune: unknown option '$1' (see the head of $0)" >&2; exit 2 ;;
    esac
    shift 2
done
pacic=$root/build/bin/pacic
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# write_dsl FILE SCHEDULE WINDOW STEPS: the study's model at this depth.
write_dsl() {
    sed -e "s|@STAGES@|$stages|; s|@SCHEDULE@|$2|; s|@WINDOW@|$3|; s|@STEPS@|$4|; s|@EVAL@|0|" \
        -e "s|@DATA@|$root/examples/data|; s|@MODEL@|$model_args|" "$root/study/study.paci.in" > "$1"
}

# Stage costs do not depend on the schedule or the window: one short PACI run measures them.
write_dsl "$work/measure.paci" paci "$stages" 8
"$pacic" "$work/measure.paci" -o "$work/run" 2> /dev/null
(cd "$work" && ./run --quiet --profile-out profile.txt --ckpt-dir ckpt)
echo "measured stage costs at $stages stages (thread CPU seconds per instruction):"
sed 's/^/  /' "$work/profile.txt"
echo
printf '%6s  %14s  %14s  %16s  %16s  %9s  %s\n' window "drift bound s0" "global batch" "paci tokens/s" "1f1b tokens/s" "paci/1f1b" "peak lr"
chosen=""
for k in $windows; do
    for schedule in paci 1f1b; do
        write_dsl "$work/$schedule-$k.paci" $schedule "$k" 64
        "$pacic" "$work/$schedule-$k.paci" --explain --profile "$work/profile.txt" > "$work/$schedule-$k.txt" 2> /dev/null
    done
    tps() { sed -n 's/.*step time [^,]* s, \([0-9.e+]*\) tokens\/s.*/\1/p' "$work/$1-$k.txt"; }
    paci=$(tps paci) flush=$(tps 1f1b)
    drift=$(awk '$1 == "paci" { print $NF == "file" ? $(NF - 3) : $NF }' "$work/paci-$k.txt")
    batch=$(sed -n 's/.*global batch \([0-9]*\).*/\1/p' "$work/paci-$k.txt")
    lr=$(sed -n 's/^learning rate: peak \([^ ]*\) .*/\1/p' "$work/paci-$k.txt")
    printf '%6d  %14s  %14s  %16.0f  %16.0f  %8.2fx  %s\n' "$k" "$drift" "$batch" "$paci" "$flush" \
        "$(awk -v a="$paci" -v b="$flush" 'BEGIN { print a / b }')" "$lr"
    if [ -z "$chosen" ] && [ "$drift" -le 1 ]; then
        chosen=$k
    fi
done
echo
echo "choose window $chosen: the smallest with drift bound <= 1 (K >= p-1 = $((stages - 1))); edit 'window $chosen' in the DSL"
