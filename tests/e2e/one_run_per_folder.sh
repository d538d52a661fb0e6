#!/usr/bin/env bash
# One training run per checkpoint folder (runtime/checkpoint.c, pr_ckpt_claim):
# - two runs whose lives overlap in one folder, in every order (different programs, the same
#   program twice, with --resume and --overwrite): the second is refused at its start, in one
#   line naming the folder and the holder (pid, host, command line), and the first ends with
#   a lone run's checkpoints, bit for bit; two started at the same moment: one trains, the
#   other is refused (by the lock, or by the folder guard when the first had ended);
# - the lock, not its file, decides: a holder killed with SIGKILL leaves the file, and the
#   next run starts;
# - where the file system gives no locks, the run warns and goes on; a run that fails before
#   step 1 leaves no folder behind that it made;
# - the ranks of a run of several processes share one folder (rank 0 holds the lock); a
#   second such run is refused by rank 0, and its other ranks stop saying why;
# - a read-only folder, one without write permission (its old lock file writable or not) and
#   one without room for a checkpoint (a small tmpfs, and statvfs as a preloaded library says)
#   are refused before step 1, with the system's reason or the two sizes.
# The overlap is made, not timed: a preloaded library stops the first run (SIGSTOP) right
# after it wrote its name into the lock file, and the test continues it after the second run;
# the same library plays a file system without locks, and one without room.
source tests/e2e/lib.sh

# model NAME LAYERS: 12 steps at p = 2, a checkpoint every 6 in ./ckpt, into $work/bin/NAME.
model() {
    cat > "$work/$1.paci" <<DSL
model gpt2 { layers $2; width 32; heads 2; context 16; vocab 256 }
pipeline { stages 2; schedule paci; window 2 }
batch { micro 2 }
train {
    data "$data/tiny_train.bin"
    steps 12
    optimizer adamw { lr 3e-3 }
    checkpoint { every 6; dir "ckpt" }
}
DSL
    mkdir -p "$work/bin"
    "$pacic" "$work/$1.paci" -o "$work/bin/$1" > /dev/null || fail "$1: pacic failed"
}
model four 4
model two 2

cat > "$work/lock_shim.c" <<'C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <unistd.h>

static int lock_fd = -1;

/* The runtime truncates its lock file right after taking the lock, then writes its name. */
int ftruncate(int fd, off_t length)
{
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    path[n > 0 ? n : 0] = '\0';
    if (n > 5 && strcmp(path + n - 5, "/lock") == 0)
        lock_fd = fd;
    int (*real)(int, off_t) = (int (*)(int, off_t))dlsym(RTLD_NEXT, "ftruncate");
    return real(fd, length);
}

/* NO_LOCKS=1: a file system that gives no record locks (Lustre without -o flock). */
static int no_locks(int cmd)
{
    const char *no = getenv("NO_LOCKS");
    return no && *no == '1' && (cmd == F_SETLK || cmd == F_SETLKW);
}

/* The shim of fcntl and fcntl64 (NAME): ENOLCK for a lock under NO_LOCKS, else the real call. */
static int fcntl_shim(const char *name, int fd, int cmd, void *arg)
{
    if (no_locks(cmd))
        return errno = ENOLCK, -1;
    int (*real)(int, int, ...) = (int (*)(int, int, ...))dlsym(RTLD_NEXT, name);
    return real(fd, cmd, arg);
}

int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_shim("fcntl", fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_shim("fcntl64", fd, cmd, arg);
}

/* FREE_BYTES=N: the folder's file system has N bytes free for a user (statvfs's f_bavail). */
static void free_bytes(struct statvfs *fs)
{
    const char *n = getenv("FREE_BYTES");
    if (n && fs->f_frsize > 0)
        fs->f_bavail = strtoull(n, NULL, 10) / fs->f_frsize;
}

