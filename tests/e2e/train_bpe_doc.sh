#!/usr/bin/env bash
# docs/tokenize.md quotes what `make train-bpe` printed (its "train-bpe output" block); this
# rechecks the part that takes seconds, so the figures cannot drift from the code again (the
# doc said val 6.3405 at step 100 after the code had come to print 6.3433): the tokenize line's
# token count and bytes a token, the training and validation files' counts, and the loss at
# step 10 of examples/shakespeare-gpt2.paci (within 0.001: another CPU's BLAS may round
# otherwise). The rest (the losses at steps 100 and 200, the sample) takes minutes: not
# rechecked here. Needs the GPT-2 vocabulary (examples/data/get-gpt2-vocab.sh).
source tests/e2e/lib.sh
vocab=$root/examples/data/gpt2
doc=$root/docs/tokenize.md
[ -f "$vocab/encoder.json" ] || skip "no GPT-2 vocabulary in $vocab (examples/data/get-gpt2-vocab.sh)"
sed -n '/^<!-- train-bpe output -->$/,/^<!-- \/train-bpe output -->$/p' "$doc" > "$work/quoted"
[ -s "$work/quoted" ] || fail "docs/tokenize.md has no train-bpe output block"
# quoted SED: what SED's substitution prints of the doc's block (one line, or fail).
quoted() {
    local got
    got=$(sed -n "$1" "$work/quoted")
    [ -n "$got" ] && [ "$(wc -l <<< "$got")" = 1 ] || fail "docs/tokenize.md's block: no one line for $1"
    echo "$got"
}

mkdir -p "$work/data"
"$pacic" tokenize --bpe "$vocab" "$data/tinyshakespeare.txt" "$work/data/shakespeare_gpt2" > "$work/tokenize.out" ||
    fail "tokenize --bpe"
for pattern in 's/^[0-9]* bytes, \([0-9]* tokens ([0-9.]* bytes a token)\).*/\1/p' \
    's/^.*shakespeare_gpt2_train.bin: \([0-9]* tokens\)$/\1/p' 's/^.*shakespeare_gpt2_val.bin: \([0-9]* tokens\)$/\1/p'; do
    want=$(quoted "$pattern")
    got=$(sed -n "$pattern" "$work/tokenize.out")
    [ "$got" = "$want" ] || fail "docs/tokenize.md says '$want', pacic tokenize prints '$got': make train-bpe and copy its lines"
done

cp "$root/examples/shakespeare-gpt2.paci" "$work/gpt2.paci"
"$pacic" "$work/gpt2.paci" -o "$work/run" > /dev/null 2>&1 || fail "examples/shakespeare-gpt2.paci does not compile"
cd "$work"
./run --steps 10 --no-checkpoint > train.out 2>&1 || fail "./run --steps 10: $(tail -3 train.out)"
want=$(quoted 's/^step 10\/200 loss \([0-9.]*\) .*/\1/p')
got=$(sed -n 's/^step 10\/[0-9]* loss \([0-9.]*\) .*/\1/p' train.out)
[ -n "$got" ] || fail "no step 10 line: $(tail -3 train.out)"
awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; exit !(d <= 0.001 && d >= -0.001) }' ||
    fail "docs/tokenize.md says step 10's loss is $want, run prints $got: make train-bpe and copy its lines"
echo "docs/tokenize.md's train-bpe figures: tokens $(quoted 's/^[0-9]* bytes, \([0-9]*\) tokens.*/\1/p'), step 10 loss $got: ok"
