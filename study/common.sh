# study/common.sh: what the study's grid drivers (tuned.sh, scale.sh) share, sourced after
# study/toolchain.sh: learning-rate multipliers, the {X} rates of an optimizer entry, one
# training run with its times and its divergence, and a pool of J runs at once.

# check_multipliers WHERE LIST: every multiplier a positive number, else an error naming WHERE.
check_multipliers() {
    local m
    for m in $2; do
        [[ $m =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] && awk -v m="$m" 'BEGIN { exit !(m > 0) }' ||
            { echo "study: ${1}learning-rate multiplier '$m' is not a positive number" >&2; exit 2; }
    done
}

trim() { sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' <<< "$1"; }

# scale_rates M TEXT: TEXT with each {X} (a learning rate) replaced by X x M.
scale_rates() {
    awk -v m="$1" -v text="$2" 'BEGIN {
        while (match(text, /\{[-+0-9.eE]+\}/)) {
            printf "%s%.6g", substr(text, 1, RSTART - 1), substr(text, RSTART + 1, RLENGTH - 2) * m
            text = substr(text, RSTART + RLENGTH)
        }
        print text }'
}

# train_run DIR LABEL [RUN FLAGS...]: compile DIR/model.paci and train it in DIR with
# --no-checkpoint --metrics metrics.jsonl and the flags; DIR/time.txt gets its wall, user and
# system seconds. A run that stops on a non-finite loss or gradient (too high an lr) is
# recorded as diverged (DIR/diverged.txt), not as a failure; any other failure exits 1.
train_run() {
    local dir=$1 label=$2
    shift 2
    "$pacic" "$dir/model.paci" -o "$dir/run" 2> "$dir/compile.log" || { cat "$dir/compile.log" >&2; exit 1; }
    local status=0 TIMEFORMAT="%R %U %S"
    { time (cd "$dir" && ./run --no-checkpoint --metrics metrics.jsonl "$@" > run.log 2> run.err) ; } \
        2> "$dir/time.txt" || status=$?
    rm -f "$dir/run"
    if (( status != 0 )); then
        if grep -q 'is not finite' "$dir/run.err"; then
            grep 'is not finite' "$dir/run.err" > "$dir/diverged.txt"
            printf '  %-24s diverged: %s\n' "$label" "$(cat "$dir/diverged.txt")"
            return
        fi
        echo "study: $label failed (exit $status):" >&2
        cat "$dir/run.err" >&2
        exit 1
    fi
    local wall user sys
    read -r wall user sys < "$dir/time.txt"
    printf '  %-24s %s (%.0f s wall, %.0f s CPU)\n' "$label" "$(grep '^done:' "$dir/run.log" | cut -d';' -f2-)" \
        "$wall" "$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')"
}

# The pool: pool_start COMMAND... runs COMMAND in the background once fewer than $jobs_max
# are running; pool_drain waits for the rest. A failed command (exit 1) stops the driver under
# set -e at the next wait, and the driver's EXIT trap ends its peers.
pool_running=0
pool_start() {
    if (( pool_running == jobs_max )); then
        wait -n
        pool_running=$((pool_running - 1))
    fi
    "$@" &
    pool_running=$((pool_running + 1))
}
pool_drain() {
    while (( pool_running > 0 )); do
        wait -n
        pool_running=$((pool_running - 1))
    done
}
