#!/usr/bin/env bash
# The GPU check: one script for a machine with one NVIDIA GPU (sm_80 or newer) and the CUDA
# toolkit, made for a scarce session (15 minutes of device time, the machine's start and the
# transfers included) that must not come back empty:
#
#   - saving: every figure is appended to $OUT/figures.txt the moment it is measured, and
#     $OUT/gpu_check.tgz (logs, metrics, profiles, --explain and --emit costs outputs) is
#     rewritten after every section, so a session killed at any point keeps what was done;
#     nothing waits for an exit trap. nvidia-smi samples memory, utilisation, clocks and
#     power every second into $OUT/nvidia_smi.csv. Without $OUT everything stays in a
#     scratch folder that is printed.
#   - time: a global deadline (GPU_CHECK_DEADLINE, default 470 s from the start: the check
#     fits one 540 s device call with 70 s to spare) and a budget per section; a section runs
#     under `timeout` for the smaller of its budget and the time left, and one that cannot
#     start before the deadline is recorded as skipped. pacic compiles the CUDA units for the
#     device's architecture only (PACIC_CUDA_ARCHS, from nvidia-smi's compute capability).
#   - no gates: each section runs whatever happened to the ones before (a failed matmul_rate
#     makes the MFU against it n/a, a failed build fails the sections that need it, each on
#     its own line); the exit status is 1 if any failed or was skipped.
#
# Sections, in this order (correctness first, then speed), with their budgets on a GPU
# (seconds):
#   preflight  one line each: GPU, driver, nvcc, NVRTC, cuBLASLt, nccl.h, libnccl, cuDNN and
#              the profilers, where found; the build's tools, taken from .gpu-deps/*.deb when
#              that folder was carried (tests/gpu/fetch-deps.sh makes it)
#   build 120  make; tests/gpu/matmul_rate.c; NCCL loaded with dlopen the way run loads it
#              (tests/e2e/nccl_load.c): its version, or why not (nccl.h is optional: the
#              runtime's transport is behind __has_include)
#   tiny_fp32 45, tiny_bf16 45
#              the tiny example with the default GPU attention (flash; its `attention matmul`
#              line removed), on the CPU and the GPU from the same initial weights: the loss
#              at step 1 within 1e-5 (fp32) or 5e-3 (bf16) relative, then the trend over all
#              20 steps within 1e-4 or 2e-2; fp32's step-1 gradient norm within 1e-4. A GPU
#              run that fails runs once more under compute-sanitizer's memcheck, to name the
#              kernel
#   sanitizer 60
#              compute-sanitizer on the tiny bf16 program: memcheck over 2 steps (out-of-bounds
#              and misaligned accesses, on the real hardware), then racecheck on the attention
#              kernels over 1 step (shared-memory hazards between a block's warps)
#   matmul 20  the measured bf16 matmul rate (8192^3, random operands, after 0.5 s of warm-up)
#   small 90   GPT-2 Small at context 1024 as one stage, 6 steps: losses finite, step 1 near
#              ln V, falling; tokens/s between steps 2 and 6, and MFU against 989 TFLOP/s and
#              against the measured matmul rate, from that run; then a profiled run of 2 steps
#              (run --profile-out waits after every op, so its rate is no headline): the top
#              kernels, predicted beside measured per kernel (pacic --emit costs)
#   medium_paci 90, medium_1f1b 80
#              the 8-stage GPT-2 Medium example on the one GPU, 4 steps (warmup 1 step in the
#              copy, so the loss can fall): losses as for Small; tokens/s between steps 2 and
#              4, and MFU; where the memory check refuses micro-batch 16 (it prints the
#              shortfall), again at micro-batch 12; then a profiled run of 2 steps: predicted
#              beside measured, and --explain read from it
#   ncu 40     Nsight Compute on GPT-2 Small's most expensive kernel, where ncu runs
#
# The commit: `git rev-parse` where .git came along, else the file .gpu-commit (write it
# before sending the tree: git rev-parse HEAD > .gpu-commit).
#
# GPU_CHECK_EMULATE=1 (or `check.sh --dry`) is a dry run of this script without a GPU (tests/e2e/gpu_check_dry.sh):
# every `pacic X.paci -o run` becomes tests/cuda_fake/build.sh (the same `run`, with the fake
# CUDA stack of the CPU beside it: the real GPU layer runs, the kernels under the emulator),
# each .paci is first shrunk (shape, micro-batch and window: see shrink; the stages and every
# other line kept, so every edit below is exercised), matmul_rate is built but not run, and
# there is no nvidia-smi or ncu. It counts steps, never seconds: the tiny runs take 8 steps,
# GPT-2 Small 3, Medium 3, the profiled runs 1; its deadline and budgets are hang guards only (GPU_CHECK_RUN_LIMIT,
# default 1800 s per section, and 4 times that in all). Its figures say nothing about a GPU;
# they show that the script's glue and the GPU layer's calls work.
#
# Test hooks (the dry run's own test uses them): GPU_CHECK_PLANT_FAIL=SECTION makes that
# section fail at its start, GPU_CHECK_PLANT_HANG=SECTION makes it hang there (until its
# budget stops it); GPU_CHECK_PLANT_KILL_AFTER=SECTION kills this script with SIGKILL once
# that section's results are saved, as a device tool's hard limit would.
#
# Written and reviewed without a GPU (none was available to this work): see docs/gpu.md.
set -uo pipefail
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/../.." || exit 1
root=$(pwd)

# ---- helpers every section shares (a section runs as `check.sh --section NAME`) -----------

