#!/usr/bin/env bash
# bench/cpu.sh: the CPU trainer's speed, printed as one table (run by `make bench`).
#
#   (a) tokens/s of `run` on bench/gpt6.paci (6 layers, width 384, 6 heads, context 256,
#       vocabulary 256, micro-batch 4, p = 1) with THREADS cores, over steps 3 to STEPS from
#       run's trace (the first two steps warm up: page faults on the first touch of the
#       activations, cold caches; bench/torch_gpt.py leaves out its first two alike), the
#       best of BEST_OF runs;
#   (b) the same model, batch and thread count in PyTorch eager (bench/torch_gpt.py), the
#       best of as many runs, taken in turns with (a)'s, and the ratio (best against best: on
#       a busy or drifting machine a single run of either side may lose 15%, as three single
#       runs once spread; each turn's ratio is printed beside it);
#   (c) the achieved FLOP/s against the machine's sgemm rate (bench/sgemm_rate.c, OpenBLAS,
#       same thread count, the best of one measure in each turn of (a) and (b)); FLOPs per
#       step = 6 * N * tokens + 12 * L * B * T^2 * C, with
#       N = L * 12 * C^2 + V * C the parameters that multiply (the blocks' matrices and the
#       LM head; biases, LayerNorms and the embedding lookups do not) and the second term
#       the attention scores and their weighted sum, forward and backward, over the full
#       T x T square (PaLM's convention);
#   (d) p = 2: PACI against 1F1B-flush at window 2 (theory: flush 1.5x slower), P2_STEPS
#       steps each, P2_BEST_OF runs of each in turns, each schedule's run of the shortest
#       steady step kept (one run of each spread 1.38x to 1.49x in one idle hour), in the
#       steady state, from run's trace: the wall-clock seconds per optimizer step between the
#       moments every stage has taken step 2 and step P2_STEPS - 1, and each stage's busy
#       share between them. The same marks for both schedules: step 1 holds
#       PACI's pipeline fill (as long as a 1F1B-flush step; docs/benchmarks.md says what it
#       did to the ratio over a whole run of 6 steps), step 2 the one redo of a window that
#       1F1B's post-validation makes when step 1 clipped, the last step the drain. Beside
#       them: the whole run's seconds per step (fill, redo and drain included); each stage's
#       thread CPU seconds per step (run --profile-out), which exclude waits and the cores'
#       sharing, so PACI's above 1F1B's says its two busy stages slow each other down on the
#       shared cores (caches, memory, clock), which no schedule removes; and the ratio the
#       schedules alone give at PACI's CPU costs (pacic --profile --explain replays both as
#       if each stage had a core).
#
# No assertions: figures only. Environment: THREADS (default: nproc), BEST_OF (default 5),
# P2_BEST_OF (default 3), STEPS (p = 1 steps, at least 4, default 12), P2_STEPS (at least 4, default 14),
# TORCH_STEPS (default 6), PYTHON (default /usr/bin/python3, which has torch on Debian).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
source bench/trace_spans.sh  # trace_spans
threads=${THREADS:-$(nproc)}
steps=${STEPS:-12}
p2_steps=${P2_STEPS:-14}
[ "$steps" -ge 4 ] 2>/dev/null || { echo "bench/cpu.sh: STEPS must be at least 4 (steps 3 to STEPS are measured), not '$steps'" >&2; exit 2; }
[ "$p2_steps" -ge 4 ] 2>/dev/null || { echo "bench/cpu.sh: P2_STEPS must be at least 4 (the steady state lies between steps 2 and P2_STEPS - 1), not '$p2_steps'" >&2; exit 2; }
torch_steps=${TORCH_STEPS:-6}
best_of=${BEST_OF:-5}
p2_best_of=${P2_BEST_OF:-3}
[ "$best_of" -ge 1 ] 2>/dev/null || { echo "bench/cpu.sh: BEST_OF must be a whole number of at least 1, not '$best_of'" >&2; exit 2; }
[ "$p2_best_of" -ge 1 ] 2>/dev/null || { echo "bench/cpu.sh: P2_BEST_OF must be a whole number of at least 1, not '$p2_best_of'" >&2; exit 2; }
python=${PYTHON:-/usr/bin/python3}
pacic=$root/build/bin/pacic
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

make -s all >/dev/null
cc -O2 -o "$work/sgemm_rate" bench/sgemm_rate.c -lopenblas

