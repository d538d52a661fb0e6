#!/usr/bin/env bash
# The GPU check: one script for a machine with one NVIDIA GPU (sm_80 or newer) and the CUDA
# toolkit, meant to finish in under 8 minutes. Every section runs even when an earlier one
# failed (the GPU time is scarce: one failure must not throw away the other figures); the
# exit status is 1 if any failed. Every figure is printed with the command that produced it.
# With $OUT set, $OUT/figures.txt and $OUT/gpu_check.tgz (everything: logs, metrics,
# profiles, explain output) are written, so a device tool that returns few files gets all.
#
#   0. preflight: the tools the build needs; missing ones are taken from .gpu-deps/*.deb
#      when that folder was carried (tests/gpu/fetch-deps.sh makes it)
#   1. build (make) and tests/gpu/matmul_rate
#   2. the tiny example, 50 steps on the CPU and on the GPU from the same initial weights:
#      fp32 losses agree to 1e-5 relative over the first 5 steps and 1e-4 over all 50 (the
#      orders of summation differ: cuBLASLt's, and atomicAdd's in two backward kernels);
#      bf16 (tensor cores round the matrix inputs to 8 bits of mantissa) to 2e-2
#   3. GPT-2 Small (124M) at context 1024 as one stage, 6 steps: tokens/s between steps 2
#      and 6 and its share of the measured bf16 matmul rate (tests/gpu/matmul_rate.c)
#   4. the 8-stage GPT-2 Medium example on the one GPU, 2 steps under paci and 1f1b; its 8
#      stages need 110.9 GiB by `pacic --explain`'s totals, 113.2 with cuBLASLt's workspaces:
#      where the memory check refuses that, again at micro-batch 12 (84.9 GiB), and the
#      figure says which ran
#   5. measured per-stage instruction times and per-kernel times (CUDA events) written as a
#      `pacic --profile` file, read back; the kernels' share of each stage's compute printed
#
# GPU_CHECK_EMULATE=1 is a dry run of this script without a GPU (tests/e2e/gpu_check_dry.sh):
# every `pacic X.paci -o run` becomes tests/cuda_fake/build.sh (the same `run`, with the fake
# CUDA stack of the CPU beside it: the real GPU layer runs, the kernels under the emulator),
# each .paci is first shrunk (shape, micro-batch and window: see shrink; the stages and every
# other line kept, so every edit below is exercised), and matmul_rate is built but not run.
# It counts steps, never seconds: the tiny runs take 8 steps, GPT-2 Small 3, and the run
# limit is only a hang guard (GPU_CHECK_RUN_LIMIT, default 1800 s: a correct run, even on a
# slow, loaded machine, takes a small fraction of it). Its figures say nothing about a GPU;
# they show that the script's glue and the GPU layer's calls work.
#
# Written and reviewed without a GPU (none was available to this work): see docs/gpu.md.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
root=$(pwd)
cuda=${CUDA_HOME:-/usr/local/cuda}
emulate=${GPU_CHECK_EMULATE:-0}
# run_limit: seconds for any one command (on a GPU: the session's time is scarce). The dry
# run's speed is the CPU's, so there the limit only catches a hang, and its work is set in
# steps and layers: tiny_steps, tiny_layers and small_steps.
if [ "$emulate" = 1 ]; then
    run_limit=${GPU_CHECK_RUN_LIMIT:-1800} tiny_steps=8 tiny_layers=2 small_steps=3
else
    run_limit=${GPU_CHECK_RUN_LIMIT:-150} tiny_steps=50 tiny_layers=4 small_steps=6
