#!/usr/bin/env bash
# Resume with each optimizer: 16 steps straight equal 8, stop, resume, 8, bit for bit
# (model.bin, state.bin with Muon's momentum and its AdamW group's moments, LAMB's m and v,
# LARS's momentum, NAdamW's and LANS's m and v, and the losses), on the asynchronous paci
# schedule at p = 3 (nadamw with delay_correction nesterov too: each stage its own beta1; lans
# with delay_correction predict too). A state.bin of another optimizer is refused with the way
# out (LAMB's under LANS: the same m and v, another rule), and so is AdamW's (version 1) under Muon.
source tests/e2e/lib.sh

# opt_model NAME OPTIMIZER-BLOCK [PIPELINE-KEYS]: a 3-stage paci program of 16 steps,
# checkpoints every 8.
opt_model() {
    cat > "$work/$1.paci" <<DSL
model gpt2 { layers 3; width 32; heads 2; context 16; vocab 256 }
pipeline { stages 3; schedule paci; window 2${3:+; $3} }
batch { micro 2 }
train {
    data "$data/tiny_train.bin"
    steps 16
    optimizer $2
    checkpoint { every 8; dir "ckpt" }
}
DSL
}
# refused WHAT: `run --resume` in $work/switch fails with one line that says WHAT.
refused() {
    local out
    out=$(cd "$work/switch" && ./run --quiet --resume 2>&1) && fail "resume did not refuse: $out"
    grep -qF "$1" <<<"$out" || fail "resume refused, without '$1': $out"
}
declare -A rule=(
    [muon]="muon { lr 0.02; weight_decay 0.01; clip 0.5; adamw { lr 3e-3 } }"
    [lamb]="lamb { lr 5e-3; weight_decay 0.01; clip 0.5 }"
    [lars]="lars { lr 0.5; trust_coefficient 0.01; weight_decay 1e-4; clip 0.5 }"
    [adamw]="adamw { lr 3e-3; clip 0.5 }"
    [nadamw]="nadamw { lr 3e-3; betas 0.9 0.95; weight_decay 0.1; momentum_decay 0.004; clip 0.5 }"
    [nadamw-nesterov]="nadamw { lr 3e-3; weight_decay 0.1; clip 0.5 }"
    [lans]="lans { lr 5e-3; betas 0.9 0.99; weight_decay 0.01 }"
    [lans-predict]="lans { lr 5e-3; weight_decay 0.01 }"
)
declare -A pipeline_keys=([nadamw-nesterov]="delay_correction nesterov" [lans-predict]="delay_correction predict")
# One build per optimizer; the resumed run is the same program in another folder.
for opt in muon lamb lars nadamw nadamw-nesterov lans lans-predict; do
    opt_model "$opt-straight" "${rule[$opt]}" "${pipeline_keys[$opt]:-}"
    train "$opt-straight"
    mkdir -p "$work/$opt-resumed"
    cp "$work/$opt-straight/run" "$work/$opt-resumed/run"
    (cd "$work/$opt-resumed" && ./run --quiet --steps 8)
    (cd "$work/$opt-resumed" && ./run --quiet --resume --metrics resumed.jsonl)
    for f in model.bin state.bin; do
        cmp "$work/$opt-straight/ckpt/step_00000016/$f" "$work/$opt-resumed/ckpt/step_00000016/$f" \
            || fail "$opt: $f after resume differs from the straight run"
    done
    straight=$(losses "$opt-straight" | tail -8)
    resumed=$(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$work/$opt-resumed/resumed.jsonl")
    [ "$straight" = "$resumed" ] || fail "$opt: losses of steps 9..16 differ after resume"
    # the optimizer's state is there: m (the header's field 11 floats after its 128 bytes) is not all zero
    state=$work/$opt-straight/ckpt/step_00000016/state.bin
    floats=$(od -An -td8 -j88 -N8 "$state" | tr -d ' ')
    nonzero=$(od -An -v -tx1 -j128 -N$((4 * floats)) "$state" | grep -c '[1-9a-f]' || true)
    [ "$nonzero" -gt 0 ] || fail "$opt: state.bin holds no optimizer state"
    echo "$opt: 16 straight == 8 + resume + 8 (weights, optimizer state, losses)"
done

# Another optimizer's state does not carry over: lamb's checkpoint under muon, AdamW's
# (state version 1) under lars; --init from its model.bin is the way out, and works.
mkdir -p "$work/switch"
cp -r "$work/lamb-straight/ckpt" "$work/switch/ckpt"
cp "$work/muon-straight/run" "$work/switch/run"
refused "written by optimizer lamb (2), the program uses muon: its state does not carry over"
cp "$work/nadamw-straight/run" "$work/switch/run"
refused "written by optimizer lamb (2), the program uses nadamw: its state does not carry over"
cp "$work/lans-straight/run" "$work/switch/run"
refused "written by optimizer lamb (2), the program uses lans: its state does not carry over"
opt_model adamw "${rule[adamw]}"
train adamw --steps 8
rm -rf "$work/switch/ckpt" && cp -r "$work/adamw/ckpt" "$work/switch/ckpt"
cp "$work/lars-straight/run" "$work/switch/run"
refused "state version 1 holds AdamW's moments, the program uses lars"
(cd "$work/switch" && rm -rf ckpt && ./run --quiet --steps 8 --init "$work/adamw/ckpt/step_00000008/model.bin") \
    || fail "--init from AdamW's model.bin under lars"
echo "switching optimizers: refused at --resume with the way out (--init model.bin), which works"
