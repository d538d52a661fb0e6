#!/usr/bin/env bash
# Builds the front-end fuzzer (clang, libFuzzer + ASan + UBSan) into build/fuzz/ and runs it
# for a bounded time on a copy of the seed corpus. Exits non-zero on a crash; a crashing
# input is left in build/fuzz/ as crash-*.
#   tests/fuzz/run.sh [SECONDS]      default 60
set -eu
seconds=${1:-60}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$root/build/fuzz
mkdir -p "$out/gen" "$out/corpus"
cd "$root"
bison -Wall -Werror --defines="$out/gen/parser.h" -o "$out/gen/parser.c" grammar/parser.y
flex --header-file="$out/gen/lexer.h" -o "$out/gen/lexer.c" grammar/lexer.l
clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Icompiler -I"$out/gen" -Wno-unused-function \
    tests/fuzz/fuzz_frontend.c compiler/util.c compiler/diag.c compiler/ast.c compiler/sema.c \
    "$out/gen/parser.c" "$out/gen/lexer.c" -lm -o "$out/fuzz_frontend"
cp -n "$here"/corpus/* "$out/corpus/" 2>/dev/null || true
cd "$out"
# -max_len: large enough for any real file; huge inputs are covered by the unit tests
./fuzz_frontend -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 corpus
