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
left=$(ls -A "$work/tmp")
[ -z "$left" ] || fail "pacic left $left in TMPDIR"
out=$(TMPDIR=$work/no-such-folder "$work/prefix/bin/pacic" "$work/m.paci" -o run4 2>&1; echo "exit $?")
[ "$out" = "pacic: error: cannot create a temporary folder in $work/no-such-folder (TMPDIR): No such file or directory
exit 1" ] || fail "unexpected: $out"
echo "installed pacic builds and trains outside the source tree"
