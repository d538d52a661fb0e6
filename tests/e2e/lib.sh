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

# compare_devices LABEL GPU_DIR CPU_DIR LOSS_TOL WEIGHT_TOL: a GPU run (emulated or faked)
# against the CPU's from the same seed. Every loss, validation loss and gradient norm (which
# AdamW's updates hardly depend on, so only its log shows a wrong norm) GPU_DIR/metrics.jsonl
# logged must be in CPU_DIR's and agree to LOSS_TOL relative; the last checkpoints
# (DIR/ckpt/step_*/model.bin) must be of the same step and agree to WEIGHT_TOL absolute.
compare_devices() {
    python3 - "$@" <<'PY' || fail "$1: the GPU run and the CPU run disagree"
import array, glob, json, os, sys
label, gpu_dir, cpu_dir = sys.argv[1:4]
loss_tol, weight_tol = float(sys.argv[4]), float(sys.argv[5])
def losses(folder):
    out = {}
    for line in open(os.path.join(folder, "metrics.jsonl")):
        rec = json.loads(line)
        for key in ("loss", "val_loss", "grad_norm"):
            if key in rec:
                out[(key, rec["step"])] = rec[key]
    return out
gpu, cpu = losses(gpu_dir), losses(cpu_dir)
assert gpu and set(gpu) <= set(cpu), "the GPU run logged losses the CPU run did not"
loss_rel = max(abs(gpu[k] - cpu[k]) / abs(cpu[k]) for k in gpu)
def weights(folder):
    last = max(glob.glob(os.path.join(folder, "ckpt", "step_*", "model.bin")))
    w = array.array("f")
    with open(last, "rb") as f:
        header = f.read(256 * 4)
        w.frombytes(f.read())
    return os.path.basename(os.path.dirname(last)), header, w
gname, gheader, gw = weights(gpu_dir)
cname, cheader, cw = weights(cpu_dir)
assert gname == cname and gheader == cheader and len(gw) == len(cw), "different checkpoints"
diff = [abs(a - b) for a, b in zip(gw, cw)]
weight_abs = max(diff)
differing = sum(1 for d in diff if d != 0.0)
print(f"{label}: {len(gpu)} losses, max relative difference {loss_rel:.3g}; "
      f"{gname}: {differing} of {len(cw)} weights differ, max {weight_abs:.3g} (max |w| {max(map(abs, cw)):.3g})")
sys.exit(0 if loss_rel <= loss_tol and weight_abs <= weight_tol else 1)
PY
}
