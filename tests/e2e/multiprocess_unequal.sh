#!/usr/bin/env bash
# One process per stage with unequal stages (split [1, 4, 1], and [0, 6, 0]: an
# embedding-only and a head-only stage; 1f1b, global clipping): the ranks exchange
# per-tensor gradient sums of different lengths every step. Trains bit-identically to the
# threaded run. Under ASan (make sanitize) this is the case where a rank sending more sums
# than its stage holds would read past its buffer.
source tests/e2e/lib.sh

for split in "1, 4, 1" "0, 6, 0"; do
rm -rf "$work/unequal" "$work/mp"
cat > "$work/unequal.paci" <<DSL
model gpt2 { layers 6; width 32; heads 2; context 16; vocab 256 }
pipeline { stages 3; schedule 1f1b; window 2; split [$split] }
batch { micro 2 }
train {
    data "$data/tiny_train.bin"
    steps 4
    optimizer adamw { lr 3e-3; clip 0.5 }
    checkpoint { every 0; dir "ckpt" }
}
DSL
train unequal
pids=()
for r in 0 1 2; do
    mkdir -p "$work/mp/rank$r"
    (cd "$work/mp/rank$r" && RANK=$r WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "$work/unequal/run" --quiet --metrics metrics.jsonl --connect-timeout 60 >out.txt 2>err.txt) &
    pids+=($!)
done
rc=0
for r in 0 1 2; do
    wait "${pids[$r]}" || { rc=1; echo "rank $r failed:" >&2; head -8 "$work/mp/rank$r/err.txt" >&2; }
done
[ $rc = 0 ] || fail "a rank of the unequal 3-process run failed"
[ "$(losses unequal | wc -l)" = 4 ] || fail "expected 4 logged steps"
[ "$(losses unequal)" = "$(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$work/mp/rank2/metrics.jsonl")" ] \
    || fail "the last rank's losses differ from the threaded run's"
for f in model.bin state.bin; do
    cmp "$work/unequal/ckpt/step_00000004/$f" "$work/mp/rank0/ckpt/step_00000004/$f" \
        || fail "$f differs from the threaded run's"
done
echo "3 processes, split [$split], global clipping: identical to the threaded run"
done
