#!/usr/bin/env bash
# SIGTERM or SIGINT during training: run finishes the optimizer step in progress (stage 0
# stops issuing forwards, the pipeline drains what is in flight), writes a checkpoint there,
# says where, and exits 0. For every schedule:
#   - the losses of steps 1..N equal the uninterrupted run's (the stop changes no step);
#   - the checkpoint at N is bit-identical to `run --steps N` (the same drain, deterministic),
#     and `--resume` from it is deterministic and completes the run;
#   - for the synchronous schedules (gpipe, 1f1b) the resumed run ends bit-identical to the
#     uninterrupted one. The asynchronous ones resume as if the schedule had drained at N.
# --no-checkpoint saves nothing, at the end or at a stop. A second signal, SIGINT then
# SIGTERM, ends the run at once. PACI_SIGNAL_SCHEDULES limits the schedules (the
# ThreadSanitizer run takes one).
source tests/e2e/lib.sh
steps=200

# stop_run NAME SIGNAL: starts NAME's run, sends SIGNAL once it has logged progress, and
# prints the step it stopped after.
stop_run() {
    local dir=$work/$1 pid
    (cd "$dir" && exec ./run --metrics metrics.jsonl > out.txt 2> err.txt) &
    pid=$!
    until grep -q '^step ' "$dir/out.txt" 2>/dev/null; do
        kill -0 $pid 2>/dev/null || break
        sleep 0.05
    done
    kill -"$2" $pid 2>/dev/null || true
    wait $pid || fail "$1: run exited with $? after SIG$2: $(cat "$dir/err.txt")"
    sed -n "s|^run: stopped by SIG$2 after step \([0-9]*\); checkpoint ckpt/step_0*\1 (continue with --resume)$|\1|p" \
        "$dir/err.txt"
}

for schedule in ${PACI_SIGNAL_SCHEDULES:-gpipe 1f1b pipedream paci}; do
    small_model "$schedule" 3 $schedule 2 $steps
    train "$schedule"
    signal=TERM
    [ $schedule = 1f1b ] && signal=INT
    mkdir -p "$work/$schedule-stopped"
    cp "$work/$schedule/run" "$work/$schedule-stopped/"
    n=$(stop_run "$schedule-stopped" $signal)
    [ -n "$n" ] || fail "$schedule: no 'stopped by SIG$signal' line: $(cat "$work/$schedule-stopped/err.txt")"
    [ "$n" -lt $steps ] || fail "$schedule: stopped only at the end (step $n)"
    [ "$(cat "$work/$schedule-stopped/ckpt/latest")" = "$(printf 'step_%08d' "$n")" ] \
        || fail "$schedule: latest does not name step $n"
    grep -q "^checkpoint ckpt/step_$(printf %08d "$n") (its LM head is untied and kept in state.bin; " \
        "$work/$schedule-stopped/out.txt" || fail "$schedule: no checkpoint line: $(tail -3 "$work/$schedule-stopped/out.txt")"
    [ "$(losses "$schedule" | head -"$n")" = "$(losses "$schedule-stopped")" ] \
        || fail "$schedule: the losses of steps 1..$n differ from the uninterrupted run's"

    mkdir -p "$work/$schedule-steps"
    cp "$work/$schedule/run" "$work/$schedule-steps/"
    (cd "$work/$schedule-steps" && ./run --quiet --steps "$n")
    for f in model.bin state.bin; do
        cmp -s "$work/$schedule-stopped/ckpt/step_$(printf %08d "$n")/$f" \
            "$work/$schedule-steps/ckpt/step_$(printf %08d "$n")/$f" \
            || fail "$schedule: $f at the stop differs from --steps $n"
    done

    (cd "$work/$schedule-stopped" && ./run --quiet --resume)
    (cd "$work/$schedule-steps" && ./run --quiet --resume)
    final=ckpt/step_$(printf %08d $steps)
    for f in model.bin state.bin; do
        cmp -s "$work/$schedule-stopped/$final/$f" "$work/$schedule-steps/$final/$f" \
            || fail "$schedule: $f after resuming from the stop differs from --steps $n + resume"
        if [ $schedule = gpipe ] || [ $schedule = 1f1b ]; then
            cmp -s "$work/$schedule-stopped/$final/$f" "$work/$schedule/$final/$f" \
                || fail "$schedule: $f after stop at $n + resume differs from the uninterrupted run"
        fi
    done
    echo "$schedule: SIG$signal stopped after step $n of $steps with a checkpoint; losses 1..$n unchanged; resumed to $steps"
