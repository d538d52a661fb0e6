#!/usr/bin/env bash
# pacic tokenize --bpe (runtime/bpe.c) gives tiktoken's "gpt2" ids (its Rust core as WASM, npm
# package tiktoken in tests/bpe) to the last id, on the shipped Tiny Shakespeare and on
# tests/bpe/torture.txt (contractions, runs of spaces and newlines, emoji, CJK, combining
# marks, Unicode spaces, digits of several scripts, control bytes, <|endoftext|> inside the
# text) and on a 100 KB word of random letters and 100 KB of base64; the ids do not depend on --threads; decoding gives back every byte, also of text that
# is not UTF-8 (which tiktoken cannot take: such bytes are pieces of their own); bad vocabulary
# files get an error naming the file and line. Needs node, npm ci in tests/bpe and the
# vocabulary (examples/data/get-gpt2-vocab.sh); .ci/install-deps sets up all three.
source tests/e2e/lib.sh
vocab=$root/examples/data/gpt2
command -v node > /dev/null || skip "no node: the reference tiktoken runs on node"
[ -d "$root/tests/bpe/node_modules/tiktoken" ] || skip "tiktoken not installed (npm ci --prefix tests/bpe)"
[ -f "$vocab/encoder.json" ] || skip "no GPT-2 vocabulary in $vocab (examples/data/get-gpt2-vocab.sh)"

# same_as_tiktoken TEXT: pacic's token file against tiktoken's ids.
same_as_tiktoken() {
    local name
    name=$(basename "$1" .txt)
    "$pacic" tokenize --val-fraction 0 --bpe "$vocab" "$1" "$work/$name" > /dev/null || fail "$name: pacic tokenize failed"
    node "$root/tests/bpe/reference.js" ids "$1" "$work/$name.ref" || fail "$name: tiktoken failed"
    python3 - "$work/${name}_train.bin" "$work/$name.ref" <<'PY' || fail "$name: pacic's ids differ from tiktoken's"
import struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack_from("<i", data, 8)[0]
ours = list(struct.unpack_from("<%dH" % n, data, 1024))
ref = list(struct.unpack("<%di" % (len(open(sys.argv[2], "rb").read()) // 4), open(sys.argv[2], "rb").read()))
if ours != ref:
    at = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), min(len(ours), len(ref)))
    print("%d ids against tiktoken's %d; first difference at %d: %s against %s"
          % (len(ours), len(ref), at, ours[at:at + 6], ref[at:at + 6]))
    sys.exit(1)
print("%s: %d ids, identical to tiktoken's" % (sys.argv[1].split("/")[-1], len(ours)))
PY
    "$pacic" tokenize --bpe "$vocab" --decode "$work/${name}_train.bin" > "$work/$name.decoded" || fail "$name: decode failed"
    { printf '<|endoftext|>'; cat "$1"; } | cmp -s - "$work/$name.decoded" || fail "$name: decode(encode(x)) is not x"
}
same_as_tiktoken "$data/tinyshakespeare.txt"
same_as_tiktoken "$root/tests/bpe/torture.txt"
# One piece of 100 KB (the heap of pairs: runs of equal ranks, stale entries, long merge
# chains), and base64 (short pieces of letters, digits and '+/', no spaces); tiktoken is
# quadratic on the word (seconds) and crashes on a MB of it.
python3 - "$work/long_word.txt" "$work/base64.txt" <<'PY'
import base64, random, sys
rng = random.Random(36)
open(sys.argv[1], "w").write("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(100000)))
open(sys.argv[2], "w").write(base64.b64encode(rng.randbytes(75000)).decode())
PY
same_as_tiktoken "$work/long_word.txt"
same_as_tiktoken "$work/base64.txt"

# Chunk borders: one thread or three over 3.3 MB, the same ids.
for i in 1 2 3; do cat "$data/tinyshakespeare.txt" "$root/tests/bpe/torture.txt"; done > "$work/three.txt"
"$pacic" tokenize --threads 1 --bpe "$vocab" "$work/three.txt" "$work/one_thread" > /dev/null || fail "--threads 1"
"$pacic" tokenize --threads 3 --bpe "$vocab" "$work/three.txt" "$work/three_threads" > /dev/null || fail "--threads 3"
cmp -s "$work/one_thread_train.bin" "$work/three_threads_train.bin" || fail "--threads 3 gives other ids than --threads 1"

# Not UTF-8: stray continuation bytes, a cut sequence, an overlong '/', a surrogate, 0xff.
printf 'ok \x80\x80 caf\xc3 x \xe2\x82 \xc0\xaf \xed\xa0\x80 \xff\xfe end\n\xf0\x9f\x98' > "$work/invalid.txt"
"$pacic" tokenize --val-fraction 0 --bpe "$vocab" "$work/invalid.txt" "$work/invalid" > /dev/null || fail "invalid UTF-8: tokenize failed"
"$pacic" tokenize --bpe "$vocab" --decode "$work/invalid_train.bin" > "$work/invalid.decoded"
{ printf '<|endoftext|>'; cat "$work/invalid.txt"; } | cmp -s - "$work/invalid.decoded" || fail "invalid UTF-8 does not decode to itself"

# Several documents: each starts with <|endoftext|> (50256).
printf 'one' > "$work/a.txt"; printf 'two' > "$work/b.txt"
"$pacic" tokenize --val-fraction 0 --bpe "$vocab" "$work/a.txt" "$work/b.txt" "$work/ab" > /dev/null || fail "two documents"
python3 -c "
import struct,sys; d=open('$work/ab_train.bin','rb').read(); n=struct.unpack_from('<i',d,8)[0]
ids=struct.unpack_from('<%dH'%n,d,1024); sys.exit(0 if ids==(50256,505,50256,11545) else 'two documents: %s'%(ids,))" ||
    fail "two documents are not <|endoftext|> one <|endoftext|> two"

# Bad input: the error names the file (and line).
expect_error() {
    local want=$1; shift
    if "$pacic" tokenize "$@" > "$work/out" 2>&1; then fail "accepted: $*"; fi
    grep -qF -- "$want" "$work/out" || fail "$*: expected '$want', got: $(cat "$work/out")"
}
mkdir -p "$work/bad"
cp "$vocab/encoder.json" "$work/bad/vocab.json"
printf '#version: 0.2\n\xc4\xa0 t\nno_such_token x\n' > "$work/bad/merges.txt"
expect_error "merges.txt:3: \"no_such_token\" is not in the vocabulary" --bpe "$work/bad" "$work/a.txt" "$work/x"
printf '{"a": 0,\n "b": }' > "$work/bad/vocab.json"
expect_error "vocab.json:2:" --bpe "$work/bad" "$work/a.txt" "$work/x"
printf '{"a": 0}' > "$work/bad/vocab.json"
expect_error "no token for the byte 0x00" --bpe "$work/bad" "$work/a.txt" "$work/x"
expect_error "cannot open" --bpe "$work/nothing" "$work/a.txt" "$work/x"
expect_error "several text files need --bpe" "$work/a.txt" "$work/b.txt" "$work/x"
expect_error "--decode FILE needs --bpe DIR" --decode "$work/ab_train.bin"
expect_error "not an llm.c token file" --bpe "$vocab" --decode "$work/a.txt"
echo "tiktoken's ids on Tiny Shakespeare and the torture text; threads, invalid UTF-8, documents, bad files: ok"
