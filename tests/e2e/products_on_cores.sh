#!/usr/bin/env bash
# A model whose products are large enough to be cut on a stage's cores (runtime/gemm.c: 512
# tokens a micro-batch at width 256, each product at least 2^24 multiply-adds): gpipe at p = 1
# on 2 cores (every large product cut in two blocks, each an OpenBLAS call on one thread) and
# at p = 2 on 1 core a stage (every product whole) train to the same bits over 2 steps with
# the SSE3 kernels (and AVX-512's: bench/gemm_cut_bits.sh). A control shows the products were
# cut and that the comparison sees it: OpenBLAS's AVX2 kernels sum a cut block differently from
# the whole product, so with them p = 1 at 2 cores and at 1 core differ (where the CPU has
# AVX2 and FMA; else that part is skipped).
source tests/e2e/lib.sh

sse3_kernels

# model NAME STAGES: 2 layers of width 256, context 64, micro-batch 8, window 2, 2 steps.
model() {
    cat > "$work/$1.paci" <<DSL
model gpt2 { layers 2; width 256; heads 4; context 64; vocab 256 }
pipeline { stages $2; schedule gpipe; window 2 }
batch { micro 8 }
train {
    data "$data/tiny_train.bin"
    steps 2
    optimizer adamw { lr 1e-3; clip 1.0 }
    checkpoint { every 2; dir "ckpt" }
}
DSL
}

# same A B: A's and B's step-2 checkpoints and losses (same_checkpoint).
same() { same_checkpoint "$1" "$2" 2; }

model p1 1
model p2 2
train p1 --threads 2
train p2 --threads 2
same p1 p2 || fail "gpipe at p = 1 on 2 cores (products cut) and at p = 2 on 1 core a stage differ"
echo "gpipe, p = 1 on 2 cores (products cut in blocks) and p = 2 on 1 core a stage: the same bits over 2 steps"

if [ $x86 = 1 ] && grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
    OPENBLAS_CORETYPE=Haswell again p1 p1-hw1 --threads 1
    OPENBLAS_CORETYPE=Haswell again p1 p1-hw2 --threads 2
    same p1-hw1 p1-hw2 && fail "the AVX2 kernels gave the same bits at 1 and 2 cores: were the products cut?"
    echo "control: with the AVX2 kernels, which sum a cut block differently, 2 cores and 1 differ: the products were cut"
else
    skip_part "the check that the products were cut needs an x86-64 CPU with AVX2 and FMA"
fi
