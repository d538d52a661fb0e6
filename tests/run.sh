#!/usr/bin/env bash
# Runs every test and prints one closing line "N passed, N failed".
# Counts: each cmocka test case, each golden file, each end-to-end script.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
pass=0 fail=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

for t in "$root"/build/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    if (cd "$root" && "$t") >"$log" 2>&1; then ok=1; else ok=0; fi
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    if [ "$ok" = 0 ] && [ "$f" = 0 ]; then f=1; fi  # crashed or failed outside a test case
    pass=$((pass + p)); fail=$((fail + f))
    if [ "$f" != 0 ]; then echo "FAIL $name"; cat "$log"; else echo "ok   $name ($p)"; fi
done

if "$here/golden.sh" >"$log" 2>&1; then :; fi
p=$(sed -n 's/^golden: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$log")
f=$(sed -n 's/^golden: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$log")
[ -z "$p" ] && { p=0; f=1; }
pass=$((pass + p)); fail=$((fail + f))
if [ "$f" != 0 ]; then cat "$log"; else echo "ok   golden ($p)"; fi

for t in "$here"/e2e/*.sh; do
    [ -x "$t" ] || continue
    name=$(basename "$t" .sh)
    start=$(date +%s)
    if (cd "$root" && "$t") >"$log" 2>&1; then
        pass=$((pass + 1)); echo "ok   e2e/$name ($(( $(date +%s) - start ))s)"
    else
        fail=$((fail + 1)); echo "FAIL e2e/$name"; tail -40 "$log"
    fi
done

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
