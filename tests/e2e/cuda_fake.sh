#!/usr/bin/env bash
# The real GPU layer, run without a GPU: `run` as pacic builds it (runtime/cuda/ linked in:
# device.c, gemm.c, nccl_transport.c) on the fake CUDA stack of tests/cuda_fake (a driver,
# cuBLASLt and NCCL on the CPU, with the model's kernels under tests/cuda_emu/simt.h; device
# memory the host cannot dereference, one worker thread per stream, CUDA's rules for contexts,
# events and launches checked). From the same seed, --device cuda must train as --device cpu
# (losses to LOSS_TOL relative, final weights to WEIGHT_TOL absolute; tests/e2e/cuda_emu.sh says
# why the weights differ in their last bits) in every way stages meet GPUs:
#   - one stage on one GPU, with per-op profiling (CUDA events) and cuBLASLt without a bias
#     epilogue (its rank-1 fallback);
#   - bf16 (products read bf16 copies, the LM head writes bf16 logits, which the fused
#     classifier turns into dlogits in place): GELU in cuBLASLt's epilogues or apart; two stages
#     under 1F1B as one; PipeDream (stashed weights), against the CPU to bf16's tolerance;
#   - two stages on one GPU (device links between them), on lazy streams, and the host's
#     waits for the GPU counted per step;
#   - the noise scale (docs/run.md) on one GPU and on two stages of one GPU (lazy streams) is
#     the CPU run's to 1e-4 relative (its sum rides on the step's download: no wait of its own);
#   - three stages on one GPU (device links under PACI, lazy streams);
#   - three stages on three GPUs in one process (NCCL between every pair), and stopped early
#     (--steps 2, the stop mark over NCCL) with every receive late (FAKE_NCCL_RECV_DELAY_US);
#   - two processes, one stage and one GPU each (torchrun-style variables; NCCL across
#     processes, the ids through the TCP bootstrap), and again under mpirun when run has MPI
#     (the ids through MPI).
# Then the errors: too little GPU memory, and no GPU.
# Skips (exit 77) where tests/cuda_emu cannot run (need_cuda_emu) or pacic writes no stages.cu;
# where run has no MPI (or there is no mpirun), the rest runs and the script still exits 77,
# naming the mpirun part it left out.
source tests/e2e/lib.sh
need_cuda_emu
export PACIC_CACHE=$work/cache
LOSS_TOL=1e-5
WEIGHT_TOL=1e-4

# on NAME DIR GPUS [run flags...]: runs NAME's program in $work/NAME/DIR on GPUS fake GPUs.
on() {
    local name=$1 dir=$2 gpus=$3
    shift 3
    mkdir -p "$work/$name/$dir"
    (cd "$work/$name/$dir" && LD_LIBRARY_PATH=$work/$name/lib FAKE_CUDA_GPUS=$gpus FAKE_CUDA_REPORT=1 \
        ../run --quiet --metrics metrics.jsonl "$@" 2> err.txt) || { cat "$work/$name/$dir/err.txt" >&2; return 1; }
}

# calls NAME DIR WHAT: how many times the fake stack counted WHAT in that run (0 if never).
calls() {
    sed -n "s/^fake cuda: calls:.* $3 \([0-9]*\).*/\1/p" "$work/$1/$2/err.txt" | head -n 1 | grep . || echo 0
}

# case_model NAME STAGES SCHEDULE ATTENTION [PRECISION [VOCAB [noclip]]]: a 6-step model with an
# evaluation at step 3, one layer per stage (at least 2: the emulated kernels dominate the
# test's time), built with its fake CUDA stack. A vocabulary off a multiple of 64 pads the
# logits' rows (VP). noclip: without gradient clipping.
case_model() {
    small_model "$1" "$2" "$3" 2 6 3
    sed -i -e "s/^train {/train {\n    attention $4\n    precision ${5:-fp32}/" \
        -e "s/layers 4;/layers $(($2 > 2 ? $2 : 2));/" -e "s/vocab 256 }/vocab ${6:-256} }/" "$work/$1.paci"
    [ "${7:-}" != noclip ] || sed -i -e "s/; clip 0.5//" "$work/$1.paci"
    fake_build "$1"
}

