#!/usr/bin/env bash
# bench/profile_ops.sh: where the CPU trainer's time goes on bench/gpt6.paci, by op group, at two
# commits side by side: each commit's pacic builds each commit's bench/gpt6.paci (--steps 12),
# and `run --threads THREADS --profile-out P` runs RUNS times for each, in turns (a machine that
# drifts weighs on both alike). Printed: per op group the median over the runs of the thread
# seconds its ops took over the 12 steps (run's monotonic clock around each op; the per-head
# products and the softmax run on the stage's cores at once, so their seconds add up both
# threads'), and the stage's compute (wall seconds in its instructions). No assertions: figures
# only.
#
# usage: bash bench/profile_ops.sh BEFORE AFTER     (git revisions, e.g. b82af95 HEAD)
# Environment: RUNS (default 8), THREADS (default: nproc).
set -euo pipefail
export LC_ALL=C  # sort and join in one collation
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ $# -eq 2 ] || { echo "usage: bash bench/profile_ops.sh BEFORE AFTER (git revisions)" >&2; exit 2; }
runs=${RUNS:-8}
threads=${THREADS:-$(nproc)}
[ "$runs" -ge 1 ] 2>/dev/null || { echo "bench/profile_ops.sh: RUNS must be a whole number of at least 1, not '$runs'" >&2; exit 2; }
work=$(mktemp -d)
cleanup() {
    for side in before after; do
        [ ! -d "$work/$side" ] || git worktree remove --force "$work/$side" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

revs=("$1" "$2")
sides=(before after)
for k in 0 1; do
    side=${sides[$k]}
    rev=$(git rev-parse --short "${revs[$k]}^{commit}") ||
        { echo "bench/profile_ops.sh: '${revs[$k]}' is not a commit of this repository" >&2; exit 2; }
    revs[$k]=$rev
    git worktree add -q --detach "$work/$side" "$rev"
    make -s -C "$work/$side" -j"$(nproc)" all >/dev/null
    mkdir -p "$work/$side/bench/run"
    "$work/$side/build/bin/pacic" "$work/$side/bench/gpt6.paci" --steps 12 -o "$work/$side/bench/run/run" 2>/dev/null
done

for (( r = 1; r <= runs; r++ )); do
    for side in before after; do
        dir=$work/$side/bench/run
        rm -rf "$dir/ckpt"
        (cd "$dir" && ./run --threads "$threads" --ckpt-dir "$dir/ckpt" --profile-out "profile_$r.txt" >/dev/null 2>&1)
    done
done

# groups PROFILE: "GROUP SECONDS" lines; a product inside the (sequence, head) loops runs more
# often than the layers' LayerNorm (B x heads times as often): those are the per-head products
groups() {
    awk '$1 == "op" && $5 == "layernorm_forward" && $7 > most { most = $7 }
         $1 == "op" { name[NR] = $5; calls[NR] = $7; secs[NR] = $9 }
         $1 == "compute" { compute += $3 }
         END {
             for (i in name) {
                 g = name[i]
                 if (g == "gemm") g = calls[i] > most ? "products per (sequence, head)" : "products (qkv, projections, MLP, head)"
                 sum[g] += secs[i]
             }
             for (g in sum) printf "%s\t%.4f\n", g, sum[g]
             printf "the stage'"'"'s compute (wall)\t%.4f\n", compute
         }' "$1"
}
for side in before after; do
    for (( r = 1; r <= runs; r++ )); do groups "$work/$side/bench/run/profile_$r.txt"; done |
        sort -t$'\t' -k1,1 -k2,2n |
        awk -F'\t' '{ v[$1, ++n[$1]] = $2 } END { for (g in n) { m = n[g]; printf "%s\t%.3f\n", g, (m % 2 ? v[g, (m + 1) / 2] : (v[g, m / 2] + v[g, m / 2 + 1]) / 2) } }' |
        sort > "$work/$side.txt"
done

echo "bench/gpt6.paci, --steps 12, ./run --threads $threads --profile-out P, $runs runs of each in turns," \
     "$(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
echo "median thread seconds over the 12 steps, by op group"
echo
echo "| ops | ${revs[0]} | ${revs[1]} |"
echo "| --- | ---: | ---: |"
# the groups by their larger figure, largest first; the compute last
join -t$'\t' -a1 -a2 -e - -o 0,1.2,2.2 "$work/before.txt" "$work/after.txt" |
    awk -F'\t' '{ a = $2 == "-" ? 0 : $2; b = $3 == "-" ? 0 : $3
                  printf "%s\t| %s | %s | %s |\n", ($1 ~ /compute/ ? -1 : (a > b ? a : b)), $1, $2, $3 }' |
    sort -t$'\t' -k1,1gr | cut -f2
