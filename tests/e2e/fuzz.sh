#!/usr/bin/env bash
# Every libFuzzer harness (DSL front end, whole compile to the verified schedule, token
# files, checkpoints, Hugging Face safetensors) runs from its seed corpus for a bounded
# time and finds no crash, leak, hang or undefined behaviour. PACI_FUZZ_SECONDS sets the
# time per harness (default 3: five harnesses and their builds stay near a minute in
# CI); 0 skips (exit 77).
set -euo pipefail
seconds=${PACI_FUZZ_SECONDS:-3}
[ "$seconds" = 0 ] && { echo "skipped: PACI_FUZZ_SECONDS=0"; exit 77; }
command -v clang >/dev/null || { echo "FAIL: clang (with libFuzzer) is needed" >&2; exit 1; }
tests/fuzz/run.sh "$seconds" frontend compile tokens checkpoint safetensors 2>&1 | grep '^fuzz \|ERROR\|SUMMARY\|error:\|undefined reference'
