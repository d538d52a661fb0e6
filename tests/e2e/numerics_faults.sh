#!/usr/bin/env bash
# A non-finite loss or gradient is caught at the step it appears in, with the step, stage
# and tensor named, before any update. The trigger is real, not a hook: a run resumes from
# a checkpoint whose token-embedding row of '!' is +inf, so exactly the micro-batches that
# read a '!' produce a NaN (the steps are computed here from the token file).
#   on_nan stop (default): the run ends with one error line at the first such step and
#     never writes a checkpoint after it; the ones before it stay loadable.
#   on_nan skip: exactly those steps are skipped (one warning each), the run completes, and
#     every checkpoint value is finite but the injected row (AdamW turns its inf into NaN
#     at the first step, as it would any inf it is given: 0 * inf).
# Both under 1f1b, whose global clipping norm lets every stage see every stage's sums, and
# under paci, whose stages step on their own and must each find the fault in their own
# loss or gradients: there each stage warns of its own tensors at every such step.
source tests/e2e/lib.sh
steps=40
bang=33  # '!'

# model NAME SCHEDULE [ON_NAN]: the small model on 2 stages, checkpoints every 2 steps, no
# weight decay (the generated AdamW once wrote `0f`, an invalid literal, for it).
model() {
    small_model "$1" 2 "$2" 2 $steps 0 2
    sed -i 's/clip 0.5 }/clip 0.5; weight_decay 0 }/' "$work/$1.paci"
    [ -n "${3:-}" ] && sed -i "s/^    steps $steps\$/    steps $steps\n    on_nan $3/" "$work/$1.paci"
    grep -q "weight_decay 0" "$work/$1.paci" || fail "model edit did not apply"
}

# The steps (1-based) whose micro-batches read a '!' as input, from the token file itself:
# micro-batch g, sequence b starts at chunk (g*B+b) mod chunks, T tokens (runtime/data.c).
expected=$(python3 - "$data/tiny_train.bin" $steps $bang <<'PY'
import array, struct, sys
path, steps, bang = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
raw = open(path, 'rb').read()
n = struct.unpack('<3i', raw[:12])[2]
tokens = array.array('H'); tokens.frombytes(raw[1024:1024 + 2 * n])
B, T, K = 2, 16, 2
chunks = (n - 1) // T
hit = []
for t in range(steps):
    seqs = [((g * B + b) % chunks) * T for g in range(t * K, (t + 1) * K) for b in range(B)]
    if any(bang in tokens[s:s + T] for s in seqs):
        hit.append(str(t + 1))
print(' '.join(hit))
PY
)
first=${expected%% *}
[ -n "$first" ] && [ "$expected" != "$first" ] || fail "the data has no or one step with '!' ($expected)"

# poisoned_start NAME: trains NAME for 2 steps (no '!' read yet), then sets row '!' of wte
# in that checkpoint to +inf (the head is untied: its own row stays finite).
poisoned_start() {
    train "$1" --steps 2
    poison_row "$work/$1/ckpt/step_00000002/model.bin" $bang
}

# finite_except_row DIR: every float of DIR's state.bin is finite, and of model.bin all but
# those of the injected row.
finite_except_row() {
    python3 - "$1" $bang <<'PY'
import math, struct, sys
folder, row = sys.argv[1], int(sys.argv[2])
model = open(folder + '/model.bin', 'rb').read()
width = struct.unpack('<256i', model[:1024])[6]
floats = struct.unpack('<%df' % ((len(model) - 1024) // 4), model[1024:])
bad = [i for i, x in enumerate(floats) if not math.isfinite(x)]
want = list(range(row * width, (row + 1) * width))
if bad != want:
    sys.exit('%s/model.bin: non-finite floats at %s, expected exactly row %d' % (folder, bad[:8], row))
state = open(folder + '/state.bin', 'rb').read()
values = struct.unpack('<%df' % ((len(state) - 128) // 4), state[128:])
if not all(math.isfinite(x) for x in values):
    sys.exit('%s/state.bin: non-finite optimizer state' % folder)
PY
}

[ "${expected%% *}" -gt 2 ] || fail "a '!' in steps 1..2: pick another byte"
for schedule in 1f1b paci; do
    stop=stop-$schedule skip=skip-$schedule
    model $stop $schedule
    poisoned_start $stop
    if train $stop --resume 2> "$work/$stop.err"; then
        fail "$schedule, on_nan stop: the run went on past a NaN"
    fi
    line=$(grep -m1 '^run: error: ' "$work/$stop.err")
    grep -Eq "^run: error: step $first, stage [01]: (the loss is not finite|the gradient of [a-z0-9_.]+ is not finite|stage [01]'s gradient of [a-z0-9_.]+ is not finite)" <<< "$line" \
        || fail "$schedule, on_nan stop: expected an error at step $first naming stage and tensor, got: $(cat "$work/$stop.err")"
    last_ok=$(( (first - 1) / 2 * 2 ))
    [ "$(cat "$work/$stop/ckpt/latest")" = "$(printf 'step_%08d' $last_ok)" ] \
        || fail "$schedule, on_nan stop: latest is $(cat "$work/$stop/ckpt/latest"), expected step $last_ok"
    for d in "$work"/$stop/ckpt/step_*; do
        [ "${d##*step_}" -lt "$first" ] || fail "$schedule, on_nan stop: a checkpoint at or after the fault: $d"
        finite_except_row "$d" || fail "$schedule, on_nan stop: $d holds a non-finite value"
    done
    echo "$schedule, on_nan stop: $line"

    model $skip $schedule skip
    poisoned_start $skip
    train $skip --resume 2> "$work/$skip.err" || fail "$schedule, on_nan skip: $(cat "$work/$skip.err")"
    # Each stage skips each such step: stage 0 for its gradients, stage 1 for its loss.
    for s in 0 1; do
        skipped=$(sed -n "s/^run: warning: step \([0-9]*\), stage $s: .*; the step is skipped (on_nan skip)\$/\1/p" \
            "$work/$skip.err" | sort -n | uniq | tr '\n' ' ')
        [ "${skipped% }" = "$expected" ] || fail "$schedule, on_nan skip: stage $s skipped steps '$skipped', expected '$expected'"
    done
    if [ $schedule = paci ] && grep -q "clipping norm is global" "$work/$skip.err"; then
        fail "paci, on_nan skip: a stage judged by another's gradients: $(grep -m1 global "$work/$skip.err")"
    fi
    finite_except_row "$work/$skip/ckpt/step_$(printf %08d $steps)" || fail "$schedule, on_nan skip: poisoned checkpoint"
    # A skipped step's loss is NaN: the metrics say null, so that every line stays JSON.
    python3 -c 'import json, sys; [json.loads(line) for line in open(sys.argv[1])]' "$work/$skip/metrics.jsonl" ||
        fail "$schedule, on_nan skip: a metrics line is not JSON"
    grep -q '"loss": null' "$work/$skip/metrics.jsonl" || fail "$schedule, on_nan skip: no null loss in the metrics"
    echo "$schedule, on_nan skip: steps $expected skipped by both stages (each the step a '!' was read), the other $((steps - $(echo $expected | wc -w))) trained; checkpoints finite"
done
