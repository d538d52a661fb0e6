#!/usr/bin/env bash
# bench/balance.sh: what the balanced partition gains on a CPU replay of a small model whose
# LM head outweighs its layers (6 layers of width 128, context 64, vocabulary 4096: the head
# is about 2.6 layers of FLOPs), over 4 stages under PACI, window 8 of 8 sequences.
#
#   old:      split [1, 2, 2, 1], what pacic chose before a stage could hold only the head
#             (every stage at least one layer: the last one layer plus the head);
#   balanced: the automatic split now (the head alone on the last stage);
#   measured: the split `pacic --balance` chooses from the old run's measured costs.
#
# Each program trains STEPS steps at one BLAS thread a stage with --profile-out; pacic then
# replays its schedule with the costs that run measured (thread CPU seconds per instruction,
# per stage) as if every stage had a core of its own (`pacic --profile --explain`), the way
# the study does (docs/study.md). Printed: both splits, their replayed tokens/s and bubble,
# the ratio, and the wall-clock tokens/s of the real runs (their stages share this machine's
# cores, so the wall clock is not the pipeline's speed). No assertions: figures only.
# Environment: STEPS (default 20).
source "$(dirname "$0")/replay_lib.sh"

# split_of PACI [pacic flags]: the plan's layers per stage as a split list.
split_of() {
    "$pacic" "$@" --dump plan | awk '/^stage / { n = $4 == "none" ? 0 : substr($4, index($4, "..") + 2) - $4 + 1;
        s = s (s ? ", " : "") n } END { print "[" s "]" }'
}

write old 6 "; split [1, 2, 2, 1]"
write balanced 6 ""
old=$(measure old)
balanced=$(measure balanced)
write measured 6 "; split $(split_of "$work/balanced.paci" --balance "$work/old/profile.txt")"
measured=$(measure measured)
echo "bench/balance.sh: 6 layers, width 128, vocabulary 4096, 4 stages, paci, window 8, micro 8, $steps steps, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-9s %-38s %16s %8s %14s\n' split "stages (layers)" "replayed tok/s" bubble "wall tok/s"
for row in "$old" "$balanced" "$measured"; do
    IFS='|' read -r name split replay _ wall <<< "$row"
    read -r tps bubble <<< "$replay"
    printf '%-9s %-38s %16.0f %8s %14s\n' "$name" "$split" "$tps" "$bubble" "$wall"
done
old_tps=$(echo "$old" | cut -d'|' -f3 | cut -d' ' -f1)
new_tps=$(echo "$balanced" | cut -d'|' -f3 | cut -d' ' -f1)
measured_tps=$(echo "$measured" | cut -d'|' -f3 | cut -d' ' -f1)
awk -v a="$new_tps" -v b="$old_tps" -v c="$measured_tps" \
    'BEGIN { printf "replayed tokens/s: balanced / old %.2fx, measured / old %.2fx\n", a / b, c / b }'
# The runs' costs move with the machine's load; priced with one set of measured costs (the
# old run's, per part of the model: pacic --balance with the split written in the file), the
# ratio depends on the split alone.
same_old=$(tokens_per_s "$work/old.paci" --balance "$work/old/profile.txt")
same_measured=$(tokens_per_s "$work/measured.paci" --balance "$work/old/profile.txt")
awk -v a="$same_measured" -v b="$same_old" \
    'BEGIN { printf "both priced with the old run'"'"'s measured costs: %.0f and %.0f tokens/s, measured / old %.2fx\n", b, a, a / b }'
