#!/usr/bin/env bash
# Optimizer post-validation (docs/dsl.md, "Post-validation"): a synchronous schedule clipping
# by the global norm steps without waiting for it, and rolls back and redoes (with the window
# run since) every step the norm turns out to clip. zb-h2 at p = 4, K = 8, clip 1.0 equals its
# barrier run (post_validation false) to the bit: every logged loss and grad_norm, model.bin
# and state.bin at every checkpoint:
#   - 42 steps from scratch, a checkpoint every 24 (the check of a segment's last step comes at
#     its end): clipping triggers in some steps, as many as the barrier run's grad_norm says
#     exceed 1.0, and the summary and --metrics count exactly those;
#   - steps 25-42 resumed from the same checkpoint: clipping triggers in none (0 rolled back);
#   - on_nan skip from a checkpoint whose embedding row of '!' is +inf: the same steps skipped,
#     on threads and as 4 processes;
#   - 1f1b and gpipe at p = 4, clip 0.5, 20 steps: equal too; one stage has nothing to check;
#   - zb-h2 as 4 processes over TCP (the sums go through the bootstrap's allgather, on a
#     thread of its own): the threaded run's bits.
# And --explain prices the schedules without the barrier: on examples/gpt2-medium-8.paci at
# zb-h2, window 16, fp32, clip 1.0, zb-h2's bubble is below half of zb-h1's, and not with
# post_validation false.
# tier: check
source tests/e2e/lib.sh

# model NAME SCHEDULE WINDOW STEPS CKPT POST_VALIDATION: the small model on 4 stages, clip 1.0.
model() {
    small_model "$1" 4 "$2" "$3" "$4" 0 "$5"
    sed -i "s/clip 0.5 }/clip 1.0; post_validation $6 }/" "$work/$1.paci"
    grep -q "post_validation $6" "$work/$1.paci" || fail "model edit of $1 did not apply"
}

# same A B STEP: A's and B's checkpoints at STEP hold the same bits and they logged the same
# losses and norms.
same() {
    local a=$work/$1/ckpt/$(printf step_%08d "$3") b=$work/$2/ckpt/$(printf step_%08d "$3")
    cmp -s "$a/model.bin" "$b/model.bin" && cmp -s "$a/state.bin" "$b/state.bin" &&
        [ "$(norms "$1")" = "$(norms "$2")" ] && [ "$(losses "$1")" = "$(losses "$2")" ]
}

norms() {
    sed -n 's/.*"grad_norm": \([^,]*\),.*/\1/p' "$work/$1/metrics.jsonl"
}

# rolled NAME: "checked clipped not_finite waited" from NAME's metrics record.
rolled() {
    python3 - "$work/$1/metrics.jsonl" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
pv = [r['post_validation'] for r in records if 'post_validation' in r]
pv = pv[-1:]  # a resumed run appends its own
print('%d %d %d %d' % (pv[0]['steps_checked'], pv[0]['rolled_back_clipped'], pv[0]['rolled_back_not_finite'],
                       pv[0]['steps_waited']) if pv else 'none')
PY
}

# clipping NAME: how many of NAME's steps logged a grad_norm above 1.0 (the clip).
clipping() {
    norms "$1" | awk '$1 > 1.0 { n++ } END { print n + 0 }'
}

# expected NAME [CLIP]: "checked clipped 0 waited" that post-validation reports for the norms NAME
# logged with the barrier at clip CLIP (1.0 unless said): a step after one that clipped waits for the norm, the others are
# taken on trust, and those of them that clip are rolled back.
expected() {
    norms "$1" | awk -v clip="${2:-1.0}" '{ if (n > 0 && last > clip) waited++; else { checked++; if ($1 > clip) rolled++ }
                        last = $1; n++ } END { printf "%d %d 0 %d\n", checked, rolled, waited }'
}

# Some steps clip: from scratch, 42 steps.
model on zb-h2 8 42 24 true
model off zb-h2 8 42 24 false
# (train runs --quiet, which prints no summary: the second run prints it.)
for name in on off; do
    mkdir -p "$work/$name"
    "$pacic" "$work/$name.paci" -o "$work/$name/run" || fail "$name did not compile"
    (cd "$work/$name" && ./run --metrics metrics.jsonl --blas-threads 1) > "$work/$name.out" 2>&1 ||
        fail "zb-h2 $name did not train: $(cat "$work/$name.out")"
