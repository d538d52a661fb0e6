#!/usr/bin/env bash
# Pipelined training under a synchronous schedule (gpipe, 1f1b) at p = 2, 3, 4 gives
# bit-identical losses, weights (model.bin) and optimizer state and head (state.bin) to
# p = 1 over 20 optimizer steps, at any number of cores a stage; PACI at p = 1 is synchronous
# training too. The shape would make OpenBLAS's own threads split its products (vocabulary
# 300: the LM head's products exceed its 64^3 threading threshold), and a kernel whose
# threaded sums round differently from its single-threaded ones is forced, so the test also
# shows that run's products do not depend on the thread count where OpenBLAS's threads do.
# tier: check
source tests/e2e/lib.sh

# SSE3 kernels (AVX-512's happen to sum this shape alike at 1 and 2 threads); with a
# machine's own OPENBLAS_CORETYPE, OpenBLAS's threaded mismatch below is not shown.
sse3_kernels

# model NAME STAGES SCHEDULE WINDOW: the small model with a vocabulary of 300.
model() {
    small_model "$1" "$2" "$3" "$4" 20
    sed -i 's/vocab 256 }/vocab 300 }/' "$work/$1.paci"
    grep -q "vocab 300" "$work/$1.paci" || fail "model edit did not apply"
}

# same A B: A's and B's step-20 checkpoints and losses (same_checkpoint).
same() { same_checkpoint "$1" "$2" 20; }

for schedule in gpipe 1f1b; do
    for p in 1 2 3 4; do
        model "$schedule-$p" $p $schedule 4
        train "$schedule-$p" --blas-threads 2
    done
done
model paci-1 1 paci 4
train paci-1 --blas-threads 2

reference=gpipe-1
[ "$(losses $reference | wc -l)" = 20 ] || fail "expected 20 logged steps"
for run in gpipe-2 gpipe-3 gpipe-4 1f1b-1 1f1b-2 1f1b-3 1f1b-4 paci-1; do
    same $reference $run || fail "$run: weights, optimizer state or losses differ from $reference"
done
echo "gpipe and 1f1b at p = 1..4 and paci at p = 1, 2 BLAS threads a stage: identical model.bin, state.bin and losses over 20 steps"

# Any thread count: a stage's products run on its own cores (a product large enough is cut
# into blocks, each an OpenBLAS call on one thread; none is at this shape), so one core a
# stage, two, and --threads 2 (2 cores at p = 1, 1 a stage at p = 2) all give the same bits.
again gpipe-1 gpipe-1-b1 --blas-threads 1
again gpipe-2 gpipe-2-b1 --blas-threads 1
again gpipe-1 gpipe-1-t2 --threads 2
again gpipe-2 gpipe-2-t2 --threads 2
for run in gpipe-1-b1 gpipe-2-b1 gpipe-1-t2 gpipe-2-t2; do
    same $reference $run || fail "$run differs from $reference: the thread count changed the bits"
done
echo "1 and 2 cores a stage, and --threads 2 at p = 1 and p = 2: the same bits"

# OpenBLAS's own threads (PACIRT_GEMM_THREADS=openblas, what run used before) sum this shape
# differently at 2 threads than at 1 with the SSE3 kernels: the comparison sees such last bits.
if [ $x86 = 1 ]; then
    PACIRT_GEMM_THREADS=openblas again gpipe-1 gpipe-1-ob1 --blas-threads 1
    PACIRT_GEMM_THREADS=openblas again gpipe-1 gpipe-1-ob2 --blas-threads 2
    same gpipe-1-b1 gpipe-1-ob1 || fail "OpenBLAS's own threads at 1 thread differ from the pool's products"
    same gpipe-1-ob1 gpipe-1-ob2 && fail "OpenBLAS's own threads gave the same bits at 1 and 2 threads: the comparison is blind to threading"
    differ=$(python3 - "$work/gpipe-1-ob1/ckpt/step_00000020/model.bin" "$work/gpipe-1-ob2/ckpt/step_00000020/model.bin" <<'PY'
import array, sys
def weights(path):
    w = array.array('f')
    w.frombytes(open(path, 'rb').read()[1024:])
    return w
a, b = weights(sys.argv[1]), weights(sys.argv[2])
d = [abs(x - y) for x, y in zip(a, b)]
print(f"{sum(1 for x in d if x)} of {len(d)} weights differ, by up to {max(d):.3g}")
PY
)
    echo "OpenBLAS's own threads, 1 against 2: $differ (the pool's products do not differ)"
fi

# The comparison must be able to fail whatever OpenBLAS does: a different window trains
# differently.
model gpipe-1-w2 1 gpipe 2
train gpipe-1-w2 --blas-threads 2
same $reference gpipe-1-w2 && fail "window 2 and window 4 gave the same weights: the comparison is blind"
out=$(cd "$work/gpipe-1" && ./run --threads 2 --blas-threads 2 2>&1) && fail "--threads with --blas-threads ran"
[ "$out" = "run: error: --threads and --blas-threads both set the BLAS threads: give one" ] \
    || fail "unexpected message: $out"
echo "window 2 differs from window 4; --threads with --blas-threads is refused"