# figure NAME VALUE COMMAND: prints one figure with its command and appends it to the figures.
figure() {
    printf '%-46s %s\n    (command: %s)\n' "$1" "$2" "$3" | tee -a "$figures"
}
# fail WHAT: records a failure (figures and the failure list); the caller returns.
fail() {
    echo "FAIL: $*" | tee -a "$figures" >&2
    echo "$*" >> "$results/failures.txt"
    return 1
}
# timed COMMAND...: runs it under the run limit, echoing the command first. --foreground keeps
# it in the section's process group, so the section's own timeout stops it too.
timed() {
    echo "+ $*" | tee -a "$results/commands.txt" >&2
    # run takes SIGTERM as "finish the step, checkpoint, exit", which a hung stage never
    # reaches (a peer wait lasts up to --peer-timeout, 600 s): SIGKILL 10 s later
    timeout --foreground -k 10 "$run_limit" "$@"
}
planted() {
    if [ "${GPU_CHECK_PLANT_HANG:-}" = "$1" ]; then
        echo "$1: planted hang (GPU_CHECK_PLANT_HANG)" >&2
        sleep 987654 # a number the dry run's test looks for among the processes
    fi
    if [ "${GPU_CHECK_PLANT_FAIL:-}" = "$1" ]; then
        fail "$1: planted failure (GPU_CHECK_PLANT_FAIL)"
        return 0
    fi
    return 1
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
    [ -x "$pacic" ] || { echo "no $pacic: the build failed" >&2; return 1; }
    if [ "$emulate" != 1 ]; then
        timed "$pacic" "$1" -o "$2/run"
        return
    fi
    shrink "$1" "$3" "$4"
    timed tests/cuda_fake/build.sh "$1" "$2" > "$2/fake_build.log" 2>&1 || { tail -5 "$2/fake_build.log"; return 1; }
}
# dry_lr PACI: in the dry run, a peak lr of 1e-1 at batch 256 (8.8e-3 at the shrunk batch of
# 2), so that the loss falls within its 2 or 3 steps as the GPU's larger models' do at theirs.
dry_lr() {
    [ "$emulate" != 1 ] || sed -i -E "s/(^|[[:space:]])lr[[:space:]]+[0-9.e-]+/\1lr 1e-1/" "$1"
}
# fake_env: in the dry run, the fake CUDA stack of the current folder (a section's run folder,
# in its subshell) ahead of run's RUNPATH; only there, as NVRTC in pacic would load it too.
fake_env() {
    if [ "$emulate" = 1 ]; then export LD_LIBRARY_PATH=$PWD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; fi
}
losses_of() {
    sed -n 's/.*"loss": \([^,}]*\)[,}].*/\1/p' "$1"
}
# check_losses NAME METRICS VOCAB: every loss finite, step 1 within 10% of ln V (a fresh
# model predicts about uniformly), and the last below the first.
check_losses() {
    local verdict
    verdict=$(losses_of "$2" | awk -v v="$3" '
        { n++; if ($1 !~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/) bad++; if (n == 1) first = $1; last = $1 }
        END { lnv = log(v); if (n == 0) { print "no losses"; exit 1 }
              printf "%d steps, first %.4f (ln V %.4f), last %.4f", n, first, lnv, last
              if (bad) { printf "; %d not finite", bad; exit 1 }
              d = (first - lnv) / lnv; if (d < 0) d = -d
              if (d > 0.1) { printf "; step 1 is not near ln V"; exit 1 }
              if (n < 2 || last >= first) { printf "; not falling"; exit 1 } }')
    local status=$?
    figure "$1 losses" "$verdict" "metrics of $1 (finite, step 1 within 10% of ln V, falling)"
    [ $status -eq 0 ] || fail "$1 losses: $verdict"
}
# tokens_per_s METRICS FIRST LAST TOKENS: the rate between steps FIRST and LAST (metrics'
# tokens_per_s is cumulative from the start: t_k = k * tokens / tps_k).
tokens_per_s() {
    sed -n 's/.*"step": \([0-9]*\),.*"tokens_per_s": \([0-9.e+]*\).*/\1 \2/p' "$1" |
        awk -v a="$2" -v b="$3" -v n="$4" '$1 == a { t1 = $2 } $1 == b { t2 = $2 }
             END { if (t1 > 0 && t2 > 0 && b > a) printf "%.0f", n * (b - a) / (b * n / t2 - a * n / t1) }'
}
# profiled NAME DIR [run flags...]: DIR's run again for $profiled_steps steps with run
# --profile-out into NAME.profile (it waits for the GPU after every op: per-kernel times, and
# no rate worth quoting), its output into NAME_profiled_out.txt.
profiled() {
    local name=$1 dir=$2 rc
    shift 2
    (cd "$dir" && fake_env && timed ./run --device cuda --no-checkpoint --steps "$profiled_steps" "$@" \
        --profile-out "$results/$name.profile" > "$results/${name}_profiled_out.txt" 2>&1)
    rc=$?
    [ $rc -eq 0 ] || { tail -5 "$results/${name}_profiled_out.txt"; fail "$name: the profiled run (exit $rc)"; }
}
# mfu NAME TOKPS FLOPS_PER_TOKEN: MFU against 989 TFLOP/s and against the measured matmul rate.
mfu() {
    local rate share989 shared
    rate=$(cat "$work/matmul_rate.txt" 2> /dev/null)
    share989=$(awk -v t="$2" -v f="$3" 'BEGIN { printf "%.1f%%", 100 * t * f / 989e12 }')
    figure "$1 MFU (989 TFLOP/s)" "$share989" "tokens/s x $3 FLOPs/token (pacic --emit costs) / 989e12"
    if [[ "$rate" =~ ^[0-9.]+$ ]]; then
        shared=$(awk -v t="$2" -v f="$3" -v r="$rate" 'BEGIN { printf "%.1f%%", 100 * t * f / (r * 1e12) }')
    else
        shared="n/a (no measured matmul rate)"
    fi
    figure "$1 MFU (measured matmul rate)" "$shared" "tokens/s x FLOPs/token / tests/gpu/matmul_rate"
}
# costs NAME PACI PROFILE: pacic's prediction beside the profile's measurement, per kernel
# (summed over a stage's ops of one name, per step), into NAME_costs.txt; the top 12 printed.
costs() {
    local out=$results/$1_costs.txt
    timed "$pacic" "$2" --profile "$3" --emit costs > "$results/$1_emit_costs.txt" 2> /dev/null ||
        { fail "$1: pacic --profile --emit costs"; return 1; }
    # op STAGE INDEX SECTION KERNEL calls N flops F bytes B predicted P BOUND measured M "what"
    { printf '%-44s %12s %12s %8s\n' "stage section kernel" "predicted ms" "measured ms" "ratio"
      awk '$1 == "op" && $13 != "-" && $16 != "-" {
               key = $2 " " $4 " " $5; p[key] += $7 * $13; m[key] += $7 * $16 }
           END { for (k in m) printf "%-44s %12.4g %12.4g %8.2f\n", k, p[k] * 1e3, m[k] * 1e3,
                                     (p[k] > 0 ? m[k] / p[k] : 0) }' "$results/$1_emit_costs.txt" |
          sort -k5,5gr; } > "$out"
    figure "$1 predicted vs measured, per step (profiled run)" "$(awk 'NR > 1 { p += $(NF-2); m += $(NF-1) } END {
        printf "%.4g ms predicted, %.4g ms measured (%d kernels)", p, m, NR - 1 }' "$out")" \
        "pacic $(basename "$2") --profile $(basename "$3") --emit costs"
    head -13 "$out" | tee -a "$figures"
}

