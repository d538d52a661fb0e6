#!/usr/bin/env bash
# run --sample with --bpe DIR (GPT-2's BPE files) on a model of GPT-2's vocabulary (its seeded
# initial weights; data: Tiny Shakespeare tokenized by pacic tokenize --bpe):
# - the start token is <|endoftext|> with or without --bpe, so the same seed draws the same ids;
#   with --bpe they print as text, which is tiktoken's decoding of the ids run prints without it;
# - --temperature 0 is the argmax of an independent float64 GPT-2 on the exported weights
#   (tests/numeric/greedy_ref.py), from <|endoftext|>;
# - --prompt is encoded as tiktoken encodes it: run's greedy continuation of a prompt is the
#   reference's greedy continuation of tiktoken's ids of it, decoded by tiktoken;
# - --bpe with another vocabulary, or with --tokenizer, is refused with one line.
source tests/e2e/lib.sh
vocab=$root/examples/data/gpt2
command -v node > /dev/null || skip "no node: the reference tiktoken runs on node"
[ -d "$root/tests/bpe/node_modules/tiktoken" ] || skip "tiktoken not installed (npm ci --prefix tests/bpe)"
[ -f "$vocab/encoder.json" ] || skip "no GPT-2 vocabulary in $vocab (examples/data/get-gpt2-vocab.sh)"
python_with "torch, numpy"
reference() { node "$root/tests/bpe/reference.js" "$@"; }

"$pacic" tokenize --bpe "$vocab" "$data/tinyshakespeare.txt" "$work/shk" > /dev/null || fail "tokenize --bpe"
small_model words 2 1f1b 2 10
sed -i "s|vocab 256 }|vocab 50257 }|; s|$data/tiny_train.bin|$work/shk_train.bin|; s|$data/tiny_val.bin|$work/shk_val.bin|" "$work/words.paci"
grep -q "vocab 50257" "$work/words.paci" && grep -q "shk_train" "$work/words.paci" || fail "the model edit did not apply"
mkdir -p "$work/w"
"$pacic" "$work/words.paci" -o "$work/w/run" 2> /dev/null || fail "pacic failed"
cd "$work/w"
# The initial (seeded) weights: a trained toy model's greedy text is one token over and over,
# which would not show whether the prompt was fed.

./run --quiet --sample 12 --seed 3 > ids.txt || fail "--sample without --bpe"
./run --quiet --sample 12 --seed 3 --bpe "$vocab" > text.txt || fail "--sample --bpe"
[ "$(wc -w < ids.txt)" = 12 ] || fail "expected 12 ids: $(cat ids.txt)"
reference decode $(cat ids.txt) > expected.txt
printf '\n' >> expected.txt
cmp -s text.txt expected.txt || fail "--bpe's text is not tiktoken's decoding of the same seed's ids: '$(cat text.txt)' against '$(cat expected.txt)'"

./run --quiet --export hf hf > /dev/null || fail "--export hf"
./run --quiet --sample 10 --temperature 0 > greedy_ids.txt
want=$("$python" "$root/tests/numeric/greedy_ref.py" hf --generate 10 50256) || fail "the reference: $want"
[ "$(cat greedy_ids.txt)" = "$want" ] || fail "--temperature 0 from <|endoftext|>: run '$(cat greedy_ids.txt)', the reference '$want'"

prompt="ROMEO: Wherefore art thou"
./run --quiet --sample 10 --temperature 0 --bpe "$vocab" --prompt "$prompt" > prompted.txt || fail "--prompt with --bpe"
want=$("$python" "$root/tests/numeric/greedy_ref.py" hf --generate 10 50256 $(reference encode "$prompt")) ||
    fail "the reference: $want"
[ "$want" != "$(cat greedy_ids.txt)" ] || fail "the reference continues the prompt as it continues nothing: a weak check"
{ printf '%s' "$prompt"; reference decode $want; printf '\n'; } > expected_prompted.txt
cmp -s prompted.txt expected_prompted.txt ||
    fail "--prompt: run printed '$(cat prompted.txt)', the reference's continuation of tiktoken's ids is '$(cat expected_prompted.txt)'"

# Refusals: a vocabulary that is not the model's, --bpe beside --tokenizer, a missing folder.
mkdir -p small
python3 - small <<'PY' # a byte-level vocabulary of 258 tokens in GPT-2's byte-to-unicode alphabet
import json, sys
printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
chars, extra = {}, 0
for b in range(256):
    chars[b] = chr(b) if b in printable else chr(256 + extra)
    extra += b not in printable
vocab = {chars[b]: b for b in range(256)}
vocab["<|endoftext|>"] = 256
vocab["ab"] = 257
json.dump(vocab, open(sys.argv[1] + "/vocab.json", "w"))
open(sys.argv[1] + "/merges.txt", "w").write("#version: 0.2\na b\n") # pacic refuses no merges
PY
if ./run --quiet --sample 5 --bpe small > out.txt 2>&1; then fail "a 258-token --bpe accepted by a 50257-token model"; fi
grep -q "its vocabulary has 258 tokens, the model's 50257" out.txt || fail "vocabulary mismatch: $(cat out.txt)"
if ./run --quiet --sample 5 --bpe "$vocab" --tokenizer x.bin > out.txt 2>&1; then fail "--bpe with --tokenizer accepted"; fi
grep -q -- "--tokenizer and --bpe: one of them" out.txt || fail "--bpe with --tokenizer: $(cat out.txt)"
if ./run --quiet --sample 5 --bpe nowhere > out.txt 2>&1; then fail "a missing --bpe folder accepted"; fi
grep -q "nowhere: cannot open vocab.json or encoder.json" out.txt || fail "missing folder: $(cat out.txt)"
echo "the same seed's ids decode as tiktoken decodes them; greedy from <|endoftext|> and after a prompt encoded as tiktoken does: the reference's; refusals: ok"
