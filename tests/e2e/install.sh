#!/usr/bin/env bash
# An installed pacic works outside the source tree: it finds its runtime library and
# headers relative to its own executable. Its sources go to a folder in $TMPDIR, removed
# after the build whether it succeeded or not.
source tests/e2e/lib.sh

make -s install PREFIX="$work/prefix" >/dev/null
small_model m 2 paci 2 4
mkdir -p "$work/elsewhere"
cd "$work/elsewhere"
"$work/prefix/bin/pacic" "$work/m.paci" -o run
./run --quiet --ckpt-dir ck
[ -f ck/step_00000004/model.bin ] || fail "the installed toolchain's run did not train"
# Moved away from both the install and the source tree, pacic names what it misses.
# It leaves no temporary folder of sources behind ($TMPDIR's), built or not.
cp "$work/prefix/bin/pacic" "$work/lonely-pacic"
mkdir -p "$work/tmp"
out=$(TMPDIR=$work/tmp "$work/lonely-pacic" "$work/m.paci" -o run2 2>&1) && fail "pacic built without its runtime"
grep -q "libpacirt" <<< "$out" || fail "no mention of the missing runtime: $out"
TMPDIR=$work/tmp "$work/prefix/bin/pacic" "$work/m.paci" -o run3 || fail "the installed pacic with TMPDIR"
out=$(TMPDIR=$work/tmp CC=$work/no-such-cc "$work/prefix/bin/pacic" "$work/m.paci" -o run5 2>&1) && fail "pacic built without a C compiler"
[ "$out" = "pacic: error: cannot run the C compiler '$work/no-such-cc': No such file or directory (set CC to choose one)" ] \
    || fail "unexpected: $out"
[ ! -e run5 ] || fail "run5 exists although nothing compiled"
# The generated C is built for this machine's instruction set, or PACIC_MARCH's (another
# machine's, or a fixed one: the study's); a value that is no -march name is refused.
printf '#!/bin/sh\necho "$@" >> %s\nexec cc "$@"\n' "$work/cc-args" > "$work/cc-log"
chmod +x "$work/cc-log"
TMPDIR=$work/tmp CC=$work/cc-log "$work/prefix/bin/pacic" "$work/m.paci" -o run6 || fail "pacic with CC=cc-log"
grep -q -- "-march=native " "$work/cc-args" || fail "not built for this machine: $(head -1 "$work/cc-args")"
rm "$work/cc-args"
march=x86-64 # the baseline every x86-64 CPU runs; elsewhere the compiler's own name for this one
[ "$(uname -m)" = x86_64 ] || march=native
TMPDIR=$work/tmp CC=$work/cc-log PACIC_MARCH=$march "$work/prefix/bin/pacic" "$work/m.paci" -o run7 ||
    fail "pacic with PACIC_MARCH=$march"
[ "$(grep -c -- "-march=$march " "$work/cc-args")" = "$(wc -l < "$work/cc-args")" ] ||
    fail "PACIC_MARCH not passed on to every compilation: $(cat "$work/cc-args")"
./run7 --quiet --steps 1 --no-checkpoint || fail "the $march build did not run"
out=$(TMPDIR=$work/tmp PACIC_MARCH="x86-64 -O0" "$work/prefix/bin/pacic" "$work/m.paci" -o run8 2>&1) &&
    fail "pacic took PACIC_MARCH='x86-64 -O0'"
[ "$out" = "pacic: error: PACIC_MARCH 'x86-64 -O0' is not an instruction-set name (a value of the C compiler's -march, such as native or x86-64-v3)" ] ||
    fail "unexpected: $out"
[ ! -e run8 ] || fail "run8 exists although nothing compiled"
left=$(ls -A "$work/tmp")
[ -z "$left" ] || fail "pacic left $left in TMPDIR"
out=$(TMPDIR=$work/no-such-folder "$work/prefix/bin/pacic" "$work/m.paci" -o run4 2>&1; echo "exit $?")
[ "$out" = "pacic: error: cannot create a temporary folder in $work/no-such-folder (TMPDIR): No such file or directory
exit 1" ] || fail "unexpected: $out"
echo "installed pacic builds and trains outside the source tree"
