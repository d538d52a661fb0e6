#!/usr/bin/env bash
# pacic tokenize's inputs, each bad one refused with one line naming it and exit 1:
# - /dev/zero as a text, as vocab.json, as merges.txt and as --decode's token file: refused at
#   once (the tokenizer reads regular files only), within a 20 s hang guard and under 100 MB
#   of memory (it used to read /dev/zero for ever, growing 0.8 GB/s);
# - an empty text (also with --val-fraction 0), a text too short for a validation file, and
#   the warning for token files shorter than a sequence of 1024 + 1;
# - a vocab.json that misses an id or repeats one, an empty merges.txt (or only its #version
#   line): named for what they are;
# - --help prints the usage and exits 0.
# The vocabulary is a made-up byte-level one (the 256 bytes, two merges, <|endoftext|>), so
# no download is needed.
# tier: check
source tests/e2e/lib.sh
mkdir -p "$work/tok" "$work/bad"
python3 - "$work/tok" <<'PY'
import json, sys
# GPT-2's bytes_to_unicode: the character that stands for each byte in the files.
printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
chars, extra = {}, 0
for b in range(256):
    chars[b] = chr(b) if b in printable else chr(256 + extra)
    extra += b not in printable
vocab = {chars[b]: b for b in range(256)}
vocab.update({"ab": 256, "abc": 257, "<|endoftext|>": 258})
json.dump(vocab, open(sys.argv[1] + "/vocab.json", "w"))
open(sys.argv[1] + "/merges.txt", "w").write("#version: 0.2\na b\nab c\n")
PY
printf 'abc abcab' > "$work/doc.txt"
"$pacic" tokenize --val-fraction 0 --bpe "$work/tok" "$work/doc.txt" "$work/doc" > /dev/null 2>&1 ||
    fail "the made-up vocabulary does not load"

# expect_error WANT ARG...: pacic tokenize ARG... exits 1 with one line that holds WANT, within
# 20 s and (where /usr/bin/time is) under 100 MB of memory; not measured under a sanitizer build
# (ASan's shadow memory: its reservation fails under ulimit -v and its pages count in the peak).
measure_memory=1
if [ "${PACI_BUILD:-build}" != build ]; then
    measure_memory=0
    skip_part "the memory bound under $PACI_BUILD (a sanitizer's shadow memory); the messages and the hang guard ran"
fi
expect_error() {
    local want=$1 rc=0; shift
    if [ $measure_memory = 0 ]; then
        timeout 20 "$pacic" tokenize "$@" > "$work/out" 2> "$work/err" || rc=$?
    elif [ -x /usr/bin/time ]; then
        timeout 20 /usr/bin/time -o "$work/peak" -f %M "$pacic" tokenize "$@" > "$work/out" 2> "$work/err" || rc=$?
    else
        (ulimit -v 1000000; timeout 20 "$pacic" tokenize "$@" > "$work/out" 2> "$work/err") || rc=$?
    fi
    [ "$rc" = 124 ] && fail "tokenize $*: still running after 20 s"
    [ "$rc" = 1 ] || fail "tokenize $*: exit $rc, expected 1: $(cat "$work/err")"
    grep -qF -- "$want" "$work/err" || fail "tokenize $*: expected '$want', got: $(cat "$work/err")"
    [ "$(grep -c . "$work/err")" = 1 ] || fail "tokenize $*: more than one line: $(cat "$work/err")"
    if [ $measure_memory = 1 ] && [ -x /usr/bin/time ]; then
        [ "$(tail -1 "$work/peak")" -lt 100000 ] || fail "tokenize $*: peak memory $(tail -1 "$work/peak") KB"
    fi
    return 0
}
# with_file NAME [LINK]: $work/bad holds the made-up vocabulary with NAME a link to LINK, or stdin.
with_file() {
    rm -rf "$work/bad"; cp -r "$work/tok" "$work/bad"; rm "$work/bad/$1"
    if [ -n "${2:-}" ]; then ln -s "$2" "$work/bad/$1"; else cat > "$work/bad/$1"; fi
}

