#!/usr/bin/env bash
# The 32-bit limits at their edges (the goldens hold the errors one past them):
# - micro x context x width = 2^31 - 65536 (micro 32767 at context 65536, width 1), the
#   largest the checker accepts: its generated C compiles with integer overflow an error;
#   micro 32768 is refused.
# - window 1000 over 3,000,000 steps: the listing's last micro-batch is 2999999999, no
#   number wrapped negative.
# - gpipe at window 65535, its most slots, builds a table that verifies; at window 300 (more
#   than 255 slots, the old cap) it trains, and its losses equal 1f1b's at the same window
#   bit for bit (both synchronous, the same accumulation order).
source tests/e2e/lib.sh
export PACIC_NO_CUDA=1 # the CPU program only: the GPU path is not what is tested here

extent_file() {
    cat > "$work/extent$1.paci" <<DSL
model gpt2 { layers 1; width 1; heads 1; context 65536; vocab 2 }
pipeline { stages 1 }
batch { micro $1 }
train { data "$data/tiny_train.bin"; steps 1 }
hardware { memory 1e30 }
DSL
}
extent_file 32767
"$pacic" "$work/extent32767.paci" --emit c -o "$work/gen" || fail "micro 32767 is refused"
for f in "$work"/gen/*.c; do
    ${CC:-cc} -std=c11 -D_GNU_SOURCE -fsyntax-only -Werror=overflow -Iruntime "$f" ||
        fail "$(basename "$f") at micro 32767 overflows"
done
echo "micro 32767 x context 65536 x width 1: accepted, its C compiles without an overflow"
extent_file 32768
out=$("$pacic" "$work/extent32768.paci" --check 2>&1) && fail "micro 32768 is accepted"
grep -q "above 2147483647 (2^31 - 1)" <<<"$out" || fail "micro 32768: $out"
echo "micro 32768: refused"

cat > "$work/long.paci" <<'DSL'
model gpt2 { layers 2; width 16; heads 2; context 8; vocab 256 }
pipeline { stages 2; schedule paci; window 1000 }
batch { micro 1 }
train { steps 3000000 }
DSL
"$pacic" "$work/long.paci" --emit schedule -o "$work/long.txt"
wrapped=$(grep -o -- '[a-zA-Z]*-[0-9][0-9]*' "$work/long.txt" | head -1 || true)
[ -z "$wrapped" ] || fail "a micro-batch number wrapped: $wrapped"
last=$(tail -1 "$work/long.txt" | tr -s ' ')
[ "$last" = " ra2999999999 F2999999999 B2999999999 sg2999999999 S" ] || fail "the last stage ends with '$last'"
echo "window 1000 x 3000000 steps: the listing ends with$last"

sed 's/schedule paci; window 1000/schedule gpipe; window 65535/; s/steps 3000000/steps 2/' "$work/long.paci" > "$work/gpipe_edge.paci"
"$pacic" "$work/gpipe_edge.paci" --emit schedule -o "$work/gpipe_edge.txt" || fail "gpipe at window 65535 is refused"
grep -q '^  stage 0: 65535 slots$' "$work/gpipe_edge.txt" || fail "gpipe at window 65535: $(grep -m1 'stage 0:' "$work/gpipe_edge.txt")"
echo "gpipe at window 65535: accepted, 65535 slots, the table verifies (window 65536: golden err_gpipe_slots)"

for schedule in gpipe 1f1b; do
    small_model "$schedule" 2 "$schedule" 300 2
    sed -i 's/context 16/context 4/; s/width 32/width 8/; s/layers 4/layers 2/' "$work/$schedule.paci"
    train "$schedule"
done
[ "$(losses gpipe | wc -l)" = 2 ] || fail "gpipe at window 300 logged $(losses gpipe | wc -l) losses"
[ "$(losses gpipe)" = "$(losses 1f1b)" ] ||
    fail "gpipe and 1f1b at window 300 differ: $(losses gpipe | tr '\n' ' ') vs $(losses 1f1b | tr '\n' ' ')"
echo "gpipe at window 300 (300 slots): losses $(losses gpipe | tr '\n' ' ')equal 1f1b's"
