#!/usr/bin/env bash
# The GPU check: one script for a machine with one NVIDIA GPU (sm_80 or newer) and the CUDA
# toolkit, meant to finish in under 8 minutes. It stops at the first failure. Every figure
# is printed with the command that produced it; with $OUT set, results are copied there.
#
#   1. build (make) and the CUDA unit tests' prerequisites
#   2. the tiny example, 50 steps on the CPU and on the GPU from the same initial weights:
#      fp32 losses agree to 1e-5 relative; bf16 (tensor cores round the matrix inputs to
#      8 bits of mantissa) to 2e-2 relative
#   3. GPT-2 Small (124M) at context 1024 as one stage: tokens/s and its share of the
#      measured bf16 matmul rate (tests/gpu/matmul_rate.c, cuBLASLt)
#   4. the 8-stage GPT-2 Medium example on the one GPU, a few steps under paci and 1f1b
#   5. measured per-stage instruction times and per-kernel times (CUDA events) written as a
#      `pacic --profile` file, read back; the kernels' share of each stage's compute printed
#
# Written and reviewed without a GPU (none was available to this work): see docs/gpu.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
work=$(mktemp -d)
results=$work/results
mkdir -p "$results"
trap 'status=$?; [ -n "${OUT:-}" ] && cp -r "$results"/. "$OUT"/ 2>/dev/null; rm -rf "$work"; exit $status' EXIT
fail() { echo "GPU CHECK FAILED: $*" >&2; exit 1; }
# figure NAME VALUE COMMAND: prints and records one figure with its command.
figure() {
    printf '%-40s %s\n    (command: %s)\n' "$1" "$2" "$3" | tee -a "$results/figures.txt"
}
# timed COMMAND...: runs it, echoing the command first.
timed() {
    echo "+ $*" | tee -a "$results/commands.txt"
    "$@"
}
start=$(date +%s)
echo "GPU check, $(date -u +%Y-%m-%dT%H:%MZ), $(hostname)" | tee "$results/figures.txt"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
    | tee -a "$results/figures.txt"

# ---- 1. build ------------------------------------------------------------------------
timed make -j"$(nproc)" > "$results/build.log" 2>&1 || { tail -30 "$results/build.log"; fail "make"; }
[ -f build/lib/pacic/libpacirt_cuda.a ] || fail "make built no libpacirt_cuda.a: no CUDA toolkit under $cuda"
pacic=$root/build/bin/pacic
cc -std=c11 -O2 -I"$cuda/include" tests/gpu/matmul_rate.c -L"$cuda/lib64" -Wl,-rpath,"$cuda/lib64" \
    -lcublasLt -lcudart -o "$work/matmul_rate" || fail "cannot build tests/gpu/matmul_rate.c"

