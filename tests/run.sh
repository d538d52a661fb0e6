#!/usr/bin/env bash
# Runs every test and prints one closing line "N passed, N failed, N skipped" (CI parses it).
# Counts: each cmocka test case, each golden file, each end-to-end script.
# A skip is never a pass: an e2e script that cannot run here (no CUDA toolkit, no MPI, a
# sanitizer build, ...) prints one line "skipped: REASON" and exits 77; a script that ran
# only part of its work does the same at its end (the part it left out is the reason; what
# it did run passed). Each skip is listed with its reason. Exit 77 without such a line is a
# failure, and so is every skip under PACI_REQUIRE_ALL=1 (CI, whose machine has everything),
# and so is an e2e script that is not executable (it would never run).
# For the sanitizer builds (make sanitize): PACI_BUILD names the build tree (default build),
# PACI_UNIT and PACI_E2E limit the unit binaries and e2e scripts run (space-separated names
# without folder or .sh; empty: all), PACI_GOLDEN=0 leaves out the golden files, and
# PACI_JOBS sets how many e2e scripts run at once (default: the number of CPUs; a script whose
# header holds the line "# pool: waits" runs beside them).
# PACI_TIER=check (make check) runs the unit tests, the golden files and only the e2e scripts
# whose header holds the line "# tier: check" (one smoke per subsystem, for the inner loop);
# unset or "all" (make test): every script.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=$root/${PACI_BUILD:-build}
export PACI_BUILD=${PACI_BUILD:-build} PACIC=$build/bin/pacic
# What --explain prints for CPU programs is the same on every machine, and no test measures
# this one unasked: one fixed CPU calibration (tests/e2e/cpu_prediction.sh measures its own).
export PACIC_CPU_CALIBRATION=${PACIC_CPU_CALIBRATION:-$here/cpu-calibration.txt}
require_all=${PACI_REQUIRE_ALL:-0}
# selected LIST NAME: NAME is in the space-separated LIST, or LIST is empty.
selected() {
    [ -z "$1" ] || [[ " $1 " == *" $2 "* ]]
}
# in_tier SCRIPT: SCRIPT belongs to PACI_TIER's e2e scripts (see the header).
tier=${PACI_TIER:-all}
case $tier in
    all) in_tier() { true; } ;;
    check) in_tier() { grep -qx '# tier: check' "$1"; } ;;
    *) echo "tests/run.sh: PACI_TIER=$tier: expected check or all" >&2; exit 2 ;;
esac
pass=0 fail=0 skip=0
skipped=() # "NAME: REASON", listed again before the closing line

# skipped_test NAME REASON: counts a skip, or a failure under PACI_REQUIRE_ALL=1.
skipped_test() {
    if [ "$require_all" = 1 ]; then
        fail=$((fail + 1)); echo "FAIL $1: skipped, and PACI_REQUIRE_ALL=1 allows no skip: $2"
    else
        skip=$((skip + 1)); skipped+=("$1: $2"); echo "skip $1: $2"
    fi
}