fi
work=$(mktemp -d)
results=$work/results
mkdir -p "$results"
failures=0
finish() {
    if [ -n "${OUT:-}" ]; then
        mkdir -p "$OUT"
        cp "$results/figures.txt" "$OUT/" 2>/dev/null
        tar czf "$OUT/gpu_check.tgz" -C "$results" . 2>/dev/null
    fi
    rm -rf "$work"
}
trap finish EXIT
# fail WHAT: records a failure; the caller returns from its section.
fail() {
    echo "FAIL: $*" | tee -a "$results/figures.txt" >&2
    failures=$((failures + 1))
    return 1
}
# figure NAME VALUE COMMAND: prints and records one figure with its command.
figure() {
    printf '%-44s %s\n    (command: %s)\n' "$1" "$2" "$3" | tee -a "$results/figures.txt"
}
# timed COMMAND...: runs it under the run limit, echoing the command first (to the script's
# stdout, fd 3, not into the file the caller redirects the command's output to).
exec 3>&1
timed() {
    echo "+ $*" | tee -a "$results/commands.txt" >&3
    # run takes SIGTERM as "finish the step, checkpoint, exit", which a hung stage never
    # reaches (a peer wait lasts up to --peer-timeout, 600 s): SIGKILL 10 s later
    timeout -k 10 "$run_limit" "$@"
}
start=$(date +%s)
echo "GPU check, $(date -u +%Y-%m-%dT%H:%MZ), $(hostname), commit $(git rev-parse --short HEAD 2>/dev/null)" |
    tee "$results/figures.txt"
[ "$emulate" != 1 ] || echo "DRY RUN (GPU_CHECK_EMULATE=1): the fake CUDA stack on the CPU, tiny shapes; no GPU figures" |
    tee -a "$results/figures.txt"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
    | tee -a "$results/figures.txt"
figure "run limit per command (s)" "$run_limit" "GPU_CHECK_RUN_LIMIT (default 150; in the dry run 1800, a hang guard)"

