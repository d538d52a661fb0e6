#!/usr/bin/env bash
# tests/run.sh itself: a skip (exit 77 with "skipped: REASON") is counted as skipped, never
# as passed, and named with its reason; so is a cmocka skip() and a script that left out a
# part (skip_part in lib.sh); exit 77 without a reason is a failure, and so is a script that
# is not executable; under PACI_REQUIRE_ALL=1 every skip is. PACI_TIER=check runs only the
# scripts marked for it; a script marked "# pool: waits" runs beside the PACI_JOBS others. The
# closing line reads "N passed, N failed, N skipped".
# First on a made-up tree (a copy of run.sh beside fake scripts and a fake unit binary), then
# on this tree's own scripts with a build that has nothing (every skip site must exit 77).
# tier: check
source tests/e2e/lib.sh
fake=$work/tree
mkdir -p "$fake/tests/e2e" "$fake/build/tests"
cp tests/run.sh "$fake/tests/run.sh"

# e2e NAME BODY: a fake end-to-end script; it can use lib.sh's skip and skip_part.
e2e() {
    printf '#!/usr/bin/env bash\nsource "%s/tests/e2e/lib.sh"\n%s\n' "$root" "$2" > "$fake/tests/e2e/$1.sh"
    chmod +x "$fake/tests/e2e/$1.sh"
}
e2e pass_one 'echo fine'
e2e pass_two 'true'
e2e fails 'fail "broken on purpose"'
e2e skips 'skip "no widget here: none"'
e2e skips_too 'echo some output; skip "no gadget"'
e2e part 'skip_part "the gadget half"; echo the widget half passed'
e2e part_then_fails 'skip_part "the gadget half"; fail "the widget half broke"'
e2e bare77 'exit 77'
e2e not_executable 'true'
chmod -x "$fake/tests/e2e/not_executable.sh"
# A unit binary as cmocka reports one: 5 passed, 1 skipped.
cat > "$fake/build/tests/test_fake" <<'SH'
#!/bin/sh
printf '[  SKIPPED ] lacks_a_gpu\n[==========] 6 test(s) run.\n[  PASSED  ] 5 test(s).\n'
printf '[  SKIPPED ] 1 test(s), listed below:\n[  SKIPPED ] lacks_a_gpu\n\n 1 SKIPPED TEST(S)\n'
SH
chmod +x "$fake/build/tests/test_fake"

# runner OUT [VAR=VALUE...]: runs the fake tree's run.sh into $work/OUT.txt; prints its status.
runner() {
    local out=$1 status=0
    shift
    env -u PACI_UNIT -u PACI_E2E -u PACI_BUILD -u PACI_REQUIRE_ALL -u PACI_TIER PACI_GOLDEN=0 "$@" \
        "$fake/tests/run.sh" > "$work/$out.txt" 2>&1 || status=$?
    echo "$status"
}
# has OUT LINE: OUT.txt holds LINE exactly.
has() {
    grep -qxF -- "$2" "$work/$1.txt" || { cat "$work/$1.txt" >&2; fail "$1: no line '$2'"; }
}

[ "$(runner all)" = 1 ] || fail "all: run.sh exited 0 with failures"
has all "ok   test_fake (5)"
has all "skip test_fake/lacks_a_gpu: skip() in the test case"
has all "skipped: test_fake/lacks_a_gpu: skip() in the test case" # listed again at the end
has all "skip e2e/skips: no widget here: none"
has all "skip e2e/skips_too: no gadget"
has all "skip e2e/part: part of the test did not run: the gadget half"
has all "FAIL e2e/fails (exit 1)"
has all "FAIL e2e/part_then_fails (exit 1)"
has all "e2e/bare77 exited 77 (skipped) without a 'skipped: REASON' line"
has all "FAIL e2e/bare77 (exit 77)"
has all "FAIL e2e/not_executable: not executable (chmod +x), so it never ran"
has all "7 passed, 4 failed, 4 skipped"
[ "$(tail -n 1 "$work/all.txt")" = "7 passed, 4 failed, 4 skipped" ] || fail "all: the closing line is not last"
echo "fake tree: $(tail -n 1 "$work/all.txt")"

# Scripts running at once are each counted once under their own name, whatever order they
# end in (a slow one holds its slot while the others finish): the same lines as one at a time.
e2e slow_pass 'sleep 1; echo fine, slowly'
[ "$(runner serial PACI_JOBS=1)" = 1 ] || fail "serial: run.sh exited 0 with failures"
[ "$(runner parallel PACI_JOBS=4)" = 1 ] || fail "parallel: run.sh exited 0 with failures"
has parallel "8 passed, 4 failed, 4 skipped"
sorted_lines() { sed 's/ ([0-9]*s)$//' "$work/$1.txt" | sort; }
diff <(sorted_lines serial) <(sorted_lines parallel) >&2 || fail "PACI_JOBS=4 counted other results than PACI_JOBS=1"
rm "$fake/tests/e2e/slow_pass.sh"