int statvfs(const char *path, struct statvfs *fs)
{
    int (*real)(const char *, struct statvfs *) = (int (*)(const char *, struct statvfs *))dlsym(RTLD_NEXT, "statvfs");
    int rc = real(path, fs);
    if (rc == 0)
        free_bytes(fs);
    return rc;
}

ssize_t write(int fd, const void *data, size_t bytes)
{
    ssize_t (*real)(int, const void *, size_t) = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    ssize_t rc = real(fd, data, bytes);
    if (fd == lock_fd && getenv("STOP_AT_LOCK")) {
        lock_fd = -1;
        raise(SIGSTOP);
    }
    return rc;
}
C
${CC:-cc} -shared -fPIC -O1 -o "$work/lock_shim.so" "$work/lock_shim.c" -ldl

# start DIR TAG PROGRAM [flags]: PROGRAM in $work/DIR, in the background ($!), stderr in
# $work/DIR/TAG.err; with STOP=1 in the environment it stops itself once it holds the lock.
start() {
    local dir=$work/$1 tag=$2 program=$3
    shift 3
    mkdir -p "$dir"
    if [ "${STOP:-}" = 1 ]; then
        (cd "$dir" && STOP_AT_LOCK=1 LD_PRELOAD="$work/lock_shim.so" exec "$work/bin/$program" --quiet \
            --blas-threads 1 "$@" 2> "$tag.err") &
    else
        (cd "$dir" && exec "$work/bin/$program" --quiet --blas-threads 1 "$@" 2> "$tag.err") &
    fi
}
# await_stopped PID ERRFILE: returns once PID is stopped (state T); fails, with ERRFILE, if it ends first.
await_stopped() {
    local i
    for ((i = 0; i < 24000; i++)); do # a 20-minute hang guard, no time limit
        [ "$(sed 's/^.*) \(.\).*/\1/' "/proc/$1/stat" 2> /dev/null)" = T ] && return 0
        kill -0 "$1" 2> /dev/null || fail "pid $1 ended before it stopped at its lock: $(cat "$2")"
        sleep 0.05
    done
    fail "pid $1 never stopped at its lock"
}
# same_checkpoints DIR REF: DIR's checkpoint folders are REF's, model.bin and state.bin bit for bit.
same_checkpoints() {
    local a=$work/$1/ckpt b=$work/$2/ckpt step f
    [ "$(cd "$a" && echo step_*)" = "$(cd "$b" && echo step_*)" ] ||
        fail "$1 holds $(cd "$a" && echo step_*), a lone run $(cd "$b" && echo step_*)"
    for step in $(cd "$b" && echo step_*); do
        for f in model.bin state.bin; do
            cmp -s "$a/$step/$f" "$b/$step/$f" || fail "$1: $step/$f differs from a lone run's"
        done
    done
}
# refusal_of PID PROGRAM FLAGS...: the one line a run refused by PID's lock prints.
refusal_of() {
    local pid=$1 program=$2
    shift 2
    echo "run: error: ckpt: in use by another run (pid $pid on host $(hostname): $work/bin/$program" \
         "--quiet --blas-threads 1${*:+ $*}), which holds ckpt/lock: one training run per checkpoint" \
         "folder; wait for it to end, or train in another folder (--ckpt-dir DIR)"
}

start lone-four run four && wait $! || fail "lone four: $(cat "$work/lone-four/run.err")"
start lone-two run two && wait $! || fail "lone two: $(cat "$work/lone-two/run.err")"
start lone-four6 run four --steps 6 && wait $! || fail "lone four, 6 steps"