# unit_and_golden COUNTS: the cmocka binaries, then the golden files, printing their lines;
# runs as one job of the e2e pool below (one process at a time, so a core would idle if they
# ran alone before it), in a subshell: its counts go to COUNTS ("PASS FAIL SKIP", then
# each skip's "NAME: REASON" line) for collect.
unit_and_golden() {
    local log=$logs/unit-and-golden.out t name ok p f case_name
    pass=0 fail=0 skip=0 skipped=()
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
        # cmocka's skip(): "[  SKIPPED ] N test(s), listed below:", then one line per case
        while read -r case_name; do
            skipped_test "$name/$case_name" "skip() in the test case"
        done < <(sed -n '/^\[  SKIPPED \] [0-9]* test(s), listed below:$/,$s/^\[  SKIPPED \] \([^ ]*\)$/\1/p' "$log")
    done

    if [ "${PACI_GOLDEN:-1}" != 0 ]; then
        if "$here/golden.sh" >"$log" 2>&1; then :; fi
        p=$(sed -n 's/^golden: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$log")
        f=$(sed -n 's/^golden: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$log")
        [ -z "$p" ] && { p=0; f=1; }
        pass=$((pass + p)); fail=$((fail + f))
        if [ "$f" != 0 ]; then cat "$log"; else echo "ok   golden ($p)"; fi
    fi
    { echo "$pass $fail $skip"; [ "$skip" = 0 ] || printf '%s\n' "${skipped[@]}"; } > "$1"
}

# The e2e scripts run PACI_JOBS at a time (default: one per CPU); each has its own scratch
# folder and its own block of TCP ports, and none measures time, so only the order of the lines
# depends on the machine. Results are counted as each script ends.
jobs=${PACI_JOBS:-$(nproc 2>/dev/null || echo 1)}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# One NVRTC cache for the whole run, empty at its start (as on a fresh CI machine): pacic keys
# it by the unit's content, which most scripts' models share (small_model's shape), so their
# builds skip NVRTC; scripts that set PACIC_CACHE themselves keep their own. Concurrent
# scripts may share it: entries are written whole (renamed into place).
export PACIC_CACHE=${PACIC_CACHE:-$logs/nvrtc-cache}
# The emulator and the fake CUDA stack run no image, and the fake GPU is a compute capability
# 9.0 that loads the sm_90 cubin as an H100 would: one architecture instead of pacic's three
# (each is another NVRTC pass over every unit, most of a cold build). tests/e2e/cuda_build.sh
# compiles every example for the default three; tests/e2e/nvrtc.sh every kernel for sm_80 and sm_90.
export PACIC_CUDA_ARCHS=${PACIC_CUDA_ARCHS-sm_90}
# Likewise the fake CUDA stack's parts that do not depend on the model (tests/cuda_fake/build.sh).
export FAKE_CACHE=${FAKE_CACHE:-$logs/fake-cache}
# And the C compiler's objects of the programs pacic builds (tests/cc_cache.sh, keyed by the
# preprocessed source): scripts that build the same model and schedule compile its stages
# once. PACI_CC_CACHE=off turns it off, and so does a checkout path with blanks (pacic splits
# CC on them).
if [ "${PACI_CC_CACHE:-}" != off ] && [ -x "$here/cc_cache.sh" ] && [[ $here != *[[:space:]]* ]]; then
    export PACI_CC_REAL=${CC:-cc} PACI_CC_CACHE=${PACI_CC_CACHE:-$logs/cc-cache}
    export CC=$here/cc_cache.sh
fi
declare -A started_at=() name_of=() waits=()
running=0 waiting=0 index=0 left_out=0
# Script N's ports start at PACI_PORT_BASE + 100 N: two runs at once (make sanitize's ASan
# and TSan runs) take bases far apart.
port_base=${PACI_PORT_BASE:-10000}

# collect PID STATUS: counts the finished script's result and prints its line.
collect() {
    local pid=$1 status=$2 name=${name_of[$1]} reason
    local out=$logs/$name.log
    if [ "$name" = "unit and golden" ]; then
        cat "$out"
        local counts=$logs/unit-and-golden.counts
        local p f k
        if [ -f "$counts" ] && read -r p f k < "$counts"; then
            pass=$((pass + p)) fail=$((fail + f)) skip=$((skip + k))
            mapfile -t -O "${#skipped[@]}" skipped < <(tail -n +2 "$counts")
        else
            fail=$((fail + 1)); echo "FAIL unit and golden: ended without its counts (exit $status)"
        fi
        return
    fi
    if [ "$status" = 0 ]; then
        pass=$((pass + 1)); echo "ok   e2e/$name ($(( $(date +%s) - started_at[$pid] ))s)"
    elif [ "$status" = 77 ] && reason=$(sed -n 's/^skipped: //p' "$out" | tail -n 1) && [ -n "$reason" ]; then
        skipped_test "e2e/$name" "$reason"
    else
        [ "$status" = 77 ] && echo "e2e/$name exited 77 (skipped) without a 'skipped: REASON' line"
        fail=$((fail + 1)); echo "FAIL e2e/$name (exit $status)"; tail -40 "$out"
    fi
}

# wait_one: waits for any running script and collects it.
wait_one() {
    local pid status
    wait -n -p pid
    status=$?
    collect "$pid" "$status"
    if [ -n "${waits[$pid]:-}" ]; then waiting=$((waiting - 1)); else running=$((running - 1)); fi
}

# The longest scripts start first, longest first, so that the run does not end with one of
# them on one core while the other cores idle (their order only: every script runs, and none
# is timed). The order is that of their times in one make test (2026-12-07, a clean clone on 2
# idle cores: 65 s for zero_bubble down to 10 s for checkpoint_trust, the BPE scripts by a CI
# run's; the rest took less), then those the earlier order named, alphabetical after;
# stop_continue, which runs beside the others (# pool: waits), first.
long_first=(stop_continue zero_bubble fuzz study_v4_smoke data_parallel cuda_fake cuda_emu_optim cuda_fake_chunks
            gpu_check_dry cuda_fake_dgc chunks torch_ref cuda_emu cuda_build readme_commands half_layers_cuda
            study_scale_smoke optim_ref cuda_fake_replicas delay_dcasgd nvrtc study_tuned_smoke cuda_fake_vocab
            post_validation lans_schedules half_layers resume_optimizers dgc train_bpe_doc loss_falls sample_bpe
            bpe_tiktoken multiprocess sync_equals_single_stage checkpoint_trust bad_inputs signals plot
            dgc_processes sampling)
# The unit tests and golden files are one job, started first.
if [ -n "$(ls "$build"/tests/test_* 2>/dev/null)" ] || [ "${PACI_GOLDEN:-1}" != 0 ]; then
    unit_and_golden "$logs/unit-and-golden.counts" > "$logs/unit and golden.log" 2>&1 &
    started_at[$!]=$(date +%s) name_of[$!]="unit and golden"
    running=$((running + 1))
fi
scripts=()
for name in "${long_first[@]}"; do
    [ ! -e "$here/e2e/$name.sh" ] || scripts+=("$here/e2e/$name.sh")
done
for t in "$here"/e2e/*.sh; do
    [[ " ${long_first[*]} " == *" $(basename "$t" .sh) "* ]] || scripts+=("$t")
done
for t in "${scripts[@]}"; do
    name=$(basename "$t" .sh)
    [ "$name" != lib ] || continue # sourced by the others
    selected "${PACI_E2E:-}" "$name" || continue
    in_tier "$t" || { left_out=$((left_out + 1)); continue; }
    if [ ! -x "$t" ]; then
        fail=$((fail + 1)); echo "FAIL e2e/$name: not executable (chmod +x), so it never ran"
        continue
    fi
    # A script whose header holds the line "# pool: waits" sleeps most of its time (stop_continue's
    # stops of the runs it tests): it runs beside the PACI_JOBS others, not in one of their places.
    sleeper=0
    grep -qx '# pool: waits' "$t" && sleeper=1
    while [ "$sleeper" = 0 ] && [ "$running" -ge "$jobs" ]; do wait_one; done
    index=$((index + 1))
    (cd "$root" && PACI_TEST_PORT=$((port_base + 100 * index)) exec "$t") >"$logs/$name.log" 2>&1 &
    started_at[$!]=$(date +%s) name_of[$!]=$name
    if [ "$sleeper" = 1 ]; then waits[$!]=1 waiting=$((waiting + 1)); else running=$((running + 1)); fi
done
while [ $((running + waiting)) -gt 0 ]; do wait_one; done

[ "$tier" = all ] || echo "tier $tier: $left_out e2e scripts not in it left out (make test runs every one)"
[ "$skip" = 0 ] || printf 'skipped: %s\n' "${skipped[@]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]
