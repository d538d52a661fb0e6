#!/usr/bin/env bash
# The GPU check (tests/gpu/check.sh) as a dry run on the CPU: GPU_CHECK_EMULATE=1 builds every
# run as on a GPU, runs it on the fake CUDA stack (tests/cuda_fake/build.sh: the real GPU
# layer, the kernels under the emulator) and shrinks the models, so the script's own glue
# (its edits of the example files, run flags, metrics parsing, the tokens/s and MFU
# arithmetic, the profile read back with pacic --explain and beside pacic --emit costs, the
# results archive) and the GPU layer's calls have run before it runs on a borrowed GPU, where
# a bug wastes scarce time. Four runs:
#   1. the whole check: every figure of the right form, every file in the archive;
#   2. a planted failure in the tiny fp32 section and a SIGKILL after the next section (as a
#      device tool's hard limit would kill it): the later section still ran, and its figures
#      and files are under $OUT, saved as produced, since nothing after a SIGKILL runs;
#   3. a deadline already passed: every section is recorded as skipped, exit 1, no hang;
#   4. a section that hangs: stopped at its budget and recorded as failed.
# Its work is counted in steps and its limits are hang guards only (see check.sh), so a slow
# machine takes longer but never fails it: 56 s of wall time (48 s of CPU) on the 2-core
# development machine, most of it building the runs and their fake CUDA stacks (NVRTC for
# sm_90 alone, as on the GPU); the second and third runs take about 20 s of it.
# Skips (exit 77) exactly when e2e/cuda_emu does: without libpacirt_cuda.a, without a C++
# compiler, when pacic writes no stages.cu, and under the sanitizer builds.
source tests/e2e/lib.sh
need_cuda_emu
export PACIC_CACHE=$work/cache
small_model probe 1 paci 1 1
"$pacic" "$work/probe.paci" --emit c -o "$work/probe" > /dev/null 2>&1 || fail "pacic --emit c"
[ -f "$work/probe/stages.cu" ] || skip "pacic --emit c wrote no stages.cu (no NVRTC here?)"
# dry_check OUT LOG [VAR=VALUE...]: the dry run with OUT, its output in LOG; prints its status.
dry_check() {
    local out=$1 log=$2
    shift 2
    set +e
    # the outer timeout is a hang guard of this test's own (part 4 plants a hang)
    env -u GPU_CHECK_RUN_LIMIT -u GPU_CHECK_DEADLINE -u GPU_CHECK_PLANT_FAIL -u GPU_CHECK_PLANT_KILL_AFTER \
        -u GPU_CHECK_PLANT_HANG GPU_CHECK_EMULATE=1 OUT="$out" "$@" timeout -k 10 3600 tests/gpu/check.sh > "$log" 2>&1
    echo $?
    set -e
}

# ---- 1. the whole check ---------------------------------------------------------------------
out=$work/out # not created: check.sh makes it
status=$(dry_check "$out" "$work/check.txt")
[ "$status" -eq 0 ] || { tail -40 "$work/check.txt"; fail "check.sh exited $status"; }
grep -qx "GPU check passed" "$work/check.txt" || { tail -40 "$work/check.txt"; fail "no 'GPU check passed'"; }
[ -f "$out/figures.txt" ] || fail "no \$OUT/figures.txt"
[ -f "$out/gpu_check.tgz" ] || fail "no \$OUT/gpu_check.tgz"
[ ! -e "$out/gpu_check.tgz.part" ] || fail "a half-written archive was left in \$OUT"
cat "$out/figures.txt"

