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
