#!/usr/bin/env bash
# bench/compile_steps.sh: a compile takes the same time whatever the number of steps. Times
# `pacic --check`, `--explain` and `--emit schedule` of examples/tiny.paci with a checkpoint
# every step (a segment a step, the most segments a run can have) at steps 10 (the baseline)
# and 2^31 - 1 (the most the DSL takes), in the same run; then with a checkpoint every 5 steps
# and a warm start that cuts a segment. Figures only, no assertions; a second or so.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
pacic=$root/build/bin/pacic
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make -s all >/dev/null

# variant STEPS EVERY [PIPELINE_LINE]: tiny.paci at STEPS, a checkpoint every EVERY steps, no eval.
variant() {
    sed -e "s/steps 600/steps $1/" -e "s/checkpoint { every 300;/checkpoint { every $2;/" \
        -e 's/eval { every 100; batches 16 }//' -e "s#\"data/#\"$root/examples/data/#" \
        -e "s/schedule paci/schedule paci\n    ${3:-}/" examples/tiny.paci
}

# seconds FILE FLAGS...: the wall time of one pacic run, in seconds.
seconds() {
    local file=$1 start end
    shift
    start=$(date +%s.%N)
    "$pacic" "$file" "$@" >/dev/null 2>&1 || { echo failed; return; }
    end=$(date +%s.%N)
    awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }'
}

printf '%-56s %10s %13s\n' "pacic examples/tiny.paci" "steps 10" "steps 2^31-1"
for shape in "1" "5 warm_start 1f1b 7"; do
    read -r every warm <<<"$shape"
    variant 10 "$every" "$warm" >"$work/small.paci"
    variant 2147483647 "$every" "$warm" >"$work/large.paci"
    for flags in --check --explain "--emit schedule"; do
        # shellcheck disable=SC2086 # the flags are words
        printf '%-56s %9ss %12ss\n' "$flags, checkpoint every $every${warm:+, $warm}" \
            "$(seconds "$work/small.paci" $flags)" "$(seconds "$work/large.paci" $flags)"
    done
done