# early_steps_agree LABEL DIR_A DIR_B: two GPU runs under bf16 whose differences start in the
# last bits of a sum (the fake's GELU against the kernel's; the global clipping norm summed in
# another order over two stages) agree to 1e-6 relative in the losses and gradient norms of
# steps 1 to 3. Later the bf16 logits amplify such a difference: a logit whose rounding flips
# moves by a bf16 step, and by step 6 the losses differ by up to 2.4e-5 and the weights by
# 5.8e-4 (OpenBLAS's Haswell kernels on an AMD CPU of family 26; 2.2e-5 and 1.2e-4 with its
# SkylakeX kernels on an Intel one: how far the flips carry depends on the last bits), so
# BF16_LOSS_TOL and BF16_WEIGHT_TOL below for the whole runs. A wrong product, epilogue or
# message is off from step 1.
BF16_LOSS_TOL=1e-4
BF16_WEIGHT_TOL=1.5e-3
early_steps_agree() {
    python3 - "$@" <<'PY' || fail "$1: steps 1 to 3 disagree"
import json, os, sys
label, a_dir, b_dir = sys.argv[1:4]
def metrics(folder):
    out = {}
    for line in open(os.path.join(folder, "metrics.jsonl")):
        rec = json.loads(line)
        for key in ("loss", "grad_norm"):
            if key in rec and rec["step"] <= 3:
                out[(key, rec["step"])] = rec[key]
    return out
a, b = metrics(a_dir), metrics(b_dir)
assert len(a) == 6 and a.keys() == b.keys(), "steps 1 to 3 missing"
worst = max(abs(a[k] - b[k]) / abs(b[k]) for k in a)
print(f"{label}: steps 1 to 3, max relative difference {worst:.3g}")
sys.exit(0 if worst <= 1e-6 else 1)
PY
}

# One stage on one GPU; per-op profile; cuBLASLt without a bias epilogue in a second run.
case_model one 1 paci flash
on one cuda 1 --device cuda --profile-out profile.txt || fail "one: --device cuda"
on one cpu 1 --device cpu || fail "one: --device cpu"
compare_devices "one stage, one GPU" "$work/one/cuda" "$work/one/cpu" "$LOSS_TOL" "$WEIGHT_TOL"
same_noise "one stage, one GPU" "$work/one/cuda" "$work/one/cpu"
[ "$(grep -c '^op 0 ' "$work/one/cuda/profile.txt")" -gt 10 ] || fail "one: no per-op times in the profile"
"$pacic" "$work/one.paci" --profile "$work/one/cuda/profile.txt" --explain > "$work/one/explain.txt" \
    || fail "one: pacic does not read the profile"
FAKE_CUBLASLT_NO_BIAS=2 on one nobias 1 --device cuda || fail "one: --device cuda without bias epilogues"
compare_devices "one stage, no bias epilogue" "$work/one/nobias" "$work/one/cpu" "$LOSS_TOL" "$WEIGHT_TOL"
fused=$(calls one cuda cublasLtMatmul) unfused=$(calls one nobias cublasLtMatmul)
[ "$unfused" -gt "$fused" ] || fail "one: no rank-1 bias products without the epilogue ($unfused, $fused with it)"
echo "one: $(calls one cuda cuLaunchKernel) launches; $fused products, $unfused without bias epilogues"

# bf16: GELU's gradient fuses into cuBLASLt's epilogue, and must train as the same GPU run
# with GELU's own kernel (FAKE_CUBLASLT_NO_GELU=1; the fake's GELU uses the kernel's float
# expressions, compiled apart, so they differ in last bits: early_steps_agree). Against the
# CPU only loosely: both keep the products' activations in bf16,
# but the CPU's products read fp32 weights and gradients: 1e-2 (tests/gpu/check.sh allows
# 2e-2 on a GPU).
case_model half 1 paci flash bf16 300 noclip
on half cuda 1 --device cuda || fail "half: --device cuda"
[ "$(calls half cuda dgelu_epilogue)" -gt 0 ] || fail "half: GELU's gradient did not fuse into its product under bf16"
FAKE_CUBLASLT_NO_GELU=1 on half apart 1 --device cuda || fail "half: --device cuda without GELU epilogues"
[ "$(calls half apart dgelu_epilogue)" = 0 ] || fail "half: a GELU epilogue without an algorithm for it"
early_steps_agree "bf16, GELU fused vs apart" "$work/half/cuda" "$work/half/apart"
compare_devices "bf16, GELU fused vs apart" "$work/half/cuda" "$work/half/apart" "$BF16_LOSS_TOL" "$BF16_WEIGHT_TOL"
# An algorithm the heuristic offers and cublasLtMatmul then refuses: one notice, GELU apart.
FAKE_CUBLASLT_NO_GELU=2 on half refused 1 --device cuda || fail "half: a refused GELU epilogue stopped the run"
cmp "$work/half/apart/ckpt/step_00000006/model.bin" "$work/half/refused/ckpt/step_00000006/model.bin" ||
    fail "half: a refused GELU epilogue trains differently from GELU apart"