done
for step in 24 42; do
    same on off $step || fail "zb-h2, clip 1.0, 42 steps: post-validated and barrier runs differ at step $step"
done
clipped=$(clipping off)
[ "$clipped" -gt 0 ] && [ "$clipped" -lt 42 ] || fail "expected some of 42 steps to clip, $clipped did"
read -r checked rolled _ waited <<< "$(expected off)"
[ "$rolled" -gt 1 ] || fail "expected more than one step to roll back: '$(expected off)'"
[ "$(rolled on)" = "$(expected off)" ] || fail "the metrics say '$(rolled on)', expected '$(expected off)'"
grep -q "^post-validation: $rolled of $checked steps taken on trust rolled back and redone ($rolled clipped, 0 not finite), $waited after those waiting for the norm; kept to roll back: stage 0 " "$work/on.out" ||
    fail "no or a wrong post-validation summary line: $(grep post-validation "$work/on.out")"
[ "$(rolled off)" = none ] && ! grep -q '^post-validation' "$work/off.out" || fail "the barrier run reports post-validation"
echo "zb-h2, p = 4, K = 8, clip 1.0, 42 steps: clipping triggered in $clipped; $checked steps taken on trust, $rolled of them rolled back and redone, $waited waited for the norm after one that clipped; the barrier run's bits at steps 24 and 42"

# None clip: steps 25-42 from step 24's checkpoint.
for name in on off; do
    mkdir -p "$work/$name-resumed/ckpt"
    cp "$work/$name.paci" "$work/$name-resumed.paci"
    cp -r "$work/on/ckpt/step_00000024" "$work/$name-resumed/ckpt/"
    echo step_00000024 > "$work/$name-resumed/ckpt/latest"
    train "$name-resumed" --blas-threads 1 --resume > /dev/null 2>&1 || fail "$name: the resume did not train"
done
same on-resumed off-resumed 42 || fail "zb-h2, clip 1.0, steps 25-42: post-validated and barrier runs differ"
[ "$(clipping off-resumed)" = 0 ] || fail "steps 25-42 were to clip in none, $(clipping off-resumed) did"
[ "$(rolled on-resumed)" = "18 0 0 0" ] || fail "resumed: the metrics say '$(rolled on-resumed)', expected '18 0 0 0'"
echo "zb-h2, steps 25-42 resumed: clipping triggered in none, nothing rolled back; the barrier run's bits"

# on_nan skip: the micro-batches that read '!' give NaN losses and gradients. Clip 100 clips
# nothing, so the step that meets them is taken on trust; every stage skips it on its own
# loss or sums, and the step after each skipped one waits for the norm.
for name in nan-on nan-off; do
    model $name zb-h2 8 12 2 "$([ $name = nan-on ] && echo true || echo false)"
    sed -i "s/clip 1.0;/clip 100;/" "$work/$name.paci"
    sed -i "s/^    steps 12\$/    steps 12\n    on_nan skip/" "$work/$name.paci"
    grep -q "on_nan skip" "$work/$name.paci" || fail "on_nan edit of $name did not apply"
    train $name --blas-threads 1 --steps 2 > /dev/null
    poison_row "$work/$name/ckpt/step_00000002/model.bin" 33
    [ $name = nan-off ] || cp -r "$work/$name/ckpt" "$work/nan-poisoned" # the start of the processes below
    train $name --blas-threads 1 --resume > /dev/null 2> "$work/$name.err" || fail "$name: $(cat "$work/$name.err")"
done
skipped=$(skipped_steps < "$work/nan-on.err")
[ -n "$skipped" ] && [ "$skipped" = "$(skipped_steps < "$work/nan-off.err")" ] ||
    fail "on_nan skip: post-validated run skipped '$skipped', the barrier run '$(skipped_steps < "$work/nan-off.err")'"
same nan-on nan-off 12 || fail "on_nan skip: post-validated and barrier runs differ"
waits=$(for s in $skipped; do [ "$s" -ge 12 ] || echo; done | wc -l)
[ "$(rolled nan-on)" = "$((10 - waits)) 0 0 $waits" ] || fail "on_nan skip: the metrics say '$(rolled nan-on)', expected '$((10 - waits)) 0 0 $waits'"
echo "zb-h2, on_nan skip from a poisoned row: steps $skipped skipped alike; the barrier run's bits"

