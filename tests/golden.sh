#!/usr/bin/env bash
# Golden tests: every tests/golden/NAME.paci is compiled with the arguments in NAME.args
# (one line; none if the file is absent) from inside tests/golden, and everything pacic
# prints (stdout, stderr) plus its exit status must equal NAME.expected.
#   tests/golden.sh               compare; prints "golden: N passed, N failed"
#   tests/golden.sh --regenerate  rewrite the .expected files (review the diff!)
set -u
here=$(cd "$(dirname "$0")" && pwd)
pacic=${PACIC:-$here/../build/bin/pacic}
regen=0
[ "${1:-}" = "--regenerate" ] && regen=1
pass=0 fail=0
cd "$here/golden"
# CPU programs are priced with this fixed calibration, not this machine's (docs/dsl.md "hardware");
# named from here, so the files do not hold the checkout's path
export PACIC_CPU_CALIBRATION=../cpu-calibration.txt
for dsl in *.paci; do
    name=${dsl%.paci}
    args=""
    [ -f "$name.args" ] && args=$(cat "$name.args")
    # shellcheck disable=SC2086
    actual=$("$pacic" "$dsl" $args 2>&1; echo "exit $?")
    if [ $regen = 1 ]; then
        printf '%s\n' "$actual" > "$name.expected"
        continue
    fi
    if [ -f "$name.expected" ] && [ "$actual" = "$(cat "$name.expected")" ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL golden/$name"
        diff <(printf '%s\n' "$actual") "$name.expected" | head -20
    fi
done
[ $regen = 1 ] && { echo "regenerated $(ls *.paci | wc -l) golden files"; exit 0; }
echo "golden: $pass passed, $fail failed"
[ $fail = 0 ]
