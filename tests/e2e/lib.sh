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

# split_model NAME STAGES SCHEDULE SPLIT [EVAL CKPT]: the small model, window 4, 20 steps, a
# checkpoint every CKPT (default 20) steps, with `split SPLIT` ("" = automatic).
split_model() {
    small_model "$1" "$2" "$3" 4 20 0 "${6:-20}"
    [ -z "$4" ] || set_split "$1" "$4"
}

# set_split NAME SPLIT: adds `split SPLIT` to $work/NAME.paci's pipeline block.
set_split() {
    with_pipeline "$1" "split $2"
}

# with_pipeline NAME KEYS: adds KEYS (e.g. "vocab_split 128; messages bf16") to
# $work/NAME.paci's pipeline block.
with_pipeline() {
    sed -i "s/^pipeline { \(.*\) }$/pipeline { \1; $2 }/" "$work/$1.paci"
    grep -qF "$2" "$work/$1.paci" || fail "pipeline edit '$2' did not apply"
}

# processes_equal_threads NAME P [LAST]: NAME's program (already run threaded in $work/NAME) as P
# processes on loopback, one device each (torchrun-style variables, TCP bootstrap and links,
# in $work/NAME-mp/rankR): the threaded run's weights and losses (logged by rank LAST, the
# last stage's device: P - 1 unless said), bit for bit; a rank that hangs is killed at 600 s.
processes_equal_threads() {
    local name=$1 p=$2 last=${3:-$(($2 - 1))} r pids=()
    port=$((port + 1))
    for ((r = 0; r < p; r++)); do
        mkdir -p "$work/$name-mp/rank$r"
        (cd "$work/$name-mp/rank$r" && RANK=$r WORLD_SIZE=$p MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            timeout -k 10 600 "$work/$name/run" --quiet --blas-threads 1 --metrics metrics.jsonl --connect-timeout 60 \
            >out.txt 2>&1) &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || fail "$name over $p processes: a rank failed"; done
    cmp -s "$work/$name/ckpt/step_00000020/model.bin" "$work/$name-mp/rank0/ckpt/step_00000020/model.bin" ||
        fail "$name over $p processes: weights differ from the threaded run's"
    [ "$(losses "$name")" = "$(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$work/$name-mp/rank$last/metrics.jsonl")" ] ||
        fail "$name over $p processes: losses differ from the threaded run's"
}

# expect_allreduces NAME STAGE0 STAGE1: the fake stack's ncclAllReduce calls of NAME's four
# ranks (fake_replicas_run: data 2 x 2 stages) are STAGE0 on stage 0's and STAGE1 on stage 1's.
expect_allreduces() {
    local r reduces want
    for r in 0 1 2 3; do
        reduces=$(allreduce_calls "$1" $r)
        want=$(( r % 2 == 0 ? $2 : $3 ))
        [ "${reduces:-0}" = "$want" ] || fail "rank $r: ${reduces:-no} ncclAllReduce calls, $want expected"
    done
}

# poison_row MODEL_BIN ROW: sets row ROW of wte in a checkpoint's model.bin to +inf, so the
# micro-batches that read token ROW get a NaN loss and gradients (an untied head keeps its own).
poison_row() {
    python3 - "$1" "$2" <<'PY'
import struct, sys
path, row = sys.argv[1], int(sys.argv[2])
data = bytearray(open(path, 'rb').read())
width = struct.unpack('<256i', data[:1024])[6]
for c in range(width):
    struct.pack_into('<f', data, 1024 + 4 * (row * width + c), float('inf'))
open(path, 'wb').write(data)
PY
}

# skipped_steps: the steps (1-based, ascending, once each) that the run warnings on standard
# input say on_nan skip skipped, on one line.
skipped_steps() {
    sed -n 's/^run: warning: step \([0-9]*\), stage [0-9]*: .*; the step is skipped (on_nan skip)$/\1/p' |
        sort -n | uniq | tr '\n' ' ' | sed 's/ $//'
}

