#!/usr/bin/env bash
# run --sample N and its draw, on a byte-level model trained 600 steps (a few seconds; enough
# that the greedy text is more than one repeated byte and follows the prompt):
# - --seed S repeats the text bit for bit; another seed gives another text; without --seed a
#   seed comes from the clock, said on stderr, and --seed with it repeats that text;
# - --temperature 0 is greedy: the same text under any seed, each token the argmax of an
#   independent float64 GPT-2 on the exported weights (tests/numeric/greedy_ref.py), with and
#   without a prompt; --top-k 1
#   is the same text; a temperature of 0.5 or --top-k 5 changes a seed's text;
# - --prompt TEXT is printed first and the continuation follows; a prompt longer than the
#   context is cut to its last context - 1 bytes (said), so it continues as that tail does;
# - every text ends with a newline;
# - a subnormal temperature (1e-320) is accepted: greedy, as 0 is;
# - bad values (a negative, NaN, infinite, too large or missing temperature, a folder for
#   --tokenizer, a negative top-k or one above the vocabulary, a seed that is not an integer
#   >= 0) and the sampling flags without --sample end the run with exit 1 and one line that
#   names the flag and the value.
source tests/e2e/lib.sh
small_model bytes 1 1f1b 1 600
sed -i 's/batch { micro 2 }/batch { micro 4 }/' "$work/bytes.paci"
grep -q "micro 4" "$work/bytes.paci" || fail "the micro edit did not apply"
train bytes --blas-threads 1 >/dev/null
cd "$work/bytes"

# draw FILE [flags]: 48 tokens into FILE (stderr into FILE.err).
draw() {
    local file=$1
    shift
    ./run --sample 48 "$@" > "$file" 2> "$file.err" || fail "--sample 48 $*: $(cat "$file.err")"
    [ "$(tail -c 1 "$file" | od -An -c | tr -d ' ')" = '\n' ] || fail "--sample 48 $*: no newline at the end"
}
same() { cmp -s "$1" "$2" || fail "$3: '$(cat "$1")' != '$(cat "$2")'"; }
differ() { ! cmp -s "$1" "$2" || fail "$3: both '$(cat "$1")'"; }

draw s5 --seed 5
draw s5again --seed 5
draw s6 --seed 6
same s5 s5again "--seed 5 twice"
differ s5 s6 "--seed 5 and --seed 6"
grep -q "seed" s5.err && fail "--seed given, yet a seed was said: $(cat s5.err)"

draw clock1
draw clock2
seed1=$(sed -n 's/^run: seed \([0-9]*\) (--seed \1 repeats this sample)$/\1/p' clock1.err)
seed2=$(sed -n 's/^run: seed \([0-9]*\) (--seed \1 repeats this sample)$/\1/p' clock2.err)
[ -n "$seed1" ] && [ -n "$seed2" ] || fail "no seed said: $(cat clock1.err)"
[ "$seed1" != "$seed2" ] || fail "two runs without --seed drew with the same seed $seed1"
differ clock1 clock2 "two runs without --seed"
draw repeat --seed "$seed1"
same clock1 repeat "--seed $seed1, the seed said"

draw greedy1 --temperature 0 --seed 1
draw greedy2 --temperature 0 --seed 2
draw greedy_clock --temperature 0
draw top1 --top-k 1 --seed 3
same greedy1 greedy2 "--temperature 0 under seeds 1 and 2"
same greedy1 greedy_clock "--temperature 0 under seed 1 and the clock's"
same greedy1 top1 "--temperature 0 and --top-k 1"
draw cool --temperature 0.5 --seed 5
draw top5 --top-k 5 --seed 5
differ s5 cool "--seed 5 at temperature 1 and 0.5"
differ s5 top5 "--seed 5 over the whole vocabulary and the top 5"
draw all --top-k 256 --seed 5
same s5 all "--top-k 256 (the whole vocabulary) and no --top-k"
# A subnormal temperature is a number >= 0 like any: it keeps the most likely token alone.
draw subnormal --temperature 1e-320 --seed 5
same greedy1 subnormal "--temperature 1e-320 and --temperature 0"
# Sampling trains nothing: where no GPU answers, the note says what runs on the CPU.
! grep -q "training" s5.err || fail "--sample's note speaks of training: $(cat s5.err)"
if grep -q "^run: note: no GPU" s5.err; then
    grep -q "^run: note: no GPU (.*); sampling on the CPU$" s5.err || fail "--sample's note: $(cat s5.err)"
