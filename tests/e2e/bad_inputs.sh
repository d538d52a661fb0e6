#!/usr/bin/env bash
# Bad inputs to run: each gives one error line naming the file and the problem, a
# non-zero exit, and no crash.
# tier: check
source tests/e2e/lib.sh

small_model m 2 paci 2 4 0 2
train m
cd "$work/m"

# expect_error WHAT PATTERN [run flags...]: run must fail with one line matching PATTERN.
expect_error() {
    local what=$1 pattern=$2
    shift 2
    local out status=0
    out=$(./run --quiet "$@" 2>&1) || status=$?
    [ $status != 0 ] || fail "$what: exit status 0"
    [ $status -lt 128 ] || fail "$what: killed by signal $((status - 128))"
    [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "$what: expected one line, got: $out"
    grep -qE "$pattern" <<< "$out" || fail "$what: '$out' does not match '$pattern'"
    echo "$what: $out"
}

train_bin=$data/tiny_train.bin
expect_error "missing token file" "missing\.bin" --data "$work/missing.bin"
head -c 5000 "$train_bin" > "$work/truncated.bin"
expect_error "truncated token file" "truncated\.bin.*(truncated|short|declares)" --data "$work/truncated.bin"
{ printf '\x01\x02\x03\x04'; tail -c +5 "$train_bin"; } > "$work/magic.bin"
expect_error "wrong magic" "magic\.bin.*magic" --data "$work/magic.bin"
: > "$work/empty.bin"
expect_error "empty token file" "empty\.bin" --data "$work/empty.bin"

# Tokens outside the vocabulary: a 64-token model fed byte-level text.
sed -i 's/vocab 256/vocab 64/' "$work/m.paci"
"$pacic" "$work/m.paci" -o "$work/m/run64" 2>/dev/null
out=$(./run64 --quiet 2>&1) && fail "vocab 64 on byte data trained"
grep -qE "tiny_train\.bin.*token.*64" <<< "$out" || fail "out-of-vocabulary: '$out'"
echo "token outside the vocabulary: $out"

# A checkpoint of another model shape.
sed -i 's/vocab 64/vocab 256/; s/width 32/width 48/' "$work/m.paci"
"$pacic" "$work/m.paci" -o "$work/m/run48" 2>/dev/null
out=$(./run48 --quiet --init "$work/m/ckpt/step_00000004/model.bin" 2>&1) && fail "--init of another shape was accepted"
[ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "another shape: expected one line, got: $out"
grep -qE "model\.bin.*(width|channels|C)" <<< "$out" || fail "another shape: '$out' does not name the file and field"
echo "checkpoint of another shape: $out"

# An unwritable checkpoint folder (a path through a regular file: root ignores modes).
: > "$work/plainfile"
before=$(cat ckpt/latest)
expect_error "unwritable checkpoint folder" "plainfile" --ckpt-dir "$work/plainfile/ckpt"
[ "$(cat ckpt/latest)" = "$before" ] || fail "the earlier checkpoint moved"
[ -z "$(find "$work" -name "*.tmp*")" ] || fail "a temporary file was left behind"
# ... and it is refused before the first step: metrics would show a trained step.
./run --quiet --ckpt-dir "$work/plainfile/ckpt" --metrics "$work/early.jsonl" 2> /dev/null && fail "unwritable folder accepted"
! grep -q '"step"' "$work/early.jsonl" 2> /dev/null || fail "an unwritable checkpoint folder was found only after training"
# A folder whose parents are missing is made whole, as the examples' checkpoints/NAME needs.
./run --quiet --steps 1 --ckpt-dir "$work/nested/a/b" || fail "a nested checkpoint folder was not created"
[ -d "$work/nested/a/b/step_00000001" ] || fail "no checkpoint in the nested folder"
# --metrics, --trace and --profile-out that cannot be written: refused before training (no
# checkpoint folder made), not when the trace and the profile are written at the end.
expect_error "--trace in a missing folder" "^run: error: $work/no/such/trace.json: cannot write trace: No such file or directory$" \
    --ckpt-dir "$work/early-ckpt" --trace "$work/no/such/trace.json"
expect_error "--profile-out a folder" "^run: error: $work: cannot write profile: it is a folder$" \
    --ckpt-dir "$work/early-ckpt" --profile-out "$work"
expect_error "--metrics through a file" "^run: error: $work/plainfile/m.jsonl: cannot write metrics: Not a directory$" \
    --ckpt-dir "$work/early-ckpt" --metrics "$work/plainfile/m.jsonl"
[ ! -e "$work/early-ckpt" ] || fail "a run with an unwritable output trained first"
# A resume's closing line counts the steps it ran, not the checkpoint's.
./run --quiet --steps 2 --ckpt-dir "$work/resumed" || fail "2 steps"
done_line=$(./run --resume --ckpt-dir "$work/resumed" 2> /dev/null | grep '^done:')
[[ $done_line == "done: 2 steps (3 to 4) in "* ]] || fail "the resumed run's closing line: $done_line"
echo "a resume's closing line: ${done_line%% in *}"
# calibrate-cpu -o a folder: refused before it measures, saying why.
msg=$("$pacic" calibrate-cpu -o "$work" 2>&1) && fail "calibrate-cpu -o a folder succeeded"
[ "$msg" = "pacic: error: cannot write the CPU calibration to $work: it is a folder (-o names the rates file)" ] ||
    fail "calibrate-cpu -o a folder: '$msg'"
echo "calibrate-cpu -o a folder: $msg"
# pacic -o where no executable can be written: one error naming the path, exit 1 (a user's
# mistake, not pacic's), before anything is compiled, and nothing left behind.
: > "$work/afile"
for out in "$work/no/such/run" "$work" "$work/afile/run"; do
    status=0
    msg=$("$pacic" "$work/m.paci" -o "$out" 2>&1) || status=$?
    [ "$status" = 1 ] || fail "pacic -o $out: exit $status, expected 1"
    [[ $msg == "pacic: error: cannot write $out: "* ]] || fail "pacic -o $out: '$msg'"
    echo "pacic -o $out: $msg"
done
[ -z "$(find "$work" -name "*.tmp*")" ] || fail "pacic left a temporary file behind"
echo "all bad inputs rejected cleanly"
