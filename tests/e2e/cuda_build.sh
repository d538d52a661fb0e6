#!/usr/bin/env bash
# The GPU path without a GPU: every example's generated CUDA compiles with NVRTC for sm_80,
# sm_90 and PTX with no kernel spilling registers, cached by the unit's content less its
# banner; `run` links the CUDA layer and still trains with --device cpu; --device cuda
# without a usable GPU is one clear line and exit 1, alone or as one rank of several; run
# holds the NCCL transport, which loads NCCL by dlopen (a missing library is one line naming it).
# Skips (exit 77) when the build found no CUDA toolkit (no libpacirt_cuda.a).
source tests/e2e/lib.sh
[ -f build/lib/pacic/libpacirt_cuda.a ] || skip "built without a CUDA toolkit (no build/lib/pacic/libpacirt_cuda.a)"
export PACIC_CACHE=$work/cache
unset PACIC_CUDA_ARCHS # pacic's default architectures (tests/run.sh compiles the others for sm_90 alone)

for example in examples/*.paci; do
    name=$(basename "$example" .paci)
    # The examples' own data files may be absent here; NVRTC needs only the shapes.
    sed -E "s|^([[:space:]]*)(data\|val)([[:space:]]+)\"[^\"]*\"|\1\2\3\"$data/tiny_train.bin\"|" \
        "$example" > "$work/$name.paci"
    "$pacic" "$work/$name.paci" --emit c -o "$work/$name.gen" || fail "$name: pacic --emit c"
    report=$work/$name.gen/cuda_resources.txt
    [ -f "$report" ] && [ -f "$work/$name.gen/cuda_images.c" ] || fail "$name: no CUDA images or report"
    for arch in sm_80 sm_90; do
        kernels=$(grep -c " $arch " "$report" || true)
        [ "$kernels" -ge 10 ] || fail "$name: only $kernels kernels reported for $arch"
    done
    spilling=$(grep -v "spill stores 0, spill loads 0" "$report" | grep -c "registers" || true)
    [ "$spilling" -eq 0 ] || { grep -v "spill stores 0, spill loads 0" "$report" >&2; fail "$name: kernels spill"; }
    grep -q '"compute_90"' "$work/$name.gen/cuda_images.c" || fail "$name: no PTX image"
    echo "$name: $(grep -c registers "$report") kernel images, no spills"
done

# PACIC_CUDA_ARCHS: only the architectures named (the GPU check compiles its device's alone)
PACIC_CUDA_ARCHS=sm_90 "$pacic" "$work/tiny.paci" --emit c -o "$work/tiny-sm90.gen" || fail "PACIC_CUDA_ARCHS=sm_90"
[ "$(grep -c " sm_90 " "$work/tiny-sm90.gen/cuda_resources.txt")" -ge 10 ] &&
    ! grep -q " sm_80 " "$work/tiny-sm90.gen/cuda_resources.txt" &&
    ! grep -q '"compute_90"' "$work/tiny-sm90.gen/cuda_images.c" &&
    grep -q "pr_cuda_images\[1\]" "$work/tiny-sm90.gen/program.c" || fail "PACIC_CUDA_ARCHS=sm_90 compiled other architectures"
out=$(PACIC_CUDA_ARCHS=sm90 "$pacic" "$work/tiny.paci" --emit c -o "$work/tiny-bad.gen" 2>&1) && fail "PACIC_CUDA_ARCHS=sm90 was taken"
[ "$out" = "pacic: error: PACIC_CUDA_ARCHS='sm90': 'sm90' is not sm_NN or compute_NN (at most 8, comma-separated; unset, pacic compiles for sm_80, sm_90 and compute_90)" ] ||
    fail "PACIC_CUDA_ARCHS=sm90: $out"
echo "PACIC_CUDA_ARCHS=sm_90: one image; a bad name refused"

small_model gpu 2 paci 2 20
mkdir -p "$work/gpu"
cached=$(ls "$PACIC_CACHE" | wc -l)
"$pacic" "$work/gpu.paci" -o "$work/gpu/run"
# NVRTC's cache is keyed by the unit less its banner comment (the .paci path, the stage's
# layers): a shape no example has compiles anew, the same shape at another depth and path
# finds every image cached (tests share them: most use small_model's shape).
after_gpu=$(ls "$PACIC_CACHE" | wc -l)
[ "$after_gpu" -gt "$cached" ] || fail "small_model's shape found cached after the examples only"
small_model deeper 3 paci 2 20
sed -i "s/layers 4;/layers 6;/" "$work/deeper.paci"
"$pacic" "$work/deeper.paci" --emit c -o "$work/deeper.gen" || fail "deeper: pacic --emit c"
[ "$(ls "$PACIC_CACHE" | wc -l)" = "$after_gpu" ] || fail "the same shapes at another depth compiled again"
[ "$(nm "$work/gpu/run" | grep -c " pr_device_cuda$")" -eq 1 ] || fail "run does not hold the CUDA layer"
# cuBLASLt is loaded with dlopen on the GPU path: linked, its ~540 MB image was mapped at every start
grep -q " U cublasLt" <<< "$(nm "$work/gpu/run")" && fail "run links cuBLASLt directly (it must dlopen it)"
readelf -d "$work/gpu/run" | grep -q "NEEDED.*libcublasLt" && fail "run needs libcublasLt at its start"
(cd "$work/gpu" && ./run --device cpu --quiet --metrics metrics.jsonl) || fail "--device cpu did not train"
[ "$(losses gpu | wc -l)" -eq 20 ] || fail "--device cpu logged $(losses gpu | wc -l) steps, expected 20"
losses gpu | awk '{ if (!($1 > 0 && $1 < 10)) exit 1 }' || fail "--device cpu losses not finite"
set +e
(cd "$work/gpu" && ./run --device cuda > out.txt 2> err.txt)
status=$?
set -e
if [ "$status" -ne 0 ]; then
    [ "$status" -eq 1 ] || fail "--device cuda without a GPU exited $status, expected 1"
    [ "$(wc -l < "$work/gpu/err.txt")" -eq 1 ] && grep -q "^run: error: --device cuda: no usable GPU: " \
        "$work/gpu/err.txt" || { cat "$work/gpu/err.txt" >&2; fail "--device cuda: message"; }
    (cd "$work/gpu" && ./run --overwrite > /dev/null 2> err.txt) || fail "default device did not train"
    grep -q "^run: note: no GPU (.*); training on the CPU$" "$work/gpu/err.txt" || fail "no CPU notice"
    echo "no GPU here: --device cuda exits 1 with: $(cat "$work/gpu/err.txt")"
else
    echo "a GPU answered: --device cuda trained"
fi
echo "run links the CUDA layer; --device cpu trains 20 steps"

# The NCCL transport is in run, and NCCL is loaded with dlopen: a missing library is one
# line naming it, the toolkit's own loads with every symbol the transport calls.
[ "$(nm "$work/gpu/run" | grep -c " pr_nccl_links$")" -eq 1 ] || fail "run does not hold the NCCL transport"
grep -q " U ncclSend" <<< "$(nm "$work/gpu/run")" && fail "run links NCCL directly (it must dlopen it)"
"${CC:-cc}" -std=c11 -D_GNU_SOURCE -Iruntime -I"${CUDA_HOME:-/usr/local/cuda}/include" tests/e2e/nccl_load.c \
    build/lib/pacic/libpacirt_cuda.a build/lib/pacic/libpacirt.a $(cat build/lib/pacic/cuda_ldflags) \
    -lpcre2-8 -ljansson -lopenblas -lpthread -lm -o "$work/nccl_load" || fail "nccl_load does not build against libpacirt_cuda.a"
set +e
missing=$("$work/nccl_load" libnccl-absent.so.2)
status=$?
set -e
[ "$status" -eq 1 ] || fail "a missing NCCL loaded?"
[[ "$missing" == "error: NCCL is needed between stages on different GPUs, and libnccl-absent.so.2 does not load ("*")" ]] \
    || fail "missing NCCL: $missing"
echo "missing NCCL: $missing"
if LD_LIBRARY_PATH="${CUDA_HOME:-/usr/local/cuda}/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$work/nccl_load" - > "$work/nccl.txt"; then
    echo "NCCL found: $(cat "$work/nccl.txt")"
else
    echo "no usable NCCL here: $(cat "$work/nccl.txt")"
fi

# A toolkit without nccl.h still builds the GPU path: the transport compiles to a stub
# (__has_include) whose loader says why, so only the links between GPUs lose NCCL.
mkdir -p "$work/no_nccl_include"
ln -s "${CUDA_HOME:-/usr/local/cuda}/include/cuda.h" "$work/no_nccl_include/cuda.h"
"${CC:-cc}" -std=c11 -D_GNU_SOURCE -Wall -Werror -Wno-unused-parameter -Iruntime -I"$work/no_nccl_include" \
    -c runtime/cuda/nccl_transport.c -o "$work/nccl_stub.o" || fail "nccl_transport.c does not build without nccl.h"
"${CC:-cc}" -std=c11 -D_GNU_SOURCE -Iruntime -I"${CUDA_HOME:-/usr/local/cuda}/include" tests/e2e/nccl_load.c \
    "$work/nccl_stub.o" build/lib/pacic/libpacirt_cuda.a build/lib/pacic/libpacirt.a $(cat build/lib/pacic/cuda_ldflags) \
    -lpcre2-8 -ljansson -lopenblas -lpthread -lm -o "$work/nccl_load_stub" || fail "nccl_load does not link with the stub"
set +e
stub=$("$work/nccl_load_stub" -)
status=$?
set -e
[ "$status" -eq 1 ] && [[ "$stub" == *"this runtime was built without nccl.h" ]] || fail "without nccl.h: $stub (exit $status)"
echo "without nccl.h: $stub"

# One process per stage asking for a GPU where none answers: one line, exit 1, no bootstrap.
set +e
(cd "$work/gpu" && RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 ./run --device cuda \
    --connect-timeout 1 > out.txt 2> err.txt)
status=$?
set -e
if [ "$status" -ne 0 ]; then
    [ "$status" -eq 1 ] || fail "rank 1 --device cuda without a GPU exited $status, expected 1"
    [ "$(wc -l < "$work/gpu/err.txt")" -eq 1 ] && grep -q "^run: error: rank 1: --device cuda: no usable GPU: " \
        "$work/gpu/err.txt" || { cat "$work/gpu/err.txt" >&2; fail "rank 1 --device cuda: message"; }
    echo "rank 1 of 2 without a GPU: $(cat "$work/gpu/err.txt")"
fi
