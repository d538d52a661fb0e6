#!/usr/bin/env bash
# bench/bpe.sh: GPT-2 BPE throughput of `pacic tokenize --bpe` against tiktoken's gpt2
# encoding (its Rust core as WASM, node; tests/bpe) on the same text in the same run: MB/s of
# input text, best of 3 each, and the ratios. pacic's figure is what `tokenize` prints for
# the encoding alone (the vocabulary's loading excluded, as tiktoken's is). Run by
# `make bench-bpe`. TEXT (default: Tiny Shakespeare 8 times, 8.9 MB, so the thread pool has
# chunks of a MiB and more), THREADS (default: nproc). No assertions: figures only.
set -euo pipefail
cd "$(dirname "$0")/.."
pacic=${PACI_BUILD:-build}/bin/pacic vocab=examples/data/gpt2 threads=${THREADS:-$(nproc)}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
text=${TEXT:-$scratch/text.txt}
[ -n "${TEXT:-}" ] || for i in 1 2 3 4 5 6 7 8; do cat examples/data/tinyshakespeare.txt; done > "$text"
best_pacic() { # THREADS: the best MB/s of 3 runs
    local best=0 rate
    for _ in 1 2 3; do
        rate=$("$pacic" tokenize --threads "$1" --val-fraction 0 --bpe "$vocab" "$text" "$scratch/t" |
            sed -n 's/.* \([0-9.]*\) MB\/s on .*/\1/p')
        best=$(awk -v a="$best" -v b="$rate" 'BEGIN { print (b > a ? b : a) }')
    done
    echo "$best"
}
one=$(best_pacic 1) many=$(best_pacic "$threads")
reference=$(node tests/bpe/reference.js bench "$text")
printf '%s bytes of text (%s)\n' "$(stat -c %s "$text")" "${TEXT:-Tiny Shakespeare x 8}"
printf '%-32s %8s MB/s\n' "tiktoken 1.0.22 (WASM, node)" "$reference" "pacic, 1 thread" "$one" \
    "pacic, $threads threads" "$many"
awk -v a="$one" -v b="$many" -v r="$reference" -v t="$threads" \
    'BEGIN { printf "pacic / tiktoken: %.2fx on one core, %.2fx on %d threads\n", a / r, b / r, t }'
