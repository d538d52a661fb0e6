#!/usr/bin/env bash
# `train { data_order shuffled }`: the training sequences in a per-epoch permutation keyed by
# the seed. The order depends only on the micro-batch number, so a pipelined synchronous run
# still equals one stage to the bit, and a resume continues the same order; the shuffled
# order is not the file's (the first step's loss differs), and another seed reorders it.
source tests/e2e/lib.sh

shuffled() { sed -i 's/^    steps \(.*\)$/    steps \1\n    data_order shuffled/' "$work/$1.paci"; grep -q "data_order shuffled" "$work/$1.paci" || fail "edit of $1 did not apply"; }

small_model sequential 1 1f1b 2 6
small_model one 1 1f1b 2 6
shuffled one
small_model three 3 1f1b 2 6
shuffled three
for name in sequential one three; do train "$name" --blas-threads 1; done
[ "$(losses one)" = "$(losses three)" ] || fail "shuffled: 3 stages of 1f1b differ from one stage"
[ "$(losses one | head -1)" != "$(losses sequential | head -1)" ] ||
    fail "shuffled: the first step's loss equals the file order's: the order did not change"
cmp -s "$work/one/ckpt/step_00000006/model.bin" "$work/three/ckpt/step_00000006/model.bin" ||
    fail "shuffled: weights of 3 stages differ from one stage"
echo "shuffled: 1f1b on 3 stages == one stage (losses, weights); the order is not the file's"

# Another seed: another order (and other initial weights: the seed sets both).
small_model reseeded 1 1f1b 2 6
shuffled reseeded
sed -i 's/^    data_order shuffled$/    data_order shuffled\n    seed 7/' "$work/reseeded.paci"
train reseeded --blas-threads 1
[ "$(losses reseeded | head -1)" != "$(losses one | head -1)" ] || fail "seed 7 gives seed 1337's first loss"

# Resume: 10 + 10 steps read what 20 straight steps read.
split_model straight 2 paci "" 0 10
shuffled straight
resumes_bit_for_bit "paci, data_order shuffled"

# `pacic --dump config` says the order; a wrong word is an error naming the file and line.
"$pacic" "$work/one.paci" --dump config | grep -qx "  data_order shuffled" || fail "--dump config does not say the order"
sed 's/data_order shuffled/data_order random/' "$work/one.paci" > "$work/bad.paci"
if "$pacic" "$work/bad.paci" --dump config > "$work/bad.out" 2>&1; then fail "data_order random accepted"; fi
grep -q "bad.paci:[0-9]*:[0-9]*: .*data_order" "$work/bad.out" || fail "unclear error: $(cat "$work/bad.out")"
echo "--dump config says the order; data_order random: $(head -1 "$work/bad.out")"
