# study/common.sh: what the study's grid drivers (tuned.sh, scale.sh, v4.sh) share, sourced after
# study/toolchain.sh: learning-rate multipliers, the {X} rates of an optimizer entry, one
# training run with its times and its divergence, and a pool of J runs at once; the
# configurations files (tuned.sh, v4.sh).

# check_multipliers WHERE LIST: every multiplier a positive number, else an error naming WHERE.
check_multipliers() {
    local m
    for m in $2; do
        [[ $m =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] && awk -v m="$m" 'BEGIN { exit !(m > 0) }' ||
            { echo "study: ${1}learning-rate multiplier '$m' is not a positive number" >&2; exit 2; }
    done
}

trim() { sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' <<< "$1"; }

# read_configs FILE ONLY: the configurations of FILE (NAME | SCHEDULE | PIPELINE KEYS |
# OPTIMIZER [| LR MULTIPLIERS], comments and blanks skipped) into names (in FILE's order, or
# ONLY's names where ONLY is not empty) and schedule_of, pipeline_of, optimizer_of, lrs_of.
read_configs() {
    local configs=$1 only=$2 line name schedule pipeline optimizer own_lrs extra
    [ -r "$configs" ] || { echo "study: cannot read the configurations file $configs" >&2; exit 2; }
    names=() ; declare -gA schedule_of=() pipeline_of=() optimizer_of=() lrs_of=()
    while IFS= read -r line; do
        line=${line%%#*}
        [[ $line =~ ^[[:space:]]*$ ]] && continue
        IFS='|' read -r name schedule pipeline optimizer own_lrs extra <<< "$line"
        name=$(trim "$name") schedule=$(trim "$schedule") pipeline=$(trim "$pipeline") optimizer=$(trim "$optimizer")
        own_lrs=$(trim "$own_lrs")
        if [ -n "$extra" ] || [ -z "$optimizer" ] || ! [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || [ -z "$schedule" ]; then
            echo "study: $configs: expected 'NAME | SCHEDULE | PIPELINE KEYS | OPTIMIZER [| LR MULTIPLIERS]', NAME of letters, digits, '.', '_', '-', in: $line" >&2
            exit 2
        fi
        check_multipliers "$configs: configuration '$name': " "$own_lrs"
        [ -z "${schedule_of[$name]+x}" ] || { echo "study: $configs: configuration '$name' is declared twice" >&2; exit 2; }
        [[ $optimizer == *"{"*[0-9]*"}"* ]] || { echo "study: $configs: configuration '$name' has no {LR} to scale in its optimizer" >&2; exit 2; }
        names+=("$name"); schedule_of[$name]=$schedule pipeline_of[$name]=$pipeline optimizer_of[$name]=$optimizer
        lrs_of[$name]=$own_lrs
    done < "$configs"
    if [ -n "$only" ]; then
        for name in $only; do
            [ -n "${schedule_of[$name]+x}" ] || { echo "study: --only names '$name', which $configs does not declare (it has: ${names[*]})" >&2; exit 2; }
        done
        names=($only)
    fi
}

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