grep -q "^run: note: stage 0: cuBLASLt refused the GELU gradient epilogue for .*; computing the epilogue apart$" \
    "$work/half/refused/err.txt" || fail "half: no notice for the refused epilogue: $(cat "$work/half/refused/err.txt")"
on half cpu 1 --device cpu --threads 1 || fail "half: --device cpu"
compare_devices "bf16 GPU vs the CPU" "$work/half/cuda" "$work/half/cpu" 1e-2 2e-2
[ "$(calls one cuda dgelu_epilogue)" = 0 ] || fail "one: fp32 fused GELU"

# bf16 pipelined on two GPUs. 1F1B is synchronous: it must train as one stage (the same
# 2-layer model; the gradient stage 0 receives gets its bf16 copy there): early_steps_agree,
# then BF16_LOSS_TOL. Both without clipping: the clip scale divides by a norm summed per stage,
# which differs in its last bit between 1 and 2 stages, and the tiled attention's bf16
# roundings (of q, k, v, dO and the probabilities) amplify that to weights 1.2e-3 apart in 6
# steps (3.4e-6 unclipped).
# PipeDream, with matmul attention (its per-head products and the two reading their results
# take fp32 operands, the rest bf16): the backwards read the stashed weights' bf16 copies; a
# copy read before it is written holds NaN (the runtime's poison); bf16's tolerance against
# the CPU.
case_model halves 2 1f1b flash bf16 300 noclip
on halves cuda 2 --device cuda || fail "halves: --device cuda"
early_steps_agree "bf16 1F1B on two GPUs vs one stage" "$work/halves/cuda" "$work/half/cuda"
compare_devices "bf16 1F1B on two GPUs vs one stage" "$work/halves/cuda" "$work/half/cuda" "$BF16_LOSS_TOL" \
    "$BF16_WEIGHT_TOL"
# The CPU keeps the same activations in bf16 (its products widen them): there too, 1F1B on
# two stages must train as one stage, bit for bit, given one BLAS thread a stage in both
# runs (--threads: OpenBLAS's threaded sgemm sums some shapes, as vocabulary 300's, in an
# order that depends on its thread count).
on halves cpu 1 --device cpu --threads 2 || fail "halves: --device cpu"
compare_devices "bf16 1F1B on two CPU stages vs one" "$work/halves/cpu" "$work/half/cpu" 0 0
case_model stashed 2 pipedream matmul bf16
on stashed cuda 2 --device cuda || fail "stashed: --device cuda"
on stashed cpu 1 --device cpu || fail "stashed: --device cpu"
compare_devices "bf16 PipeDream on two GPUs vs the CPU" "$work/stashed/cuda" "$work/stashed/cpu" 1e-2 2e-2

