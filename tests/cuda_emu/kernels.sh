#!/usr/bin/env bash
# kernels.sh STAGES_CU OBJ CXX [FLAG...]: OBJ, the kernels of pacic's STAGES_CU compiled as C++
# under tests/cuda_emu/simt.h with their launch table (trampolines.sh, written to OBJ's name
# with .cpp), by `CXX -std=c++17 FLAG... -include simt.h -c`. With FAKE_CACHE set (a folder),
# the object is kept there under the content of everything it is built from: STAGES_CU less its
# banner comment (the .paci path, the stage's layers: a model's kernels are the same at any
# depth), the emulator's headers, this script, trampolines.sh, the compiler and the flags; a
# unit of the same content then copies it (its debug information names the first unit's path).
# Test tooling for tests/cuda_fake/build.sh and tests/cuda_emu/build_run.sh.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: kernels.sh STAGES_CU OBJ CXX [FLAG...]" >&2; exit 2; }
stages=$1 obj=$2 cxx=$3
shift 3
emu=$(cd "$(dirname "$0")" && pwd)
cached=
if [ -n "${FAKE_CACHE:-}" ]; then
    mkdir -p "$FAKE_CACHE"
    key=$({ sed '1,/\*\//d' "$stages"; cat "$emu"/*.h "$0" "$emu/trampolines.sh"; echo "$cxx $*"; "$cxx" --version; } |
          sha256sum | cut -c1-32)
    cached=$FAKE_CACHE/kernels-$key.o
    if [ -f "$cached" ]; then
        cp "$cached" "$obj"
        exit 0
    fi
fi
"$emu/trampolines.sh" "$stages" > "${obj%.o}.cpp" || { echo "kernels.sh: trampolines" >&2; exit 1; }
"$cxx" -std=c++17 "$@" -include "$emu/simt.h" -c "${obj%.o}.cpp" -o "$obj"
# renamed into place: a concurrent build reads it whole or not at all
[ -z "$cached" ] || { cp "$obj" "$cached.$$" && mv -f "$cached.$$" "$cached"; }
