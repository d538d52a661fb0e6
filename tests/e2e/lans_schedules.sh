#!/usr/bin/env bash
# optimizer lans under every schedule and data parallelism, on the CPU threads, 20 steps (the
# rule itself is checked against float64 in optim_ref.sh, its resume in resume_optimizers.sh):
#   - the synchronous schedules give one stage's bits (model.bin, state.bin past the schedule's
#     fields, losses): gpipe and 1f1b at p = 2 and 4, zb-h1 at p = 4 and zb-h2 at p = 4 with
#     window 8, uneven splits: a LANS block (a layer's slice, or a whole tensor) never straddles
#     stages, so no norm changes with the cut;
#   - the asynchronous ones, paci and pipedream at p = 4, train: the loss falls by > 0.3 and ends
#     within 0.02 of one stage's (measured: 5.524 -> 5.107 for all three);
#   - data 2 x window 2 with accumulate pairwise gives window 4's bits (the all-reduced mean is
#     the gradient every replica normalises);
#   - compression dgc at density 1 (data 2) is the dense run to the bit (error feedback sends
#     everything, the sum feeds LANS as in a dense run).
source tests/e2e/lib.sh

split="[0.5, 1.5, 1.5, 0.5]"
# lans_model NAME STAGES SCHEDULE WINDOW [SPLIT]: the small model of 20 steps under lans,
# checkpoint at 20.
lans_model() {
    small_model "$1" "$2" "$3" "$4" 20 0 20
    sed -i "s/optimizer adamw { lr 3e-3; clip 0.5 }/optimizer lans { lr 2e-2; betas 0.9 0.99; weight_decay 0.01 }/" \
        "$work/$1.paci"
    grep -q "optimizer lans" "$work/$1.paci" || fail "$1: the optimizer was not set"
    [ -z "${5:-}" ] || set_split "$1" "$5"
}

lans_model one 1 1f1b 4
lans_model one8 1 1f1b 8
for run in one one8; do train "$run" --blas-threads 1 || fail "$run (one stage) did not train"; done
for run in gpipe-2:gpipe:2:4 1f1b-2:1f1b:2:4 gpipe-4:gpipe:4:4 1f1b-4:1f1b:4:4 zb-h1:zb-h1:4:4 zb-h2:zb-h2:4:8; do
    IFS=: read -r name schedule p window <<< "$run"
    lans_model "$name" "$p" "$schedule" "$window" "$([ "$p" = 4 ] && echo "$split")"
    train "$name" --blas-threads 1 || fail "$name did not train"
    reference=one
    [ "$window" = 4 ] || reference=one8
    same_step20 "$reference" "$name" || fail "lans under $schedule at p = $p: not one stage's bits"
done
[ "$(losses one | wc -l)" = 20 ] || fail "one stage logged $(losses one | wc -l) steps, 20 expected"
echo "lans: gpipe and 1f1b (p = 2, 4), zb-h1 and zb-h2 (p = 4, split $split): one stage's model, optimizer state and losses, to the bit"

# loss_fell NAME: the last logged loss is at least 0.3 below the first, and within 0.02 of one
# stage's last.
loss_fell() {
    local first last one
    first=$(losses "$1" | head -1) last=$(losses "$1" | tail -1) one=$(losses one | tail -1)
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(a - b > 0.3) }' || fail "$1: the loss went from $first to $last"
    awk -v b="$last" -v o="$one" 'BEGIN { d = b - o; exit !(d < 0.02 && d > -0.02) }' ||
        fail "$1: the loss ended at $last, one stage's at $one"
    echo "lans under $1 at p = 4: loss $first -> $last in 20 steps (one stage: $one)"
}
for schedule in paci pipedream; do
    lans_model "$schedule" 4 "$schedule" 4 "$split"
    train "$schedule" --blas-threads 1 || fail "$schedule did not train"
    loss_fell "$schedule"
done

# same_state A B: the same model.bin, and state.bin past its header (which records D), at step 20.
same_state() {
    cmp -s "$work/$1/ckpt/step_00000020/model.bin" "$work/$2/ckpt/step_00000020/model.bin" &&
        cmp -s -i 128 "$work/$1/ckpt/step_00000020/state.bin" "$work/$2/ckpt/step_00000020/state.bin"
}
lans_model pair-d2 2 1f1b 2
lans_model pair-k4 2 1f1b 4
for name in pair-d2 pair-k4; do
    sed -i "s/^batch { micro 2 }/batch { micro 2; accumulate pairwise }/" "$work/$name.paci"
    grep -q "accumulate pairwise" "$work/$name.paci" || fail "$name: accumulate was not set"
done
echo "parallel { data 2 }" >> "$work/pair-d2.paci"
lans_model dgc-dense 2 1f1b 2
lans_model dgc-d1 2 1f1b 2
echo "parallel { data 2 }" >> "$work/dgc-dense.paci"
echo "parallel { data 2; compression dgc { density 1 } }" >> "$work/dgc-d1.paci"
for name in pair-d2 pair-k4 dgc-dense dgc-d1; do train "$name" --blas-threads 1 || fail "$name did not train"; done
same_state pair-d2 pair-k4 || fail "lans, accumulate pairwise: data 2 x window 2 is not window 4's bits"
same_state dgc-dense dgc-d1 || fail "lans: compression dgc at density 1 is not the dense run's bits"
echo "lans: data 2 x window 2 == window 4 (accumulate pairwise), and dgc at density 1 == dense, to the bit"