# The same resume as 4 processes over TCP: each judges its own stage's loss and sums at its
# step and the others' at the check, and the threads' bits come out.
port=$((port + 1))
pids=()
for r in 0 1 2 3; do
    mkdir -p "$work/nan-mp/rank$r/ckpt"
    cp -r "$work/nan-poisoned/step_00000002" "$work/nan-mp/rank$r/ckpt/"
    echo step_00000002 > "$work/nan-mp/rank$r/ckpt/latest"
    (cd "$work/nan-mp/rank$r" && RANK=$r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "$work/nan-on/run" --quiet --resume --blas-threads 1 --connect-timeout 60 > out.txt 2> err.txt) &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || fail "on_nan skip over 4 processes: a rank failed"; done
cmp -s "$work/nan-on/ckpt/step_00000012/model.bin" "$work/nan-mp/rank0/ckpt/step_00000012/model.bin" &&
    cmp -s "$work/nan-on/ckpt/step_00000012/state.bin" "$work/nan-mp/rank0/ckpt/step_00000012/state.bin" ||
    fail "on_nan skip over 4 processes: not the threads' bits"
[ "$(cat "$work"/nan-mp/rank*/err.txt | skipped_steps)" = "$skipped" ] ||
    fail "on_nan skip over 4 processes: skipped '$(cat "$work"/nan-mp/rank*/err.txt | skipped_steps)', threads '$skipped'"
echo "the same as 4 processes: steps $skipped skipped; the threads' bits"

# The other synchronous schedules, and one stage (nothing to check there).
for schedule in 1f1b gpipe; do
    for pv in true false; do
        small_model $schedule-$pv 4 $schedule 4 20 0 20
        sed -i "s/clip 0.5 }/clip 0.5; post_validation $pv }/" "$work/$schedule-$pv.paci"
        train $schedule-$pv --blas-threads 1 > /dev/null || fail "$schedule-$pv did not train"
    done
    same $schedule-true $schedule-false 20 || fail "$schedule: post-validated and barrier runs differ"
    [ "$(rolled $schedule-true)" = "$(expected $schedule-false)" ] ||
        fail "$schedule: the metrics say '$(rolled $schedule-true)', expected '$(expected $schedule-false)'"
    echo "$schedule, p = 4, clip 0.5: $(rolled $schedule-true | cut -d' ' -f2) of 20 steps rolled back, $(rolled $schedule-true | cut -d' ' -f4) waited; the barrier run's bits"
done
# One process per stage over TCP: the sums of a step trusted go out on a thread of their own
# while the stage runs on; the threaded run's bits, and its count of steps rolled back.
model mp zb-h2 8 20 20 true
train mp --blas-threads 1 > /dev/null || fail "zb-h2 mp did not train"
processes_equal_threads mp 4
[ "$(rolled mp)" = "$(rolled mp-mp/rank3)" ] || fail "processes: rank 3 says '$(rolled mp-mp/rank3)', threads '$(rolled mp)'"
cmp -s "$work/mp/ckpt/step_00000020/state.bin" "$work/mp-mp/rank0/ckpt/step_00000020/state.bin" ||
    fail "processes: optimizer state differs from the threaded run's"
echo "zb-h2 as 4 processes over TCP: $(rolled mp | cut -d' ' -f2) of 20 steps rolled back, $(rolled mp | cut -d' ' -f4) waited; the threaded run's bits"