done

# The asynchronous contract, exactly: a stop at N (here --steps N, the same drain a signal
# makes) and a resume are bit-identical to a run whose schedule drains at N (a checkpoint
# every N steps): steps 1..N are the uninterrupted run's, and after N the micro-batches in
# flight at the stop cross no optimizer update, as after any drain. PipeDream's stashes
# included (a mid-way resume refills those the skipped steps would have written). Both are
# programs of $steps steps run to step 40 (--steps); the stop's is the loop's above.
for schedule in ${PACI_SIGNAL_SCHEDULES:-pipedream paci}; do
    [ $schedule = paci ] || [ $schedule = pipedream ] || continue
    mkdir -p "$work/$schedule-cut"
    cp "$work/$schedule/run" "$work/$schedule-cut/"
    (cd "$work/$schedule-cut" && ./run --quiet --steps 20 && ./run --quiet --resume --steps 40)
    small_model "$schedule-drain" 3 $schedule 2 $steps 0 20
    train "$schedule-drain" --steps 40
    for f in model.bin state.bin; do
        cmp -s "$work/$schedule-cut/ckpt/step_00000040/$f" "$work/$schedule-drain/ckpt/step_00000040/$f" \
            || fail "$schedule: $f of stop at 20 + resume differs from a schedule that drains at 20"
    done
    echo "$schedule: stop at 20 + resume == the schedule with a drain at 20, bit for bit"
done

# One process per stage (the launcher's variables): SIGTERM to rank 0 stops both ranks
# after the same step (the stop travels down the links), both exit 0, and rank 0's
# checkpoint is bit-identical to the threaded `run --steps N`.
# A 2-stage 1F1B program long enough for any stop, here and for the two signals at the end.
small_model twice 2 1f1b 2 5000
mkdir -p "$work/twice"
"$pacic" "$work/twice.paci" -o "$work/twice/run"
if [ -z "${PACI_SIGNAL_SCHEDULES:-}" ]; then
    mkdir -p "$work/mp0" "$work/mp1" "$work/mp-threads"
    cp "$work/twice/run" "$work/mp.run"
    port=$((port + 50)) # a block of its own, clear of the ports used above
    (cd "$work/mp0" && exec env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "$work/mp.run" --quiet > out.txt 2> err.txt) &
    rank0=$!
    (cd "$work/mp1" && exec env RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "$work/mp.run" > out.txt 2> err.txt) &
    rank1=$!
    until grep -q '^step ' "$work/mp1/out.txt" 2>/dev/null; do
        kill -0 $rank1 2>/dev/null || break
        sleep 0.05
    done
    kill -TERM $rank0 2>/dev/null || true
    wait $rank0 || fail "processes: rank 0 exited with $?: $(cat "$work/mp0/err.txt")"
    wait $rank1 || fail "processes: rank 1 exited with $?: $(cat "$work/mp1/err.txt")"
    n=$(sed -n 's|^run: stopped by SIGTERM after step \([0-9]*\); .*|\1|p' "$work/mp0/err.txt")
    [ -n "$n" ] && [ "$n" -lt 5000 ] || fail "processes: no stop before the end: $(cat "$work/mp0/err.txt")"
    cp "$work/mp.run" "$work/mp-threads/run"
    (cd "$work/mp-threads" && ./run --quiet --steps "$n")
    for f in model.bin state.bin; do
        cmp -s "$work/mp0/ckpt/step_$(printf %08d "$n")/$f" "$work/mp-threads/ckpt/step_$(printf %08d "$n")/$f" \
            || fail "processes: $f at the stop differs from the threaded --steps $n"
    done
    echo "one process per stage: SIGTERM to rank 0 stopped both after step $n, exit 0; checkpoint == threads --steps $n"
fi