# model shape, read back from the DSL file so the FLOP count follows edits to it
shape() { sed -n "s/^ *$1 \\([0-9]*\\).*/\\1/p" bench/gpt6.paci | head -1; }
L=$(shape layers) C=$(shape width) NH=$(shape heads) T=$(shape context) V=$(shape vocab)
B=$(shape micro)

# run_model PACI STEPS [RUN FLAGS]: compiles and trains in $work/NAME; prints run's summary lines
run_model() {
    local dir=$work/$(basename "$1" .paci) paci=$1 steps=$2
    shift 2
    mkdir -p "$dir"
    rm -rf "$dir/ckpt"  # the bench's own checkpoints from its previous run of the same file
    "$pacic" "$paci" --steps "$steps" -o "$dir/run" 2>/dev/null
    (cd "$dir" && ./run --threads "$threads" --ckpt-dir "$dir/ckpt" "$@" | grep -E '^(done|busy|blas):')
}

echo "pacic CPU benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: nproc $(nproc), $(lscpu | sed -n 's/^Model name: *//p' | head -1), load average" \
     "$(cut -d' ' -f1-3 /proc/loadavg) at start (the cores may be shared)"

# (a)
# seconds per optimizer step in the pipeline (without the final checkpoint), from
# "done: N steps in W s (P s in the pipeline, ...)"; W where run does not print P
per_step() { sed -n 's/^done: \([0-9]*\) steps in \([0-9.]*\) s\( (\([0-9.]*\) s in the pipeline\)\{0,1\}.*/\1 \2 \4/p' <<<"$1" |
             awk '{printf "%.4f", ($3 != "" ? $3 : $2) / $1}'; }

# best "N N ...": the largest of the numbers
best() { tr ' ' '\n' <<<"$1" | awk 'NF && (n++ == 0 || $1 > b) { b = $1 } END { print b }'; }
# steady TRACE STEPS: from run's trace, the seconds per optimizer step between the moments every
# stage has taken step 2 and step STEPS - 1, then each stage's busy share between them (the
# union of its instructions' spans there, should any overlap).
steady() {
    trace_spans "$1" |
    awk -v n="$2" '{ tid[NR] = $1; from[NR] = $2; to[NR] = $3
                     if ($4 && ++steps[$1] == 2 && $3 > a) a = $3
                     if ($4 && steps[$1] == n - 1 && $3 > b) b = $3 }
         END {
             if (b <= a) exit 1
             printf "%.4f", (b - a) / (n - 3)
             for (i = 1; i <= NR; i++) {
                 if (i == 1 || tid[i] != tid[i - 1]) {
                     if (i > 1) printf " %.0f%%", 100 * busy / (b - a)
                     busy = 0; covered = a
                 }
                 lo = from[i] > covered ? from[i] : covered; hi = to[i] < b ? to[i] : b
                 if (hi > lo) { busy += hi - lo; covered = hi }
             }
             printf " %.0f%%\n", 100 * busy / (b - a)
         }'
}
have_torch=0
"$python" -c 'import torch' 2>/dev/null && have_torch=1
torch_run() {
    "$python" bench/torch_gpt.py --layers "$L" --width "$C" --heads "$NH" --context "$T" --vocab "$V" \
        --micro "$B" --threads "$threads" --steps "$torch_steps" | sed -n 's/^torch_tokens_per_s //p'
}
# (a) and (b) in turns, pacic then PyTorch, so that a machine that drifts over the minutes
# (another tenant, the clock) weighs on both sides alike; each turn's ratio is printed too.
pacic_all="" torch_all="" turn_ratios="" sgemm_all=""
for (( i = 0; i < best_of; i++ )); do
    pacic_out=$(run_model bench/gpt6.paci "$steps" --trace "$work/gpt6/trace.json")
    # steps 3 to STEPS: the first two warm up, as bench/torch_gpt.py's first two do
    warm=$(steady "$work/gpt6/trace.json" $((steps + 1))) ||
        { echo "bench/cpu.sh: the p = 1 run's trace has no steps 2 and $steps to measure between" >&2; exit 1; }
    one=$(awk -v s="${warm%% *}" -v bt=$((B * T)) 'BEGIN {printf "%.1f", bt / s}')
    pacic_all="$pacic_all $one"
    if [ "$i" = 0 ]; then
        # PyTorch and sgemm_rate get the kernels run chose (run replaces a generic fallback of
        # OpenBLAS's by the kernels the CPU allows, unless OPENBLAS_CORETYPE is set: runtime/gemm.c).
        kernels=$(sed -n 's/^blas: OpenBLAS, \([A-Za-z0-9]*\) kernels.*/\1/p' <<<"$pacic_out")
        [ -n "${OPENBLAS_CORETYPE:-}" ] || [ -z "$kernels" ] || export OPENBLAS_CORETYPE=$kernels
    fi
    if [ "$have_torch" = 1 ]; then
        theirs=$(torch_run)
        torch_all="$torch_all $theirs"
        turn_ratios="$turn_ratios $(awk -v a="$one" -v b="$theirs" 'BEGIN {printf "%.2fx", a / b}')"
    fi
    sgemm_all="$sgemm_all $("$work/sgemm_rate" "$threads" | sed -n 's/^sgemm_gflops //p')"