# Chunks: interleaved and zb-v on 4 devices x 2 stages (8 layers), clip 1.35 (some steps clip, some not): a device checks
# both its stages' steps at its first step of the next window, and a rollback runs its
# instructions since in their first order; the barrier run's bits, as threads and as 4
# processes (a process's exchange sends both its stages, once the second has stepped).
for schedule in interleaved zb-v; do
    for pv in true false; do
        small_model c$schedule-$pv 4 $schedule 4 20 0 20
        sed -i "s/layers 4;/layers 8;/; s/clip 0.5 }/clip 1.35; post_validation $pv }/" "$work/c$schedule-$pv.paci"
        grep -q "post_validation $pv" "$work/c$schedule-$pv.paci" || fail "model edit of c$schedule-$pv did not apply"
        mkdir -p "$work/c$schedule-$pv"
        "$pacic" "$work/c$schedule-$pv.paci" -o "$work/c$schedule-$pv/run" || fail "c$schedule-$pv did not compile"
        (cd "$work/c$schedule-$pv" && timeout -k 10 600 ./run --quiet --metrics metrics.jsonl --blas-threads 1) ||
            fail "c$schedule-$pv did not train, or hung (600 s)"
    done
    same c$schedule-true c$schedule-false 20 || fail "$schedule with chunks: post-validated and barrier runs differ"
    [ "$(rolled c$schedule-true)" = "$(expected c$schedule-false 1.35)" ] ||
        fail "$schedule with chunks: the metrics say '$(rolled c$schedule-true)', expected '$(expected c$schedule-false 1.35)'"
    read -r _ rolled _ _ <<< "$(rolled c$schedule-true)"
    [ "$rolled" -gt 0 ] || fail "$schedule with chunks: no step rolled back, so no rollback was tested"
    processes_equal_threads c$schedule-true 4 "$([ $schedule = zb-v ] && echo 0 || echo 3)"
    echo "$schedule, 4 devices x 2 stages, clip 1.35: $rolled of 20 steps rolled back, $(rolled c$schedule-true | cut -d' ' -f4) waited; the barrier run's bits, as threads and as 4 processes"
done

small_model one 1 1f1b 4 20 0 20
train one --blas-threads 1 > "$work/one.out" || fail "one stage did not train"
[ "$(rolled one)" = none ] || fail "one stage reports post-validation: $(rolled one)"

# --explain: zb-h2's priced bubble below half of zb-h1's without the barrier, not with it.
# bubbles FILE: "zb-h1 zb-h2" bubbles (percent) from --explain's schedules table.
bubbles() {
    "$pacic" "$1" --explain 2> /dev/null | awk '$1 == "zb-h1" || $1 == "zb-h2" { sub("%", "", $2); printf "%s ", $2 }'
}
sed 's/^    schedule paci$/    schedule zb-h2/; s/^    window 8 /    window 16 /; s/^    precision bf16$/    precision fp32/' \
    examples/gpt2-medium-8.paci > "$work/m8.paci"
grep -q "schedule zb-h2" "$work/m8.paci" && grep -q "window 16 " "$work/m8.paci" && grep -q "precision fp32" "$work/m8.paci" ||
    fail "the medium-8 edit did not apply"
sed 's/^        clip 1.0$/        clip 1.0\n        post_validation false/' "$work/m8.paci" > "$work/m8-barrier.paci"
grep -q "post_validation false" "$work/m8-barrier.paci" || fail "the barrier edit did not apply"
explain=$("$pacic" "$work/m8.paci" --explain 2> /dev/null)
grep -q '^clipping: by the norm over every stage (clip 1), post-validated: ' <<< "$explain" ||
    fail "--explain does not say the steps are post-validated"
explain=$("$pacic" "$work/m8-barrier.paci" --explain 2> /dev/null)
grep -q "^clipping: by the norm over every stage (clip 1): every step waits for every stage's gradients (post_validation false)" <<< "$explain" ||
    fail "--explain does not say the steps wait for the norm"
read -r h1 h2 <<< "$(bubbles "$work/m8.paci")"
read -r bh1 bh2 <<< "$(bubbles "$work/m8-barrier.paci")"
[ -n "$h1" ] && [ -n "$bh1" ] || fail "no zb-h1 / zb-h2 rows in --explain"
awk -v a="$h2" -v b="$h1" 'BEGIN { exit !(a < b / 2) }' || fail "post-validated: zb-h2 $h2% is not below half of zb-h1's $h1%"
awk -v a="$bh2" -v b="$bh1" 'BEGIN { exit !(a >= b / 2) }' || fail "with the barrier: zb-h2 $bh2% already below half of zb-h1's $bh1%"
echo "--explain, gpt2-medium-8 at p = 8, K = 16, clip 1.0: zb-h2 $h2% against zb-h1 $h1% (with the barrier: $bh2% against $bh1%)"