# Two stages on one GPU: device links (runtime/links.c: a ring in device memory, copies on
# the two compute streams ordered by events, micro-batch numbers over the host channel). Lazy
# streams (FAKE_CUDA_LAZY=1): a stream runs an item only once a host wait or another stream's
# event wait depends on it, so a copy (or a kernel) that lacks its event wait reads memory
# not yet written in every run, and the losses leave the CPU's; evaluation hands the
# activations from stage to stage the same way (pr_device.follow).
case_model shared 2 1f1b matmul
FAKE_CUDA_LAZY=1 on shared cuda 1 --device cuda || fail "shared: --device cuda"
on shared cpu 1 --device cpu || fail "shared: --device cpu"
compare_devices "two stages, one GPU" "$work/shared/cuda" "$work/shared/cpu" "$LOSS_TOL" "$WEIGHT_TOL"
same_noise "two stages, one GPU, lazy streams" "$work/shared/cuda" "$work/shared/cpu"
[ "$(calls shared cuda ncclSend)" = 0 ] || fail "shared: NCCL used between stages on one GPU"
[ "$(calls shared cuda 'cuMemcpyAsync (device)')" -gt 0 ] || fail "shared: no device-to-device copies"
# The host waits for the GPU only where the schedule needs it (docs/gpu.md, "Host waits"): per
# step, each stage's clipping sums (p) and the last stage's loss after each forward (K);
# nothing per instruction, and nothing for the noise scale's sum (it rides on the clipping
# sums' download). Counted by the fake over step 2 alone (the runs of 1 and 2 steps
# differ by that step): cuStreamSynchronize and cuEventSynchronize calls, and copies to host
# memory (each returns when done).
FAKE_CUDA_LAZY=1 on shared wait1 1 --device cuda --steps 1 --no-checkpoint || fail "shared: --steps 1"
FAKE_CUDA_LAZY=1 on shared wait2 1 --device cuda --steps 2 --no-checkpoint || fail "shared: --steps 2"
# Post-validated (docs/dsl.md, "Post-validation"), a step the norm clipped is rolled back and
# the window after it runs again: where step 1 was, step 2's window downloads its K losses twice.
redone=$(python3 -c 'import json, sys
print(sum(r["post_validation"]["rolled_back_clipped"] + r["post_validation"]["rolled_back_not_finite"]
          for r in map(json.loads, open(sys.argv[1])) if "post_validation" in r))' "$work/shared/wait1/metrics.jsonl")
needed=$((2 + 2 + 2 * redone)) # p = 2 stages, K = window 2, and K again for a redone window
for what in 'host waits' 'cuMemcpyAsync (to host)'; do
    per_step=$(($(calls shared wait2 "$what") - $(calls shared wait1 "$what")))
    [ "$per_step" -le "$needed" ] || fail "shared: $per_step $what in a step, the schedule needs $needed"
    echo "shared: $per_step $what per step (p + K = 4, and K = 2 for each of $redone window run again: $needed)"
done
echo "shared: $(calls shared cuda 'cuMemcpyAsync (device)') device-to-device copies, $(calls shared cuda cuStreamWaitEvent) stream waits"

# Three stages on three GPUs: NCCL between them; every stream item waits a random 0..300 us
# (FAKE_CUDA_JITTER_US), so a missing wait between streams shows up as wrong data.
case_model three 3 paci flash fp32 300
FAKE_CUDA_JITTER_US=300 on three cuda 3 --device cuda || fail "three: --device cuda"
on three cpu 1 --device cpu || fail "three: --device cpu"
compare_devices "three stages, three GPUs" "$work/three/cuda" "$work/three/cpu" "$LOSS_TOL" "$WEIGHT_TOL"
sends=$(calls three cuda ncclSend)
[ "$sends" -gt 0 ] || fail "three: no NCCL send"
# The memory check's context is kept for the stage, not destroyed and made again.
[ "$(calls three cuda 'context created')" = 3 ] || fail "three: $(calls three cuda 'context created') contexts made for 3 GPUs"
echo "three: $sends NCCL sends, one context per GPU"
# The same three stages on one GPU: PACI's interleaved sends and receives over device links,
# on lazy streams. They carry the same bytes as NCCL: the run equals the three-GPU one.
FAKE_CUDA_LAZY=1 on three onegpu 1 --device cuda || fail "three: three stages on one GPU"
compare_devices "three stages, one GPU vs three GPUs" "$work/three/onegpu" "$work/three/cuda" 0 0
# An early stop (--steps 2) travels as a stop mark in the micro-batch word of a sender's ring
# slot. With every NCCL receive 200 ms late (FAKE_NCCL_RECV_DELAY_US) each send stays
# unfinished while its sender computes on: a sender that rewrote a slot before the slot's
# previous send completed would deliver a wrong micro-batch number (as "stage S: a stop after
# step 2 arrived in place of micro-batch 3", seen once in the GPU check's dry run). The delay
# only slows a correct run.
FAKE_CUDA_JITTER_US=300 FAKE_NCCL_RECV_DELAY_US=200000 on three stop 3 --device cuda --steps 2 --no-checkpoint ||
    fail "three: --steps 2 with late NCCL receives"
[ "$(grep -c '"loss"' "$work/three/stop/metrics.jsonl")" = 2 ] || fail "three: --steps 2 logged no 2 steps"
echo "three: stopped after step 2 with every NCCL receive 200 ms late"

# Two processes, one stage each, on two GPUs (the local rank picks the GPU): shared's program
# (its attention is no matter here), against its CPU run.
pids=()
for r in 0 1; do
    mkdir -p "$work/shared/rank$r"
    (cd "$work/shared/rank$r" && RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        LD_LIBRARY_PATH=$work/shared/lib FAKE_CUDA_GPUS=2 FAKE_CUDA_REPORT=1 FAKE_CUDA_JITTER_US=300 \
        ../run --quiet --device cuda --metrics metrics.jsonl --connect-timeout 60 2> err.txt) &
    pids+=($!)
done
for r in 0 1; do
    wait "${pids[$r]}" || { cat "$work/shared/rank$r/err.txt" >&2; fail "ranks: rank $r"; }
done
# the last rank logs the losses; rank 0 holds the checkpoint
mkdir -p "$work/shared/joined"
cp "$work/shared/rank1/metrics.jsonl" "$work/shared/joined/metrics.jsonl"
cp -r "$work/shared/rank0/ckpt" "$work/shared/joined/ckpt"
compare_devices "two processes, two GPUs" "$work/shared/joined" "$work/shared/cpu" "$LOSS_TOL" "$WEIGHT_TOL"
[ "$(calls shared rank0 ncclSend)" -gt 0 ] || fail "ranks: rank 0 sent nothing over NCCL"

# The same under mpirun where run has MPI: the NCCL ids travel by MPI_Allgather.
if [ -f build/lib/pacic/libpacirt_mpi.a ] && command -v mpirun > /dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # root in a container
    mkdir -p "$work/shared/mpi0" "$work/shared/mpi1" "$work/shared/mpi"
    (unset MASTER_ADDR MASTER_PORT RANK WORLD_SIZE LOCAL_RANK
     LD_LIBRARY_PATH=$work/shared/lib FAKE_CUDA_GPUS=2 FAKE_CUDA_REPORT=1 FAKE_CUDA_JITTER_US=300 \
        mpirun --oversubscribe --mca btl_vader_single_copy_mechanism none -x LD_LIBRARY_PATH -x FAKE_CUDA_GPUS \
        -x FAKE_CUDA_REPORT -x FAKE_CUDA_JITTER_US -np 2 sh -c "cd $work/shared/mpi\$OMPI_COMM_WORLD_RANK && exec \
        ../run --device cuda --metrics metrics.jsonl --master-port $((port + 1)) > out.txt 2> err.txt") ||
        { cat "$work"/shared/mpi*/err.txt >&2; fail "ranks: mpirun -np 2 ./run --device cuda"; }
    cp "$work/shared/mpi1/metrics.jsonl" "$work/shared/mpi/metrics.jsonl"
    cp -r "$work/shared/mpi0/ckpt" "$work/shared/mpi/ckpt"
    compare_devices "mpirun, two GPUs" "$work/shared/mpi" "$work/shared/cpu" "$LOSS_TOL" "$WEIGHT_TOL"
    [ "$(calls shared mpi0 ncclSend)" -gt 0 ] || fail "ranks: rank 0 sent nothing over NCCL under mpirun"
    grep -q "collectives over MPI" "$work/shared/mpi0/out.txt" ||
        fail "ranks: mpirun did not take the MPI bootstrap: $(head -2 "$work/shared/mpi0/out.txt")"
else
    skip_part "mpirun -np 2 on two fake GPUs (run built without MPI, or no mpirun)"
fi

# Too little memory: the stage, the GPU and the shortfall are named before anything runs.
out=$(cd "$work/one" && LD_LIBRARY_PATH=$work/one/lib FAKE_CUDA_MEM_MIB=100 ./run --device cuda --quiet 2>&1) &&
    fail "ran in 100 MiB"
case "$out" in
    "run: error: stage 0 on GPU 0: needs "*" GiB free: short by "*" GiB"*) echo "refused: $out" ;;
    *) fail "unexpected message for too little memory: $out" ;;
