#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, libFuzzer + ASan + UBSan) into build/fuzz/ and runs
# each for a bounded time on a working copy of its seed corpus. Exits non-zero if any finds
# a crash; the crashing input is left in build/fuzz/NAME/ as crash-* (or leak-*, timeout-*,
# oom-*). Prints one line per harness: executions, and the corpus size it ended with.
#   tests/fuzz/run.sh [SECONDS] [NAME...]     default 60 seconds each, every harness
#   tests/fuzz/run.sh --runs N [--jobs J] [NAME...]
#                                             N executions each, however long that takes; with
#                                             J > 1, as J processes of N / J executions at once
#                                             on the same corpus folder (libFuzzer reloads it, so
#                                             each takes up what the others found): N in all
# Harnesses: frontend (parse and check), compile (up to the verified schedule), tokens (the
# token-file reader), checkpoint (the checkpoint reader), safetensors (the Hugging Face
# reader of run --init; its seed is the toy model exported by the harness itself).
set -eu
runs_limit=0 jobs=1
if [ "${1:-}" = --runs ]; then
    runs_limit=$2 seconds=0
    shift 2
    if [ "${1:-}" = --jobs ]; then
        jobs=$2
        shift 2
    fi
else
    seconds=${1:-60}
    shift || true
fi
names=${*:-frontend compile tokens checkpoint safetensors}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$root/build/fuzz
cd "$root"

flags=(-std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -Wno-unused-function)
front_src=(compiler/util.c compiler/diag.c compiler/ast.c compiler/sema.c compiler/schedule.c compiler/machine.c
           "$out/gen/parser.c" "$out/gen/lexer.c")
runtime_src=()
for f in runtime/*.c; do
    [ "$f" = runtime/main.c ] || runtime_src+=("$f")  # main() is libFuzzer's
done

compiler_src=()
for f in compiler/*.c; do
    [ "$f" = compiler/main.c ] || compiler_src+=("$f")
done
compiler_src+=("$out/gen/parser.c" "$out/gen/lexer.c")

# obj SOURCE...: the objects of the sources, each compiled once per invocation into
# $out/obj/ (every harness shares the flags), so harnesses that share sources build faster.
obj() {
    local src o
    for src in "$@"; do
        o=$out/obj/${src//\//_}.o
        [ -e "$o" ] || clang "${flags[@]}" -Icompiler -Iruntime -I"$out/gen" -c "$src" -o "$o"
        echo "$o"
    done
}

build() {
    local name=$1 objects
    case $name in
    frontend)
        mapfile -t objects < <(obj "${front_src[@]}")
        clang "${flags[@]}" -Icompiler -I"$out/gen" tests/fuzz/fuzz_frontend.c "${objects[@]}" \
            -lm -o "$out/fuzz_frontend" ;;
    compile)
        mapfile -t objects < <(obj "${compiler_src[@]}" runtime/bpe.c runtime/util.c)
        clang "${flags[@]}" -Icompiler -Iruntime -I"$out/gen" tests/fuzz/fuzz_compile.c \
            "${objects[@]}" -lpcre2-8 -ljansson -lpthread -lm -o "$out/fuzz_compile" ;; # BPE, plot's JSON
    tokens)
        mapfile -t objects < <(obj "${runtime_src[@]}")
        clang "${flags[@]}" -Iruntime tests/fuzz/fuzz_tokens.c "${objects[@]}" \
            -lpcre2-8 -ljansson -lopenblas -lpthread -lm -o "$out/fuzz_tokens" ;;
    checkpoint|safetensors)
        # The toy model runs over the compiler's own schedule tables (tests/unit/toy_model.h).
        mapfile -t objects < <(obj "${runtime_src[@]}" "${compiler_src[@]}")
        clang "${flags[@]}" -Iruntime -Icompiler -I"$out/gen" -Itests/unit "tests/fuzz/fuzz_$name.c" \
            "${objects[@]}" -lpcre2-8 -ljansson -lopenblas -lpthread -lm -o "$out/fuzz_$name" ;;
    *)
        echo "run.sh: unknown harness '$name' (frontend, compile, tokens, checkpoint, safetensors)" >&2
        exit 2 ;;
    esac
}

corpus_of() {
    case $1 in
    frontend|compile) echo dsl ;;
    *) echo "$1" ;;
    esac
}

# -max_len: large enough for any real DSL file or a checkpoint of the toy model; huge
# inputs are covered by the unit tests.
max_len_of() {
    case $1 in
    checkpoint|safetensors) echo 32768 ;;
    *) echo 8192 ;;
    esac
}

rm -rf "$out/obj"
mkdir -p "$out/gen" "$out/obj"
bison -Wall -Werror --defines="$out/gen/parser.h" -o "$out/gen/parser.c" grammar/parser.y
flex --header-file="$out/gen/lexer.h" -o "$out/gen/lexer.c" grammar/lexer.l
for name in $names; do
    build "$name"
done

status=0
for name in $names; do
    work=$out/$name
    mkdir -p "$work/corpus"
    cp -n "$here/corpus/$(corpus_of "$name")"/* "$work/corpus/" 2>/dev/null || true
    if [ "$name" = safetensors ] && [ ! -e "$work/corpus/seed" ]; then
        FUZZ_SAFETENSORS_SEED="$work/corpus/seed" "$out/fuzz_$name" >/dev/null 2>&1
    fi
    start=$(date +%s)
    pids=() runs=0 result=ok
    for ((job = 1; job <= jobs; job++)); do
        log=$work/log$([ "$jobs" = 1 ] || echo ".$job")
        (cd "$work" && exec "$out/fuzz_$name" -max_total_time="$seconds" \
            -runs="$((runs_limit > 0 ? (runs_limit + jobs - 1) / jobs : -1))" \
            -max_len="$(max_len_of "$name")" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 corpus) \
            >"$log" 2>&1 &
        pids+=($!)
    done
    for ((job = 1; job <= jobs; job++)); do
        log=$work/log$([ "$jobs" = 1 ] || echo ".$job")
        if ! wait "${pids[$((job - 1))]}"; then
            result=FAILED; status=1
            tail -60 "$log"
        fi
        runs=$((runs + $(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | head -n 1 | grep . || echo 0)))
    done
    echo "fuzz $name: $result, $runs executions in $(( $(date +%s) - start ))s$([ "$jobs" = 1 ] || echo " ($jobs processes)"), corpus $(ls "$work/corpus" | wc -l) inputs"
done
exit $status