# every figure line, with a value of the right form
number='[0-9.e+-]+'
figures=(
    "DRY RUN \(GPU_CHECK_EMULATE=1\).*"
    "run limit per command \(s\) +[0-9]+"
    "deadline \(s\) +[0-9]+"
    "GPU +.+"
    "nvcc +.+" "NVRTC +.+" "cuBLASLt +.+" "nccl.h +.+" "libnccl +.+" "cuDNN +.+" "profilers +ncu=.*"
    "NCCL through dlopen +(version [0-9]+|error: .+)"
    "CUDA architectures compiled +sm_90"
    "measured bf16 matmul rate \(TFLOP/s\) +n/a \(emulated\)"
    "compute-sanitizer memcheck \(tiny bf16, 2 steps\) +n/a \(dry run\)"
    "GPT-2 Small losses +3 steps, first $number \(ln V 5.5452\), last $number"
    "GPT-2 Small 1 stage tokens/s \(steps 2-3\) +[0-9]+"
    "small predicted vs measured, per step \(profiled run\) +$number ms predicted, $number ms measured \([1-9][0-9]* kernels\)"
    "GPT-2 Small MFU \(989 TFLOP/s\) +[0-9.]+%"
    "GPT-2 Small MFU \(measured matmul rate\) +n/a \(no measured matmul rate\)"
    "GPT-2 Small GELU gradient +fused into cuBLASLt epilogues"
    "GPT-2 Small top kernels \(ms per call, share; profiled run\) +.*attention.*"
    "tiny fp32 flash CPU vs GPU, 1 steps \(tol 1e-5\) +1 steps, max relative difference $number"
    "tiny fp32 flash CPU vs GPU, 8 steps \(tol 1e-4\) +8 steps, max relative difference $number"
    "tiny fp32 flash grad_norm at step 1 +1 steps, max relative difference $number"
    "tiny bf16 flash CPU vs GPU, 1 steps \(tol 5e-3\) +1 steps, max relative difference $number"
    "tiny bf16 flash CPU vs GPU, 8 steps \(tol 2e-2\) +8 steps, max relative difference $number"
    "tiny bf16 flash grad_norm at step 1 +1 steps, max relative difference $number"
    "GPT-2 Medium paci losses +3 steps, first $number \(ln V 5.5452\), last $number"
    "GPT-2 Medium 8 stages paci tokens/s \(steps 2-3\) +[0-9]+"
    "GPT-2 Medium 8 stages paci memory \(micro 1\) +$number [GM]iB by the stage totals"
    "medium_paci predicted vs measured, per step \(profiled run\) +$number ms predicted, $number ms measured \([1-9][0-9]* kernels\)"
    "GPT-2 Medium paci \(8 stages, 1 GPU\) MFU \(989 TFLOP/s\) +[0-9.]+%"
    "GPT-2 Medium 1f1b losses +3 steps, first $number \(ln V 5.5452\), last $number"
    "GPT-2 Medium 8 stages 1f1b tokens/s \(steps 2-3\) +[0-9]+"
    "medium_1f1b predicted vs measured, per step \(profiled run\) +$number ms predicted, $number ms measured \([1-9][0-9]* kernels\)"
    "ncu on the top kernel +n/a \(no ncu: dry run\)"
    "total check time \(s\) +[0-9]+"
    "GPU check passed"
)
for section in build tiny_fp32 tiny_bf16 sanitizer matmul small medium_paci medium_1f1b ncu; do
    figures+=("section $section \(s\) +[0-9]+")
done
for figure in "${figures[@]}"; do
    grep -Eqx "$figure" "$out/figures.txt" || fail "figures.txt has no line matching: $figure"
done
! grep -q "^FAIL" "$out/figures.txt" || fail "figures.txt records a failure"
# the tiny runs used the default GPU attention, not the matmul path's kernels
for precision in fp32 bf16; do
    kernels=$(sed -n "s/^tiny $precision attention kernels on the GPU *//p" "$out/figures.txt")
    [[ "$kernels" == *attention* && "$kernels" != *attention_softmax_forward* ]] ||
        fail "tiny $precision ran the attention kernels '$kernels', not the default (flash) attention"
done
# Speed is no verdict: the limit is a hang guard that a correct run on a slow machine stays
# far below (150 s, the GPU's, failed a dry run on a loaded machine), and the work is steps.
limit=$(sed -n 's/^run limit per command (s) *\([0-9]*\)$/\1/p' "$out/figures.txt")
[ "$limit" -ge 1800 ] || fail "the dry run's run limit is $limit s: a slow machine can exceed it (a hang guard is >= 1800 s)"

# the archive: every log, metrics file, profile, explain and cost output
tar tzf "$out/gpu_check.tgz" | sed 's|^\./||' | sort > "$work/listed.txt"
for f in build.log commands.txt figures.txt failures.txt \
         tiny_fp32_cpu.jsonl tiny_fp32_gpu.jsonl tiny_fp32.profile tiny_bf16_cpu.jsonl tiny_bf16_gpu.jsonl tiny_bf16.profile \
         small_out.txt small_profiled_out.txt small.jsonl small.profile small_emit_costs.txt small_costs.txt \
         medium_paci_out.txt medium_paci_profiled_out.txt medium_paci.jsonl medium_paci.profile explain_paci.txt \
         medium_paci_costs.txt medium_1f1b_out.txt medium_1f1b_profiled_out.txt medium_1f1b.jsonl \
         medium_1f1b.profile explain_1f1b.txt medium_1f1b_costs.txt; do
    grep -qx "$f" "$work/listed.txt" || fail "gpu_check.tgz lacks $f"
done
mkdir "$work/archive"
tar xzf "$out/gpu_check.tgz" -C "$work/archive"
for f in tiny_fp32_cpu tiny_fp32_gpu tiny_bf16_cpu tiny_bf16_gpu small; do
    steps=$(grep -c '"loss"' "$work/archive/$f.jsonl")
    want=8
    [ $f != small ] || want=3
    [ "$steps" = $want ] || fail "$f.jsonl logs $steps steps, the dry run's $want"
