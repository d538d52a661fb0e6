#!/usr/bin/env bash
# An installed pacic works outside the source tree: it finds its runtime library and
# headers relative to its own executable.
source tests/e2e/lib.sh

make -s install PREFIX="$work/prefix" >/dev/null
small_model m 2 paci 2 4
mkdir -p "$work/elsewhere"
cd "$work/elsewhere"
"$work/prefix/bin/pacic" "$work/m.paci" -o run
./run --quiet --ckpt-dir ck
[ -f ck/step_00000004/model.bin ] || fail "the installed toolchain's run did not train"
# Moved away from both the install and the source tree, pacic names what it misses.
cp "$work/prefix/bin/pacic" "$work/lonely-pacic"
out=$("$work/lonely-pacic" "$work/m.paci" -o run2 2>&1) && fail "pacic built without its runtime"
grep -q "libpacirt" <<< "$out" || fail "no mention of the missing runtime: $out"
echo "installed pacic builds and trains outside the source tree"