# dgc_residuals_finite DGC_BIN: every residual (and velocity) float in a dgc.bin is finite.
dgc_head=584 # dgc.bin's header (runtime/checkpoint.c dgc_header: 7 int64, 2 doubles, int64 n[64])
dgc_residuals_finite() {
    python3 - "$1" $dgc_head <<'PY'
import math, struct, sys
raw = open(sys.argv[1], 'rb').read()[int(sys.argv[2]):]
values = struct.unpack('<%df' % (len(raw) // 4), raw)
bad = [i for i, x in enumerate(values) if not math.isfinite(x)]
sys.exit('%s: non-finite residuals at %s' % (sys.argv[1], bad[:8]) if bad else 0)
PY
}

# dgc_list_bytes DGC_BIN DENSITY [STAGE]: the bytes of one replica's pair list a step after the
# warm-up, from the stage sizes n in a dgc.bin's header, as docs/dsl.md "The pairs" states them:
# 4 per block of 65536 entries and 4 per pair, k = max(1, ceil(density n)) (4 n when k = n); one
# line per stage (only STAGE's if given).
dgc_list_bytes() {
    python3 - "$1" "$2" "${3:--1}" <<'PY'
import math, struct, sys
raw = open(sys.argv[1], 'rb').read()
stages = struct.unpack('<7q', raw[:56])[3]
sizes = struct.unpack('<64q', raw[72:72 + 64 * 8])[:stages]
for s, n in enumerate(sizes):
    k = min(n, max(1, math.ceil(float(sys.argv[2]) * n)))
    if int(sys.argv[3]) in (-1, s):
        print(4 * n if k == n else 4 * ((n + 65535) // 65536) + 4 * k)
PY
}

# build_quiet NAME: compiles $work/NAME.paci into $work/NAME/run; pacic and the C compiler
# must print nothing.
build_quiet() {
    mkdir -p "$work/$1"
    local out
    out=$("$pacic" "$work/$1.paci" -o "$work/$1/run" 2>&1) || fail "$1: pacic failed: $out"
    [ -z "$out" ] || fail "$1: building printed: $(printf '%s' "$out" | head -5)"
}

# run_quiet NAME [flags]: runs NAME's program in $work/NAME/ at one BLAS thread a stage.
run_quiet() {
    local name=$1
    shift
    (cd "$work/$name" && ./run --quiet --blas-threads 1 --metrics metrics.jsonl "$@")
}

# same_step20 A B: the same step-20 checkpoint (state.bin but its schedule and stage count,
# int64 fields 8 and 9) and the same losses.
same_step20() {
    local a=$work/$1/ckpt/step_00000020 b=$work/$2/ckpt/step_00000020
    cmp -s "$a/model.bin" "$b/model.bin" && cmp -s -n 64 "$a/state.bin" "$b/state.bin" &&
        cmp -s -i 80 "$a/state.bin" "$b/state.bin" && [ "$(losses "$1")" = "$(losses "$2")" ]
}

# export_equals_one NAME LABEL: NAME's Hugging Face export equals the one-stage program's
# ($work/one, trained alike), and NAME starts from its own export.
export_equals_one() {
    run_quiet one --export hf hf-one >/dev/null
    run_quiet "$1" --export hf hf >/dev/null
    cmp -s "$work/one/hf-one/model.safetensors" "$work/$1/hf/model.safetensors" ||
        fail "the export of $2 differs from one stage's"
    run_quiet "$1" --init hf --steps 1 --no-checkpoint >/dev/null || fail "$2 cannot start from its own export"
    echo "Hugging Face export of $2 == one stage's; it loads back into $2"
}

# resume_equals_straight STAGES SPLIT [run flags...]: under PACI with SPLIT, 20 steps straight
# (run with the flags, in $work/straight) == 10, stop, resume, 10: weights, optimizer state and
# losses.
resume_equals_straight() {
    local stages=$1 split=$2
    shift 2
    split_model straight "$stages" paci "$split" 0 10
    resumes_bit_for_bit "paci $split" "$@"
}

# resumes_bit_for_bit LABEL [run flags...]: $work/straight.paci (20 steps, a checkpoint every
# 10) run straight (with the flags) == 10, stop, resume, 10: weights, optimizer state and losses.
resumes_bit_for_bit() {
    local label=$1 f
    shift
    build_quiet straight
    mkdir -p "$work/resumed"
    cp "$work/straight/run" "$work/resumed/run"
    run_quiet straight "$@"
    run_quiet resumed --steps 10
    (cd "$work/resumed" && ./run --quiet --blas-threads 1 --resume --metrics resumed.jsonl)
    for f in model.bin state.bin; do
        cmp -s "$work/straight/ckpt/step_00000020/$f" "$work/resumed/ckpt/step_00000020/$f" ||
            fail "$label: $f after resume differs from the straight run"
    done
    [ "$(losses straight | tail -10)" = "$(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$work/resumed/resumed.jsonl")" ] ||
        fail "$label: losses of steps 11..20 differ after resume"
    echo "$label: 20 straight == 10 + resume + 10 (weights, optimizer state, losses)"
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

# again NAME AS [run flags...]: NAME's compiled program (train's) run again in $work/AS/.
again() {
    local name=$1 as=$2
    shift 2
    mkdir -p "$work/$as"
    (cd "$work/$as" && "$work/$name/run" --quiet --metrics metrics.jsonl "$@")
}

# same_checkpoint A B STEP: A's and B's checkpoints at STEP hold the same bits and they logged the
# same losses: all of model.bin, and all of state.bin (AdamW m and v, the untied head) but
# the schedule and stage count in its header (int64 fields 8 and 9, bytes 64..79).
same_checkpoint() {
    local a=$work/$1/ckpt/$(printf step_%08d "$3") b=$work/$2/ckpt/$(printf step_%08d "$3")
    cmp -s "$a/model.bin" "$b/model.bin" &&
        cmp -s -n 64 "$a/state.bin" "$b/state.bin" &&
        cmp -s -i 80 "$a/state.bin" "$b/state.bin" &&
        [ "$(losses "$1")" = "$(losses "$2")" ]
}

# sse3_kernels: OpenBLAS's SSE3 kernels (Prescott), on every x86-64 CPU, unless the machine
# sets OPENBLAS_CORETYPE itself (some do, to avoid kernels that fail on their CPU); x86 is 1
# when they were set, else 0. A build without runtime kernel choice ignores the variable.
sse3_kernels() {
    x86=0
    if [ "$(uname -m)" = x86_64 ] && [ -z "${OPENBLAS_CORETYPE:-}" ]; then
        export OPENBLAS_CORETYPE=Prescott
        x86=1
    fi
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

# fake_split_model NAME PRECISION SPLIT: the 2-layer small model over as many stages as SPLIT
# has entries (1F1B, window 2, 4 steps, evaluation every 2) with `split SPLIT`, and its fake
# CUDA stack (fake_build).
fake_split_model() {
    small_model "$1" "$(split_stages "$3")" 1f1b 2 4 2
    sed -i -e "s/^train {/train {\n    precision $2/" -e "s/layers 4;/layers 2;/" "$work/$1.paci"
    set_split "$1" "$3"
    fake_build "$1"
}

# split_stages SPLIT: the number of entries of a split such as "[0, 0.5, 1]".
split_stages() {
    local commas=${1//[^,]/}
    echo $((${#commas} + 1))
}

# fake_split_devices SPLIT [PREFIX]: fake_split_model in fp32 and bf16 (named PREFIXfp32 and
# PREFIXbf16), a fake GPU per stage, each against the CPU path of the same program, to
# cuda_fake.sh's tolerances.
fake_split_devices() {
    local precision tolerances gpus name
    gpus=$(split_stages "$1")
    for precision in fp32 bf16; do
        name=${2:-}$precision
        fake_split_model "$name" "$precision" "$1"
        on_fake_gpus "$gpus" "$name" cuda --device cuda || fail "$name: --device cuda"
        on_fake_gpus "$gpus" "$name" cpu --device cpu || fail "$name: --device cpu"
        tolerances="1e-5 1e-4"
        [ "$precision" = bf16 ] && tolerances="1e-2 2e-2"
        # shellcheck disable=SC2086 # two numbers
        compare_devices "$1 $precision, $gpus GPUs" "$work/$name/cuda" "$work/$name/cpu" $tolerances
    done
}

# on_fake_gpus N NAME DIR [run flags...]: runs NAME's program in $work/NAME/DIR on N fake GPUs
# (its stderr in DIR/err.txt, printed if the run fails).
on_fake_gpus() {
    local gpus=$1 name=$2 dir=$3
    shift 3
    mkdir -p "$work/$name/$dir"
    (cd "$work/$name/$dir" && LD_LIBRARY_PATH=$work/$name/lib FAKE_CUDA_GPUS=$gpus \
        ../run --quiet --threads 1 --metrics metrics.jsonl "$@" 2> err.txt) ||
        { cat "$work/$name/$dir/err.txt" >&2; return 1; }
}

# fake_replicas_model NAME [SPLIT]: the 2-layer small model with flash attention over 2 stages
# (1F1B, window 2, 6 steps, evaluation every 3), `parallel { data 2 }` and `split SPLIT` if
# given; its fake CUDA stack (fake_build), and the CPU run of it (replicas as threads) in
# $work/NAME/cpu, the reference for the GPU runs.
fake_replicas_model() {
    small_model "$1" 2 1f1b 2 6 3
    sed -i -e "s/^train {/train {\n    attention flash/" -e "s/layers 4;/layers 2;/" "$work/$1.paci"
    [ -z "${2:-}" ] || set_split "$1" "$2"
    echo "parallel { data 2 }" >> "$work/$1.paci"
    echo "hardware gpu { }   # split as priced for the GPUs it runs on" >> "$work/$1.paci"
    fake_build "$1"
    mkdir -p "$work/$1/cpu"
    (cd "$work/$1/cpu" && ../run --quiet --device cpu --metrics metrics.jsonl) || fail "$1: --device cpu"
}

# fake_replicas_run NAME: NAME's program (data 2 x 2 stages) as four processes on the port
# $port, one fake GPU each (in $work/NAME/rank0..3, stderr in err.txt, with the fake stack's
# call report), then replica 0's losses (rank 1) and checkpoint (rank 0) in $work/NAME/joined.
fake_replicas_run() {
    local name=$1 r pids=()
    for r in 0 1 2 3; do
        mkdir -p "$work/$name/rank$r"
        (cd "$work/$name/rank$r" && RANK=$r LOCAL_RANK=$r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            LD_LIBRARY_PATH=$work/$name/lib FAKE_CUDA_GPUS=4 FAKE_CUDA_REPORT=1 FAKE_CUDA_JITTER_US=300 \
            ../run --quiet --device cuda --metrics metrics.jsonl --connect-timeout 60 2> err.txt) &
        pids+=($!)
    done
    for r in 0 1 2 3; do
        wait "${pids[$r]}" || { cat "$work/$name/rank$r/err.txt" >&2; fail "$name: rank $r"; }
    done
    mkdir -p "$work/$name/joined"
    cp "$work/$name/rank1/metrics.jsonl" "$work/$name/joined/metrics.jsonl"
    cp -r "$work/$name/rank0/ckpt" "$work/$name/joined/ckpt"
}

# allreduce_calls NAME RANK: the ncclAllReduce calls the fake stack reported for that rank.
allreduce_calls() {
    sed -n 's/^fake cuda: calls:.* ncclAllReduce \([0-9]*\).*/\1/p' "$work/$1/rank$2/err.txt" | head -n 1
}

# compare_devices LABEL GPU_DIR CPU_DIR LOSS_TOL WEIGHT_TOL: a GPU run (emulated or faked)
# against the CPU's from the same seed. Every loss, validation loss and gradient norm (which
# AdamW's updates hardly depend on, so only its log shows a wrong norm) GPU_DIR/metrics.jsonl
# logged must be in CPU_DIR's and agree to LOSS_TOL relative; the last checkpoints
# (DIR/ckpt/step_*/model.bin) must be of the same step and agree to WEIGHT_TOL absolute.
# KEYS (optional, e.g. "loss val_loss"): the logged figures compared, instead of all three.
compare_devices() {
    python3 - "$@" <<'PY' || fail "$1: the two runs disagree"
import array, glob, json, os, sys
label, gpu_dir, cpu_dir = sys.argv[1:4]
loss_tol, weight_tol = float(sys.argv[4]), float(sys.argv[5])
keys = sys.argv[6].split() if len(sys.argv) > 6 else ("loss", "val_loss", "grad_norm")
def losses(folder):
    out = {}
    for line in open(os.path.join(folder, "metrics.jsonl")):
        rec = json.loads(line)
        for key in keys:
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

# same_noise LABEL GPU_DIR CPU_DIR: the GPU run logs the noise scale (docs/run.md) on the CPU
# run's steps, each to 1e-4 relative: the GPU sums the first micro-batch's squares in another
# order (pr_sumsq_partials) and the log keeps 6 digits. The sum rides on the step's download:
# read before that download finished, it would be the last window's.
same_noise() {
    python3 - "$@" 1e-4 <<'PY' || fail "$1: the noise scale on the GPU is not the CPU's"
import json, sys
label, gpu_dir, cpu_dir, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def noise(folder):
    recs = [r for r in map(json.loads, open(folder + "/metrics.jsonl")) if "loss" in r]
    return {r["step"]: r.get("noise_scale") for r in recs}
gpu, cpu = noise(gpu_dir), noise(cpu_dir)
steps = [t for t in cpu if isinstance(cpu[t], float)]
assert len(steps) >= 4 and gpu.keys() == cpu.keys(), f"{label}: steps with a noise scale {steps}"
assert all(isinstance(gpu[t], float) for t in steps), f"{label}: the GPU logged {gpu}"
worst = max(abs(gpu[t] - cpu[t]) / cpu[t] for t in steps)
print(f"{label}: noise_scale on {len(steps)} steps, max relative difference {worst:.3g} (last {gpu[steps[-1]]})")
sys.exit(0 if worst <= tol else 1)
PY
}