# A script whose header has the line "# pool: waits" runs beside the PACI_JOBS others: with one
# job, the next script starts while it waits (for a file that script writes; the 120 s guard
# fails the test if it held the only place).
flag=$work/written-by-the-next
e2e a_waits $'# pool: waits\nfor ((i = 0; i < 1200; i++)); do [ -e '"$flag"$' ] && exit 0; sleep 0.1; done; fail "held the only place"'
e2e b_writes "touch $flag"
[ "$(runner waits PACI_JOBS=1 PACI_UNIT=none PACI_E2E="a_waits b_writes")" = 0 ] || { cat "$work/waits.txt" >&2; fail "waits: run.sh failed"; }
has waits "2 passed, 0 failed, 0 skipped"
rm "$fake/tests/e2e/a_waits.sh" "$fake/tests/e2e/b_writes.sh"
echo "# pool: waits: $(tail -n 1 "$work/waits.txt") with PACI_JOBS=1"

# PACI_TIER=check (make check): the unit tests and only the scripts whose header has the line
# "# tier: check" (the words elsewhere in a line do not count); the rest are counted as left out.
e2e quick $'# tier: check\necho quick'
e2e not_quick 'echo "# tier: check"'
[ "$(runner tier PACI_TIER=check)" = 0 ] || { cat "$work/tier.txt" >&2; fail "tier: run.sh failed"; }
grep -q '^ok   e2e/quick ' "$work/tier.txt" || { cat "$work/tier.txt" >&2; fail "tier: the marked script did not run"; }
has tier "ok   test_fake (5)"
has tier "tier check: 10 e2e scripts not in it left out (make test runs every one)"
has tier "6 passed, 0 failed, 1 skipped"
[ "$(runner bad_tier PACI_TIER=quick)" = 2 ] || fail "PACI_TIER=quick: not refused"
has bad_tier "tests/run.sh: PACI_TIER=quick: expected check or all"
rm "$fake/tests/e2e/quick.sh" "$fake/tests/e2e/not_quick.sh"
echo "PACI_TIER=check: $(tail -n 1 "$work/tier.txt")"

# This tree's tier: the scripts marked for it are the smokes docs/testing.md's table names.
marked=$(grep -lx '# tier: check' tests/e2e/*.sh | xargs -n 1 basename | sed 's/\.sh$//' | sort)
[ -n "$marked" ] || fail "no e2e script is marked '# tier: check'"
named=$(sed -n '/^| subsystem | smoke |$/,/^$/p' docs/testing.md | cut -d '|' -f 3 | grep -o '[a-z_0-9]*' |
        while read -r word; do [ ! -f "tests/e2e/$word.sh" ] || echo "$word"; done | sort -u)
[ "$marked" = "$named" ] || fail "the scripts marked '# tier: check' ($(echo $marked)) are not the smokes docs/testing.md names ($(echo $named))"
echo "make check's smokes: $(echo $marked)"

[ "$(runner some PACI_UNIT=none PACI_E2E="pass_one skips part")" = 0 ] || fail "some: skips made run.sh fail"
has some "skipped: e2e/skips: no widget here: none"
has some "1 passed, 0 failed, 2 skipped"
[ "$(runner strict PACI_UNIT=none PACI_E2E="pass_one skips part" PACI_REQUIRE_ALL=1)" = 1 ] ||
    fail "strict: PACI_REQUIRE_ALL=1 let skips pass"
has strict "FAIL e2e/skips: skipped, and PACI_REQUIRE_ALL=1 allows no skip: no widget here: none"
has strict "1 passed, 2 failed, 0 skipped"
echo "PACI_REQUIRE_ALL=1: $(tail -n 1 "$work/strict.txt")"

# This tree's own skip sites, with a build tree that does not exist (a sanitizer build's
# name to need_cuda_emu, no MPI library), no CUDA under CUDA_HOME, and the fuzzers off.
scripts="cuda_emu cuda_fake gpu_check_dry mpi nvrtc fuzz"
status=0
env -u PACI_UNIT -u PACI_REQUIRE_ALL -u PACI_TIER PACI_BUILD=build/absent-for-the-runner-test PACI_GOLDEN=0 PACI_UNIT=none \
    PACI_E2E="$scripts" CUDA_HOME=$work/no-cuda PACI_FUZZ_SECONDS=0 tests/run.sh > "$work/own.txt" 2>&1 || status=$?
[ "$status" = 0 ] || { cat "$work/own.txt" >&2; fail "own scripts: run.sh exited $status"; }
for name in $scripts; do
    grep -q "^skip e2e/$name: ." "$work/own.txt" || { cat "$work/own.txt" >&2; fail "own scripts: $name not skipped with a reason"; }
done
has own "0 passed, 0 failed, 6 skipped"
grep "^skip " "$work/own.txt"
echo "tests/run.sh counts skips as skips, with their reasons"
