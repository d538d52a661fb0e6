#!/usr/bin/env bash
# The generated CUDA code, run without a GPU: pacic's stages.cu compiled as C++ under the
# emulator tests/cuda_emu/simt.h (blocks in turn, threads as coroutines, barriers and warp
# shuffles), and the generated GPU host half linked with tests/cuda_emu/emu_device.c in place
# of libpacirt_cuda.a (host memory, OpenBLAS for cuBLASLt). First the emulator's primitives on
# their own (tests/cuda_emu/simt_test.cpp, and three misuses it must refuse); then small models
# at p = 1 and 2 under `attention flash` and `attention matmul` train from the same seed with
# --device cuda (emulated) and --device cpu in one binary, and the losses per step, the
# validation losses and the final weights must agree: losses to LOSS_TOL relative and weights
# to WEIGHT_TOL absolute (the row kernels' warp reductions sum in another order than the CPU
# loops, so the final weights differ in their last bits, about 1e-6; a wrong index exceeds the
# tolerances by orders of magnitude, see docs/gpu.md).
# CUDA_EMU_SED='sed script' edits every generated stages.cu before it is compiled: a way to
# show that a broken kernel fails this test (never set in `make test`).
# Skips (passes) without libpacirt_cuda.a, without a C++ compiler (g++ or clang++), when pacic
# writes no stages.cu, and under the sanitizer builds (the coroutines switch stacks with
# swapcontext, which ASan does not follow; the plain build runs this test).
source tests/e2e/lib.sh
need_cuda_emu
export PACIC_CACHE=$work/cache
emu=$root/tests/cuda_emu
LOSS_TOL=1e-5
WEIGHT_TOL=1e-4
cxxflags="-std=c++17 -O1 -Wall -Wno-unknown-pragmas -include $emu/simt.h"

# The primitives: the handwritten kernels pass, and the misuses abort with simt's message.
"$CXX" $cxxflags -x c++ "$emu/simt_test.cpp" -pthread -o "$work/simt_test" || fail "simt_test does not build"
"$work/simt_test" > "$work/simt.txt" || { cat "$work/simt.txt" >&2; fail "simt primitives"; }
grep "^simt: " "$work/simt.txt"
for misuse in deadlock exited partial; do
    set +e
    { (ulimit -c 0; "$work/simt_test" $misuse) > "$work/misuse.txt" 2>&1; } 2> /dev/null
    status=$?
    set -e
    [ "$status" -ne 0 ] && grep -q "^simt: " "$work/misuse.txt" || { cat "$work/misuse.txt" >&2; fail "misuse '$misuse' not refused"; }
    echo "refused ($misuse): $(grep "^simt: " "$work/misuse.txt")"
done

"${CC:-cc}" -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -Iruntime -c "$emu/emu_device.c" \
    -o "$work/emu_device.o" || fail "emu_device.c does not build"

# build_emu NAME: $work/NAME/run from $work/NAME.paci, the emulated GPU in place of CUDA's
# (tests/cuda_emu/build_run.sh).
build_emu() {
    local name=$1 status=0
    mkdir -p "$work/$name"
    PACIC=$pacic CXX=$CXX CUDA_EMU_OBJ=$work/emu_device.o "$emu/build_run.sh" "$work/$name.paci" "$work/$name/run" || status=$?
    if [ "$status" -eq 77 ]; then
        echo "skipped: pacic --emit c wrote no stages.cu (no NVRTC here?)"
        exit 0
    fi
    [ "$status" -eq 0 ] || fail "$name: the emulated build"
}

# compare NAME: the emulated GPU's run against the CPU's, from $work/NAME/{cuda,cpu}.
compare() {
    local name=$1
    python3 - "$work/$name" "$LOSS_TOL" "$WEIGHT_TOL" <<'PY' || fail "$name: the emulated GPU and the CPU disagree"
import array, json, sys, glob, os
run, loss_tol, weight_tol = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
def losses(device):
    out = []
    for line in open(os.path.join(run, device, "metrics.jsonl")):
        rec = json.loads(line)
        for key in ("loss", "val_loss"):
            if key in rec:
                out.append((key, rec["step"], rec[key]))
    return out
gpu, cpu = losses("cuda"), losses("cpu")
assert len(gpu) == len(cpu) and [g[:2] for g in gpu] == [c[:2] for c in cpu], "different metrics lines"
loss_rel = max(abs(g[2] - c[2]) / abs(c[2]) for g, c in zip(gpu, cpu))
def weights(device):
    paths = glob.glob(os.path.join(run, device, "ckpt", "step_*", "model.bin"))
    last = max(paths)
    w = array.array("f")
    with open(last, "rb") as f:
        header = f.read(256 * 4)
        w.frombytes(f.read())
    return os.path.basename(os.path.dirname(last)), header, w
gname, gheader, gw = weights("cuda")
cname, cheader, cw = weights("cpu")
assert gname == cname and gheader == cheader and len(gw) == len(cw), "different checkpoints"
diff = [abs(a - b) for a, b in zip(gw, cw)]
weight_abs = max(diff)
differing = sum(1 for d in diff if d != 0.0)
print(f"{os.path.basename(run)}: {len(cpu)} losses, max relative difference {loss_rel:.3g}; "
      f"{gname}: {differing} of {len(cw)} weights differ, max {weight_abs:.3g} (max |w| {max(map(abs, cw)):.3g})")
sys.exit(0 if loss_rel <= loss_tol and weight_abs <= weight_tol else 1)
PY
}

for p in 1 2; do
    for attention in flash matmul; do
        name=$attention-$p
        small_model "$name" $p paci 2 6 3
        sed -i "s/^train {/train {\n    attention $attention/" "$work/$name.paci"
        build_emu "$name"
        for device in cuda cpu; do
            mkdir -p "$work/$name/$device"
            (cd "$work/$name/$device" && ../run --device $device --quiet --metrics metrics.jsonl) \
                || fail "$name: --device $device did not train"
        done
        [ "$(grep -c '"loss"' "$work/$name/cuda/metrics.jsonl")" -eq 6 ] || fail "$name: expected 6 steps"
        compare "$name"
    done
done
echo "the generated CUDA code under the emulator matches the CPU path (flash and matmul attention, p = 1 and 2)"
