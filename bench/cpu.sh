#!/usr/bin/env bash
# bench/cpu.sh: the CPU trainer's speed, printed as one table (run by `make bench`).
#
#   (a) tokens/s of `run` on bench/gpt6.paci (6 layers, width 384, 6 heads, context 256,
#       vocabulary 256, micro-batch 4, p = 1) with THREADS cores;
#   (b) the same model, batch and thread count in PyTorch eager (bench/torch_gpt.py), and
#       the ratio;
#   (c) the achieved FLOP/s against the machine's sgemm rate (bench/sgemm_rate.c, OpenBLAS,
#       same thread count); FLOPs per step = 6 * N * tokens + 12 * L * B * T^2 * C, with
#       N = L * 12 * C^2 + V * C the parameters that multiply (the blocks' matrices and the
#       LM head; biases, LayerNorms and the embedding lookups do not) and the second term
#       the attention scores and their weighted sum, forward and backward, over the full
#       T x T square (PaLM's convention);
#   (d) p = 2: wall-clock seconds per optimizer step of PACI and of 1F1B-flush at window 2
#       (theory: flush 1.5x slower), and each stage's busy fraction from run's summary.
#
# No assertions: figures only. Environment: THREADS (default: nproc), STEPS (p = 1 steps,
# default 12), P2_STEPS (default 6), TORCH_STEPS (default 6), PYTHON (default
# /usr/bin/python3, which has torch on Debian).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
threads=${THREADS:-$(nproc)}
steps=${STEPS:-12}
p2_steps=${P2_STEPS:-6}
torch_steps=${TORCH_STEPS:-6}
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

# run_model PACI STEPS: compiles and trains; prints run's summary lines
run_model() {
    local dir=$work/$(basename "$1" .paci)
    mkdir -p "$dir"
    "$pacic" "$1" --steps "$2" -o "$dir/run" 2>/dev/null
    (cd "$dir" && ./run --threads "$threads" --ckpt-dir "$dir/ckpt" | grep -E '^(done|busy|blas):')
}

echo "pacic CPU benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: nproc $(nproc), $(lscpu | sed -n 's/^Model name: *//p' | head -1), load average" \
     "$(cut -d' ' -f1-3 /proc/loadavg) at start (the cores may be shared)"

# (a)
# seconds per optimizer step in the pipeline (without the final checkpoint), from
# "done: N steps in W s (P s in the pipeline, ...)"; W where run does not print P
per_step() { sed -n 's/^done: \([0-9]*\) steps in \([0-9.]*\) s\( (\([0-9.]*\) s in the pipeline\)\{0,1\}.*/\1 \2 \4/p' <<<"$1" |
             awk '{printf "%.4f", ($3 != "" ? $3 : $2) / $1}'; }
busy() { sed -n 's/^busy: *//p' <<<"$1"; }

pacic_out=$(run_model bench/gpt6.paci "$steps")
pacic_tps=$(awk -v s="$(per_step "$pacic_out")" -v bt=$((B * T)) 'BEGIN {printf "%.1f", bt / s}')
echo "(a) build/bin/pacic bench/gpt6.paci --steps $steps -o run && ./run --threads $threads"
echo "    $(head -1 <<<"$pacic_out")"
# PyTorch and sgemm_rate get the kernels run chose (run replaces a generic fallback of
# OpenBLAS's by the kernels the CPU allows, unless OPENBLAS_CORETYPE is set: runtime/gemm.c).
kernels=$(sed -n 's/^blas: OpenBLAS, \([A-Za-z0-9]*\) kernels.*/\1/p' <<<"$pacic_out")
[ -n "${OPENBLAS_CORETYPE:-}" ] || [ -z "$kernels" ] || export OPENBLAS_CORETYPE=$kernels
echo "    OpenBLAS kernels: ${OPENBLAS_CORETYPE:-chosen by the library} (the same for run, PyTorch and sgemm_rate)"

# (b)
if "$python" -c 'import torch' 2>/dev/null; then
    torch_tps=$("$python" bench/torch_gpt.py --layers "$L" --width "$C" --heads "$NH" --context "$T" \
                --vocab "$V" --micro "$B" --threads "$threads" --steps "$torch_steps" |
                sed -n 's/^torch_tokens_per_s //p')
else
    torch_tps=""
fi
echo "(b) $python bench/torch_gpt.py --threads $threads --steps $torch_steps"
echo "    ${torch_tps:-skipped: no torch in $python} tokens/s"

# (c)
sgemm=$("$work/sgemm_rate" "$threads" | sed -n 's/^sgemm_gflops //p')
echo "(c) bench/sgemm_rate $threads (OpenBLAS, n = 1536, best of 8)"
echo "    $sgemm GFLOP/s"

# (d)
p2() {
    sed -e 's/stages 1/stages 2/' -e "s/schedule paci/schedule $1/" -e 's/window 1/window 2/' \
        -e "s#\"\\.\\./examples/#\"$root/examples/#" bench/gpt6.paci > "$work/gpt6_p2_$1.paci"
    run_model "$work/gpt6_p2_$1.paci" "$p2_steps"
}
paci_out=$(p2 paci)
flush_out=$(p2 1f1b)
echo "(d) bench/gpt6.paci with stages 2, window 2, schedule paci | 1f1b; --steps $p2_steps; ./run --threads $threads"
echo "    paci: $(head -1 <<<"$paci_out")"
echo "          $(tail -1 <<<"$paci_out")"
echo "    1f1b: $(head -1 <<<"$flush_out")"
echo "          $(tail -1 <<<"$flush_out")"
echo

awk -v L="$L" -v C="$C" -v T="$T" -v V="$V" -v B="$B" -v pt="$pacic_tps" -v tt="$torch_tps" \
    -v sg="$sgemm" -v threads="$threads" -v ps="$(per_step "$paci_out")" -v fs="$(per_step "$flush_out")" \
    -v pb="$(busy "$paci_out")" -v fb="$(busy "$flush_out")" 'BEGIN {
    n = L * 12 * C * C + V * C
    step_flops = 6 * n * B * T + 12 * L * B * T * T * C
    gflops = step_flops * pt / (B * T) / 1e9
    printf "| measure | value |\n| --- | --- |\n"
    printf "| model | %d layers, width %d, context %d, vocab %d, micro-batch %d; N = %.2fM multiplying parameters |\n", L, C, T, V, B, n / 1e6
    printf "| FLOPs per step (6 N BT + 12 L B T^2 C) | %.1f GFLOP |\n", step_flops / 1e9
    printf "| pacic run, p = 1, %d threads | %.0f tokens/s (steps in the pipeline) |\n", threads, pt
    if (tt != "") {
        printf "| PyTorch eager, %d threads | %.0f tokens/s |\n", threads, tt
        printf "| pacic / PyTorch | %.2fx |\n", pt / tt
    }
    printf "| pacic achieved | %.1f GFLOP/s |\n", gflops
    printf "| sgemm rate, %d threads | %.1f GFLOP/s |\n", threads, sg
    printf "| achieved / sgemm | %.0f%% |\n", 100 * gflops / sg
    printf "| p = 2, window 2: PACI | %s s per step; busy %s |\n", ps, pb
    printf "| p = 2, window 2: 1F1B-flush | %s s per step; busy %s |\n", fs, fb
    if (ps > 0)
        printf "| 1F1B-flush / PACI time per step | %.2fx (theory 1.50x) |\n", fs / ps
}'
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (above nproc, other processes take" \
     "CPU from the stage threads, and an idle stage's core is no longer free time: the p = 2 ratio" \
     "then falls towards 1)"
