#!/usr/bin/env bash
# SIGKILL at random moments, many times, with a checkpoint after every step or few (so
# many kills land inside a save; half of them are aimed there: as soon as a step_N.tmp
# folder appears). After every kill the checkpoint `latest` names is complete and the next
# `run --resume` loads it and goes on; at the end the weights and optimizer state are
# bit-identical to an uninterrupted run (checkpoints sit at drains, so that holds for the
# asynchronous PACI too). PACI_CRASH_KILLS sets the kills per schedule (default 20).
source tests/e2e/lib.sh
kills=${PACI_CRASH_KILLS:-20}
steps=40

for case in "1f1b 1" "paci 3"; do
    set -- $case
    schedule=$1 every=$2
    small_model "$schedule" 2 $schedule 2 $steps 0 $every
    train "$schedule"
    final=ckpt/step_$(printf %08d $steps)
    model_size=$(stat -c %s "$work/$schedule/$final/model.bin")
    state_size=$(stat -c %s "$work/$schedule/$final/state.bin")

    dir=$work/$schedule-killed
    mkdir -p "$dir"
    cp "$work/$schedule/run" "$dir/"
    in_save=0 done_early=0
    for i in $(seq 1 "$kills"); do
        resume=""
        [ -f "$dir/ckpt/latest" ] && resume=--resume
        (cd "$dir" && exec ./run --quiet $resume > out.txt 2> err.txt) &
        pid=$!
        if [ $((i % 2)) = 0 ]; then
            # aimed: the moment a save has started writing its folder
            until compgen -G "$dir/ckpt/step_*.tmp" > /dev/null || ! kill -0 $pid 2>/dev/null; do :; done
        else
            sleep "0.$((RANDOM % 40))"
        fi
        compgen -G "$dir/ckpt/step_*.tmp" > /dev/null && in_save=$((in_save + 1))
        kill -KILL $pid 2>/dev/null || true
        if { wait $pid; } 2>/dev/null; then
            done_early=$((done_early + 1))  # finished before the kill: start over
            rm -rf "$dir/ckpt"
            continue
        fi
        grep -q 'error' "$dir/err.txt" && fail "$schedule kill $i: the run failed: $(cat "$dir/err.txt")"
        [ -f "$dir/ckpt/latest" ] || continue  # killed before its first checkpoint
        name=$(cat "$dir/ckpt/latest")
        [ "$(stat -c %s "$dir/ckpt/$name/model.bin")" = "$model_size" ] \
            || fail "$schedule kill $i: $name/model.bin is incomplete"
        [ "$(stat -c %s "$dir/ckpt/$name/state.bin")" = "$state_size" ] \
            || fail "$schedule kill $i: $name/state.bin is incomplete"
    done
    resume=""
    [ -f "$dir/ckpt/latest" ] && resume=--resume
    (cd "$dir" && ./run --quiet $resume) || fail "$schedule: the run after the kills failed"
    for f in model.bin state.bin; do
        cmp -s "$work/$schedule/$final/$f" "$dir/$final/$f" \
            || fail "$schedule: $f after $kills kills differs from the uninterrupted run"
    done
    echo "$schedule (checkpoint every $every): $kills SIGKILLs, $in_save during a save," \
         "$done_early finished first; every checkpoint loaded; final state bit-identical"
done

# A disk that fills up during a save (a file-size limit: EFBIG, as ENOSPC would be): one
# error line naming the file, exit 1, no half-written folder, the previous checkpoint still
# `latest`; once there is room, --resume goes on from it to the same final state.
small_model full 2 1f1b 2 8 0 2
train full --steps 4
(ulimit -f 16 && cd "$work/full" && ./run --quiet --resume 2> err.txt) && fail "disk full: the run did not fail"
grep -Eq "^run: error: ckpt/step_00000006.tmp/model.bin: write failed: File too large$" "$work/full/err.txt" \
    || fail "disk full: unexpected message: $(cat "$work/full/err.txt")"
[ "$(cat "$work/full/ckpt/latest")" = step_00000004 ] || fail "disk full: latest moved"
compgen -G "$work/full/ckpt/*.tmp" > /dev/null && fail "disk full: a half-written folder is left"
(cd "$work/full" && ./run --quiet --resume) || fail "disk full: resume after the failure"
small_model straight 2 1f1b 2 8 0 2
train straight
cmp -s "$work/full/ckpt/step_00000008/model.bin" "$work/straight/ckpt/step_00000008/model.bin" \
    || fail "disk full: the resumed run differs from the uninterrupted one"
echo "disk full during a save: $(cat "$work/full/err.txt"); step 4 kept; resumed to the same state"
