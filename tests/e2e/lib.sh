# Shared by the end-to-end tests: a scratch folder, a small model written as DSL, and a
# compile-and-train helper. Sourced, not run.
set -euo pipefail
root=$(pwd)
pacic=$root/${PACI_BUILD:-build}/bin/pacic
data=$root/examples/data
work=$(mktemp -d)
skipped_parts=()
# The first TCP port of this script's block: tests/run.sh gives each script 100 of its own,
# below Linux's ephemeral range (32768 up), where a connection's local port never lands.
port=${PACI_TEST_PORT:-$((10000 + RANDOM % 20000))}
# On exit: the scratch folder goes; a script that passed but left out a part (skip_part)
# exits 77 naming it, so tests/run.sh counts it as skipped, not passed.
finish() {
    local status=$?
    rm -rf "$work"
    if [ "$status" = 0 ] && [ "${#skipped_parts[@]}" -gt 0 ]; then
        local IFS=';'
        echo "skipped: part of the test did not run: ${skipped_parts[*]}"
        exit 77
    fi
}
trap finish EXIT

# python_with MODULES: the first of python3 and Debian's /usr/bin/python3 that imports MODULES
# (e.g. "torch, numpy"), into $python; the test fails without one.
python_with() {
    local candidate
    python=
    for candidate in python3 /usr/bin/python3; do
        if "$candidate" -c "import $1" 2>/dev/null; then python=$candidate; return 0; fi
    done
    fail "no python3 with $1"
}

fail() { echo "FAIL: $*" >&2; exit 1; }
# skip REASON: this test cannot run here; tests/run.sh counts exit 77 as a skip, with REASON.
skip() { echo "skipped: $*"; exit 77; }
# skip_part REASON: a part of this test cannot run here; the rest goes on (see finish).
skip_part() { echo "part skipped: $*"; skipped_parts+=("$*"); }

# await_step FILE PID: returns once FILE (a run's stdout) holds a logged step, or 1 if PID
# ends first. No time limit but a 20-minute hang guard: a slow, busy machine only waits longer.
await_step() {
    local i
    for ((i = 0; i < 24000; i++)); do
        grep -q '^step ' "$1" 2>/dev/null && return 0
        kill -0 "$2" 2>/dev/null || break
        sleep 0.05
    done
    grep -q '^step ' "$1" 2>/dev/null
}

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

# train NAME [run flags...]: compiles $work/NAME.paci and runs it in $work/NAME/; a program
# built there from the same text (kept in $work/NAME.built) runs again without a rebuild, as
# for a --resume after a first stretch of steps.
train() {
    local name=$1
    shift
    mkdir -p "$work/$name"
    if [ ! -x "$work/$name/run" ] || ! cmp -s "$work/$name.paci" "$work/$name.built"; then
        rm -f "$work/$name.built"
        "$pacic" "$work/$name.paci" -o "$work/$name/run"
        cp "$work/$name.paci" "$work/$name.built"
    fi
    (cd "$work/$name" && ./run --quiet --metrics metrics.jsonl "$@")
}

# losses NAME: the per-step training losses a run logged, one per line.
losses() {
    sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$work/$1/metrics.jsonl"
}

# need_cuda_emu: skips (exit 77, see skip) where the CUDA emulator cannot run: the sanitizer
# builds (its coroutines switch stacks, which ASan does not follow), a build without a CUDA
# toolkit, no C++ compiler; else sets CXX (g++, or clang++) and FAKE_CACHE.
need_cuda_emu() {
    [ "${PACI_BUILD:-build}" = build ] || skip "the CUDA emulator does not run under the sanitizer builds (PACI_BUILD=${PACI_BUILD})"
    [ -f build/lib/pacic/libpacirt_cuda.a ] || skip "built without a CUDA toolkit (no build/lib/pacic/libpacirt_cuda.a)"
    CXX=${CXX:-$(command -v g++ || command -v clang++ || true)}
    [ -n "$CXX" ] || skip "no C++ compiler (g++ or clang++)"
    export CXX
    # the fake CUDA stack's parts that do not depend on the model, built once (tests/cuda_fake/build.sh)
    export FAKE_CACHE=${FAKE_CACHE:-$work/fake-cache}
}

# fake_build NAME: $work/NAME/run and its fake CUDA stack in $work/NAME/lib
# (tests/cuda_fake/build.sh); skips where pacic writes no stages.cu.
fake_build() {
    local status=0
    PACIC=$pacic tests/cuda_fake/build.sh "$work/$1.paci" "$work/$1" || status=$?
    [ "$status" -ne 77 ] || skip "pacic wrote no stages.cu (no NVRTC here?)"
    [ "$status" -eq 0 ] || fail "$1: building the fake CUDA stack"
}

# compare_devices LABEL GPU_DIR CPU_DIR LOSS_TOL WEIGHT_TOL: a GPU run (emulated or faked)
# against the CPU's from the same seed. Every loss, validation loss and gradient norm (which
# AdamW's updates hardly depend on, so only its log shows a wrong norm) GPU_DIR/metrics.jsonl
# logged must be in CPU_DIR's and agree to LOSS_TOL relative; the last checkpoints
# (DIR/ckpt/step_*/model.bin) must be of the same step and agree to WEIGHT_TOL absolute.
compare_devices() {
    python3 - "$@" <<'PY' || fail "$1: the two runs disagree"
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