# overlap CASE REF SEED "FIRST" "SECOND": in $work/CASE (a copy of $work/SEED, or empty for
# -), the first run (PROGRAM [flags]) takes the lock and stops; the second is refused at its
# start; the first, continued, ends with REF's checkpoints.
overlap() {
    local dir=$1 ref=$2 seed=$3 first second pid
    read -ra first <<< "$4"
    read -ra second <<< "$5"
    [ "$seed" = - ] || cp -a "$work/$seed" "$work/$dir"
    STOP=1 start "$dir" first "${first[@]}"
    pid=$!
    await_stopped $pid "$work/$dir/first.err"
    start "$dir" second "${second[@]}"
    wait $! && fail "$dir: the second run (${second[*]}) ran while the first (${first[*]}) held the folder"
    [ "$(cat "$work/$dir/second.err")" = "$(refusal_of $pid "${first[@]}")" ] ||
        fail "$dir: unexpected refusal: $(cat "$work/$dir/second.err")"
    kill -CONT $pid
    wait $pid || fail "$dir: the first run failed: $(cat "$work/$dir/first.err")"
    same_checkpoints "$dir" "$ref"
    echo "$dir: '${second[*]}' refused while '${first[*]}' held the folder, which ended as a lone run"
}
overlap four-two lone-four - "four" "two"
overlap two-four lone-two - "two" "four"
overlap four-four lone-four - "four" "four"
overlap resume-overwrite lone-four lone-four6 "four --resume" "four --overwrite"
overlap overwrite-resume lone-four lone-four6 "four --overwrite" "four --resume"
overlap resume-resume lone-four lone-four6 "four --resume" "four --resume"

# Started at the same moment: whichever comes first trains; the other is refused by the lock
# (their lives overlap) or by the folder guard (the first had saved): never both, never a mix.
for pair in "four two" "two four" "four four"; do
    set -- $pair
    dir=race-$1-$2
    start "$dir" first "$1"
    a=$!
    start "$dir" second "$2"
    b=$!
    ra=0 rb=0
    wait $a || ra=$?
    wait $b || rb=$?
    case "$ra $rb" in
        "0 1") won=$1 lost=second ;;
        "1 0") won=$2 lost=first ;;
        *) fail "$dir: exit statuses $ra and $rb: $(cat "$work/$dir/"*.err)" ;;
    esac
    grep -Eq "^run: error: ckpt: (in use by another run|holds the checkpoints of a run)" "$work/$dir/$lost.err" ||
        fail "$dir: unexpected refusal: $(cat "$work/$dir/$lost.err")"
    same_checkpoints "$dir" "lone-$won"
done
echo "started at once (four and two, two and four, four twice): one trained as a lone run, the other was refused"

# A holder killed with SIGKILL leaves its lock file; the next run starts.
STOP=1 start killed first four
pid=$!
await_stopped $pid "$work/killed/first.err"
kill -KILL $pid
wait $pid 2> /dev/null && fail "the killed run succeeded"
grep -q "^pid $pid on host " "$work/killed/ckpt/lock" || fail "the killed run left no lock file naming it"
start killed next four && wait $! || fail "after a SIGKILL the lock file blocked the next run: $(cat "$work/killed/next.err")"
same_checkpoints killed lone-four
echo "a holder killed by SIGKILL: its lock file stays, the next run starts and ends as a lone run"

# A run that fails before step 1 (here its data) leaves no folder its claim made, nor the lock.
mkdir -p "$work/failed"
(cd "$work/failed" && "$work/bin/four" --quiet --data missing.bin --ckpt-dir new/ckpt 2> /dev/null) &&
    fail "a run without its data trained"
[ -z "$(ls "$work/failed")" ] || fail "a run that failed before step 1 left $(cd "$work/failed" && find . | tr "\n" " ")"
echo "a run that failed before step 1 removed the folders it made"

# A file system without record locks (the preloaded fcntl says ENOLCK): one warning, and the
# run goes on, as a lone run.
mkdir -p "$work/nolocks"
(cd "$work/nolocks" && NO_LOCKS=1 LD_PRELOAD="$work/lock_shim.so" "$work/bin/four" --quiet \
    --blas-threads 1 2> err.txt) || fail "without locks the run failed: $(cat "$work/nolocks/err.txt")"
[ "$(cat "$work/nolocks/err.txt")" = "run: warning: ckpt: cannot lock ckpt/lock (No locks available): the file system gives no locks here, so a second run started in this folder would not be refused" ] ||
    fail "without locks: $(cat "$work/nolocks/err.txt")"
