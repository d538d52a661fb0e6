#!/usr/bin/env bash
# Muon, LAMB, LARS, NAdamW and LANS: `run` itself (executor, clipping, lr schedule, the rule in
# runtime/optim_rules.c) against float64 references written from the published rules
# (tests/numeric/optim_ref.py), 4 steps of window 2 from an llm.c file: weights, the
# optimizer's buffers (m, and v where the rule has one) and every logged loss, lr and
# grad_norm. Muon with Nesterov and the ratio scaling at p = 2 (untied, clipped by the global
# norm), without Nesterov and with the rms scaling at p = 1 (tied); LAMB, LARS and NAdamW
# (with decay, and without it, where torch.optim.NAdam checks the reference too) at p = 2;
# LANS at p = 2 untied with clipping (which the normalisation cancels) in two segments, and at
# p = 1 tied without decay.
set -eu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python=
for candidate in python3 /usr/bin/python3; do
    if "$candidate" -c 'import torch, numpy' 2>/dev/null; then python=$candidate; break; fi
done
[ -n "$python" ] || { echo "no python3 with torch and numpy" >&2; exit 1; }
pacic=$PWD/${PACI_BUILD:-build}/bin/pacic
"$python" tests/numeric/torch_train_ref.py init "$work/init.bin" 2 16 2 8 256

# train NAME STAGES TIED CLIP LR OPTIMIZER-BLOCK [CHECKPOINT-EVERY]: 4 steps of window 2
# from $work/init.bin (checkpoints, and so segments whose stage threads start afresh, every
# CHECKPOINT-EVERY steps; default only at the end).
train() {
    local name=$1 stages=$2 tied=$3 clip=$4 lr=$5 optimizer=$6 every=${7:-0}
    mkdir -p "$work/$name"
    cat > "$work/$name.paci" <<DSL
model gpt2 { layers 2; width 16; heads 2; context 8; vocab 256; tied $tied }
pipeline { stages $stages; schedule 1f1b; window 2 }
batch { micro 2 }
train {
    data "$PWD/examples/data/tiny_train.bin"
    steps 4
    optimizer $optimizer
    lr_schedule { warmup 2; decay cosine; floor 0.1 }
    checkpoint { every $every; dir "ckpt" }
}
DSL
    "$pacic" "$work/$name.paci" -o "$work/$name/run"
    (cd "$work/$name" && ./run --quiet --init "$work/init.bin" --metrics metrics.jsonl)
}
# args NAME CLIP LR RULE: optim_ref.py's arguments for NAME's checkpoint of step 4.
args() {
    echo "$work/init.bin examples/data/tiny_train.bin $work/$1/ckpt/step_00000004 $work/$1/metrics.jsonl 2 2 4 4 $3 2 0.1 $2 $4"
}
train muon 2 false 1.5 2e-2 "muon { lr 2e-2; momentum 0.9; nesterov true; ns_steps 5; weight_decay 0.1; clip 1.5; adamw { lr 1e-2; betas 0.8 0.95; eps 1e-8; weight_decay 0.05 } }"
train muon_plain 1 true 0 2e-2 "muon { lr 2e-2; nesterov false; shape_scale rms; weight_decay 0.1; clip 0; adamw { lr 5e-3 } }"
train lamb 2 false 1.5 1e-2 "lamb { lr 1e-2; betas 0.9 0.99; eps 1e-6; weight_decay 0.1; clip 1.5 }"
train lars 2 false 1.5 0.5 "lars { lr 0.5; momentum 0.9; trust_coefficient 0.02; eps 1e-8; weight_decay 1e-3; clip 1.5 }"
muon='{"kind": "muon", "momentum": 0.9, "nesterov": true, "ns_steps": 5, "shape_scale": "ratio", "weight_decay": 0.1, "adamw": {"lr": 1e-2, "betas": [0.8, 0.95], "eps": 1e-8, "weight_decay": 0.05}}'
muon_plain='{"kind": "muon", "momentum": 0.95, "nesterov": false, "ns_steps": 5, "shape_scale": "rms", "weight_decay": 0.1, "adamw": {"lr": 5e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}}'
lamb='{"kind": "lamb", "betas": [0.9, 0.99], "eps": 1e-6, "weight_decay": 0.1}'
# NAdamW's momentum schedule product P_t must not restart with a segment: 2 segments here
train nadamw 2 false 1.5 1e-2 "nadamw { lr 1e-2; betas 0.9 0.99; eps 1e-6; weight_decay 0.1; momentum_decay 0.004; clip 1.5 }" 2
train nadamw_nodecay 2 false 1.0 5e-3 "nadamw { lr 5e-3; betas 0.8 0.95; eps 1e-8; weight_decay 0; momentum_decay 0.1; clip 1.0 }"
nadamw='{"kind": "nadamw", "betas": [0.9, 0.99], "eps": 1e-6, "weight_decay": 0.1, "momentum_decay": 0.004}'
nadamw_nodecay='{"kind": "nadamw", "betas": [0.8, 0.95], "eps": 1e-8, "weight_decay": 0, "momentum_decay": 0.1}'
train lans 2 false 1.5 1e-2 "lans { lr 1e-2; betas 0.9 0.99; eps 1e-6; weight_decay 0.1; clip 1.5 }" 2
train lans_nodecay 1 true 0 5e-3 "lans { lr 5e-3; betas 0.8 0.95; eps 1e-8; weight_decay 0; clip 0 }"
lans='{"kind": "lans", "betas": [0.9, 0.99], "eps": 1e-6, "weight_decay": 0.1}'
lans_nodecay='{"kind": "lans", "betas": [0.8, 0.95], "eps": 1e-8, "weight_decay": 0}'
lars='{"kind": "lars", "momentum": 0.9, "trust_coefficient": 0.02, "eps": 1e-8, "weight_decay": 1e-3}'
# shellcheck disable=SC2046
"$python" tests/numeric/optim_ref.py check \
    $(args muon 1.5 2e-2 "") "$muon" $(args muon_plain 0 2e-2 "") "$muon_plain" \
    $(args lamb 1.5 1e-2 "") "$lamb" $(args lars 1.5 0.5 "") "$lars" \
    $(args nadamw 1.5 1e-2 "") "$nadamw" $(args nadamw_nodecay 1.0 5e-3 "") "$nadamw_nodecay" \
    $(args lans 1.5 1e-2 "") "$lans" $(args lans_nodecay 0 5e-3 "") "$lans_nodecay"