done
for schedule in paci 1f1b; do
    grep -q "^measured ops" "$work/archive/explain_$schedule.txt" || fail "explain_$schedule.txt has no measured ops"
    grep -q "^stage 7 fwd" "$work/archive/medium_$schedule.profile" || fail "medium_$schedule.profile lacks stage 7"
done
# predicted beside measured: a row per stage, section and kernel, both columns numbers
rows=$(awk 'NR > 1 && $(NF-2) ~ /^[0-9.e+-]+$/ && $(NF-1) ~ /^[0-9.e+-]+$/' "$work/archive/small_costs.txt" | wc -l)
[ "$rows" -ge 10 ] || fail "small_costs.txt has $rows rows of predicted beside measured"

# ---- 2. a failed section gates nothing, and results are saved as they are produced ---------
out2=$work/out2
status=$(dry_check "$out2" "$work/planted.txt" GPU_CHECK_PLANT_FAIL=tiny_fp32 GPU_CHECK_PLANT_KILL_AFTER=tiny_bf16)
[ "$status" -eq 137 ] || { tail -20 "$work/planted.txt"; fail "the planted run exited $status, not 137 (SIGKILL)"; }
grep -qx "FAIL: tiny_fp32: planted failure (GPU_CHECK_PLANT_FAIL)" "$out2/figures.txt" ||
    fail "the planted failure of the tiny_fp32 section is not in figures.txt"
grep -Eqx "tiny bf16 flash CPU vs GPU, 8 steps \(tol 2e-2\) +8 steps, max relative difference $number" "$out2/figures.txt" ||
    fail "the section after a failed one did not run, or its figures were not saved before the kill"
! grep -Eq "^(compute-sanitizer|measured bf16|GPT-2|total check time|GPU check passed|GPU check: )" "$out2/figures.txt" ||
    fail "the planted run went on past its kill"
tar tzf "$out2/gpu_check.tgz" | sed 's|^\./||' > "$work/listed2.txt" || fail "no archive after the kill"
for f in tiny_bf16_cpu.jsonl tiny_bf16_gpu.jsonl failures.txt figures.txt; do
    grep -qx "$f" "$work/listed2.txt" || fail "the archive saved before the kill lacks $f"
done

# ---- 3. a deadline already passed: every section skipped and said so, exit 1 ----------------
out3=$work/out3
status=$(dry_check "$out3" "$work/deadline.txt" GPU_CHECK_DEADLINE=0)
[ "$status" -eq 1 ] || { tail -20 "$work/deadline.txt"; fail "with its deadline passed, check.sh exited $status"; }
[ "$(grep -c "^section .* n/a: skipped, the 0 s deadline has passed" "$out3/figures.txt")" = 9 ] ||
    fail "not every section is recorded as skipped at the deadline"
grep -qx "GPU check: 0 failure(s), 9 section(s) skipped at the deadline" "$out3/figures.txt" || fail "no summary line"
[ -f "$out3/gpu_check.tgz" ] || fail "no archive when every section was skipped"

# ---- 4. a hung section is stopped at its budget -------------------------------------------
# The hang never ends, so this depends on no machine's speed: only the section's timeout
# (GPU_CHECK_RUN_LIMIT is the dry run's budget per section) can end it; the kill after the
# build keeps the later sections from running with that small budget. The deadline is set
# apart: by default it is 4 run limits (8 s) from the start, which a loaded machine spent
# in the preflight, so the build section was skipped instead of stopped.
out4=$work/out4
status=$(dry_check "$out4" "$work/hang.txt" GPU_CHECK_RUN_LIMIT=2 GPU_CHECK_DEADLINE=3600 \
    GPU_CHECK_PLANT_HANG=build GPU_CHECK_PLANT_KILL_AFTER=build)
[ "$status" -eq 137 ] || { tail -20 "$work/hang.txt"; fail "with a hung build section, check.sh exited $status, not 137"; }
grep -qx "FAIL: section build stopped at its budget of 2 s" "$out4/figures.txt" || fail "the hung section was not stopped and recorded"
# and its child with it (a hung run would hold the GPU): the budget's timeout signals the
# section's whole process group; a process signalled dies at once, 10 s is for a loaded machine
for _ in $(seq 100); do pgrep -f "sleep 987654" > /dev/null || break; sleep 0.1; done
! pgrep -f "sleep 987654" > /dev/null || fail "the hung section's child outlived the section's budget"
echo "the GPU check's dry run passed with every figure and file, gated nothing after a planted failure, kept its results through a SIGKILL and stopped a hung section"