same_checkpoints nolocks lone-four
echo "a file system without locks: one warning, the run trained as a lone run"

# ranks NAME PORT PIDS_VAR: four's two stages as two processes in $work/NAME, one folder
# (as on a shared file system); rank 0 stops at its lock when STOP=1. Pids into PIDS_VAR.
# --peer-timeout: a rank left waiting for a peer fails rather than hangs.
ranks() {
    local dir=$work/$1 r
    local -n pids=$3
    pids=()
    mkdir -p "$dir"
    for r in 0 1; do
        if [ "${STOP:-}" = 1 ] && [ $r = 0 ]; then
            (cd "$dir" && RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$2 \
                STOP_AT_LOCK=1 LD_PRELOAD="$work/lock_shim.so" exec "$work/bin/four" --quiet --connect-timeout 60 --peer-timeout 120 \
                2> "rank0.$2.err") &
        else
            (cd "$dir" && RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$2 \
                exec "$work/bin/four" --quiet --connect-timeout 60 --peer-timeout 120 2> "rank$r.$2.err") &
        fi
        pids+=($!)
    done
}
STOP=1 ranks ranks $((port + 1)) held
await_stopped "${held[0]}" "$work/ranks/rank0.$((port + 1)).err"
ranks ranks $((port + 2)) second
wait "${second[0]}" && fail "a second run's rank 0 ran in a folder another run held"
wait "${second[1]}" && fail "a second run's rank 1 went on after its rank 0 was refused"
kill -CONT "${held[0]}"
wait "${held[1]}" || fail "rank 1 of the first run: $(cat "$work/ranks/rank1.$((port + 1)).err")"
wait "${held[0]}" || fail "rank 0 of the first run: $(cat "$work/ranks/rank0.$((port + 1)).err")"
grep -q "^run: error: ckpt: in use by another run (pid ${held[0]} on host " "$work/ranks/rank0.$((port + 2)).err" ||
    fail "the second run's rank 0: $(cat "$work/ranks/rank0.$((port + 2)).err")"
[ "$(cat "$work/ranks/rank1.$((port + 2)).err")" = "run: error: rank 1: stopped: rank 0 could not take the checkpoint folder ckpt (its error says why)" ] ||
    fail "the second run's rank 1: $(cat "$work/ranks/rank1.$((port + 2)).err")"
same_checkpoints ranks lone-four
echo "two processes in one folder: rank 0 held it, rank 1 shared it; a second run's ranks both stopped"

# Folders that take no writes, and one without room for a checkpoint, refused before step 1
# (stdout logs no step: no --quiet). root writes through permissions, so a folder without
# write permission is tried as nobody (setpriv); a read-only file system is a tmpfs remounted
# read-only in a private mount namespace (unshare -m) where that is allowed (CI's container
# may not: there nobody's unwritable folder stands in).
expect_refusal() { # expect_refusal TAG OUTPUT LINE
    [ "$2" = "$3" ] || fail "$1: expected '$3', got: $2"
    ! grep -q '^step ' "$work/steps.txt" || fail "$1: the run trained: $(cat "$work/steps.txt")"
    echo "$1: refused before step 1: $3"
}
mkdir -p "$work/mnt"
chmod 755 "$work"
# as_other: a command prefix that runs as a user who is not root (nobody, where this is root),
# with the tokens copied beside the program (the checkout may be closed to nobody).
as_other=()
cp "$data/tiny_train.bin" "$work/tokens.bin"
chmod 644 "$work/tokens.bin"
if [ "$(id -u)" = 0 ] && command -v setpriv > /dev/null && id nobody > /dev/null 2>&1; then
    as_other=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups)
    "${as_other[@]}" test -r "$work/tokens.bin" -a -x "$work/bin/four" || as_other=(none)
elif [ "$(id -u)" = 0 ]; then
    as_other=(none)