done
pacic_tps=$(best "$pacic_all")
echo "(a) build/bin/pacic bench/gpt6.paci --steps $steps -o run && ./run --threads $threads --trace T, $best_of times (in turns with (b));" \
     "tokens/s over steps 3 to $steps"
echo "    $(head -1 <<<"$pacic_out") (the last run)"
echo "    tokens/s:$pacic_all; best $pacic_tps"
echo "    OpenBLAS kernels: ${OPENBLAS_CORETYPE:-chosen by the library} (the same for run, PyTorch and sgemm_rate)"

# (b)
torch_tps=""
[ "$have_torch" = 0 ] || torch_tps=$(best "$torch_all")
echo "(b) $python bench/torch_gpt.py --threads $threads --steps $torch_steps, $best_of times (in turns with (a))"
if [ -n "$torch_tps" ]; then echo "    tokens/s:$torch_all; best $torch_tps; pacic / PyTorch turn by turn:$turn_ratios"
else echo "    skipped: no torch in $python"; fi

# (c): measured in each turn after (a) and (b); a product of 0.04 s is easily caught by a
# neighbour's burst, so the best of the turns' bests
sgemm=$(best "$sgemm_all")
echo "(c) bench/sgemm_rate $threads (OpenBLAS, n = 1536, best of 8), $best_of times (in turns with (a) and (b))"
echo "    GFLOP/s:$sgemm_all; best $sgemm"

# (d)
# cpu_per_step PROFILE: each stage's thread CPU seconds per optimizer step (window 2)
cpu_per_step() { awk '$1 == "stage" { printf "%s%.3f", k++ ? ", " : "", 2 * ($4 + $6) + $8 }' "$1"; }
# p2 SCHEDULE R: run R of SCHEDULE at p = 2 in $work/gpt6_p2_SCHEDULE_R, its summary in out.txt
# and its steady seconds per step and busy shares in steady.txt
p2() {
    local name=gpt6_p2_$1_$2
    mkdir -p "$work/$name"
    sed -e 's/stages 1/stages 2/' -e "s/schedule paci/schedule $1/" -e 's/window 1/window 2/' \
        -e "s#\"\\.\\./examples/#\"$root/examples/#" bench/gpt6.paci > "$work/$name.paci"
    run_model "$work/$name.paci" "$p2_steps" --trace "$work/$name/trace.json" \
              --profile-out "$work/$name/profile.txt" > "$work/$name/out.txt"
    steady "$work/$name/trace.json" "$p2_steps" > "$work/$name/steady.txt" ||
        { echo "bench/cpu.sh: the $1 run's trace has no steps 2 and $((p2_steps - 1)) to measure between" >&2; exit 1; }
}
# each schedule P2_BEST_OF times, in turns; each keeps its run of the shortest steady step
declare -A p2_best p2_all
for (( r = 1; r <= p2_best_of; r++ )); do
    for schedule in paci 1f1b; do
        p2 "$schedule" "$r"
        step=$(cut -d' ' -f1 "$work/gpt6_p2_${schedule}_$r/steady.txt")
        p2_all[$schedule]="${p2_all[$schedule]:-} $step"
        best_dir=${p2_best[$schedule]:-}
        if [ -z "$best_dir" ] || awk -v a="$step" -v b="$(cut -d' ' -f1 "$best_dir/steady.txt")" 'BEGIN { exit !(a < b) }'; then
            p2_best[$schedule]=$work/gpt6_p2_${schedule}_$r
        fi
    done