# ---- 2. CPU vs GPU on the tiny example -------------------------------------------------
# compare_losses A B TOLERANCE: the largest relative difference of two metrics files' losses.
compare_losses() {
    paste <(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1") <(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$2") |
        awk -v tol="$3" '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > worst) worst = d; n++ }
                         END { printf "%d steps, max relative difference %.3g\n", n, worst;
                               exit (n < 1 || worst > tol) }'
}
for precision in fp32 bf16; do
    dir=$work/tiny_$precision
    mkdir -p "$dir"
    sed -E "s|^([[:space:]]*)steps[[:space:]]+[0-9_]+|\1steps 50|" examples/tiny.paci > "$dir/tiny.paci"
    grep -q "precision" "$dir/tiny.paci" && sed -i -E "s|precision[[:space:]]+[a-z0-9]+|precision $precision|" "$dir/tiny.paci" \
        || printf 'hardware { precision %s }\n' "$precision" >> "$dir/tiny.paci"
    sed -i -E "s|\"data/|\"$root/examples/data/|g" "$dir/tiny.paci"
    timed "$pacic" "$dir/tiny.paci" -o "$dir/run" || fail "pacic tiny ($precision)"
    steps=$(sed -n 's/^ *steps \([0-9]*\).*/\1/p' "$dir/tiny.paci" | head -1)
    (cd "$dir" && timed ./run --device cpu --quiet --steps "$steps" --metrics cpu.jsonl) || fail "tiny on the CPU"
    (cd "$dir" && timed ./run --device cuda --quiet --steps "$steps" --metrics gpu.jsonl) || fail "tiny on the GPU"
    tolerance=$([ "$precision" = fp32 ] && echo 1e-5 || echo 2e-2)
    verdict=$(compare_losses "$dir/cpu.jsonl" "$dir/gpu.jsonl" "$tolerance") ||
        fail "tiny $precision: CPU and GPU losses differ beyond $tolerance: $verdict"
    figure "tiny $precision CPU vs GPU (tol $tolerance)" "$verdict" "./run --device cpu|cuda --steps $steps"
    cp "$dir"/*.jsonl "$results/" 2>/dev/null || true
done

# ---- 3. GPT-2 Small at context 1024, one stage ----------------------------------------
rate=$("$work/matmul_rate" | sed -n 's/^bf16_matmul_tflops //p') || fail "matmul_rate"
figure "measured bf16 matmul rate (TFLOP/s)" "$rate" "tests/gpu/matmul_rate 8192"
small=$work/small
mkdir -p "$small"
# One stage, bf16, the tiny corpus (vocabulary 50257 holds every byte token), 20 steps.
sed -E -e "s|stages[[:space:]]+[0-9]+|stages 1|" -e "s|^([[:space:]]*)steps[[:space:]]+[0-9_]+|\1steps 20|" \
       -e "s|\"[^\"]*owt_train.bin\"|\"$root/examples/data/tiny_train.bin\"|" \
       -e "s|\"[^\"]*owt_val.bin\"|\"$root/examples/data/tiny_val.bin\"|" examples/gpt2-small.paci > "$small/small.paci"
timed "$pacic" "$small/small.paci" -o "$small/run" || fail "pacic gpt2-small"
(cd "$small" && timed ./run --device cuda --metrics m.jsonl --profile-out small.profile > out.txt) ||
    { tail -5 "$small/out.txt"; fail "GPT-2 Small on the GPU"; }
tokps=$(sed -n 's/.*"tokens_per_s": \([0-9.e+]*\).*/\1/p' "$small/m.jsonl" | tail -5 | sort -g | sed -n 3p)
[ -n "$tokps" ] || tokps=$(grep -o '[0-9.]* tok/s' "$small/out.txt" | tail -1 | cut -d' ' -f1)
[ -n "$tokps" ] || fail "no tokens/s in GPT-2 Small's output"
# 6 N FLOPs per token for N parameters, plus attention's 6 L T C (forward and backward).
share=$(awk -v t="$tokps" -v r="$rate" 'BEGIN { n = 124e6; f = 6 * n + 6 * 12 * 1024 * 768;
                                              printf "%.1f%%", 100 * t * f / (r * 1e12) }')
figure "GPT-2 Small 1 stage tokens/s" "$tokps" "./run --device cuda (examples/gpt2-small.paci, stages 1)"
figure "GPT-2 Small share of measured bf16 rate" "$share" "6N+6LTC FLOPs/token x tokens/s / matmul rate"
cp "$small/small.profile" "$small/m.jsonl" "$results/" 2>/dev/null || true

# ---- 4. GPT-2 Medium, 8 stages on one GPU, paci and 1f1b -------------------------------
for schedule in paci 1f1b; do
    dir=$work/medium_$schedule
    mkdir -p "$dir"
    sed -E -e "s|schedule[[:space:]]+[a-z0-9]+|schedule $schedule|" \
           -e "s|\"[^\"]*owt_train.bin\"|\"$root/examples/data/tiny_train.bin\"|" \
           -e "s|\"[^\"]*owt_val.bin\"|\"$root/examples/data/tiny_val.bin\"|" examples/gpt2-medium-8.paci > "$dir/m.paci"
    timed "$pacic" "$dir/m.paci" -o "$dir/run" || fail "pacic gpt2-medium-8 ($schedule)"
    segment=$("$pacic" "$dir/m.paci" --explain 2>/dev/null | sed -n 's/.*drains every \([0-9]*\) step.*/\1/p' | head -1)
    (cd "$dir" && timed ./run --device cuda --steps "${segment:-1}" --profile-out medium.profile > out.txt) ||
        { tail -5 "$dir/out.txt"; fail "GPT-2 Medium 8 stages ($schedule)"; }
    figure "GPT-2 Medium 8 stages $schedule" "$(grep -o '[0-9.]* tok/s' "$dir/out.txt" | tail -1)" \
        "./run --device cuda --steps ${segment:-1} (gpt2-medium-8, schedule $schedule)"
    # ---- 5. the profile reads back into the cost model
    timed "$pacic" "$dir/m.paci" --profile "$dir/medium.profile" --explain > "$dir/explain.txt" ||
        fail "pacic --profile cannot read the measured profile"
    grep -q "^measured ops" "$dir/explain.txt" || fail "the GPU profile has no per-kernel times"
    sed -n '/^measured ops/,$p' "$dir/explain.txt"
    cp "$dir/medium.profile" "$results/medium_$schedule.profile"
    cp "$dir/explain.txt" "$results/explain_$schedule.txt"
done
figure "total check time (s)" "$(( $(date +%s) - start ))" "tests/gpu/check.sh"
echo "GPU check passed"
