#!/usr/bin/env bash
# OpenBLAS chooses its kernels by the CPU's model number when it loads; on a model newer than
# the library (0.3.21 on Emerald Rapids) it falls back to generic ones (Prescott: SSE3, sgemm up
# to 5x slower). run then runs itself again with OPENBLAS_CORETYPE naming the kernels the CPU's
# instruction sets allow, says so in a note, and trains bit for bit as a run given that
# OPENBLAS_CORETYPE by the user. A user's OPENBLAS_CORETYPE is kept, without a note. Wherever
# the CPU has AVX2 and FMA, the summary's `blas:` line must not name a fallback.
source tests/e2e/lib.sh

small_model m 2 paci 2 6
mkdir -p "$work/m"
"$pacic" "$work/m.paci" -o "$work/m/run" > /dev/null || fail "pacic"

# as DIR [VAR=VALUE...]: the program, not quiet, in $work/m/DIR with the environment given.
as() {
    local dir=$1
    shift
    mkdir -p "$work/m/$dir"
    (cd "$work/m/$dir" && env -u OPENBLAS_CORETYPE "$@" ../run --no-checkpoint --metrics metrics.jsonl \
        > out.txt 2> err.txt) || { cat "$work/m/$dir/err.txt" >&2; fail "$dir: run failed"; }
}
kernels() { sed -n 's/^blas: OpenBLAS, \([A-Za-z0-9]*\) kernels, .*/\1/p' "$work/m/$1/out.txt"; }
note() { sed -n 's/^run: note: OpenBLAS does not know this CPU and chose its \([A-Za-z0-9]*\) kernels; running with OPENBLAS_CORETYPE=\([A-Za-z0-9]*\),.*/\1 \2/p' "$work/m/$1/err.txt"; }
losses_of() { sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$work/m/$1/metrics.jsonl"; }
fallback='^(Prescott|Core2|Penryn|Dunnington|Nehalem|Sandybridge)$'

as default
chosen=$(kernels default)
[ -n "$chosen" ] || fail "no 'blas:' line in the summary: $(cat "$work/m/default/out.txt")"
[ "$(losses_of default | wc -l)" = 6 ] || fail "the run logged no 6 losses"
if grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo && [[ $chosen =~ $fallback ]]; then
    fail "OpenBLAS runs its $chosen kernels on a CPU with AVX2 and FMA"
fi
read -r library noted <<<"$(note default)"
if [ -n "${noted:-}" ]; then
    [ "$noted" = "$chosen" ] || fail "the note names $noted, the summary $chosen"
    [[ $library =~ $fallback ]] || fail "a note for the library's own $library kernels"
    # the user's choice of the same kernels: no note, the same losses bit for bit
    as user "OPENBLAS_CORETYPE=$chosen"
    [ -z "$(note user)" ] || fail "a note when the user set OPENBLAS_CORETYPE"
    cmp <(losses_of default) <(losses_of user) || fail "the default run differs from OPENBLAS_CORETYPE=$chosen"
    echo "OpenBLAS chose $library here; run ran itself with $chosen, as OPENBLAS_CORETYPE=$chosen does"
else
    [ -z "$(grep 'OpenBLAS' "$work/m/default/err.txt")" ] || fail "an unexpected OpenBLAS note"
    echo "OpenBLAS's own choice here: $chosen kernels, kept"
fi
# A user's choice is kept, even of the fallback (x86-64: every OpenBLAS there has Prescott).
if [ "$(uname -m)" = x86_64 ]; then
    as kept OPENBLAS_CORETYPE=Prescott
    [ "$(kernels kept)" = Prescott ] || fail "OPENBLAS_CORETYPE=Prescott ran $(kernels kept) kernels"
    [ -z "$(note kept)" ] || fail "a note when the user set OPENBLAS_CORETYPE=Prescott"
    echo "OPENBLAS_CORETYPE=Prescott kept"
fi
