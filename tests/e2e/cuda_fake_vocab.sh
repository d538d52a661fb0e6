#!/usr/bin/env bash
# The GPU path under the vocabulary split (`vocab_split 128` of the small model's 256 rows;
# tests/e2e/vocab_split.sh shows the CPU path equal to one stage): the stage before the last
# runs the final LayerNorm and its rows' logits and partial log-sum-exp, the last its rows'
# classifier, and the two exchange the split's own messages. On the fake CUDA stack (fp32 and
# bf16, where the logits and dlogits are bf16 in place), it must train as the CPU path of the
# same program, to cuda_fake.sh's tolerances:
#   - three stages on three GPUs (NCCL between every pair), and under bf16 on one GPU (device
#     links);
#   - sampling, which assembles the probabilities from both stages' rows;
#   - data 2 x 2 stages as four processes: the window's last backward starts an allreduce for
#     each range of gradients it finishes, the head's rows on both stages included.
# bf16 runs with `messages bf16` (the residual stream and the gradients between stages in bf16
# too): its logits path is bf16's, and the conversions run on the GPU.
# Skips where tests/cuda_emu cannot run (need_cuda_emu).
source tests/e2e/lib.sh
need_cuda_emu
export PACIC_CACHE=$work/cache

# vocab_model NAME PRECISION [PIPELINE]: the 2-layer small model over 3 stages, split [1, 1, 0]
# and vocab_split 128 (1F1B, window 2, 4 steps, evaluation every 2) and PIPELINE's keys, with
# its fake CUDA stack.
vocab_model() {
    small_model "$1" 3 1f1b 2 4 2
    sed -i -e "s/^train {/train {\n    precision $2/" -e "s/layers 4;/layers 2;/" \
        -e "s/^pipeline { \(.*\) }$/pipeline { \1; split [1, 1, 0]; vocab_split 128${3:+; $3} }/" "$work/$1.paci"
    grep -q "vocab_split 128" "$work/$1.paci" || fail "vocab_split edit did not apply"
    fake_build "$1"
}

for name in fp32 bf16-messages; do
    precision=${name%-messages}
    extra=""
    [ "$name" = bf16-messages ] && extra="messages bf16"
    vocab_model "$name" "$precision" "$extra"
    on_fake_gpus 3 "$name" cuda --device cuda || fail "$name: --device cuda on 3 GPUs"
    on_fake_gpus 3 "$name" cpu --device cpu || fail "$name: --device cpu"
    tolerances="1e-5 1e-4"
    [ "$precision" = bf16 ] && tolerances="1e-2 2e-2"
    # shellcheck disable=SC2086 # two numbers
    compare_devices "vocab_split 128 $name, 3 GPUs" "$work/$name/cuda" "$work/$name/cpu" $tolerances
    if [ "$precision" = bf16 ]; then
        on_fake_gpus 1 "$name" shared --device cuda || fail "$name: --device cuda, 3 stages on 1 GPU"
        # shellcheck disable=SC2086
        compare_devices "vocab_split 128 $name, 1 GPU" "$work/$name/shared" "$work/$name/cpu" $tolerances
    fi
    # sampling from the trained weights: fp32 probabilities agree closely enough to draw the
    # same tokens; bf16 ones only need to give a sample
    gpu_text=$(cd "$work/$name/cuda" && LD_LIBRARY_PATH=$work/$name/lib FAKE_CUDA_GPUS=3 \
        ../run --device cuda --sample 24 --seed 1 2>&1) || fail "$name: --sample on the GPU: $gpu_text"
    cpu_text=$(cd "$work/$name/cuda" && ../run --device cpu --sample 24 --seed 1 2>&1) ||
        fail "$name: --sample on the CPU: $cpu_text"
    if [ "$precision" = fp32 ]; then
        [ "$gpu_text" = "$cpu_text" ] || fail "fp32: the GPU samples '$gpu_text', the CPU '$cpu_text'"
    else
        [ -n "$gpu_text" ] || fail "$name: the GPU sampled nothing"
    fi
done
echo "vocab_split 128 on fake GPUs (fp32 on 3 GPUs; bf16 with messages bf16 on 3 and on 1): trains as the CPU; fp32 samples as the CPU"

# Data 2 x 2 stages: stage 0 holds both layers, the LayerNorm and rows [0, 128), stage 1 the rest.
fake_replicas_model dp "[2, 0]"
sed -i "s/^pipeline { \(.*\) }$/pipeline { \1; vocab_split 128 }/" "$work/dp.paci"
fake_build dp
rm -rf "$work/dp/cpu"
mkdir -p "$work/dp/cpu"
(cd "$work/dp/cpu" && ../run --quiet --device cpu --metrics metrics.jsonl) || fail "dp: --device cpu"
fake_replicas_run dp
compare_devices "vocab_split 128, data 2 x 2 stages, four GPUs" "$work/dp/joined" "$work/dp/cpu" 1e-5 1e-4
# 6 steps: (4 ranges + the loss) on stage 0, (1 + 1) on stage 1
expect_allreduces dp 30 12
echo "data 2 with vocab_split 128 on four fake GPUs: an allreduce per range, the head's rows included; trains as the CPU"
