#!/usr/bin/env bash
# bench/vocab_split.sh: what dividing the LM head by vocabulary gains on a CPU replay of a
# small model whose head outweighs a stage's share (6 layers of width 128, context 64,
# vocabulary 8192: the head is about 5 layers of FLOPs against 2.75 a stage), over 4 stages
# under PACI, window 8 of 8 sequences; both programs split the layers [2, 2, 2, 0]:
#
#   whole:   the head whole on the last stage (vocab_split 0);
#   divided: vocab_split 2624: the final LayerNorm and rows [0, 2624) after layers 4-5 on
#            stage 2, rows [2624, 8192) alone on stage 3.
#
# (The automatic choice prices stages on the file's GPU, where this model's kernels are too
# small to matter; the bench fixes the splits.) Each program trains STEPS steps at one BLAS
# thread a stage with --profile-out; pacic replays its schedule with the costs that run
# measured as if every stage had a core (`pacic --profile --explain`), as bench/half_layers.sh
# does. Printed: both, their replayed tokens/s, bubble and busy fractions, and the ratio. No
# assertions: figures only. Environment: STEPS (default 20).
source "$(dirname "$0")/replay_lib.sh"

write whole 6 "; split [2, 2, 2, 0]; vocab_split 0"
write divided 6 "; split [2, 2, 2, 0]; vocab_split 2624"
sed -i 's/vocab 4096/vocab 8192/' "$work/whole.paci" "$work/divided.paci"
whole=$(measure whole)
divided=$(measure divided)
echo "bench/vocab_split.sh: 6 layers, width 128, vocabulary 8192, 4 stages, paci, window 8, micro 8, $steps steps, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
print_rows head "$whole" "$divided"
awk -v a="$(cut -d'|' -f3 <<< "$divided" | cut -d' ' -f1)" -v b="$(cut -d'|' -f3 <<< "$whole" | cut -d' ' -f1)" \
    'BEGIN { printf "replayed tokens/s: divided / whole %.2fx\n", a / b }'
