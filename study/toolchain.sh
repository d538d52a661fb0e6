# study/toolchain.sh: sourced by the study's drivers (run.sh, tuned.sh) once they have set
# root. A private copy of the installed-layout build, so a rebuild during the study changes
# nothing; pacic from it, and the Python that has the analysis's modules.
toolchain=$(mktemp -d)
trap 'rm -rf "$toolchain"' EXIT
cp -r "$root/build/bin" "$root/build/lib" "$root/build/include" "$toolchain/"
pacic=$toolchain/bin/pacic
python=${PYTHON:-/usr/bin/python3}
# The same bits on every x86-64 CPU with AVX2 and FMA: the generated C built for that
# instruction set instead of this machine's (PACIC_MARCH; pacic's default is native), and
# OpenBLAS's Haswell kernels instead of the ones it picks for the CPU (other kernels and vector
# widths round differently: tests/e2e/blas_kernels.sh). A caller's own PACIC_MARCH or
# OPENBLAS_CORETYPE is kept (and PACIC_CFLAGS, which replaces pacic's flags, -march included).
if grep -qw avx2 /proc/cpuinfo 2> /dev/null && grep -qw fma /proc/cpuinfo; then
    export PACIC_MARCH=${PACIC_MARCH:-x86-64-v3}
    export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
    replaced=""
    [ -z "${PACIC_CFLAGS:-}" ] || replaced=" (but PACIC_CFLAGS replaces all of pacic's flags: $PACIC_CFLAGS)"
    echo "study: generated C for -march=$PACIC_MARCH$replaced, OpenBLAS's $OPENBLAS_CORETYPE kernels"
else
    echo "study: note: this CPU lacks AVX2 or FMA: the runs use pacic's and OpenBLAS's own choices for it, and their losses differ from docs/study's in their last bits" >&2
fi
