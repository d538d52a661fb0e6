#!/usr/bin/env bash
# The tiny example learns Tiny Shakespeare: after 60 of its 600 steps (about 20 s on two
# cores) the validation loss is below 2.9 nats per byte (it starts at ln 256 = 5.55 and is
# 2.78 there; README states what the full default run reaches).
source tests/e2e/lib.sh

cp "$root/examples/tiny.paci" "$work/tiny.paci"
sed -i "s|\"data/|\"$data/|" "$work/tiny.paci"
train tiny --steps 60
val=$(sed -n 's/.*"val_loss": \([0-9.]*\).*/\1/p' "$work/tiny/metrics.jsonl" | tail -1)
[ -n "$val" ] || fail "no validation loss logged"
awk -v v="$val" 'BEGIN { exit !(v < 2.9) }' || fail "validation loss $val after 60 steps, expected < 2.9"
sample=$(cd "$work/tiny" && ./run --sample 200 2>&1) || fail "sampling failed"
[ "${#sample}" -ge 150 ] || fail "sample too short: $sample"
echo "validation loss after 60 steps: $val"
