#!/usr/bin/env bash
# bench/bpe.sh: GPT-2 BPE throughput of `pacic tokenize --bpe` against tiktoken's gpt2
# encoding (its Rust core as WASM, node; tests/bpe) on the same text in the same run: MB/s of
# input text, best of 3 each, and the ratios. pacic's figure is what `tokenize` prints for
# the encoding alone (the vocabulary's loading excluded, as tiktoken's is). Run by
# `make bench-bpe`. TEXT (default: Tiny Shakespeare 8 times, 8.9 MB, so the thread pool has
# chunks of a MiB and more), THREADS (default: nproc). Then the pathological inputs on one
# core: one word of a MB of random letters (a single piece, where merging is all the work;
# tiktoken is quadratic there and crashes on a MB, so it gets 100 KB, one round) and a MB of
# base64. No assertions: figures only.
set -euo pipefail
cd "$(dirname "$0")/.."
pacic=${PACI_BUILD:-build}/bin/pacic vocab=examples/data/gpt2 threads=${THREADS:-$(nproc)}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
text=${TEXT:-$scratch/text.txt}
[ -n "${TEXT:-}" ] || for i in 1 2 3 4 5 6 7 8; do cat examples/data/tinyshakespeare.txt; done > "$text"
best_pacic() { # TEXT THREADS: the best "MB/s seconds" of 3 runs
    local best=0 seconds=0 line rate
    for _ in 1 2 3; do
        line=$("$pacic" tokenize --threads "$2" --val-fraction 0 --bpe "$vocab" "$1" "$scratch/t" | head -1)
        rate=$(sed -n 's/.* \([0-9.]*\) MB\/s on .*/\1/p' <<< "$line")
        if awk -v a="$best" -v b="$rate" 'BEGIN { exit !(b > a) }'; then
            best=$rate seconds=$(sed -n 's/.* in \([0-9.]*\) s, .*/\1/p' <<< "$line")
        fi
    done
    echo "$best $seconds"
}
read -r one _ < <(best_pacic "$text" 1)
read -r many _ < <(best_pacic "$text" "$threads")
reference=$(node tests/bpe/reference.js bench "$text")
printf '%s bytes of text (%s)\n' "$(stat -c %s "$text")" "${TEXT:-Tiny Shakespeare x 8}"
printf '%-32s %8s MB/s\n' "tiktoken 1.0.22 (WASM, node)" "$reference" "pacic, 1 thread" "$one" \
    "pacic, $threads threads" "$many"
awk -v a="$one" -v b="$many" -v r="$reference" -v t="$threads" \
    'BEGIN { printf "pacic / tiktoken: %.2fx on one core, %.2fx on %d threads\n", a / r, b / r, t }'

python3 - "$scratch" <<'PY'
import base64, random, sys
rng = random.Random(36)
word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(1000000))
open(sys.argv[1] + "/word_1m.txt", "w").write(word)
open(sys.argv[1] + "/word_100k.txt", "w").write(word[:100000])
open(sys.argv[1] + "/base64_1m.txt", "w").write(base64.b64encode(rng.randbytes(750000)).decode())
PY
read -r word_rate word_seconds < <(best_pacic "$scratch/word_1m.txt" 1)
read -r b64_rate b64_seconds < <(best_pacic "$scratch/base64_1m.txt" 1)
word_reference=$(node tests/bpe/reference.js bench "$scratch/word_100k.txt" 1)
b64_reference=$(node tests/bpe/reference.js bench "$scratch/base64_1m.txt")
printf '\none word of random letters, one core\n'
printf '%-32s %8s MB/s\n' "tiktoken, 100 KB (1 MB crashes)" "$word_reference"
printf '%-32s %8s MB/s  (%s s)\n' "pacic, 1 MB" "$word_rate" "$word_seconds"
printf 'base64, 1 MB, one core\n'
printf '%-32s %8s MB/s\n' "tiktoken" "$b64_reference"
printf '%-32s %8s MB/s  (%s s)\n' "pacic" "$b64_rate" "$b64_seconds"
