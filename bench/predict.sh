#!/usr/bin/env bash
# Weight prediction and recompute at a high learning rate: the study's model
# (study/study.paci.in) trained under 1f1b, paci, paci with `delay_correction predict`, with
# `recompute full` and with both, the same seed, data and tokens; prints each run's final
# validation loss side by side. With --nesterov, instead: 1f1b and paci under `optimizer
# nadamw` (the template's betas, decay and clip), and paci with nadamw and `delay_correction
# nesterov`, at the same lr. A measurement, not a test.
#
#   bench/predict.sh [--stages P] [--window K] [--steps N] [--lr PEAK] [--model-args "..."] [--nesterov]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pacic=$root/build/bin/pacic
stages=8 window=8 steps=128 lr=2e-3 model_args="layers 8; width 64; heads 4" nesterov=0
while [ $# -gt 0 ]; do
    case $1 in
    --nesterov) nesterov=1; shift; continue ;;
    --stages) stages=$2 ;;
    --window) window=$2 ;;
    --steps) steps=$2 ;;
    --lr) lr=$2 ;;
    --model-args) model_args=$2 ;;
    *) echo "predict: unknown option '$1' (see the head of $0)" >&2; exit 2 ;;
    esac
    shift 2
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run NAME SCHEDULE CORRECTION [RECOMPUTE] [OPTIMIZER]: compiles and trains; prints the last
# validation loss.
run() {
    local name=$1 schedule=$2 correction=$3 recompute=${4:-none} optimizer=${5:-adamw}
    sed -e "s|@MODEL@|$model_args|" -e "s|^    optimizer adamw {|    optimizer $optimizer {|" -e "s|@STAGES@|$stages|" -e "s|@SCHEDULE@|$schedule|" \
        -e "s|@WINDOW@|$window|" -e "s|@DATA@|$root/examples/data|" -e "s|@STEPS@|$steps|" \
        -e "s|@LR@|$lr|" -e "s|@EVAL@|$steps|" \
        -e "s|^    window $window$|    window $window\n    delay_correction $correction\n    recompute $recompute|" \
        "$root/study/study.paci.in" > "$work/$name.paci"
    grep -q "delay_correction $correction" "$work/$name.paci" && grep -q "optimizer $optimizer {" "$work/$name.paci" \
        || { echo "predict: template edit failed" >&2; exit 1; }
    mkdir -p "$work/$name"
    "$pacic" "$work/$name.paci" -o "$work/$name/run" 2>/dev/null
    (cd "$work/$name" && ./run --quiet --metrics metrics.jsonl >/dev/null)
    grep '"val_loss"' "$work/$name/metrics.jsonl" | tail -1 | sed -n 's/.*"val_loss": \([^,}]*\).*/\1/p'
}

echo "p = $stages, K = $window, $steps steps, peak lr $lr at global batch 32 (sqrt rule), model: $model_args"
printf '%-24s %s\n' "run" "final val loss"
if [ $nesterov = 1 ]; then
    printf '%-24s %s\n' "1f1b, nadamw" "$(run sync 1f1b none none nadamw)"
    printf '%-24s %s\n' "paci, nadamw" "$(run paci paci none none nadamw)"
    printf '%-24s %s\n' "paci, nadamw+nesterov" "$(run nesterov paci nesterov none nadamw)"
    exit 0
fi
printf '%-24s %s\n' "1f1b" "$(run sync 1f1b none)"
printf '%-24s %s\n' "paci" "$(run paci paci none)"
printf '%-24s %s\n' "paci, predict" "$(run predict paci predict)"
printf '%-24s %s\n' "paci, recompute" "$(run recompute paci none full)"
printf '%-24s %s\n' "paci, recompute+predict" "$(run both paci predict full)"
