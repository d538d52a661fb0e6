#!/usr/bin/env bash
# build.sh PACI_FILE OUT_DIR: builds OUT_DIR/run with the real pacic (the real runtime/cuda
# layer linked in, as a user gets it) and, in OUT_DIR/lib, the fake CUDA stack that runs it on
# the CPU: libcuda.so.1 (driver.c, with the model's kernels from stages.cu compiled under
# tests/cuda_emu/simt.h), libcublasLt.so.13 (cublaslt.c) and libnccl.so.2 (nccl.c). Run it
# with LD_LIBRARY_PATH=OUT_DIR/lib (ahead of run's RUNPATH to the real toolkit). Test tooling
# for tests/e2e/cuda_fake.sh; never part of pacic or run.
# Environment: PACIC (default $PACI_BUILD/bin/pacic, PACI_BUILD default build), CC, CXX,
# CUDA_HOME (default /usr/local/cuda), FAKE_SED (a sed script applied to stages.cu before the
# fake compiles it: a planted kernel fault), FAKE_CACHE (a folder where the parts that do not
# depend on the model, and the kernels by their content (tests/cuda_emu/kernels.sh), are kept
# between builds).
# Exit 0: built; 77: no CUDA path here (pacic wrote no stages.cu, or no toolkit headers); 1:
# anything else failed, with a message on stderr.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: build.sh PACI_FILE OUT_DIR" >&2; exit 2; }
paci=$1 out=$2
case $out in /*) ;; *) out=$PWD/$out ;; esac # stages.cu is #included by its path
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/tests/cuda_fake
emu=$root/tests/cuda_emu
build=$root/${PACI_BUILD:-build}
pacic=${PACIC:-$build/bin/pacic}
cuda=${CUDA_HOME:-/usr/local/cuda}
cc=${CC:-cc}
cxx=${CXX:-$(command -v g++ || command -v clang++ || true)}
die() { echo "build.sh: $*" >&2; exit 1; }
[ -n "$cxx" ] || die "no C++ compiler (g++ or clang++)"
[ -f "$cuda/include/cuda.h" ] && [ -f "$cuda/include/cublasLt.h" ] && [ -f "$cuda/include/nccl.h" ] || exit 77

gen=$out/gen lib=$out/lib obj=$out/obj
mkdir -p "$gen" "$lib" "$obj"
"$pacic" "$paci" --emit c -o "$gen" || die "$paci: pacic --emit c"
[ -f "$gen/stages.cu" ] || exit 77
"$pacic" "$paci" -o "$out/run" || die "$paci: pacic"
[ -z "${FAKE_SED:-}" ] || sed -i -e "$FAKE_SED" "$gen/stages.cu"

cflags=(-std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -fPIC -I"$cuda/include" -I"$here" -I"$emu")
"$emu/kernels.sh" "$gen/stages.cu" "$obj/kernels.o" "$cxx" -O1 -g -fPIC -Wall -Wno-unknown-pragmas ||
    die "$paci: stages.cu under simt.h"
# The parts that do not depend on the model (driver.o, libcublasLt.so.13, libnccl.so.2) are
# built into a folder of FAKE_CACHE named by the content of everything they are built from,
# once per such content; they are only read from there (a new folder is renamed into place).
parts=$obj/parts
if [ -n "${FAKE_CACHE:-}" ]; then
    mkdir -p "$FAKE_CACHE"
    key=$({ cat "$here"/*.c "$here"/*.h "$here/cublaslt.map" "$emu"/*.h "$cuda/include/cuda.h" \
              "$cuda/include/cublasLt.h" "$cuda/include/nccl.h"; echo "$cc ${cflags[*]}"; "$cc" --version; } |
          sha256sum | cut -c1-32)
    parts=$FAKE_CACHE/$key
fi
new=
if [ ! -d "$parts" ]; then
    new=$(mktemp -d "$parts.new.XXXXXX")
    for part in driver cublaslt nccl; do
        "$cc" "${cflags[@]}" -c "$here/$part.c" -o "$new/$part.o" || die "$part.c does not build"
    done
fi
"$cc" -shared -o "$lib/libcuda.so.1" "${new:-$parts}/driver.o" "$obj/kernels.o" -Wl,-soname,libcuda.so.1 \
    -lstdc++ -lpthread || die "libcuda.so.1"
if [ -n "$new" ]; then
    # linked against this model's libcuda.so.1 for its soname only: any model's serves
    "$cc" -shared -o "$new/libcublasLt.so.13" "$new/cublaslt.o" -Wl,-soname,libcublasLt.so.13 \
        -Wl,--version-script="$here/cublaslt.map" -L"$lib" -l:libcuda.so.1 -lopenblas -lm || die "libcublasLt.so.13"
    "$cc" -shared -o "$new/libnccl.so.2" "$new/nccl.o" -Wl,-soname,libnccl.so.2 -L"$lib" -l:libcuda.so.1 \
        -lpthread -lrt || die "libnccl.so.2"
    mv -T "$new" "$parts" 2> /dev/null || rm -rf "$new" # another build may have put the same there first
fi
cp "$parts/libcublasLt.so.13" "$parts/libnccl.so.2" "$lib/" || die "copying libcublasLt.so.13 and libnccl.so.2"