done
paci_dir=${p2_best[paci]} flush_dir=${p2_best[1f1b]}
paci_out=$(cat "$paci_dir/out.txt")
flush_out=$(cat "$flush_dir/out.txt")
paci_steady=$(cat "$paci_dir/steady.txt")
flush_steady=$(cat "$flush_dir/steady.txt")
# the schedules alone, replayed at PACI's measured CPU costs: the step time column of each row
replayed=$("$pacic" "$paci_dir.paci" --steps "$p2_steps" --profile "$paci_dir/profile.txt" --explain |
           awk '$1 == "paci" && $2 ~ /%$/ { p = $3 } $1 == "1f1b" && $2 ~ /%$/ { f = $3 }
                END { printf "%.4f %.4f", p, f }')
echo "(d) bench/gpt6.paci with stages 2, window 2, schedule paci | 1f1b; --steps $p2_steps;" \
     "./run --threads $threads --trace T --profile-out P, $p2_best_of times each (in turns)"
echo "    steady s per step: paci${p2_all[paci]}; 1f1b${p2_all[1f1b]} (each schedule's shortest below)"
echo "    paci: $(head -1 <<<"$paci_out")"
echo "          $(tail -1 <<<"$paci_out")"
echo "    1f1b: $(head -1 <<<"$flush_out")"
echo "          $(tail -1 <<<"$flush_out")"
echo

awk -v L="$L" -v C="$C" -v T="$T" -v V="$V" -v B="$B" -v pt="$pacic_tps" -v tt="$torch_tps" \
    -v sg="$sgemm" -v threads="$threads" -v steps="$steps" -v ps="$(per_step "$paci_out")" -v fs="$(per_step "$flush_out")" \
    -v psteady="$paci_steady" -v fsteady="$flush_steady" -v replayed="$replayed" \
    -v pcpu="$(cpu_per_step "$paci_dir/profile.txt")" \
    -v fcpu="$(cpu_per_step "$flush_dir/profile.txt")" -v p2_steps="$p2_steps" 'BEGIN {
    n = L * 12 * C * C + V * C
    step_flops = 6 * n * B * T + 12 * L * B * T * T * C
    gflops = step_flops * pt / (B * T) / 1e9
    printf "| measure | value |\n| --- | --- |\n"
    printf "| model | %d layers, width %d, context %d, vocab %d, micro-batch %d; N = %.2fM multiplying parameters |\n", L, C, T, V, B, n / 1e6
    printf "| FLOPs per step (6 N BT + 12 L B T^2 C) | %.1f GFLOP |\n", step_flops / 1e9
    printf "| pacic run, p = 1, %d threads | %.0f tokens/s (steps 3 to %d: two warm-up steps left out, as PyTorch'"'"'s) |\n", threads, pt, steps
    if (tt != "") {
        printf "| PyTorch eager, %d threads | %.0f tokens/s |\n", threads, tt
        printf "| pacic / PyTorch | %.2fx |\n", pt / tt
    }
    printf "| pacic achieved | %.1f GFLOP/s |\n", gflops
    printf "| sgemm rate, %d threads | %.1f GFLOP/s |\n", threads, sg
    printf "| achieved / sgemm | %.0f%% |\n", 100 * gflops / sg
    split(psteady, pst, " "); split(fsteady, fst, " "); split(replayed, rep, " ")
    steady = "steps 3 to " p2_steps - 1
    printf "| p = 2, window 2: PACI | %s s per step (%s; the whole run: %s); busy stage 0 %s, stage 1 %s; CPU s per step %s |\n", pst[1], steady, ps, pst[2], pst[3], pcpu
    printf "| p = 2, window 2: 1F1B-flush | %s s per step (%s; the whole run: %s); busy stage 0 %s, stage 1 %s; CPU s per step %s |\n", fst[1], steady, fs, fst[2], fst[3], fcpu
    if (pst[1] > 0 && ps > 0 && rep[1] > 0)
        printf "| 1F1B-flush / PACI time per step | %.2fx (%s; theory 1.50x; the schedules alone at PACI'"'"'s CPU costs %.2fx; the whole run %.2fx) |\n", fst[1] / pst[1], steady, rep[2] / rep[1], fs / ps
}'
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (above nproc, other processes take" \
     "CPU from the stage threads, and an idle stage's core is no longer free time: the p = 2 ratio" \
     "then falls towards 1)"
