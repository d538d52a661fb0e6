#!/usr/bin/env bash
# Files that are not what they claim, end to end: pacic on a folder or a missing path, and
# run --resume on a corrupted checkpoint, each fail with one line naming the file and the
# problem (the readers' every error path has its unit test or golden file; this checks the
# tools report them as one line, exit 1, no crash).
source tests/e2e/lib.sh

# one_line WHAT PATTERN COMMAND...: COMMAND fails (not by a signal) with one matching line.
one_line() {
    local what=$1 pattern=$2 out status=0
    shift 2
    out=$("$@" 2>&1) || status=$?
    [ $status = 1 ] || fail "$what: exit status $status: $out"
    [ "$(grep -vc '^run: note:' <<< "$out")" = 1 ] || fail "$what: expected one line, got: $out"
    grep -qE "$pattern" <<< "$out" || fail "$what: '$out' does not match '$pattern'"
    echo "$what: $(grep -v '^run: note:' <<< "$out")"
}

mkdir -p "$work/folder.paci"
one_line "DSL path is a folder" "folder\.paci: Is a directory" "$pacic" "$work/folder.paci" --check
one_line "DSL file missing" "missing\.paci: No such file" "$pacic" "$work/missing.paci" --check

small_model m 2 1f1b 2 4 0 2
train m --steps 2
state=$work/m/ckpt/step_00000002/state.bin
printf '\xff\xff\xff\xff\xff\xff\xff\xff' | dd of="$state" bs=1 seek=88 conv=notrunc status=none
one_line "state.bin with a huge float count" "step_00000002/state\.bin: step 2 or size -1 does not fit" \
    bash -c "cd '$work/m' && ./run --quiet --resume"
truncate -s 600 "$work/m/ckpt/step_00000002/model.bin"
one_line "truncated model.bin" "step_00000002/model\.bin: truncated header" \
    bash -c "cd '$work/m' && ./run --quiet --resume"

# A device or a pipe named as a file: /dev/zero never ends, and read whole it grew memory at
# ~0.8 GB/s with no end. Every reader takes regular files only: one line, exit 1, with little
# memory. timeout 20 turns a hang into a failure (a guard, not a timing check); ulimit -v makes
# unbounded growth fail fast; /usr/bin/time (Debian's `time`, .ci/install-deps) gives the peak.
[ -x /usr/bin/time ] || fail "no /usr/bin/time (apt-get install time; .ci/install-deps does)"
# bounded WHAT PATTERN COMMAND...: COMMAND exits 1 with one error, matching PATTERN (a DSL
# error comes with its source line and caret), within the guards, its peak under 100 MB.
# Under a sanitizer build (make sanitize: PACI_BUILD=build/asan) the memory is not measured:
# ASan reserves terabytes of shadow at start (ulimit -v refuses it) and adds its own.
measure_memory=1
if [ "${PACI_BUILD:-build}" != build ]; then
    measure_memory=0
    skip_part "the memory bound under $PACI_BUILD (a sanitizer's shadow memory); the messages and the hang guard ran"
fi
bounded() {
    local what=$1 pattern=$2 out status=0 kib cap=4194304
    shift 2
    [ $measure_memory = 1 ] || cap=unlimited
    out=$(bash -c 'ulimit -v "$0" && exec "$@"' "$cap" \
        timeout 20 /usr/bin/time -f 'peak %M KiB' -o "$work/peak" "$@" 2>&1) || status=$?
    [ $status = 1 ] || fail "$what: exit status $status: $out"
    [ "$(grep -c 'error:' <<< "$out")" = 1 ] || fail "$what: expected one error, got: $out"
    grep -qE "$pattern" <<< "$out" || fail "$what: '$out' does not match '$pattern'"
    echo "$what: $(head -1 <<< "$out")"
    [ $measure_memory = 1 ] || return 0
    kib=$(sed -n 's/^peak \([0-9]*\) KiB$/\1/p' "$work/peak")
    [ -n "$kib" ] && [ "$kib" -lt 102400 ] || fail "$what: peak memory ${kib:-unknown} KiB, 100 MB at most"
    echo "$what: peak memory $kib KiB"
}
cat > "$work/calibration_device.paci" <<'DSL'
model gpt2 { layers 2; width 32; heads 2; context 16; vocab 256 }
batch { micro 2 }
train { steps 2 }
hardware cpu { calibration "/dev/zero" }
DSL
mkfifo "$work/fifo.paci"
bounded "pacic /dev/zero" "^pacic: error: cannot read /dev/zero: not a regular file$" "$pacic" /dev/zero --check
bounded "pacic on a pipe" "fifo\.paci: not a regular file$" "$pacic" "$work/fifo.paci" --check
# The limits on a regular file (docs/dsl.md "Files pacic reads"), on sparse files: no disk used
truncate -s 17M "$work/large.paci"
truncate -s 1025M "$work/large.jsonl"
bounded "a 17 MiB DSL file" "large\.paci: 17825792 bytes, larger than the 16 MiB limit$" "$pacic" "$work/large.paci" --check
bounded "a 1025 MiB metrics file" "large\.jsonl: 1074790400 bytes, larger than the 1024 MiB limit$" \
    "$pacic" plot "$work/large.jsonl" -o "$work/large.svg"
bounded "pacic plot /dev/zero" "^pacic: error: cannot read /dev/zero: not a regular file$" \
    "$pacic" plot /dev/zero -o "$work/zero.svg"
bounded "calibration \"/dev/zero\"" "calibration_device\.paci:4:28: error: cannot read the CPU calibration '/dev/zero': not a regular file" \
    "$pacic" "$work/calibration_device.paci" --explain
# run's own start is a few MiB (cuBLASLt, ~540 MB, is loaded only when a GPU stage opens;
# linked, it put run --help at ~210 MiB): the same 100 MB bound holds for run
/usr/bin/time -f 'peak %M KiB' -o "$work/peak" "$work/m/run" --help > /dev/null
echo "run --help: $(cat "$work/peak")"
bounded "run --init /dev/zero" "^run: error: /dev/zero: not a regular file \(a character device\)$" "$work/m/run" --quiet --init /dev/zero
bounded "run --init on a pipe" "fifo\.safetensors: not a regular file$" bash -c "mkfifo '$work/fifo.safetensors' && '$work/m/run' --quiet --init '$work/fifo.safetensors'"
bounded "run --sample --tokenizer /dev/zero" "^run: error: /dev/zero: not a regular file \(a character device\)$" \
    bash -c "cd '$work/m' && exec ./run --quiet --sample 4 --tokenizer /dev/zero"
# A checkpoint's run.txt that is a device: read line by line, /dev/zero never ended (no memory
# grew, the resume hung); now it reads as not recorded (an older pacic's checkpoint) and resumes.
rm -rf "$work/m/ckpt"
(cd "$work/m" && ./run --quiet --steps 2 > /dev/null) || fail "training 2 steps for the run.txt check"
ln -sf /dev/zero "$work/m/ckpt/step_00000002/run.txt"
(cd "$work/m" && timeout 20 ./run --quiet --resume > /dev/null) || fail "--resume with run.txt a device: exit $?"
[ -d "$work/m/ckpt/step_00000004" ] || fail "--resume with run.txt a device did not train to step 4"
echo "run.txt a device: --resume trained to step 4"