fi
# A folder that keeps an earlier run's lock file (writable) but takes no new file: the lock
# opens, the probe file does not.
if [ "${as_other[*]}" = none ]; then
    skip_part "a folder without write permission: no setpriv, or user nobody cannot reach $work"
else
    mkdir -p "$work/kept/ckpt"
    touch "$work/kept/ckpt/lock"
    chmod 666 "$work/kept/ckpt/lock"
    chmod 555 "$work/kept/ckpt"
    out=$(cd "$work/kept" && "${as_other[@]}" "$work/bin/four" --device cpu --blas-threads 1 --data "$work/tokens.bin" 2>&1 > "$work/steps.txt") &&
        fail "a run trained with a checkpoint folder it cannot write"
    expect_refusal "a folder without write permission (its lock file writable)" "$out" \
        "run: error: ckpt: cannot write in the checkpoint folder: Permission denied"
fi
# A folder that takes no new file: a tmpfs remounted read-only where a private mount namespace
# may (unshare -m), else a folder without write permission for nobody.
if unshare -m sh -c 'mount -t tmpfs -o size=1m none "$0" && mount -o remount,ro "$0"' "$work/mnt" 2> /dev/null; then
    out=$(cd "$work" && unshare -m sh -c 'mount -t tmpfs -o size=1m none mnt && mkdir mnt/ckpt &&
        mount -o remount,ro mnt && exec "$0" --device cpu --blas-threads 1 --ckpt-dir mnt/ckpt 2>&1 > steps.txt' "$work/bin/four") &&
        fail "a run trained with a read-only checkpoint folder"
    expect_refusal "a read-only folder" "$out" "run: error: mnt/ckpt: cannot write in the checkpoint folder: Read-only file system"
    # ... and a real file system without room for one checkpoint
    out=$(cd "$work" && unshare -m sh -c 'mount -t tmpfs -o size=256k none mnt &&
        exec "$0" --device cpu --blas-threads 1 --ckpt-dir mnt/ckpt 2>&1 > steps.txt' "$work/bin/four") &&
        fail "a run trained in a folder without room for a checkpoint"
    [[ "$out" =~ ^"run: error: mnt/ckpt: "0\.[0-9]" MB free, one checkpoint of this model needs 0.8 MB (weights and optimizer state): make room, or train in another folder (--ckpt-dir DIR)"$ ]] ||
        fail "a full tmpfs: unexpected: $out"
    ! grep -q '^step ' "$work/steps.txt" || fail "a full tmpfs: the run trained: $(cat "$work/steps.txt")"
    echo "a tmpfs without room: refused before step 1: $out"
elif [ "${as_other[*]}" != none ]; then
    mkdir -p "$work/closed/ckpt"
    chmod 555 "$work/closed/ckpt"
    out=$(cd "$work/closed" && "${as_other[@]}" "$work/bin/four" --device cpu --blas-threads 1 --data "$work/tokens.bin" 2>&1 > "$work/steps.txt") &&
        fail "a run trained with a checkpoint folder it cannot write"
    expect_refusal "a folder without write permission" "$out" \
        "run: error: ckpt: cannot write in the checkpoint folder: Permission denied"
else
    skip_part "a read-only folder: no private mount namespace for a read-only tmpfs, and no user but root"
fi
# A folder without room for one checkpoint (0.8 MB): statvfs says 300 kB free (the preloaded
# library), wherever the test runs.
out=$(cd "$work" && FREE_BYTES=300000 LD_PRELOAD="$work/lock_shim.so" "$work/bin/four" --device cpu \
    --blas-threads 1 --ckpt-dir small/ckpt 2>&1 > "$work/steps.txt") && fail "a run trained in a folder without room for a checkpoint"
expect_refusal "a folder without room" "$out" "run: error: small/ckpt: 0.3 MB free, one checkpoint of this model needs 0.8 MB (weights and optimizer state): make room, or train in another folder (--ckpt-dir DIR)"