[ -e /dev/zero ] || fail "no /dev/zero"
expect_error "/dev/zero: not a regular file (a character device)" /dev/zero "$work/z"
expect_error "/dev/zero: not a regular file (a character device)" --bpe "$work/tok" /dev/zero "$work/z"
with_file vocab.json /dev/zero
expect_error "vocab.json: not a regular file (a character device)" --bpe "$work/bad" "$work/doc.txt" "$work/z"
with_file merges.txt /dev/zero
expect_error "merges.txt: not a regular file (a character device)" --bpe "$work/bad" "$work/doc.txt" "$work/z"
expect_error "/dev/zero: not a regular file (a character device)" --bpe "$work/tok" --decode /dev/zero
expect_error "$work: not a regular file (a folder)" "$work" "$work/z"

: > "$work/empty.txt"
expect_error "empty.txt: the file is empty" "$work/empty.txt" "$work/e"
expect_error "empty.txt: the file is empty" --val-fraction 0 "$work/empty.txt" "$work/e"
expect_error "empty.txt: the file is empty" --bpe "$work/tok" "$work/empty.txt" "$work/e"
printf 'abcabcabcabc' > "$work/short.txt" # 5 tokens: 0.1 of them is none
expect_error "the last 0.1 of them (--val-fraction) are 0, and a validation file needs 2 or more" \
    --bpe "$work/tok" "$work/short.txt" "$work/s"
printf 'a' > "$work/one.txt"
expect_error "one.txt: 1 bytes are 1 tokens, too few: the training file needs 2 or more" --val-fraction 0 \
    "$work/one.txt" "$work/o"

head -c 5000 "$data/tinyshakespeare.txt" > "$work/small.txt"
"$pacic" tokenize "$work/small.txt" "$work/small" > /dev/null 2> "$work/err" || fail "a small text: $(cat "$work/err")"
grep -qF "pacic: warning: $work/small_val.bin: only 500 tokens, fewer than one sequence of 1024 + 1" "$work/err" &&
    grep -qF "a larger --val-fraction" "$work/err" || fail "no warning for a 500-token validation file: $(cat "$work/err")"
grep -qF "small_train.bin" "$work/err" && fail "a warning for a 4500-token training file: $(cat "$work/err")"

with_file vocab.json < /dev/null
python3 -c "
import json, sys; v = json.load(open('$work/tok/vocab.json')); del v['ab']; json.dump(v, open('$work/bad/vocab.json', 'w'))"
expect_error "vocab.json: no token has id 256 (the 258 tokens need ids 0..257, and \"<|endoftext|>\" has 258)" \
    --bpe "$work/bad" "$work/doc.txt" "$work/x"
python3 -c "
import json, sys; v = json.load(open('$work/tok/vocab.json')); v['abc'] = 256; json.dump(v, open('$work/bad/vocab.json', 'w'))"
expect_error "vocab.json: tokens \"ab\" and \"abc\" both have id 256" --bpe "$work/bad" "$work/doc.txt" "$work/x"
with_file merges.txt < /dev/null
expect_error "merges.txt: no merges" --bpe "$work/bad" "$work/doc.txt" "$work/x"
with_file merges.txt <<< '#version: 0.2'
expect_error "merges.txt: no merges" --bpe "$work/bad" "$work/doc.txt" "$work/x"

"$pacic" tokenize --help > "$work/help" 2>&1 || fail "--help exits $?"
grep -q "^usage: pacic tokenize" "$work/help" && grep -q -- "--val-fraction F" "$work/help" ||
    fail "--help does not print the usage: $(cat "$work/help")"
echo "/dev/zero as each input, empty and short texts, ids missing or repeated, no merges, --help: ok"
