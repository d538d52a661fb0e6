#!/usr/bin/env bash
# Runs every test and prints one closing line "N passed, N failed".
# Counts: each cmocka test case, each golden file, each end-to-end script.
# For the sanitizer builds (make sanitize): PACI_BUILD names the build tree (default build),
# PACI_UNIT and PACI_E2E limit the unit binaries and e2e scripts run (space-separated names
# without folder or .sh; empty: all), PACI_GOLDEN=0 skips the golden files.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=$root/${PACI_BUILD:-build}
export PACI_BUILD=${PACI_BUILD:-build} PACIC=$build/bin/pacic
# selected LIST NAME: NAME is in the space-separated LIST, or LIST is empty.
selected() {
    [ -z "$1" ] || [[ " $1 " == *" $2 "* ]]
}
pass=0 fail=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    selected "${PACI_UNIT:-}" "$name" || continue
    if (cd "$root" && "$t") >"$log" 2>&1; then ok=1; else ok=0; fi
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
    if [ "$ok" = 0 ] && [ "$f" = 0 ]; then f=1; fi  # crashed or failed outside a test case
    pass=$((pass + p)); fail=$((fail + f))
    if [ "$f" != 0 ]; then echo "FAIL $name"; cat "$log"; else echo "ok   $name ($p)"; fi
done

if [ "${PACI_GOLDEN:-1}" != 0 ]; then
    if "$here/golden.sh" >"$log" 2>&1; then :; fi
    p=$(sed -n 's/^golden: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$log")
    f=$(sed -n 's/^golden: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$log")
    [ -z "$p" ] && { p=0; f=1; }
    pass=$((pass + p)); fail=$((fail + f))
    if [ "$f" != 0 ]; then cat "$log"; else echo "ok   golden ($p)"; fi
fi

for t in "$here"/e2e/*.sh; do
    [ -x "$t" ] || continue
    name=$(basename "$t" .sh)
    selected "${PACI_E2E:-}" "$name" || continue
    start=$(date +%s)
    if (cd "$root" && "$t") >"$log" 2>&1; then
        pass=$((pass + 1)); echo "ok   e2e/$name ($(( $(date +%s) - start ))s)"
    else
        fail=$((fail + 1)); echo "FAIL e2e/$name"; tail -40 "$log"
    fi
done

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