esac
# No GPU: --device cuda is refused, the default falls back to the CPU with a notice.
out=$(cd "$work/one" && LD_LIBRARY_PATH=$work/one/lib FAKE_CUDA_GPUS=0 ./run --device cuda --quiet 2>&1) &&
    fail "--device cuda ran without a GPU"
case "$out" in
    "run: error: --device cuda: no usable GPU: "*) echo "refused: $out" ;;
    *) fail "unexpected message without a GPU: $out" ;;
esac
# cuBLASLt is loaded when a stage opens on a GPU: one that does not load is one line naming it.
mkdir -p "$work/broken_lt"
cp "$work/one/lib/libcuda.so.1" "$work/one/lib/libnccl.so.2" "$work/broken_lt/"
: > "$work/broken_lt/libcublasLt.so.13" # found first, and not a library
out=$(cd "$work/one" && LD_LIBRARY_PATH=$work/broken_lt FAKE_CUDA_GPUS=1 ./run --device cuda --quiet 2>&1) &&
    fail "ran without a loadable cuBLASLt"
case "$out" in
    "run: error: cuBLASLt is needed on the GPU, and libcublasLt.so.13 does not load ($work/broken_lt/libcublasLt.so.13: "*")")
        echo "refused: $out" ;;
    *) fail "unexpected message for a cuBLASLt that does not load: $out" ;;
esac
echo "the real GPU layer on the fake CUDA stack matches the CPU path"
