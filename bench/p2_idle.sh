#!/usr/bin/env bash
# bench/p2_idle.sh: where PACI's idle goes at p = 2, window 2 (the p = 2 part of bench/cpu.sh),
# in figures a shared machine keeps: bench/gpt6.paci on 2 stages trains STEPS steps (default 6,
# bench/cpu.sh's old count) under paci and 1f1b with --profile-out, whose thread CPU seconds
# per instruction exclude waits and the cores' sharing; pacic then replays each run with those
# costs as if each stage had a core (--emit trace --profile --fill-drain). Printed: each
# stage's CPU per step (forwards, backwards, the optimizer step) and per step's messages; per
# schedule the replayed run, its steady step, and the fill and drain that a run of STEPS steps
# adds to it; each stage's idle in the replay, at the run's start, inside it and at its end;
# and the seconds run spends after the pipeline (the final checkpoint), which run's summary
# counts in its busy share. No assertions: figures only. THREADS (default: nproc).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
source bench/trace_spans.sh  # trace_spans
steps=${STEPS:-6}
threads=${THREADS:-$(nproc)}
pacic=$root/build/bin/pacic
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make -s all >/dev/null
[ "$steps" -ge 2 ] 2>/dev/null || { echo "bench/p2_idle.sh: STEPS must be at least 2, not '$steps'" >&2; exit 2; }

# replay TRACE STEPS: "makespan steady fill_and_drain" then per stage "busy start inside end"
# (seconds) from pacic's replayed trace; the steady step is the time between the ends of step 1
# and step STEPS (as the last stage to take each ends it) over STEPS - 1.
replay() {
    trace_spans "$1" |
    awk -v n="$2" '{ if (!($1 in first)) { first[$1] = $2; stages++ }
                     last[$1] = $3; busy[$1] += $3 - $2; if ($3 > makespan) makespan = $3
                     if ($4 && ++steps[$1] == 1 && $3 > t1) t1 = $3
                     if ($4 && steps[$1] == n && $3 > tn) tn = $3 }
         END {
             period = (tn - t1) / (n - 1)
             printf "%.4f %.4f %.4f\n", makespan, period, makespan - n * period
             for (s = 0; s < stages; s++)
                 printf "%.4f %.4f %.4f %.4f\n", busy[s], first[s], makespan - busy[s] - first[s] - (makespan - last[s]),
                        makespan - last[s]
         }'
}

echo "bench/p2_idle.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for schedule in paci 1f1b; do
    dir=$work/$schedule
    mkdir -p "$dir"
    sed -e 's/stages 1/stages 2/' -e "s/schedule paci/schedule $schedule/" -e 's/window 1/window 2/' \
        -e "s#\"\\.\\./examples/#\"$root/examples/#" bench/gpt6.paci > "$dir/p2.paci"
    "$pacic" "$dir/p2.paci" --steps "$steps" -o "$dir/run" 2>/dev/null
    (cd "$dir" && ./run --threads "$threads" --ckpt-dir "$dir/ckpt" --profile-out profile.txt 2>/dev/null |
        grep -E '^(done|post-validation):') > "$dir/summary.txt"
    "$pacic" "$dir/p2.paci" --steps "$steps" --profile "$dir/profile.txt" --emit trace --fill-drain \
        --show-steps "$steps" -o "$dir/replay.json"
    echo
    echo "$schedule, p = 2, window 2, $steps steps: $(head -1 "$dir/summary.txt")"
    grep '^post-validation' "$dir/summary.txt" || true
    # after the pipeline: "done: N steps in W s (P s in the pipeline, ...)"
    sed -n 's/^done: [0-9]* steps in \([0-9.]*\) s (\([0-9.]*\) s in the pipeline.*/\1 \2/p' "$dir/summary.txt" |
        awk '{ printf "  after the pipeline (the final checkpoint): %.2f s of the run'"'"'s %.2f s wall-clock\n", $1 - $2, $1 }'
    awk '$1 == "stage" { printf "  stage %d CPU per step: 2 forwards %.4f s, 2 backwards %.4f s, step %.4f s: %.4f s\n",
                                $2, 2 * $4, 2 * $6, $8, 2 * ($4 + $6) + $8 }
         $1 == "link" { printf "  messages per step (2 activations, 2 gradients; send and receive CPU): %.4f s\n", 4 * $3 }' \
        "$dir/profile.txt"
    replay "$dir/replay.json" "$steps" | awk -v n="$steps" '
        NR == 1 { m = $1; printf "  replayed at these costs: %.4f s, %.4f s a step; steady step %.4f s; fill and drain %.4f s (%.1f%% of the run)\n",
                                m, m / n, $2, $3, 100 * $3 / m; next }
        { printf "  stage %d replayed: busy %.4f s (%.1f%%), idle at the start %.4f s, inside %.4f s, at the end %.4f s\n",
                 NR - 2, $1, 100 * $1 / m, $2, $3, $4 }'
done
