#!/usr/bin/env bash
# compression dgc under on_nan skip (runtime/dgc.c pr_dgc_undo, docs/dsl.md "Gradient
# compression"): a skipped step leaves every replica's residual as it found it, so the pairs
# it sent (and summed, but never stepped on) stay to be sent later, and its own non-finite
# gradient is dropped as a dense skipped step drops it. The trigger is numerics_faults.sh's:
# a run resumes from a checkpoint whose token-embedding row of '!' is +inf, so the steps whose
# micro-batches read a '!' have a NaN loss and gradients. Data 2 as threads, p = 2, 1f1b
# (its global clipping norm skips both stages together), density 0.01, a checkpoint a step:
#   - dgc.bin after each skipped step is dgc.bin of the step before, bit for bit (the pairs
#     were put back; before, they were zeroed and lost);
#   - no NaN stays in a residual: every dgc.bin float is finite, and the steps that read no
#     '!' train (before, the NaNs left unsent in the residual went out at later steps, which
#     were skipped in turn);
#   - one process per stage and replica over TCP gives the threads' bits (model.bin,
#     state.bin, dgc.bin) and skips the same steps.
# Under AdamW (error feedback) and LARS (momentum correction: the velocity is put back too).
# LARS's trust ratio takes wte's norm, inf, at step 3 and turns all of wte into NaN (a dense
# LARS run does the same), so from the first '!' on it skips every step: there only the
# dgc.bin and transport checks apply.
source tests/e2e/lib.sh
export PACIC_CFLAGS=${PACIC_CFLAGS:--O0}
steps=16
bang=33  # '!'

# skip_model NAME: the small model, p = 2, window 2, data 2, compression dgc, on_nan skip.
skip_model() {
    small_model "$1" 2 1f1b 2 $steps 0 1
    sed -i -e "s/^    steps $steps\$/    steps $steps\n    on_nan skip/" \
        -e "s/dir \"ckpt\"/dir \"ckpt\"; keep $steps/" -e 's/clip 0.5 }/clip 0.5; weight_decay 0 }/' "$work/$1.paci"
    echo "parallel { data 2; compression dgc { density 0.01 } }" >> "$work/$1.paci"
    grep -q "keep $steps" "$work/$1.paci" && grep -q "on_nan skip" "$work/$1.paci" || fail "model edit did not apply"
}

ckpt() { printf '%s/ckpt/step_%08d' "$work/$1" "$2"; }

# processes NAME: NAME's program as 4 processes (data 2 x p 2, torchrun-style variables, TCP),
# resumed from a copy of the threads' poisoned checkpoint of step 2, in $work/NAME-tcp.
processes() {
    local r pids=() rc=0
    port=$((port + 1))
    mkdir -p "$work/$1-tcp/ckpt"
    cp -r "$(ckpt "$1" 2)" "$work/$1-tcp/ckpt/"
    echo step_00000002 > "$work/$1-tcp/ckpt/latest"
    for ((r = 0; r < 4; r++)); do
        mkdir -p "$work/$1-tcp/rank$r"
        (cd "$work/$1-tcp/rank$r" && exec env RANK=$r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            "$work/$1/run" --quiet --metrics metrics.jsonl --ckpt-dir ../ckpt --connect-timeout 60 --resume \
            > out.txt 2> err.txt) &
        pids+=($!)
    done
    for r in "${pids[@]}"; do wait "$r" || rc=1; done
    [ $rc = 0 ] || fail "$1 over 4 processes: $(cat "$work/$1-tcp"/rank*/err.txt)"
}

for opt in "adamw { lr 3e-3; clip 0.5 }" "lars { lr 0.5; momentum 0.9 }"; do
    name=${opt%% *}
    skip_model "$name"
    sed -i "s/optimizer adamw { lr 3e-3; clip 0.5; weight_decay 0 }/optimizer $opt/" "$work/$name.paci"
    grep -qF "optimizer $opt" "$work/$name.paci" || fail "$name: optimizer edit did not apply"
    train "$name" --steps 2 || fail "$name: the first 2 steps did not train"
    poison_row "$(ckpt "$name" 2)/model.bin" $bang
    train "$name" --resume 2> "$work/$name.err" || fail "$name: on_nan skip under dgc: $(cat "$work/$name.err")"
    list=$(skipped_steps < "$work/$name.err")
    [ -n "$list" ] || fail "$name: no step was skipped: the poison did not reach the run ($(cat "$work/$name.err"))"
    trained=0
    for ((t = 3; t <= steps; t++)); do
        if [[ " $list " == *" $t "* ]]; then
            cmp -s -i $dgc_head "$(ckpt "$name" $((t - 1)))/dgc.bin" "$(ckpt "$name" $t)/dgc.bin" ||
                fail "$name: step $t was skipped, but its dgc.bin differs from step $((t - 1))'s: its pairs were lost"
        else
            trained=$((trained + 1))
        fi
    done
    if [ "$name" = adamw ]; then
        first=${list%% *}
        [ $((steps - first - $(wc -w <<< "$list") + 1)) -gt 0 ] ||
            fail "$name: every step from the first skipped one ($first) on was skipped: a NaN stayed in a residual ($list)"
        dgc_residuals_finite "$(ckpt "$name" $steps)/dgc.bin" || fail "$name: dgc.bin holds a non-finite residual"
        echo "$name, threads: steps $list skipped (each where a '!' was read), each one's dgc.bin the step" \
             "before's to the bit; $trained other steps trained; every residual finite"
    else
        echo "$name, threads: steps $list skipped, each one's dgc.bin (residuals and velocities) the step" \
             "before's to the bit"
    fi
    processes "$name"
    for f in model.bin state.bin dgc.bin; do
        cmp -s "$(ckpt "$name" $steps)/$f" "$work/$name-tcp/ckpt/step_$(printf %08d $steps)/$f" ||
            fail "$name: 4 processes over TCP differ from the threads in $f"
    done
    tcp_list=$(cat "$work/$name-tcp"/rank*/err.txt | skipped_steps)
    [ "$tcp_list" = "$list" ] || fail "$name: the processes skipped steps '$tcp_list', the threads '$list'"
    echo "$name, 4 processes over TCP: the same steps skipped, the threads' model.bin, state.bin and dgc.bin"
done
