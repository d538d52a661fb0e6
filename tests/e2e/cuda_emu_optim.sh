#!/usr/bin/env bash
# The optimizers' GPU steps (runtime/cuda/optim.c: the kernels of compiler/kernels.c and the
# Newton-Schulz products through pr_cuda_gemm) under the CUDA emulator, against the CPU's
# (runtime/optim_rules.c) in one binary from one seed: muon (Nesterov, ratio scaling; p = 2,
# so both its AdamW group and its matrices run on each stage), lamb, lars, lans and nadamw (with
# delay_correction nesterov, so stage 0's beta1 is raised and stage 1's is not: one emulated
# build covers the kernel and the per-stage beta1) at p = 2, and muon under precision bf16
# (the weights' bf16 copy written back after each tensor's step),
# losses to LOSS_TOL relative and weights to WEIGHT_TOL absolute as tests/e2e/cuda_emu.sh.
# The builds named -predict add delay_correction predict (stage 0's forwards run 1 step
# ahead), so the GPU's predictions (pr_cuda_optim_predict) are checked against the CPU's
# too: adamw's, muon's (fp32 and bf16: the predicted weights' bf16 copy), lamb's and lans's.
# Then muon with predict through the real GPU layer on the fake CUDA stack (tests/e2e/cuda_fake.sh).
# Skips as cuda_emu.sh does (no libpacirt_cuda.a, no C++ compiler, sanitizer builds).
source tests/e2e/lib.sh
need_cuda_emu
export PACIC_CACHE=$work/cache
emu=$root/tests/cuda_emu
LOSS_TOL=1e-5
WEIGHT_TOL=1e-4
"${CC:-cc}" -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -Iruntime -c "$emu/emu_device.c" \
    -o "$work/emu_device.o" || fail "emu_device.c does not build"

declare -A rule=(
    [adamw]="adamw { lr 3e-3; weight_decay 0.1; clip 0.5 }"
    [muon]="muon { lr 0.02; weight_decay 0.1; clip 0.5; adamw { lr 3e-3; betas 0.8 0.95 } }"
    [lamb]="lamb { lr 5e-3; betas 0.9 0.99; eps 1e-6; weight_decay 0.1; clip 0.5 }"
    [lars]="lars { lr 0.5; trust_coefficient 0.02; weight_decay 1e-3; clip 0.5 }"
    [lans]="lans { lr 5e-3; betas 0.9 0.99; eps 1e-6; weight_decay 0.1 }"
    [nadamw]="nadamw { lr 5e-3; betas 0.9 0.99; eps 1e-6; weight_decay 0.1; momentum_decay 0.004; clip 0.5 }"
)
for name in muon-predict lamb-predict lans-predict lars nadamw-nesterov muon-bf16-predict adamw-predict; do
    opt=${name%-predict}
    opt=${opt%-bf16}
    opt=${opt%-nesterov}
    small_model "$name" 2 paci 2 5 0
    sed -i "s/^    optimizer adamw.*/    optimizer ${rule[$opt]}/" "$work/$name.paci"
    [[ $name == *-bf16* ]] && sed -i "s/^train {/train {\n    precision bf16/" "$work/$name.paci"
    [ "$name" = nadamw-nesterov ] && sed -i "s/^pipeline { \(.*\) }/pipeline { \1; delay_correction nesterov }/" "$work/$name.paci"
    [[ $name == *-predict ]] && sed -i "s/^pipeline { \(.*\) }/pipeline { \1; delay_correction predict }/" "$work/$name.paci"
    grep -q "optimizer $opt" "$work/$name.paci" || fail "$name: the optimizer was not set"
    [[ $name != *-predict ]] || grep -q "delay_correction predict" "$work/$name.paci" || fail "$name: predict was not set"
    mkdir -p "$work/$name"
    status=0
    PACIC=$pacic CXX=$CXX CUDA_EMU_OBJ=$work/emu_device.o "$emu/build_run.sh" "$work/$name.paci" "$work/$name/run" || status=$?
    [ "$status" -ne 77 ] || skip "pacic --emit c wrote no stages.cu (no NVRTC here?)"
    [ "$status" -eq 0 ] || fail "$name: the emulated build"
    for device in cuda cpu; do
        mkdir -p "$work/$name/$device"
        (cd "$work/$name/$device" && ../run --device $device --quiet --metrics metrics.jsonl) \
            || fail "$name: --device $device did not train"
    done
    if [ "$name" = muon-bf16-predict ]; then # bf16 products on the GPU only: the tolerances of gpu.md's bf16 check
        compare_devices "$name" "$work/$name/cuda" "$work/$name/cpu" 2e-2 5e-2
    else
        compare_devices "$name" "$work/$name/cuda" "$work/$name/cpu" "$LOSS_TOL" "$WEIGHT_TOL"
    fi
done
grep -q "delay_correction nesterov" "$work/nadamw-nesterov.paci" || fail "nadamw-nesterov: the key was not set"
echo "muon, lamb, lans, lars, nadamw and adamw under the emulated GPU match their CPU steps and predictions"

# The real GPU layer (runtime/cuda/ linked: device.c's allocation and sums of squares,
# cuBLASLt) on the fake CUDA stack of tests/cuda_fake, whose device memory the host cannot
# read: muon, two stages on one GPU.
small_model fake 2 paci 2 4 0
sed -i -e "s/^    optimizer adamw.*/    optimizer ${rule[muon]}/" -e "s/layers 4;/layers 2;/" \
    -e "s/^pipeline { \(.*\) }/pipeline { \1; delay_correction predict }/" "$work/fake.paci"
grep -q "delay_correction predict" "$work/fake.paci" || fail "fake: predict was not set"
status=0
PACIC=$pacic tests/cuda_fake/build.sh "$work/fake.paci" "$work/fake" || status=$?
if [ "$status" -eq 77 ]; then
    skip_part "the fake CUDA stack cannot be built here (tests/cuda_fake/build.sh exited 77)"
else
    [ "$status" -eq 0 ] || fail "fake: building the fake CUDA stack"
    for device in cuda cpu; do
        mkdir -p "$work/fake/$device"
        (cd "$work/fake/$device" && LD_LIBRARY_PATH=$work/fake/lib FAKE_CUDA_GPUS=1 \
            ../run --quiet --device $device --metrics metrics.jsonl) || fail "fake: --device $device did not train"
    done
    compare_devices "muon with predict on the real GPU layer (fake CUDA)" "$work/fake/cuda" "$work/fake/cpu" "$LOSS_TOL" "$WEIGHT_TOL"
fi
