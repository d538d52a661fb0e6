#!/usr/bin/env bash
# bench/blas_spin.sh: whether OpenBLAS's worker threads, which spin for a while after each
# product (OPENBLAS_THREAD_TIMEOUT, 2^N cycles), slow the stage's own pool that runs the loops
# between products: `run` on bench/gpt6.paci (p = 1, 2 threads, STEPS steps) with the
# library's default and with OPENBLAS_THREAD_TIMEOUT=4 (the shortest), ROUNDS rounds in turns;
# seconds in the pipeline for each run, then each setting's mean, least and most. Figures
# only. Environment: ROUNDS (default 6), STEPS (default 12), THREADS (default 2).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${ROUNDS:-6} steps=${STEPS:-12} threads=${THREADS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
make -s all >/dev/null
build/bin/pacic bench/gpt6.paci --steps "$steps" -o "$work/run" 2>/dev/null
# pipeline_s [ENV=VALUE]: one run's seconds in the pipeline
pipeline_s() {
    rm -rf "$work/ckpt"
    (cd "$work" && env "$@" ./run --threads "$threads" --ckpt-dir "$work/ckpt" 2>/dev/null) |
        sed -n 's/^done: .*(\([0-9.]*\) s in the pipeline.*/\1/p'
}
echo "bench/blas_spin.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for (( i = 0; i < rounds; i++ )); do
    echo "default $(pipeline_s)"
    echo "timeout-4 $(pipeline_s OPENBLAS_THREAD_TIMEOUT=4)"
done | awk '{ print; s[$1] += $2; n[$1]++; if (!($1 in lo) || $2 < lo[$1]) lo[$1] = $2; if ($2 > hi[$1]) hi[$1] = $2 }
     END { for (k in s) printf "%s: mean %.2f s, least %.2f, most %.2f (%d runs of %s steps)\n", k, s[k] / n[k], lo[k], hi[k], n[k], "'"$steps"'" }'
