#!/usr/bin/env bash
# --sample N --tokenizer FILE decodes the sampled tokens with llm.c's tokenizer file
# (gpt2_tokenizer.bin: 256 uint32 of header, then per token a length byte and its bytes),
# written here by the test itself for a 300-token vocabulary: the text is exactly the
# decoding of the ids `--sample N` prints without it, in both versions of the header; ids
# past a shorter tokenizer print as <|ID|>. A malformed file ends the run with one error
# line naming it, before anything is sampled.
source tests/e2e/lib.sh
small_model vocab300 1 1f1b 1 2
sed -i 's/vocab 256 }/vocab 300 }/' "$work/vocab300.paci"
grep -q "vocab 300" "$work/vocab300.paci" || fail "model edit did not apply"
mkdir -p "$work/s"
"$pacic" "$work/vocab300.paci" -o "$work/s/run"
cd "$work/s"
./run --sample 40 --seed 1 > ids.txt 2> /dev/null
[ "$(wc -w < ids.txt)" = 40 ] || fail "expected 40 ids: $(cat ids.txt)"

# tok FILE VERSION COUNT: token i is "t<i>|", but 7 is a newline and 9 is two bytes 0xff 0x00.
python3 - "$work/s" <<'PY' || fail "could not write the tokenizers"
import struct, sys
def token(i):
    return b"\n" if i == 7 else b"\xff\x00" if i == 9 else b"t%d|" % i
def write(path, version, count, cut=None):
    header = [20240328, version, count, 0] + [0] * 252
    data = struct.pack("<256I", *header) + b"".join(bytes([len(token(i))]) + token(i) for i in range(count))
    open(path, "wb").write(data[:cut] if cut is not None else data)
folder = sys.argv[1]
write(folder + "/v2.bin", 2, 300)
write(folder + "/v1.bin", 1, 300)
write(folder + "/short.bin", 2, 200)
write(folder + "/cut_tokens.bin", 2, 300, 1024 + 500)
write(folder + "/cut_header.bin", 2, 300, 600)
ids = [int(t) for t in open(folder + "/ids.txt").read().split()]
open(folder + "/expected_v2.txt", "wb").write(b"".join(token(i) for i in ids) + b"\n")
open(folder + "/expected_short.txt", "wb").write(
    b"".join(token(i) if i < 200 else b"<|%d|>" % i for i in ids) + b"\n")
PY
grep -q "<|" expected_short.txt || fail "no sampled id past 200: the short tokenizer is not exercised"
for v in v2 v1; do
    ./run --sample 40 --seed 1 --tokenizer $v.bin > text_$v.txt 2> /dev/null || fail "$v: the run failed"
    cmp -s text_$v.txt expected_v2.txt || fail "$v: the text is not the ids decoded: $(head -c 200 text_$v.txt)"
done
./run --sample 40 --seed 1 --tokenizer short.bin > text_short.txt 2> /dev/null
cmp -s text_short.txt expected_short.txt || fail "short tokenizer: $(head -c 200 text_short.txt)"

# bad FILE MESSAGE: exit 1, nothing on stdout, one error line that names the file.
bad() {
    if ./run --sample 40 --tokenizer "$1" > out.txt 2> err.txt; then fail "$1: the run did not fail"; fi
    [ ! -s out.txt ] || fail "$1: something was sampled: $(cat out.txt)"
    [ "$(grep -v '^run: note:' err.txt)" = "run: error: $1: $2" ] \
        || fail "$1: unexpected message: $(cat err.txt)"
}
bad cut_tokens.bin "truncated at token 102 of 300"
bad cut_header.bin "truncated tokenizer header (600 bytes, the header is 1024)"
printf 'not a tokenizer file, but long enough to hold a header%01000d' 0 > text.bin
bad text.bin "magic is 544501614, an llm.c tokenizer file has 20240328"
bad missing.bin "cannot open tokenizer: No such file or directory"
./run --tokenizer v2.bin > out.txt 2> err.txt && fail "--tokenizer without --sample was accepted"
grep -q "^run: error: --tokenizer is for --sample N$" err.txt || fail "unexpected: $(cat err.txt)"
echo "--sample 40 --tokenizer: the ids decoded exactly (v1, v2, a 200-token tokenizer);" \
     "a truncated, foreign or missing file: one line naming it"