# ---- 0. preflight ----------------------------------------------------------------------
missing() {
    local what=()
    for tool in cc make flex bison; do command -v "$tool" > /dev/null || what+=("$tool"); done
    [ "$emulate" != 1 ] || command -v g++ > /dev/null || command -v clang++ > /dev/null || what+=("g++")
    echo '#include <cblas.h>' | cc -E - > /dev/null 2>&1 || what+=("cblas.h")
    echo '#include <jansson.h>' | cc -E - > /dev/null 2>&1 || what+=("jansson.h")
    echo "${what[*]}"
}
preflight() {
    local lacking
    lacking=$(missing)
    if [ -n "$lacking" ] && ls .gpu-deps/*.deb > /dev/null 2>&1; then
        echo "preflight: missing $lacking; unpacking .gpu-deps into $work/deps"
        for deb in .gpu-deps/*.deb; do dpkg -x "$deb" "$work/deps"; done
        local lib=$work/deps/usr/lib/x86_64-linux-gnu
        export PATH=$work/deps/usr/bin:$PATH
        export CPATH=$work/deps/usr/include:$work/deps/usr/include/x86_64-linux-gnu/openblas-pthread
        export LIBRARY_PATH=$lib:$lib/openblas-pthread LD_LIBRARY_PATH=$lib:$lib/openblas-pthread:${LD_LIBRARY_PATH:-}
        export BISON_PKGDATADIR=$work/deps/usr/share/bison M4=$work/deps/usr/bin/m4
        lacking=$(missing)
    fi
    [ -z "$lacking" ] || fail "the build needs: $lacking (carry .gpu-deps: tests/gpu/fetch-deps.sh)"
    for f in include/cublasLt.h include/nvrtc.h lib64/libcublasLt.so lib64/libnvrtc.so; do
        [ -e "$cuda/$f" ] || fail "no $cuda/$f"
    done
}

# ---- 1. build --------------------------------------------------------------------------
build() {
    timed make -j"$(nproc)" > "$results/build.log" 2>&1 || { tail -30 "$results/build.log"; fail "make"; return; }
    [ -f build/lib/pacic/libpacirt_cuda.a ] || { fail "make built no libpacirt_cuda.a: no CUDA toolkit under $cuda"; return; }
    cc -std=c11 -O2 -I"$cuda/include" tests/gpu/matmul_rate.c -L"$cuda/lib64" -Wl,-rpath,"$cuda/lib64" \
        -lcublasLt -lcudart -o "$work/matmul_rate" || fail "cannot build tests/gpu/matmul_rate.c"
}

# shrink PACI LAYERS WINDOW: the model in PACI rewritten in place to LAYERS x width 32, 2
# heads, context 16, vocabulary 256, micro-batches of 1 and WINDOW. The dry run's shapes: the
# emulator takes about a millisecond for a launch of a few blocks, and more for every warp
# (the bias gradients' column sums) and every thread (AdamW) beyond.
shrink() {
    sed -i -E -e "/^[[:space:]]*(layers|width|heads|context|vocab)[[:space:]]/d" \
        -e "s/^(model[^{]*\{)/\1\n    layers $2\n    width 32\n    heads 2\n    context 16\n    vocab 256\n/" \
        -e "s/micro[[:space:]]+[0-9_]+/micro 1/" -e "s/window[[:space:]]+[0-9_]+/window $3/" "$1"
}
# build_run PACI DIR LAYERS WINDOW: pacic PACI -o DIR/run; in the dry run, PACI shrunk in place
# to LAYERS and WINDOW first (so a later `pacic PACI --profile` reads the model that ran) and
# the fake CUDA stack built for it in DIR/lib.
build_run() {
    if [ "$emulate" != 1 ]; then
        timed "$pacic" "$1" -o "$2/run"
        return
    fi
    shrink "$1" "$3" "$4"
    timed tests/cuda_fake/build.sh "$1" "$2" > "$2/fake_build.log" 2>&1 || { tail -5 "$2/fake_build.log"; return 1; }
}
# fake_env: in the dry run, the fake CUDA stack of the current folder (a section's run folder,
# in its subshell) ahead of run's RUNPATH; only there, as NVRTC in pacic would load it too.
fake_env() {
    if [ "$emulate" = 1 ]; then export LD_LIBRARY_PATH=$PWD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; fi
}

# ---- 2. CPU vs GPU on the tiny example ---------------------------------------------------
# compare_losses A B FIRST TOLERANCE: the largest relative difference of two metrics files'
# losses over their first FIRST steps; fails beyond TOLERANCE.
compare_losses() {
    paste <(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$1" | head -"$3") \
          <(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$2" | head -"$3") |
        awk -v tol="$4" '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > worst) worst = d; n++ }
                         END { printf "%d steps, max relative difference %.3g\n", n, worst;
                               exit (n < 1 || worst > tol) }'
}
tiny() {
    local precision=$1 dir=$work/tiny_$1 verdict checks
    mkdir -p "$dir"
    sed -E -e "s|^([[:space:]]*)steps[[:space:]]+[0-9_]+|\1steps $tiny_steps|" -e "/^[[:space:]]*precision /d" \
           -e "s|^train[[:space:]]*\{|train {\n    precision $precision|" \
           -e "s|\"data/|\"$root/examples/data/|g" examples/tiny.paci > "$dir/tiny.paci"
    build_run "$dir/tiny.paci" "$dir" "$tiny_layers" 2 || { fail "pacic tiny ($precision)"; return; }
    (cd "$dir" && fake_env && timed ./run --device cpu --quiet --metrics cpu.jsonl) || { fail "tiny $precision on the CPU"; return; }
    (cd "$dir" && fake_env && timed ./run --device cuda --quiet --metrics gpu.jsonl > gpu.txt 2>&1) ||
        { tail -5 "$dir/gpu.txt"; fail "tiny $precision on the GPU"; return; }
    cp "$dir/cpu.jsonl" "$results/tiny_${precision}_cpu.jsonl"
    cp "$dir/gpu.jsonl" "$results/tiny_${precision}_gpu.jsonl"
    if [ "$precision" = fp32 ]; then checks="5 1e-5 $tiny_steps 1e-4"; else checks="$tiny_steps 2e-2"; fi
    # shellcheck disable=SC2086
    set -- $checks
    while [ $# -ge 2 ]; do
        verdict=$(compare_losses "$dir/cpu.jsonl" "$dir/gpu.jsonl" "$1" "$2") ||
            fail "tiny $precision: CPU and GPU losses differ beyond $2: $verdict"
        figure "tiny $precision CPU vs GPU, $1 steps (tol $2)" "$verdict" "./run --device cpu|cuda (tiny.paci, $tiny_steps steps)"
        shift 2
    done
}

# ---- 3. GPT-2 Small at context 1024, one stage -------------------------------------------
small() {
    local rate dir=$work/small tokps share
    if [ "$emulate" = 1 ]; then
        rate="n/a (emulated)"
    else
        rate=$("$work/matmul_rate" | sed -n 's/^bf16_matmul_tflops //p')
        [ -n "$rate" ] || { fail "matmul_rate"; return; }
    fi
    figure "measured bf16 matmul rate (TFLOP/s)" "$rate" "tests/gpu/matmul_rate 8192 (random operands)"
    mkdir -p "$dir"
    # One stage, bf16, the tiny corpus (vocabulary 50257 holds every byte token), 6 steps (3 in the dry run).
    sed -E -e "s|stages[[:space:]]+[0-9]+|stages 1|" -e "s|^([[:space:]]*)steps[[:space:]]+[0-9_]+|\1steps $small_steps|" \
           -e "s|\"[^\"]*owt_train.bin\"|\"$root/examples/data/tiny_train.bin\"|" \
           -e "s|\"[^\"]*owt_val.bin\"|\"$root/examples/data/tiny_val.bin\"|" examples/gpt2-small.paci > "$dir/small.paci"
    build_run "$dir/small.paci" "$dir" 2 2 || { fail "pacic gpt2-small"; return; }
    (cd "$dir" && fake_env && timed ./run --device cuda --no-checkpoint --metrics m.jsonl --profile-out small.profile > out.txt 2>&1)
    local rc=$?
    cp "$dir/out.txt" "$results/small_out.txt" 2>/dev/null
    cp "$dir/m.jsonl" "$results/small.jsonl" 2>/dev/null
    cp "$dir/small.profile" "$results/" 2>/dev/null
    [ $rc -eq 0 ] || { tail -5 "$dir/out.txt"; fail "GPT-2 Small on the GPU (exit $rc)"; return; }
    # tokens_per_s is cumulative from the start; the rate between steps 2 and the last leaves out
    # the first step (module loads, cuBLASLt heuristics): t_k = k * tokens / tps_k.
    tokps=$(sed -n 's/.*"step": \([0-9]*\),.*"tokens_per_s": \([0-9.e+]*\).*/\1 \2/p' "$dir/m.jsonl" |
        awk -v last="$small_steps" '$1 == 2 { k1 = $1; t1 = $2 } $1 == last { k2 = $1; t2 = $2 }
             END { if (t1 > 0 && t2 > 0) printf "%.0f", 65536 * (k2 - k1) / (k2 * 65536 / t2 - k1 * 65536 / t1) }')
    [ -n "$tokps" ] || { fail "no tokens/s for steps 2..$small_steps in GPT-2 Small's metrics"; return; }
    # 6 N FLOPs per token for N parameters, plus attention's 6 L T C (forward and backward).
    if [ "$emulate" = 1 ]; then
        share=$rate
    else
        share=$(awk -v t="$tokps" -v r="$rate" 'BEGIN { n = 124e6; f = 6 * n + 6 * 12 * 1024 * 768;
                                                      printf "%.1f%%", 100 * t * f / (r * 1e12) }')
    fi
    figure "GPT-2 Small 1 stage tokens/s (steps 2-$small_steps)" "$tokps" "./run --device cuda (examples/gpt2-small.paci, stages 1)"
    # bf16 asks cuBLASLt for GELU's gradient in its epilogue; the kernel runs only where it has none.
    local gelu
    gelu=$(awk '$1 == "op" && $5 == "gelu_backward" { n += $7 }
                END { print (n == 0 ? "fused into cuBLASLt epilogues" : "apart: " n " launches") }' \
           "$dir/small.profile")
    figure "GPT-2 Small GELU gradient" "$gelu" "op lines of small.profile (gelu_backward calls)"
    figure "GPT-2 Small share of measured bf16 rate" "$share" "6N+6LTC FLOPs/token x tokens/s / matmul rate"
}

# ---- 4, 5. GPT-2 Medium, 8 stages on one GPU; its profile read back ----------------------
medium() {
    local schedule=$1 dir=$work/medium_$1 micro
    mkdir -p "$dir"
    sed -E -e "s|schedule[[:space:]]+[a-z0-9]+|schedule $schedule|" -e "s|batches[[:space:]]+[0-9]+|batches 1|" \
           -e "s|\"[^\"]*owt_train.bin\"|\"$root/examples/data/tiny_train.bin\"|" \
           -e "s|\"[^\"]*owt_val.bin\"|\"$root/examples/data/tiny_val.bin\"|" examples/gpt2-medium-8.paci > "$dir/m.paci"
    # the example's micro-batch; where the memory check refuses it, the shortfall and micro 12
    local rc
    for micro in 16 12; do
        [ "$micro" = 16 ] || sed -i -E "s|micro[[:space:]]+[0-9_]+|micro $micro|" "$dir/m.paci"
        build_run "$dir/m.paci" "$dir" 8 2 || { fail "pacic gpt2-medium-8 at micro $micro ($schedule)"; return; }
        (cd "$dir" && fake_env && timed ./run --device cuda --steps 2 --no-checkpoint --metrics m.jsonl --profile-out medium.profile > out.txt 2>&1)
        rc=$?
        [ $rc -ne 0 ] && grep -q "short by" "$dir/out.txt" || break
        grep -m1 "short by" "$dir/out.txt" | tee -a "$results/figures.txt"
    done
    cp "$dir/out.txt" "$results/medium_${schedule}_out.txt" 2>/dev/null
    cp "$dir/m.jsonl" "$results/medium_${schedule}.jsonl" 2>/dev/null
    [ $rc -eq 0 ] || { tail -5 "$dir/out.txt"; fail "GPT-2 Medium 8 stages $schedule (exit $rc)"; return; }
    figure "GPT-2 Medium 8 stages $schedule" "$(grep -o '[0-9.]* tokens/s' "$dir/out.txt" | tail -1)" \
        "./run --device cuda --steps 2 (gpt2-medium-8 at micro $micro, schedule $schedule)"
    cp "$dir/medium.profile" "$results/medium_$schedule.profile"
    timed "$pacic" "$dir/m.paci" --profile "$dir/medium.profile" --explain > "$dir/explain.txt" ||
        { fail "pacic --profile cannot read the measured profile"; return; }
    cp "$dir/explain.txt" "$results/explain_$schedule.txt"
    grep -q "^measured ops" "$dir/explain.txt" || { fail "the GPU profile has no per-kernel times"; return; }
    sed -n '/^measured ops/,$p' "$dir/explain.txt" | head -40
}

pacic=$root/build/bin/pacic
preflight
if build; then
    tiny fp32
    tiny bf16
    small
    medium paci
    medium 1f1b
fi
figure "total check time (s)" "$(( $(date +%s) - start ))" "tests/gpu/check.sh"
if [ "$failures" -gt 0 ]; then
    echo "GPU check: $failures failure(s)" | tee -a "$results/figures.txt"
    exit 1
fi
echo "GPU check passed" | tee -a "$results/figures.txt"
