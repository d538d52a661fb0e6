#!/usr/bin/env bash
# SIGKILL at random moments, many times, with a checkpoint after every step or few (so
# many kills land inside a save; half of them are aimed there: as soon as a step_N.tmp
# folder appears). After every kill the checkpoint `latest` names is complete and the next
# `run --resume` loads it and goes on; at the end the weights and optimizer state are
# bit-identical to an uninterrupted run (checkpoints sit at drains, so that holds for the
# asynchronous PACI too). PACI_CRASH_KILLS sets the kills per schedule (default 20).
# Then a step saved again while `latest` names it, killed before each of its file-system
# changes in turn; and a disk that fills up during a save.
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
        resume=""  # a kill between a save's rename and its `latest` leaves a step folder alone
        { [ -f "$dir/ckpt/latest" ] || compgen -G "$dir/ckpt/step_????????" > /dev/null; } && resume=--resume
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
    { [ -f "$dir/ckpt/latest" ] || compgen -G "$dir/ckpt/step_????????" > /dev/null; } && resume=--resume
    (cd "$dir" && ./run --quiet $resume) || fail "$schedule: the run after the kills failed"
    for f in model.bin state.bin; do
        cmp -s "$work/$schedule/$final/$f" "$dir/$final/$f" \
            || fail "$schedule: $f after $kills kills differs from the uninterrupted run"
    done
    echo "$schedule (checkpoint every $every): $kills SIGKILLs, $in_save during a save," \
         "$done_early finished first; every checkpoint loaded; final state bit-identical"
done

# The step `latest` names, saved again: a fresh `run --steps 4 --overwrite` in a folder whose
# latest is step_00000004. A preloaded library sends SIGKILL before the K-th call that changes the
# file system (mkdir, rename, link, unlink, rmdir), for K = 1, 2, ... until a run gets
# through its save: after every kill, `latest` names a complete checkpoint and --resume goes
# on from it to the state a resume from the first save reaches.
cat > "$work/kill_at_call.c" <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static int calls;

static void count_call(const char *name, const char *path)
{
    const char *at = getenv("KILL_AT_CALL");
    if (at && ++calls == atoi(at)) {
        fprintf(stderr, "killed before %s(%s)\n", name, path);
        raise(SIGKILL);
    }
}

#define WRAP(name, params, args, first)                                   \
    int name params                                                        \
    {                                                                      \
        count_call(#name, first);                                          \
        int(*real) params = (int(*) params)dlsym(RTLD_NEXT, #name);        \
        return real args;                                                  \
    }
WRAP(mkdir, (const char *a, mode_t mode), (a, mode), a)
WRAP(rename, (const char *a, const char *b), (a, b), a)
WRAP(link, (const char *a, const char *b), (a, b), a)
WRAP(unlink, (const char *a), (a), a)
WRAP(rmdir, (const char *a), (a), a)
C
${CC:-cc} -shared -fPIC -O1 -o "$work/kill_at_call.so" "$work/kill_at_call.c" -ldl
small_model resave 2 1f1b 2 6
train resave --steps 4
cp -a "$work/resave/ckpt" "$work/resave-first"
(cd "$work/resave" && ./run --quiet --resume)
cp "$work/resave/ckpt/step_00000006/state.bin" "$work/resave-reference.bin"
dir=$work/resave
kills=0
for k in $(seq 1 100); do
    rm -rf "$dir/ckpt"
    cp -a "$work/resave-first" "$dir/ckpt"
    if { (cd "$dir" && KILL_AT_CALL=$k LD_PRELOAD="$work/kill_at_call.so" exec ./run --quiet \
            --steps 4 --overwrite > out.txt 2> err.txt); } 2> /dev/null; then
        break  # the whole save got through
    fi
    grep -q "^killed before" "$dir/err.txt" || fail "re-save, call $k: the run failed: $(cat "$dir/err.txt")"
    kills=$((kills + 1))
    at=$(cat "$dir/err.txt")
    [ -n "${PACI_CRASH_VERBOSE:-}" ] && echo "$at: latest $(cat "$dir/ckpt/latest")"
    name=$(cat "$dir/ckpt/latest")
    [ -d "$dir/ckpt/$name" ] || fail "re-save, $at: latest names $name, which is missing"
    for f in model.bin state.bin; do
        cmp -s "$dir/ckpt/$name/$f" "$work/resave-first/step_00000004/$f" \
            || fail "re-save, $at: latest names $name, whose $f is not step 4's"
    done
    (cd "$dir" && ./run --quiet --resume) || fail "re-save, $at: --resume failed"
    cmp -s "$dir/ckpt/step_00000006/state.bin" "$work/resave-reference.bin" \
        || fail "re-save, $at: the resumed run differs"
done
[ "$kills" -ge 5 ] && [ "$k" -lt 100 ] || fail "re-save: $kills kills, the last run at call $k"
[ "$(cat "$dir/ckpt/latest")" = step_00000004 ] || fail "re-save: latest is $(cat "$dir/ckpt/latest")"
[ "$(ls "$dir/ckpt")" = "$(printf 'latest\nlock\nstep_00000004')" ] || fail "re-save left $(ls "$dir/ckpt")"
echo "step 4 saved again while latest named it: killed before each of its $kills file-system changes," \
     "latest always named a complete step 4 and --resume went on from it"

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
mkdir -p "$work/straight"
cp "$work/full/run" "$work/straight/" # the same program, run through
(cd "$work/straight" && ./run --quiet)
cmp -s "$work/full/ckpt/step_00000008/model.bin" "$work/straight/ckpt/step_00000008/model.bin" \
    || fail "disk full: the resumed run differs from the uninterrupted one"
echo "disk full during a save: $(cat "$work/full/err.txt"); step 4 kept; resumed to the same state"
