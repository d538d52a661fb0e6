#!/usr/bin/env bash
# bench/blas_pool.sh: a stage's products on its own pool (pr_gemm cuts each large product into
# blocks of rows or columns, one per core, each an OpenBLAS call on one thread; the default)
# against OpenBLAS's own threads (PACIRT_GEMM_THREADS=openblas), whose workers spin for a while
# after each product (OPENBLAS_THREAD_TIMEOUT) while the pool runs the loops between products:
# `run` on bench/gpt6.paci (p = 1, THREADS cores, STEPS steps), ROUNDS rounds in turns; seconds
# in the pipeline for each run, each setting's mean, least and most, and the ratio of the
# means. Figures only. Environment: ROUNDS (default 6), STEPS (default 12), THREADS (default 2).
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
echo "bench/blas_pool.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
for (( i = 0; i < rounds; i++ )); do
    echo "pool $(pipeline_s PACIRT_GEMM_THREADS=)"
    echo "openblas $(pipeline_s PACIRT_GEMM_THREADS=openblas)"
done | awk '{ print; s[$1] += $2; n[$1]++; if (!($1 in lo) || $2 < lo[$1]) lo[$1] = $2; if ($2 > hi[$1]) hi[$1] = $2 }
     END { for (k in s) printf "%s: mean %.2f s, least %.2f, most %.2f (%d runs of %s steps)\n", k, s[k] / n[k], lo[k], hi[k], n[k], "'"$steps"'"
           if (n["pool"] && n["openblas"]) printf "openblas / pool: %.2fx (means)\n", (s["openblas"] / n["openblas"]) / (s["pool"] / n["pool"]) }'
