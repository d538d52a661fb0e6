#!/usr/bin/env bash
# One bubble figure per schedule and cost model: --explain's prediction, its schedule table's
# row for the file's own schedule, the terminal timeline's title and the SVG's title print
# the same number for the same file, and the same "steady state: steps a-b of n simulated,
# MODEL" words beside it; the timeline and the SVG draw steps of that steady state (not a
# separate run), and --fill-drain says it draws a run of its own. Two examples (tiny on the
# CPU cost model, gpt2-medium-8 on the GPU's, in bf16) under 1f1b, paci and zb-h1, and once
# with --profile's measured costs.
# tier: check
source tests/e2e/lib.sh

phrase() { { grep -o 'bubble [0-9.]*% (steady state: steps [0-9]*-[0-9]* of [0-9]* simulated, [^)]*)' || true; } | head -n 1; }

# check NAME FILE: the four figures of FILE agree; prints them.
check() {
    local name=$1 file=$2 explain timeline svg row
    explain=$("$pacic" "$file" --explain "${@:3}" 2>/dev/null) || fail "$name: --explain failed"
    timeline=$("$pacic" "$file" --emit timeline "${@:3}" 2>/dev/null) || fail "$name: --emit timeline failed"
    svg=$("$pacic" "$file" --emit svg "${@:3}" 2>/dev/null) || fail "$name: --emit svg failed"
    local e t s
    e=$(phrase <<< "$explain")
    t=$(head -n 1 <<< "$timeline" | phrase)
    s=$(sed -n 's|.*<text x="70" y="20" font-size="14">\(.*\)</text>|\1|p' <<< "$svg" | phrase)
    [ -n "$e" ] || fail "$name: --explain prints no steady-state bubble: $(grep -m1 'step time' <<< "$explain")"
    [ "$e" = "$t" ] || fail "$name: --explain says '$e', the timeline '$t'"
    [ "$e" = "$s" ] || fail "$name: --explain says '$e', the SVG '$s'"
    # the schedule table's row for this file prints the same percentage
    local pct row_pct
    pct=$(sed 's/bubble \([0-9.]*\)%.*/\1/' <<< "$e")
    row_pct=$(grep -- '<- this file' <<< "$explain" | awk '{print $2}' | tr -d '%')
    [ "$pct" = "$row_pct" ] || fail "$name: the schedule table's row says $row_pct%, the prediction $pct%"
    # the timeline draws steady-state steps of the file's run
    head -n 1 <<< "$timeline" | grep -qE ": steps [0-9]+-[0-9]+ of [0-9]+, " || fail "$name: the timeline does not say which steps it draws"
    echo "$name: $e (explain, table, timeline, svg)"
}

small=$root/examples/tiny.paci
medium=$root/examples/gpt2-medium-8.paci
for schedule in 1f1b paci zb-h1; do
    sed "s/schedule paci/schedule $schedule/" "$small" > "$work/tiny-$schedule.paci"
    check "tiny $schedule" "$work/tiny-$schedule.paci"
    sed "s/schedule paci/schedule $schedule/" "$medium" > "$work/medium-$schedule.paci"
    check "gpt2-medium-8 $schedule" "$work/medium-$schedule.paci"
done
grep -q "GPU cost model" <<< "$("$pacic" "$work/medium-paci.paci" --emit timeline 2>/dev/null | head -n 1)" ||
    fail "gpt2-medium-8's timeline does not name the GPU cost model"
grep -q "CPU cost model" <<< "$("$pacic" "$work/tiny-paci.paci" --emit timeline 2>/dev/null | head -n 1)" ||
    fail "tiny's timeline does not name the CPU cost model"

# Measured costs (--profile, a version 1 file): the same agreement, naming the file.
cat > "$work/profile.txt" <<'PROFILE'
stage 0 fwd 0.004 bwd 0.008 step 0.001
stage 1 fwd 0.005 bwd 0.010 step 0.001
link 0 0.0001
PROFILE
check "tiny paci --profile" "$work/tiny-paci.paci" --profile "$work/profile.txt"
"$pacic" "$work/tiny-paci.paci" --emit timeline --profile "$work/profile.txt" 2>/dev/null | head -n 1 |
    grep -q "costs measured in $work/profile.txt" || fail "--profile's timeline does not name the profile"

# --fill-drain: a run of its own, and it says so instead of a steady-state bubble.
fd=$("$pacic" "$work/tiny-paci.paci" --emit timeline --fill-drain 2>/dev/null | head -n 1)
grep -qE "a run of 3 steps alone, .*idle [0-9.]+% of a 3-step run, its fill and drain included \(CPU cost model\)" <<< "$fd" ||
    fail "--fill-drain's title: $fd"
grep -q "steady state" <<< "$fd" && fail "--fill-drain's title speaks of a steady state: $fd"
echo "--fill-drain: $fd"
