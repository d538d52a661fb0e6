#!/usr/bin/env bash
# The generated code of a tiny GPT-2 (p = 1, untied and tied) against the same model in
# PyTorch (float64), with every attention form (flash, matmul, stored; matmul also at context 6 and at context 13 with
# head size 40: the blocked causal products' last rows and, at every vector width, both their
# whole column blocks and a narrower last one), built as pacic builds it (vectorised dot
# products): loss, every gradient, and two AdamW steps (tests/numeric/torch_ref.py).
# Then `run` itself, executor and all, trains with gradient accumulation (window K > 1) from an
# llm.c file, against float64 PyTorch replaying the same micro-batches (tests/numeric/
# torch_train_ref.py): after step 1 at K = 2 with clip 0, AdamW's m is the accumulated gradient,
# which must be the mean of the per-micro-batch gradients; after 4 steps (warmup, cosine decay)
# the weights, m and v, and every logged loss, lr and grad_norm, at p = 1 (tied) and at p = 2
# (1f1b, untied head, clipping by the global norm: active at the first two steps, not after),
# and one step of matmul attention (and of stored) at context 256 with --threads 2, whose
# (sequence, head) pairs a helper thread shares.
set -eu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc=${CC:-cc}
python=
for candidate in python3 /usr/bin/python3; do
    if "$candidate" -c 'import torch, numpy' 2>/dev/null; then python=$candidate; break; fi
done
[ -n "$python" ] || { echo "no python3 with torch and numpy" >&2; exit 1; }
[ -f build/obj/libpacic.a ] || { echo "build/obj/libpacic.a missing: run make first" >&2; exit 1; }
$cc -std=c11 -D_GNU_SOURCE -O2 -Icompiler tests/numeric/gen_stages.c build/obj/libpacic.a -lm \
    -o "$work/gen_stages"
for case in "untied 2 16 2 8 32 2 1 0 flash" "matmul 2 16 2 8 32 2 1 0 matmul" "matmul_t6 2 16 2 6 32 2 1 0 matmul" \
            "stored 2 16 2 8 32 2 1 0 stored" "matmul_h40 1 80 2 13 32 2 1 0 matmul" "tied 2 16 2 8 32 2 1 1 flash"; do
    # shellcheck disable=SC2086
    set -- $case
    name=$1
    shift
    "$work/gen_stages" "$work/$name" "$@"
    # pacic's own flags (compiler/build.c), so the kernels run as a program's do
    $cc -std=c11 -O3 -march="${PACIC_MARCH:-native}" -fno-math-errno -fopenmp-simd -DPR_OMP_SIMD -Iruntime \
        tests/numeric/gradcheck.c "$work/$name"/*.c \
        -o "$work/$name/gradcheck" -lopenblas -lm
    echo "== $name"
    "$work/$name/gradcheck" --dump "$work/$name/dump.bin" >/dev/null
    "$python" tests/numeric/torch_ref.py "$work/$name/dump.bin"
done

# train NAME STAGES SCHEDULE TIED CLIP [run flags]: a 4-step program of window 2 in $work/NAME,
# run from $work/init.bin (checkpoint in $work/NAME/ckpt); ATTENTION=matmul for that form,
# SHAPE and INIT for another model.
pacic=$PWD/${PACI_BUILD:-build}/bin/pacic
"$python" tests/numeric/torch_train_ref.py init "$work/init.bin" 2 16 2 8 256
train() {
    local name=$1 stages=$2 schedule=$3 tied=$4 clip=$5
    shift 5
    mkdir -p "$work/$name"
    cat > "$work/$name.paci" <<DSL
model gpt2 { ${SHAPE:-layers 2; width 16; heads 2; context 8}; vocab 256; tied $tied }
pipeline { stages $stages; schedule $schedule; window 2 }
batch { micro 2 }
train {
    data "$PWD/examples/data/tiny_train.bin"
    steps 4
    optimizer adamw { lr 1e-2; betas 0.9 0.95; eps 1e-8; weight_decay 0.1; clip $clip }
    lr_schedule { warmup 2; decay cosine; floor 0.1 }
    checkpoint { every 0; dir "ckpt" }
    attention ${ATTENTION:-flash}
}
DSL
    "$pacic" "$work/$name.paci" -o "$work/$name/run"
    (cd "$work/$name" && ./run --quiet --init "${INIT:-$work/init.bin}" --metrics metrics.jsonl "$@")
}
# case NAME STEPS CLIP [INIT]: the arguments that check NAME's checkpoint of step STEPS.
case_args() {
    echo "${4:-$work/init.bin} examples/data/tiny_train.bin $work/$1/ckpt/step_0000000$2 $work/$1/metrics.jsonl 2 2 $2 4 1e-2 2 0.1 $3"
}
train one 1 1f1b true 0 --steps 1         # p = 1, one step, clip 0: the accumulated gradient
train tied 1 1f1b true 0                  # p = 1, four steps, clip 0
train clipped 2 1f1b false 1.5            # p = 2, four steps, clip 1.5: steps 1 and 2 clipped, 3 and 4 not
# p = 1 on 2 cores, matmul attention at context 256: the stage thread and a helper run the
# (sequence, head) pairs at once, each in its own workspaces
"$python" tests/numeric/torch_train_ref.py init "$work/init_t256.bin" 1 64 2 256 256
ATTENTION=matmul SHAPE="layers 1; width 64; heads 2; context 256" INIT=$work/init_t256.bin \
    train matmul 1 1f1b true 0 --threads 2 --steps 1
ATTENTION=stored SHAPE="layers 1; width 64; heads 2; context 256" INIT=$work/init_t256.bin \
    train stored 1 1f1b true 0 --threads 2 --steps 1
# shellcheck disable=SC2046
"$python" tests/numeric/torch_train_ref.py check $(case_args one 1 0) $(case_args tied 4 0) \
    $(case_args clipped 4 1.5) $(case_args matmul 1 0 "$work/init_t256.bin") \
    $(case_args stored 1 0 "$work/init_t256.bin")
