#!/usr/bin/env bash
# bench/half_layers.sh: what split points inside a layer gain on a CPU replay of a small
# model whose LM head outweighs its layers (7 layers of width 128, context 64, vocabulary
# 4096: the head is about 2.6 layers of FLOPs), over 4 stages under PACI, window 8 of 8
# sequences, the small analogue of examples/gpt2-medium-8.paci (head alone on the last stage,
# the layers over the others not dividing evenly):
#
#   whole:     split [2, 2, 3, 0], the best split into whole layers (the head alone);
#   automatic: what pacic chooses on this machine's calibration: [2, 2.5, 2.5, 0] (layer 4
#              cut between its attention and its MLP half) on 2026-12-02; since the cut after
#              the fc product (2026-12-06) it may cut there too (`pacic --dump plan` says).
#
# Each program trains STEPS steps at one BLAS thread a stage with --profile-out; pacic then
# replays its schedule with the costs that run measured (thread CPU seconds per instruction,
# per stage) as if every stage had a core of its own (`pacic --profile --explain`), as
# bench/balance.sh and the study do. Printed: both splits, their replayed tokens/s, bubble
# and stage busy fractions, and the ratio. No assertions: figures only. Environment: STEPS
# (default 20).
source "$(dirname "$0")/replay_lib.sh"

write whole 7 "; split [2, 2, 3, 0]"
write automatic 7 ""
whole=$(measure whole)
automatic=$(measure automatic)
echo "bench/half_layers.sh: 7 layers, width 128, vocabulary 4096, 4 stages, paci, window 8, micro 8, $steps steps, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
print_rows split "$whole" "$automatic"
awk -v a="$(cut -d'|' -f3 <<< "$automatic" | cut -d' ' -f1)" -v b="$(cut -d'|' -f3 <<< "$whole" | cut -d' ' -f1)" \
    'BEGIN { printf "replayed tokens/s: automatic / whole %.2fx\n", a / b }'
# The runs' costs move with the machine's load; priced with one set of measured costs (the
# whole run's, per part of the model: pacic --balance, a half layer at its share of a layer's
# FLOPs), the ratio depends on the split alone.
write fixed 7 "; split [2, 2.5, 2.5, 0]"
same_whole=$(tokens_per_s "$work/whole.paci" --balance "$work/whole/profile.txt")
same_automatic=$(tokens_per_s "$work/fixed.paci" --balance "$work/whole/profile.txt")
awk -v a="$same_automatic" -v b="$same_whole" \
    'BEGIN { printf "both priced with the whole run'"'"'s measured costs: %.0f and %.0f tokens/s, automatic / whole %.2fx\n", b, a, a / b }'
