#!/usr/bin/env bash
# The GPU check (tests/gpu/check.sh) as a dry run on the CPU: GPU_CHECK_EMULATE=1 builds every
# run as on a GPU, runs it on the fake CUDA stack (tests/cuda_fake/build.sh: the real GPU
# layer, the kernels under the emulator) and shrinks the models, so the script's own glue
# (its edits of the example files, run flags, metrics parsing, the tokens/s arithmetic, the
# profile read back with pacic --explain, the results archive) and the GPU layer's calls have
# run before it runs on a borrowed GPU, where a bug wastes scarce time. Its work is counted in
# steps and its limits are hang guards only (see check.sh), so a slow machine takes longer
# but never fails it: about 75 s of CPU time (77 s on two cores under a load of 2.5, 200 s
# under a load of 9), most of it building the five runs and their fake CUDA stacks.
# Skips (exit 77) exactly when e2e/cuda_emu does: without libpacirt_cuda.a, without a C++
# compiler, when pacic writes no stages.cu, and under the sanitizer builds.
source tests/e2e/lib.sh
need_cuda_emu
export PACIC_CACHE=$work/cache
small_model probe 1 paci 1 1
"$pacic" "$work/probe.paci" --emit c -o "$work/probe" > /dev/null 2>&1 || fail "pacic --emit c"
[ -f "$work/probe/stages.cu" ] || skip "pacic --emit c wrote no stages.cu (no NVRTC here?)"

out=$work/out # not created: check.sh makes it
set +e
env -u GPU_CHECK_RUN_LIMIT GPU_CHECK_EMULATE=1 OUT=$out tests/gpu/check.sh > "$work/check.txt" 2>&1
status=$?
set -e
[ "$status" -eq 0 ] || { tail -40 "$work/check.txt"; fail "check.sh exited $status"; }
grep -qx "GPU check passed" "$work/check.txt" || { tail -40 "$work/check.txt"; fail "no 'GPU check passed'"; }
[ -f "$out/figures.txt" ] || fail "no \$OUT/figures.txt"
[ -f "$out/gpu_check.tgz" ] || fail "no \$OUT/gpu_check.tgz"
cat "$out/figures.txt"

# every figure line, with a value of the right form
figures=(
    "DRY RUN \(GPU_CHECK_EMULATE=1\).*"
    "run limit per command \(s\) +[0-9]+"
    "tiny fp32 CPU vs GPU, 5 steps \(tol 1e-5\) +5 steps, max relative difference [0-9.e+-]+"
    "tiny fp32 CPU vs GPU, 8 steps \(tol 1e-4\) +8 steps, max relative difference [0-9.e+-]+"
    "tiny bf16 CPU vs GPU, 8 steps \(tol 2e-2\) +8 steps, max relative difference [0-9.e+-]+"
    "measured bf16 matmul rate \(TFLOP/s\) +n/a \(emulated\)"
    "GPT-2 Small 1 stage tokens/s \(steps 2-3\) +[0-9]+"
    "GPT-2 Small share of measured bf16 rate +n/a \(emulated\)"
    "GPT-2 Small GELU gradient +fused into cuBLASLt epilogues"
    "GPT-2 Medium 8 stages paci +[0-9.]+ tokens/s"
    "GPT-2 Medium 8 stages 1f1b +[0-9.]+ tokens/s"
    "total check time \(s\) +[0-9]+"
    "GPU check passed"
)
for figure in "${figures[@]}"; do
    grep -Eqx "$figure" "$out/figures.txt" || fail "figures.txt has no line matching: $figure"
done
! grep -q "^FAIL" "$out/figures.txt" || fail "figures.txt records a failure"
# Speed is no verdict: the limit is a hang guard that a correct run on a slow machine stays
# far below (150 s, the GPU's, failed a dry run on a loaded machine), and the work is steps.
limit=$(sed -n 's/^run limit per command (s) *\([0-9]*\)$/\1/p' "$out/figures.txt")
[ "$limit" -ge 1800 ] || fail "the dry run's run limit is $limit s: a slow machine can exceed it (a hang guard is >= 1800 s)"

# the archive: every log, metrics file, profile and explain output
tar tzf "$out/gpu_check.tgz" | sed 's|^\./||' | sort > "$work/listed.txt"
for f in build.log commands.txt figures.txt \
         tiny_fp32_cpu.jsonl tiny_fp32_gpu.jsonl tiny_bf16_cpu.jsonl tiny_bf16_gpu.jsonl \
         small_out.txt small.jsonl small.profile \
         medium_paci_out.txt medium_paci.jsonl medium_paci.profile explain_paci.txt \
         medium_1f1b_out.txt medium_1f1b.jsonl medium_1f1b.profile explain_1f1b.txt; do
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
echo "the GPU check's dry run passed with every figure and file"
