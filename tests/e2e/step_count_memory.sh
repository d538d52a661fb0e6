#!/usr/bin/env bash
# A program at a huge step count (2,000,000,000, near the DSL's 2^31 - 1) run for 2 steps
# with --steps 2: the runtime's memory does not grow with the step count (the last stage's
# per-step losses sit in a ring as long as its slots, not an array of every step), so it
# trains under an 800 MB address-space limit (a byte a step would take 2 GB), and it ends
# after its 2 steps without walking the rest of the 2e9-step segment. The limit leaves room
# for what does not grow: each stage thread's OpenBLAS buffer (128 MB of addresses with the
# AVX-512 kernels, one more when both stages multiply at once) and glibc's malloc arena a
# thread (64 MB). Under 400 MB, a run whose two stages first multiplied at the same moment
# could not map the second buffer, and OpenBLAS retries a failed map forever: the run hung
# (3 runs of 27 here); a timeout now turns such a hang into a failure.
source tests/e2e/lib.sh
export PACIC_NO_CUDA=1 # the CPU program only: the CUDA libraries alone map more than the limit

cat > "$work/huge.paci" <<DSL
model gpt2 { layers 2; width 16; heads 2; context 8; vocab 256 }
pipeline { stages 2; schedule 1f1b; window 2 }
batch { micro 2 }
train { data "$data/tiny_train.bin"; steps 2000000000 }
DSL
"$pacic" "$work/huge.paci" -o "$work/run" || fail "pacic refuses steps 2000000000"
status=0
(cd "$work" && ulimit -v 800000 && OPENBLAS_NUM_THREADS=1 timeout -k 10 120 ./run --steps 2 --threads 1 > out.txt 2>&1) ||
    status=$?
[ "$status" != 124 ] && [ "$status" != 137 ] || fail "run --steps 2 of a 2e9-step program under ulimit -v 800000 did not end in 120 s: $(head -3 "$work/out.txt")"
[ "$status" = 0 ] || fail "run --steps 2 of a 2e9-step program under ulimit -v 800000 exits $status: $(head -3 "$work/out.txt")"
grep -q "^step 2/2 loss" "$work/out.txt" || fail "no step 2/2 line: $(head -3 "$work/out.txt")"
[ -f "$work/checkpoints/step_00000002/model.bin" ] || fail "no checkpoint at step 2"
echo "2 steps of a 2e9-step program trained in under 800 MB of address space"