# ---- sections -------------------------------------------------------------------------------

section_build() {
    planted build && return 1
    timed make -j"$(nproc)" > "$results/build.log" 2>&1 || { tail -30 "$results/build.log"; fail "make"; return 1; }
    [ -f build/lib/pacic/libpacirt_cuda.a ] || { fail "make built no libpacirt_cuda.a: no CUDA toolkit under $cuda"; return 1; }
    cc -std=c11 -O2 -I"$cuda/include" tests/gpu/matmul_rate.c -L"$cuda/lib64" -Wl,-rpath,"$cuda/lib64" \
        -lcublasLt -lcudart -o "$work/matmul_rate" || fail "cannot build tests/gpu/matmul_rate.c"
    # NCCL as run loads it: dlopen, never linked
    local nccl
    # shellcheck disable=SC2046
    if cc -std=c11 -D_GNU_SOURCE -Iruntime -I"$cuda/include" tests/e2e/nccl_load.c build/lib/pacic/libpacirt_cuda.a \
          build/lib/pacic/libpacirt.a $(cat build/lib/pacic/cuda_ldflags) -lpcre2-8 -ljansson -lopenblas -lpthread -lm \
          -o "$work/nccl_load" 2>> "$results/build.log"; then
        nccl=$("$work/nccl_load" - 2>&1)
    else
        nccl="n/a (tests/e2e/nccl_load.c does not build: build.log)"
    fi
    figure "NCCL through dlopen" "$nccl" "tests/e2e/nccl_load.c (run's loader)"
}

section_matmul() {
    planted matmul && return 1
    local rate
    if [ "$emulate" = 1 ]; then
        rate="n/a (emulated)"
    elif [ -x "$work/matmul_rate" ]; then
        rate=$(timed "$work/matmul_rate" 2>> "$results/matmul.log" | sed -n 's/^bf16_matmul_tflops //p')
        [ -n "$rate" ] && echo "$rate" > "$work/matmul_rate.txt" || { rate="n/a (matmul_rate failed)"; fail "matmul_rate"; }
    else
        rate="n/a (not built)"
        fail "matmul_rate was not built"
    fi
    figure "measured bf16 matmul rate (TFLOP/s)" "$rate" "tests/gpu/matmul_rate 8192 (random operands)"
}