fi
echo "--seed repeats bit for bit, seeds differ, the clock's seed is said and repeats;" \
     "temperature 0 == top-k 1 under any seed; temperature 0.5 and top-k 5 change the draw"

python_with "torch, numpy"
./run --quiet --export hf hf > /dev/null
"$python" "$root/tests/numeric/greedy_ref.py" hf greedy1 10 || fail "--temperature 0 is not the argmax"
draw greedy_prompted --prompt "Citizen" --temperature 0
"$python" "$root/tests/numeric/greedy_ref.py" hf greedy_prompted 10 7 ||
    fail "--temperature 0 after a prompt is not the argmax given the prompt"
[ "$(tail -c +8 greedy_prompted)" != "$(cat greedy1)" ] || fail "the prompt did not change the greedy text"

draw prompted --prompt "ROMEO:" --seed 5
[ "$(head -c 6 prompted)" = "ROMEO:" ] || fail "the prompt does not come first: $(cat prompted)"
[ "$(wc -c < prompted)" = $((6 + 48 + 1)) ] || fail "prompt, 48 tokens, newline: $(wc -c < prompted) bytes"
differ prompted s5 "the same seed with and without a prompt"
# A prompt past the context (16): only its last 15 bytes count, so a 53-byte one continues
# as its tail does, and says so.
long="First Citizen: Before we proceed any further, hear me"
tail=${long: -15}
draw cut --prompt "$long" --temperature 0
draw tail --prompt "$tail" --temperature 0
[ "$(tail -c +$((${#long} + 1)) cut)" = "$(tail -c +$((${#tail} + 1)) tail)" ] ||
    fail "a long prompt continues otherwise than its last 15 bytes: '$(cat cut)' '$(cat tail)'"
grep -q "^run: note: the prompt is ${#long} tokens and the context 16: only its last 15 are fed" cut.err ||
    fail "the cut prompt is not said: $(cat cut.err)"
echo "--prompt is printed first and continued; a long one by its last 15 bytes (said); a newline ends each text"

# bad FLAGS... -- MESSAGE: exit 1, nothing on stdout, that one error line.
bad() {
    local args=() message
    while [ "$1" != -- ]; do args+=("$1"); shift; done
    message=$2
    if ./run "${args[@]}" > out.txt 2> err.txt; then fail "${args[*]}: accepted"; fi
    [ ! -s out.txt ] || fail "${args[*]}: printed $(cat out.txt)"
    [ "$(grep -v '^run: note:' err.txt)" = "run: error: $message" ] ||
        fail "${args[*]}: $(cat err.txt), expected 'run: error: $message'"
}
bad --sample 4 --temperature -1 -- "--temperature -1: needs a finite number >= 0 (0: always the most likely token)"
bad --sample 4 --temperature nan -- "--temperature nan: needs a finite number >= 0 (0: always the most likely token)"
bad --sample 4 --temperature -- "--temperature needs a finite number >= 0 (0: always the most likely token)"
bad --sample 4 --temperature 1e400 -- "--temperature 1e400: needs at most 1.8e308, the largest double (0: always the most likely token)"
bad --sample 4 --temperature inf -- "--temperature inf: needs a finite number >= 0 (0: always the most likely token)"
bad --sample 4 --tokenizer "$work" -- "$work: not a regular file (a folder)"
bad --sample 4 --top-k -2 -- "--top-k -2: needs an integer >= 0"
bad --sample 4 --top-k 257 -- "--top-k 257: more than the 256 tokens of the vocabulary"
bad --sample 4 --seed -3 -- "--seed -3: needs an integer in [0, 18446744073709551615]"
bad --sample 4 --seed x1 -- "--seed x1: needs an integer in [0, 18446744073709551615]"
for flag in "--prompt hi" "--temperature 0" "--top-k 3" "--seed 1"; do
    # shellcheck disable=SC2086
    bad $flag -- "${flag% *} is for --sample N"
done
echo "bad temperatures, top-ks and seeds, and the sampling flags without --sample: one line naming them"

# A vocabulary other than bytes has no encoder for a prompt: refused, saying what is needed.
cd "$root"
small_model vocab300 1 1f1b 1 2
sed -i 's/vocab 256 }/vocab 300 }/' "$work/vocab300.paci"
build_quiet vocab300
cd "$work/vocab300"
bad --sample 4 --prompt hi -- "--prompt needs an encoder for this model's 300-token vocabulary: --bpe DIR with GPT-2's vocab.json and merges.txt (examples/data/get-gpt2-vocab.sh), or a byte-level model (vocab 256); --tokenizer's llm.c file only decodes"
echo "--prompt with a 300-token vocabulary: refused, saying why"
