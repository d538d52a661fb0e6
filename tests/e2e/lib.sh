# Shared by the end-to-end tests: a scratch folder, a small model written as DSL, and a
# compile-and-train helper. Sourced, not run.
set -euo pipefail
root=$(pwd)
pacic=$root/${PACI_BUILD:-build}/bin/pacic
data=$root/examples/data
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# small_model NAME STAGES SCHEDULE WINDOW STEPS [EVAL] [CKPT]: writes $work/NAME.paci, a
# model small enough that 20 steps take a second, with clipping on so it is tested too.
small_model() {
    local name=$1 stages=$2 schedule=$3 window=$4 steps=$5 eval=${6:-0} ckpt=${7:-0}
    cat > "$work/$name.paci" <<DSL
model gpt2 { layers 4; width 32; heads 2; context 16; vocab 256 }
pipeline { stages $stages; schedule $schedule; window $window }
batch { micro 2 }
train {
    data "$data/tiny_train.bin"
    val "$data/tiny_val.bin"
    steps $steps
    optimizer adamw { lr 3e-3; clip 0.5 }
    eval { every $eval; batches 2 }
    checkpoint { every $ckpt; dir "ckpt" }
}
DSL
}

# train NAME [run flags...]: compiles $work/NAME.paci and runs it in $work/NAME/.
train() {
    local name=$1
    shift
    mkdir -p "$work/$name"
    "$pacic" "$work/$name.paci" -o "$work/$name/run"
    (cd "$work/$name" && ./run --quiet --metrics metrics.jsonl "$@")
}

# losses NAME: the per-step training losses a run logged, one per line.
losses() {
    sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$work/$1/metrics.jsonl"
}

# need_cuda_emu: exits 0 printing "skipped: ..." where the CUDA emulator cannot run: the
# sanitizer builds (its coroutines switch stacks, which ASan does not follow), a build
# without a CUDA toolkit, no C++ compiler; else sets CXX (g++, or clang++).
need_cuda_emu() {
    if [ "${PACI_BUILD:-build}" != build ]; then
        echo "skipped: not under the sanitizer builds"
        exit 0
    fi
    if [ ! -f build/lib/pacic/libpacirt_cuda.a ]; then
        echo "skipped: built without a CUDA toolkit"
        exit 0
    fi
    CXX=${CXX:-$(command -v g++ || command -v clang++ || true)}
    if [ -z "$CXX" ]; then
        echo "skipped: no C++ compiler (g++ or clang++)"
        exit 0
    fi
    export CXX
}