# --no-checkpoint (trial runs): nothing is saved, neither at the end nor at a stop by signal,
# and the stop says so; the run still exits 0.
if [ -z "${PACI_SIGNAL_SCHEDULES:-}" ]; then
    small_model trial 2 paci 2 $steps
    train trial --no-checkpoint --steps 4
    [ "$(losses trial | wc -l)" = 4 ] || fail "--no-checkpoint: expected 4 logged steps"
    [ ! -e "$work/trial/ckpt" ] || fail "--no-checkpoint wrote $(ls "$work/trial/ckpt")"
    mkdir -p "$work/trial-stop"
    cp "$work/trial/run" "$work/trial-stop/run"
    (cd "$work/trial-stop" && exec ./run --no-checkpoint > out.txt 2> err.txt) &
    pid=$!
    until grep -q '^step ' "$work/trial-stop/out.txt" 2>/dev/null; do
        kill -0 $pid 2>/dev/null || break
        sleep 0.05
    done
    kill -TERM $pid 2>/dev/null || true
    wait $pid || fail "--no-checkpoint: run exited with $? after SIGTERM: $(cat "$work/trial-stop/err.txt")"
    grep -q "^run: stopped by SIGTERM after step [0-9]*; no checkpoint (--no-checkpoint)$" "$work/trial-stop/err.txt" ||
        fail "--no-checkpoint: unexpected stop message: $(cat "$work/trial-stop/err.txt")"
    [ ! -e "$work/trial-stop/ckpt" ] || fail "--no-checkpoint saved at the stop"
    echo "--no-checkpoint: nothing saved at the end or at SIGTERM; $(grep '^run: stopped' "$work/trial-stop/err.txt")"
fi

# The line naming the checkpoint a run ends with says, for an untied head (stages > 1), that
# model.bin does not carry it (llm.c would run wte as the head) and how to get a file that
# does; for a tied one (stages 1, tied true) that model.bin is llm.c's format.
if [ -z "${PACI_SIGNAL_SCHEDULES:-}" ]; then
    small_model tied 1 1f1b 2 4
    sed -i 's/vocab 256 }/vocab 256; tied true }/' "$work/tied.paci"
    mkdir -p "$work/tied" "$work/untied"
    "$pacic" "$work/tied.paci" -o "$work/tied/run"
    cp "$work/gpipe/run" "$work/untied/run"  # 3 stages
    (cd "$work/tied" && ./run > out.txt 2> err.txt) || fail "tied: $(cat "$work/tied/err.txt")"
    (cd "$work/untied" && ./run --steps 4 > out.txt 2> err.txt) || fail "untied: $(cat "$work/untied/err.txt")"
    grep -qx "checkpoint ckpt/step_00000004 (its LM head is untied and kept in state.bin; llm.c reads only model.bin and would use wte as the head, a different model: run --export hf DIR writes a file that carries the head)" \
        "$work/untied/out.txt" || fail "untied head: $(grep checkpoint "$work/untied/out.txt")"
    grep -qx "checkpoint ckpt/step_00000004 (model.bin: llm.c's GPT-2 format)" "$work/tied/out.txt" \
        || fail "tied head: $(grep checkpoint "$work/tied/out.txt")"
    echo "checkpoint line: an untied run's names where the head is; a tied one's says llm.c's format"
fi

# SIGINT, then SIGTERM before the stop is done: the second signal ends the run at once, as
# an unhandled one does (killed by that signal), with no stop message and no checkpoint.
# Both are sent while the process is held by SIGSTOP, so they are both pending when it
# goes on, however fast the machine; whichever is taken first asks for the stop, and the
# other ends the run.
(cd "$work/twice" && exec ./run > out.txt 2> err.txt) &
pid=$!
until grep -q '^step ' "$work/twice/out.txt" 2>/dev/null; do
    kill -0 $pid 2>/dev/null || fail "SIGINT then SIGTERM: the run ended early: $(cat "$work/twice/err.txt")"
    sleep 0.05
done
kill -STOP $pid
kill -INT $pid
kill -TERM $pid
kill -CONT $pid
if wait $pid; then status=0; else status=$?; fi
[ "$status" = 130 ] || [ "$status" = 143 ] \
    || fail "SIGINT then SIGTERM: exit status $status, not killed by the second signal: $(cat "$work/twice/err.txt")"
grep -q "^run: stopped by" "$work/twice/err.txt" && fail "SIGINT then SIGTERM: the run stopped cleanly"
[ ! -e "$work/twice/ckpt/latest" ] || fail "SIGINT then SIGTERM: a checkpoint was written"
echo "SIGINT then SIGTERM: ended at once by the second (exit status $status), no checkpoint"