small_tokens=$((64 * 1024)) # examples/gpt2-small.paci: global batch 64 sequences of 1024
section_small() {
    planted small && return 1
    local dir=$work/small tokps
    mkdir -p "$dir"
    # One stage, bf16, the tiny corpus (vocabulary 50257 holds every byte token).
    sed -E -e "s|stages[[:space:]]+[0-9]+|stages 1|" -e "s|^([[:space:]]*)steps[[:space:]]+[0-9_]+|\1steps $small_steps|" \
           -e "s|\"[^\"]*owt_train.bin\"|\"$root/examples/data/tiny_train.bin\"|" \
           -e "s|\"[^\"]*owt_val.bin\"|\"$root/examples/data/tiny_val.bin\"|" examples/gpt2-small.paci > "$dir/small.paci"
    dry_lr "$dir/small.paci"
    build_run "$dir/small.paci" "$dir" 2 2 || { fail "pacic gpt2-small"; return 1; }
    cp "$dir/small.paci" "$results/small.paci"
    (cd "$dir" && fake_env && timed ./run --device cuda --no-checkpoint --metrics "$results/small.jsonl" \
        > "$results/small_out.txt" 2>&1)
    local rc=$?
    [ $rc -eq 0 ] || { tail -5 "$results/small_out.txt"; fail "GPT-2 Small on the GPU (exit $rc)"; return 1; }
    local vocab=50257
    [ "$emulate" != 1 ] || vocab=256
    check_losses "GPT-2 Small" "$results/small.jsonl" "$vocab"
    [ "$emulate" != 1 ] || small_tokens=32 # shrunk: micro 1 x window 2 sequences of 16 tokens
    tokps=$(tokens_per_s "$results/small.jsonl" 2 "$small_steps" "$small_tokens")
    [ -n "$tokps" ] || { fail "no tokens/s for steps 2..$small_steps in GPT-2 Small's metrics"; return 1; }
    figure "GPT-2 Small 1 stage tokens/s (steps 2-$small_steps)" "$tokps" "./run --device cuda (examples/gpt2-small.paci, stages 1)"
    profiled small "$dir" || return 1
    costs small "$dir/small.paci" "$results/small.profile"
    local per_token
    per_token=$(sed -n 's/^predicted .* model_flops_per_token \([0-9.e+]*\)$/\1/p' "$results/small_emit_costs.txt")
    [ -z "$per_token" ] || mfu "GPT-2 Small" "$tokps" "$per_token"
    # bf16 asks cuBLASLt for GELU's gradient in its epilogue; the kernel runs only where it has none.
    local gelu
    gelu=$(awk '$1 == "op" && $5 == "gelu_backward" { n += $7 }
                END { print (n == 0 ? "fused into cuBLASLt epilogues" : "apart: " n " launches") }' \
           "$results/small.profile")
    figure "GPT-2 Small GELU gradient" "$gelu" "op lines of small.profile (gelu_backward calls)"
    # op STAGE INDEX SECTION NAME calls N total T mean M "what"
    figure "GPT-2 Small top kernels (ms per call, share; profiled run)" "$(awk '$1 == "op" { t[$5] += $9; all += $9; c[$5] += $7 }
        END { for (k in t) printf "%s %.4g %.1f%%\n", k, c[k] ? 1e3 * t[k] / c[k] : 0, 100 * t[k] / all }' \
        "$results/small.profile" | sort -k3,3gr | head -8 | paste -sd';' -)" "op lines of small.profile, by kernel"
}

# CPU vs GPU on the tiny example with the default attention; compare_losses A B STEP TOL [FIELD]:
# the largest relative difference of two metrics files' FIELD (loss) over their first STEP steps.
compare_losses() {
    local field=${5:-loss}
    paste <(sed -n "s/.*\"$field\": \\([^,}]*\\)[,}].*/\\1/p" "$1" | head -"$3") \
          <(sed -n "s/.*\"$field\": \\([^,}]*\\)[,}].*/\\1/p" "$2" | head -"$3") |
        awk -v tol="$4" '{ d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > worst) worst = d; n++ }
                         END { printf "%d steps, max relative difference %.3g\n", n, worst;
                               exit (n < 1 || worst > tol) }'
}
section_tiny() {
    local precision=$1 dir=$work/tiny_$1 verdict checks
    planted "tiny_$precision" && return 1
    mkdir -p "$dir"
    sed -E -e "s|^([[:space:]]*)steps[[:space:]]+[0-9_]+|\1steps $tiny_steps|" -e "/^[[:space:]]*precision /d" \
           -e "/^[[:space:]]*attention /d" -e "s|^train[[:space:]]*\{|train {\n    precision $precision|" \
           -e "s|\"data/|\"$root/examples/data/|g" examples/tiny.paci > "$dir/tiny.paci"
    build_run "$dir/tiny.paci" "$dir" "$tiny_layers" 2 || { fail "pacic tiny ($precision)"; return 1; }
    (cd "$dir" && fake_env && timed ./run --device cpu --quiet --no-checkpoint --metrics "$results/tiny_${precision}_cpu.jsonl") ||
        { fail "tiny $precision on the CPU"; return 1; }
    (cd "$dir" && fake_env && timed ./run --device cuda --quiet --no-checkpoint --metrics "$results/tiny_${precision}_gpu.jsonl" \
        --profile-out "$results/tiny_${precision}.profile" > "$results/tiny_${precision}_gpu.txt" 2>&1) ||
        { tail -5 "$results/tiny_${precision}_gpu.txt"; fail "tiny $precision on the GPU"; memcheck_named "tiny_$precision" "$dir"; return 1; }
    local cpu=$results/tiny_${precision}_cpu.jsonl gpu=$results/tiny_${precision}_gpu.jsonl
    figure "tiny $precision attention kernels on the GPU" \
        "$(awk '$1 == "op" && $5 ~ /attention/ && $7 > 0 { print $5 }' "$results/tiny_${precision}.profile" | sort -u | paste -sd' ' -)" \
        "op lines of tiny_${precision}.profile"
    if [ "$precision" = fp32 ]; then checks="1 1e-5 $tiny_steps 1e-4"; else checks="1 5e-3 $tiny_steps 2e-2"; fi
    # shellcheck disable=SC2086
    set -- $checks
    while [ $# -ge 2 ]; do
        verdict=$(compare_losses "$cpu" "$gpu" "$1" "$2") ||
            fail "tiny $precision flash: CPU and GPU losses differ beyond $2: $verdict"
        figure "tiny $precision flash CPU vs GPU, $1 steps (tol $2)" "$verdict" "./run --device cpu|cuda (tiny.paci, default attention, $tiny_steps steps)"
        shift 2
    done
    verdict=$(compare_losses "$cpu" "$gpu" 1 1e-4 grad_norm)
    local status=$?
    figure "tiny $precision flash grad_norm at step 1" "$verdict" "./run --metrics grad_norm, CPU vs GPU"
    [ "$precision" != fp32 ] || [ $status -eq 0 ] || fail "tiny fp32 flash: step 1's gradient norm differs beyond 1e-4: $verdict"
    return 0
}

# The compute-sanitizer of the toolkit or the PATH, or nothing.
sanitizer_tool() {
    command -v compute-sanitizer || ls "$cuda/bin/compute-sanitizer" 2> /dev/null
}
# memcheck_named NAME DIR: after a failed GPU run, DIR's run once more for 1 step under memcheck,
# into NAME_memcheck.txt; the first kernel it names becomes a figure (the dry run has none).
memcheck_named() {
    local tool kernel
    tool=$(sanitizer_tool)
    [ "$emulate" != 1 ] && [ -n "$tool" ] || return 0
    (cd "$2" && timed "$tool" --tool memcheck --print-limit 20 ./run --device cuda --steps 1 --no-checkpoint \
        --quiet > "$results/$1_memcheck.txt" 2>&1)
    kernel=$(grep -m1 -o 'in [A-Za-z_][A-Za-z0-9_]*' "$results/$1_memcheck.txt" | cut -d' ' -f2)
    figure "$1 under memcheck (after its failure)" "${kernel:-no kernel named}: $(grep -m1 -E '^========= (Invalid|Misaligned|Program hit|Error)' \
        "$results/$1_memcheck.txt" | cut -c11-)" "compute-sanitizer --tool memcheck ./run --device cuda --steps 1"
}

# compute-sanitizer on the tiny bf16 program the tiny_bf16 section built: memcheck over 2 steps,
# then racecheck on the attention kernels (shared-memory hazards between warps) over 1 step.
section_sanitizer() {
    planted sanitizer && return 1
    local tool dir=$work/tiny_bf16 rc errors
    tool=$(sanitizer_tool)
    if [ "$emulate" = 1 ] || [ -z "$tool" ]; then
        figure "compute-sanitizer memcheck (tiny bf16, 2 steps)" "n/a ($([ "$emulate" = 1 ] && echo "dry run" || echo "no compute-sanitizer"))" "compute-sanitizer"
        return 0
    fi
    [ -x "$dir/run" ] || { fail "sanitizer: the tiny bf16 program was not built"; return 1; }
    (cd "$dir" && timed "$tool" --tool memcheck --error-exitcode 3 --print-limit 20 ./run --device cuda --steps 2 \
        --no-checkpoint --quiet > "$results/sanitizer_memcheck.txt" 2>&1)
    rc=$?
    errors=$(sed -n 's/^========= ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$results/sanitizer_memcheck.txt" | tail -1)
    figure "compute-sanitizer memcheck (tiny bf16, 2 steps)" "exit $rc, ${errors:-?} errors" \
        "compute-sanitizer --tool memcheck ./run --device cuda --steps 2 (sanitizer_memcheck.txt)"
    [ $rc -eq 0 ] && [ "${errors:-1}" = 0 ] || fail "memcheck on tiny bf16: exit $rc, ${errors:-?} errors"
    (cd "$dir" && timed "$tool" --tool racecheck --racecheck-report hazard --kernel-name kns=attention \
        --error-exitcode 3 --print-limit 20 ./run --device cuda --steps 1 --no-checkpoint --quiet \
        > "$results/sanitizer_racecheck.txt" 2>&1)
    rc=$?
    errors=$(sed -n 's/^========= RACECHECK SUMMARY: \([0-9]*\) hazard.*/\1/p; s/^========= ERROR SUMMARY: \([0-9]*\) error.*/\1/p' \
        "$results/sanitizer_racecheck.txt" | tail -1)
    figure "compute-sanitizer racecheck (attention kernels, 1 step)" "exit $rc, ${errors:-?} hazards" \
        "compute-sanitizer --tool racecheck --kernel-name kns=attention (sanitizer_racecheck.txt)"
    [ $rc -eq 0 ] && [ "${errors:-1}" = 0 ] || fail "racecheck on the attention kernels: exit $rc, ${errors:-?} hazards"
    return 0
}

section_medium() {
    local schedule=$1 dir=$work/medium_$1 micro
    planted "medium_$schedule" && return 1
    mkdir -p "$dir"
    sed -E -e "s|schedule[[:space:]]+[a-z0-9]+|schedule $schedule|" -e "s|batches[[:space:]]+[0-9]+|batches 1|" \
           -e "s|warmup[[:space:]]+[0-9]+%|warmup 1|" \
           -e "s|\"[^\"]*owt_train.bin\"|\"$root/examples/data/tiny_train.bin\"|" \
           -e "s|\"[^\"]*owt_val.bin\"|\"$root/examples/data/tiny_val.bin\"|" examples/gpt2-medium-8.paci > "$dir/m.paci"
    dry_lr "$dir/m.paci"
    # the example's micro-batch; where the memory check refuses it, the shortfall and micro 12
    local rc out=$results/medium_${schedule}_out.txt
    for micro in 16 12; do
        [ "$micro" = 16 ] || sed -i -E "s|micro[[:space:]]+[0-9_]+|micro $micro|" "$dir/m.paci"
        build_run "$dir/m.paci" "$dir" 8 2 || { fail "pacic gpt2-medium-8 at micro $micro ($schedule)"; return 1; }
        (cd "$dir" && fake_env && timed ./run --device cuda --steps "$medium_steps" --no-checkpoint \
            --metrics "$results/medium_${schedule}.jsonl" > "$out" 2>&1)
        rc=$?
        [ $rc -ne 0 ] && grep -q "short by" "$out" || break
        grep -m1 "short by" "$out" | tee -a "$figures"
    done
    cp "$dir/m.paci" "$results/medium_$schedule.paci"
    [ $rc -eq 0 ] || { tail -5 "$out"; fail "GPT-2 Medium 8 stages $schedule (exit $rc)"; return 1; }
    micro=$(awk '/^[[:space:]]*micro[[:space:]]/ { print $2 }' "$dir/m.paci") # the dry run shrinks it
    local vocab=50257
    [ "$emulate" != 1 ] || vocab=256
    check_losses "GPT-2 Medium $schedule" "$results/medium_${schedule}.jsonl" "$vocab"
    # the rate between steps 2 and N: the final `done:` line counts from the start (step 1's
    # warm-up and the last evaluation included)
    local tokps tokens
    tokens=$(awk '/^[[:space:]]*micro[[:space:]]/ { m = $2 } /^[[:space:]]*window[[:space:]]/ { w = $2 }
                  /^[[:space:]]*context[[:space:]]/ { c = $2 } END { print m * w * c }' "$dir/m.paci")
    tokps=$(tokens_per_s "$results/medium_${schedule}.jsonl" 2 "$medium_steps" "$tokens")
    [ -n "$tokps" ] || { fail "no tokens/s for steps 2..$medium_steps in GPT-2 Medium $schedule's metrics"; return 1; }
    figure "GPT-2 Medium 8 stages $schedule tokens/s (steps 2-$medium_steps)" "$tokps" \
        "./run --device cuda --steps $medium_steps (gpt2-medium-8 at micro $micro, schedule $schedule)"
    profiled "medium_$schedule" "$dir" || return 1
    timed "$pacic" "$dir/m.paci" --profile "$results/medium_$schedule.profile" --explain > "$results/explain_$schedule.txt" ||
        { fail "pacic --profile cannot read the measured profile"; return 1; }
    grep -q "^measured ops" "$results/explain_$schedule.txt" || { fail "the GPU profile has no per-kernel times"; return 1; }
    figure "GPT-2 Medium 8 stages $schedule memory (micro $micro)" \
        "$(sed -n 's/^memory: .*; the 8 stages together \([0-9.]* [GM]iB\).*/\1 by the stage totals/p' "$results/explain_$schedule.txt")" \
        "pacic m.paci --explain (its memory line), in explain_$schedule.txt"
    costs "medium_$schedule" "$dir/m.paci" "$results/medium_$schedule.profile"
    local per_token
    per_token=$(sed -n 's/^predicted .* model_flops_per_token \([0-9.e+]*\)$/\1/p' "$results/medium_${schedule}_emit_costs.txt")
    [ -z "$per_token" ] || mfu "GPT-2 Medium $schedule (8 stages, 1 GPU)" "$tokps" "$per_token"
}

# Nsight Compute on the kernel that took the most of GPT-2 Small's time (its profile).
section_ncu() {
    planted ncu && return 1
    local top ncu
    ncu=$(command -v ncu || ls "$cuda"/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
    if [ "$emulate" = 1 ] || [ -z "$ncu" ]; then
        figure "ncu on the top kernel" "n/a (no ncu$([ "$emulate" != 1 ] || echo ': dry run'))" "ncu --kernel-name"
        return 0
    fi
    [ -f "$results/small.profile" ] && [ -x "$work/small/run" ] ||
        { figure "ncu on the top kernel" "n/a (GPT-2 Small did not run)" "ncu"; return 0; }
    top=$(awk '$1 == "op" && $5 != "gemm" && $5 != "zero" && $5 != "copy" { t[$5] += $9 }
               END { for (k in t) print t[k], k }' "$results/small.profile" | sort -gr | head -1 | cut -d' ' -f2)
    [ -n "$top" ] || { figure "ncu on the top kernel" "n/a (no kernel in the profile)" "ncu"; return 0; }
    (cd "$work/small" && timed "$ncu" --kernel-name "regex:$top" --launch-count 1 --clock-control none \
        --section SpeedOfLight --section Occupancy --section LaunchStats \
        ./run --device cuda --steps 1 --no-checkpoint --quiet > "$results/ncu_$top.txt" 2>&1)
    local rc=$?
    if [ $rc -eq 0 ] && grep -q "Duration" "$results/ncu_$top.txt"; then
        figure "ncu on $top" "$(grep -E 'Duration|Memory Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per Thread' \
            "$results/ncu_$top.txt" | awk '{ $1 = $1; print }' | paste -sd';' -)" "ncu --kernel-name regex:$top --launch-count 1"
    else
        figure "ncu on $top" "n/a (ncu exit $rc: ncu_$top.txt)" "ncu --kernel-name regex:$top --launch-count 1"
    fi
}

# ---- a section in its own process (under the caller's timeout) ---------------------------
if [ "${1:-}" = --dry ]; then
    export GPU_CHECK_EMULATE=1
    shift
fi
if [ "${1:-}" = --section ]; then
    shift
    "section_$1" "${@:2}"
    exit $?
fi

# ---- the main process --------------------------------------------------------------------
export cuda=${CUDA_HOME:-/usr/local/cuda}
export emulate=${GPU_CHECK_EMULATE:-0}
# run_limit: seconds for any one command; deadline: seconds for the whole check. The dry
# run's speed is the CPU's, so there both only catch a hang, and its work is set in steps and
# layers: tiny_steps, tiny_layers, small_steps and medium_steps.
if [ "$emulate" = 1 ]; then
    export run_limit=${GPU_CHECK_RUN_LIMIT:-1800} tiny_steps=8 tiny_layers=2 small_steps=3 medium_steps=3 profiled_steps=1
    deadline_s=${GPU_CHECK_DEADLINE:-$((4 * run_limit))}
else
    export run_limit=${GPU_CHECK_RUN_LIMIT:-120} tiny_steps=20 tiny_layers=4 small_steps=6 medium_steps=4 profiled_steps=2
    deadline_s=${GPU_CHECK_DEADLINE:-470}
fi
export work
work=$(mktemp -d)
export results=$work/results
mkdir -p "$results"
export pacic=$root/build/bin/pacic
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT" || exit 1
    export figures=$OUT/figures.txt
else
    export figures=$results/figures.txt
fi
: > "$figures"
: > "$results/failures.txt"
start=$(date +%s)
deadline=$((start + deadline_s))
smi_pid=
# Only a helper to stop: nothing is saved here (every result is saved as it is made).
stop_sampling() { [ -z "$smi_pid" ] || kill "$smi_pid" 2> /dev/null; }
trap stop_sampling EXIT

# save: the archive of everything so far, replaced whole (a reader never sees half of one).
save() {
    cp "$figures" "$results/figures.txt" 2> /dev/null
    [ -n "${OUT:-}" ] || return 0
    tar czf "$OUT/gpu_check.tgz.part" -C "$results" . 2> /dev/null && mv -f "$OUT/gpu_check.tgz.part" "$OUT/gpu_check.tgz"
}
skipped=0
# run_section NAME BUDGET ARGS...: section_ARGS in its own process under the smaller of its
# budget and the time left before the deadline; recorded, saved, and never a gate.
run_section() {
    local name=$1 budget=$2 began left status recorded
    shift 2
    began=$(date +%s)
    recorded=$(grep -c . "$results/failures.txt")
    left=$((deadline - began))
    if [ "$left" -lt 5 ]; then
        figure "section $name" "n/a: skipped, the ${deadline_s} s deadline has passed" "GPU_CHECK_DEADLINE"
        skipped=$((skipped + 1))
        save
        return
    fi
    [ "$budget" -le "$left" ] || budget=$left
    echo "== $name (at most $budget s)" | tee -a "$results/commands.txt"
    timeout -k 10 "$budget" "$self" --section "$@"
    status=$?
    if [ $status -eq 124 ] || [ $status -eq 137 ]; then
        fail "section $name stopped at its budget of $budget s"
    elif [ $status -ne 0 ] && [ "$(grep -c . "$results/failures.txt")" = "$recorded" ]; then
        fail "section $name exited $status"
    fi
    figure "section $name (s)" "$(($(date +%s) - began))" "tests/gpu/check.sh"
    save
    if [ "${GPU_CHECK_PLANT_KILL_AFTER:-}" = "$name" ]; then
        echo "GPU_CHECK_PLANT_KILL_AFTER=$name: SIGKILL" >&2
        kill -KILL $$
    fi
}

commit=$(git rev-parse --short HEAD 2> /dev/null || cut -c1-12 .gpu-commit 2> /dev/null || echo "unknown (no .git, no .gpu-commit)")
echo "GPU check, $(date -u +%Y-%m-%dT%H:%MZ), $(hostname), commit $commit" | tee -a "$figures"
[ "$emulate" != 1 ] || echo "DRY RUN (GPU_CHECK_EMULATE=1): the fake CUDA stack on the CPU, tiny shapes; no GPU figures" |
    tee -a "$figures"
[ -n "${OUT:-}" ] || echo "results in $results (no \$OUT)"
figure "run limit per command (s)" "$run_limit" "GPU_CHECK_RUN_LIMIT (default 120; in the dry run 1800, a hang guard)"
figure "deadline (s)" "$deadline_s" "GPU_CHECK_DEADLINE (default 470; in the dry run 4 x the run limit)"

# ---- preflight: one line each, in the main process (seconds) -------------------------------
if command -v nvidia-smi > /dev/null; then
    smi_out=${OUT:-$results}
    nvidia-smi --query-gpu=timestamp,memory.used,memory.total,utilization.gpu,utilization.memory,clocks.sm,clocks.mem,power.draw,temperature.gpu \
        --format=csv -l 1 > "$smi_out/nvidia_smi.csv" 2>&1 &
    smi_pid=$!
    figure "GPU" "$(timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)" \
        "nvidia-smi (sampled every second into nvidia_smi.csv)"
else
    figure "GPU" "n/a (no nvidia-smi)" "nvidia-smi"
fi
figure "driver" "$(sed -n '1s/.*Kernel Module *\([0-9.]*\).*/\1/p' /proc/driver/nvidia/version 2> /dev/null | grep . || echo n/a)" \
    "/proc/driver/nvidia/version"
figure "nvcc" "$("$cuda/bin/nvcc" --version 2> /dev/null | tail -1 | grep . || echo "n/a (no $cuda/bin/nvcc)")" "$cuda/bin/nvcc --version"
# found WHAT PATHS...: the first that exists
found() {
    local p
    for p in "$@"; do [ -e "$p" ] && { readlink -f "$p"; return; }; done
    echo "not found"
}
figure "NVRTC" "$(found "$cuda"/lib64/libnvrtc.so "$cuda"/lib64/libnvrtc.so.13 "$cuda"/lib64/libnvrtc.so.12)" \
    "$cuda/lib64/libnvrtc.so (or .so.13, .so.12: compiler/nvrtc.c loads any)"
figure "cuBLASLt" "$(found "$cuda"/lib64/libcublasLt.so)" "$cuda/lib64/libcublasLt.so"
# Python's CUDA wheels (the GPU machine's torch has them) hold NCCL and cuDNN too.
wheels=$(timeout 20 python3 -c "import importlib.util as u; s = u.find_spec('nvidia'); print(list(s.submodule_search_locations)[0])" 2> /dev/null)
nccl_h=$(found "$cuda/include/nccl.h" /usr/include/nccl.h /usr/local/include/nccl.h ${wheels:+"$wheels/nccl/include/nccl.h"})
figure "nccl.h" "$nccl_h" "the toolkit, /usr/include, /usr/local/include, Python's nvidia/nccl"
if [ "$nccl_h" != "not found" ] && [ "$(dirname "$nccl_h")" != "$(readlink -f "$cuda/include")" ]; then
    CPATH=$(dirname "$nccl_h")${CPATH:+:$CPATH}
    export CPATH
fi
libnccl=$(ldconfig -p 2> /dev/null | awk '/libnccl\.so\.2 / { print $NF; exit }')
if [ -z "$libnccl" ]; then # not where dlopen looks by itself: the toolkit's or Python's
    libnccl=$(found "$cuda/lib64/libnccl.so.2" ${wheels:+"$wheels/nccl/lib/libnccl.so.2"})
    if [ "$libnccl" != "not found" ]; then
        LD_LIBRARY_PATH=$(dirname "$libnccl")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        export LD_LIBRARY_PATH
    fi
fi
figure "libnccl" "$libnccl" "ldconfig -p, the toolkit, Python's nvidia/nccl"
libcudnn=$(ldconfig -p 2> /dev/null | awk '/libcudnn\.so\.[0-9]+ / { print $NF; exit }')
[ -n "$libcudnn" ] || libcudnn=$(found "$cuda"/lib64/libcudnn.so.[0-9]* ${wheels:+"$wheels"/cudnn/lib/libcudnn.so.[0-9]*})
figure "cuDNN" "$libcudnn" "ldconfig -p, the toolkit, Python's nvidia/cudnn"
figure "profilers" "$(for t in ncu nsys compute-sanitizer; do
    printf '%s=%s ' "$t" "$(command -v "$t" || ls "$cuda/bin/$t" 2> /dev/null || echo none)"; done)" "command -v, $cuda/bin"

missing() {
    local what=()
    for tool in cc make flex bison m4; do command -v "$tool" > /dev/null || what+=("$tool"); done
    [ "$emulate" != 1 ] || command -v g++ > /dev/null || command -v clang++ > /dev/null || what+=("g++")
    echo '#include <cblas.h>' | cc -E - > /dev/null 2>&1 || what+=("cblas.h")
    echo '#include <jansson.h>' | cc -E - > /dev/null 2>&1 || what+=("jansson.h")
    printf '#define PCRE2_CODE_UNIT_WIDTH 8\n#include <pcre2.h>\n' | cc -E - > /dev/null 2>&1 || what+=("pcre2.h")
    echo "${what[*]}"
}
lacking=$(missing)
if [ -n "$lacking" ] && ls .gpu-deps/*.deb > /dev/null 2>&1; then
    echo "preflight: missing $lacking; unpacking .gpu-deps into $work/deps"
    for deb in .gpu-deps/*.deb; do dpkg -x "$deb" "$work/deps"; done
    lib=$work/deps/usr/lib/x86_64-linux-gnu
    export PATH=$work/deps/usr/bin:$PATH
    export CPATH=$work/deps/usr/include:$work/deps/usr/include/x86_64-linux-gnu/openblas-pthread${CPATH:+:$CPATH}
    export LIBRARY_PATH=$lib:$lib/openblas-pthread LD_LIBRARY_PATH=$lib:$lib/openblas-pthread:${LD_LIBRARY_PATH:-}
    export BISON_PKGDATADIR=$work/deps/usr/share/bison M4=$work/deps/usr/bin/m4
    lacking=$(missing)
fi
[ -z "$lacking" ] || fail "the build needs: $lacking (carry .gpu-deps: tests/gpu/fetch-deps.sh)"
for f in include/cublasLt.h include/nvrtc.h lib64/libcublasLt.so; do
    [ -e "$cuda/$f" ] || fail "no $cuda/$f"
done
ls "$cuda"/lib64/libnvrtc.so* > /dev/null 2>&1 || fail "no $cuda/lib64/libnvrtc.so (nor .so.13, .so.12)"
# Only the device's architecture (each more is another NVRTC pass over every unit); the dry
# run's fake stack takes any image.
if [ "$emulate" = 1 ]; then
    export PACIC_CUDA_ARCHS=sm_90
elif cap=$(timeout 20 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -1) &&
     [[ "$cap" =~ ^[0-9]+\.[0-9]+$ ]]; then
    export PACIC_CUDA_ARCHS=sm_${cap/./}
fi
archs_default="sm_80,sm_90,compute_90 (the default of pacic)" # no quote inside ${...:-...}
figure "CUDA architectures compiled" "${PACIC_CUDA_ARCHS:-$archs_default}" "PACIC_CUDA_ARCHS (nvidia-smi --query-gpu=compute_cap)"
save

# ---- the sections, in order; none waits on another --------------------------------------
if [ "$emulate" = 1 ]; then budget() { echo "$run_limit"; }; else budget() { echo "$1"; }; fi
run_section build "$(budget 120)" build
run_section tiny_fp32 "$(budget 45)" tiny fp32
run_section tiny_bf16 "$(budget 45)" tiny bf16
run_section sanitizer "$(budget 60)" sanitizer
run_section matmul "$(budget 20)" matmul
run_section small "$(budget 90)" small
run_section medium_paci "$(budget 90)" medium paci
run_section medium_1f1b "$(budget 80)" medium 1f1b
run_section ncu "$(budget 40)" ncu

figure "total check time (s)" "$(($(date +%s) - start))" "tests/gpu/check.sh"
failures=$(grep -c . "$results/failures.txt")
if [ "$failures" -gt 0 ] || [ "$skipped" -gt 0 ]; then
    echo "GPU check: $failures failure(s), $skipped section(s) skipped at the deadline" | tee -a "$figures"
    save
    [ -z "${OUT:-}" ] || rm -rf "$work"
    exit 1
fi
echo "GPU check passed" | tee -a "$figures"
save
stop_sampling
[ -z "${OUT:-}" ] || rm -rf "$work"
