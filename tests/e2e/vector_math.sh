#!/usr/bin/env bash
# The generated C declares glibc's vector expf (libmvec; math.h declares it only under
# -ffast-math), so GCC vectorises the rows that take exponentials (GELU, the softmax):
# 1.5x less CPU on the study's model (docs/study.md). A program that lost the declaration
# trains just the same, only slower, so this looks at what `run` links: libmvec's expf (the
# numbers are checked by torch_ref and gradcheck). Skips where pacic's own flags, GCC, x86_64
# or glibc are missing (the vector functions are theirs).
source tests/e2e/lib.sh

[ -z "${PACIC_CFLAGS+x}" ] || skip "PACIC_CFLAGS is set: the generated code is not built with pacic's flags"
[ "$(uname -m)" = x86_64 ] || skip "not x86_64 but $(uname -m): libmvec's vector functions are x86_64's"
# (outputs read whole: `cmd | grep -q` fails under pipefail when grep stops reading early)
getconf GNU_LIBC_VERSION > /dev/null 2>&1 || skip "the C library is not glibc (getconf GNU_LIBC_VERSION)"
version=$("${CC:-cc}" --version 2>/dev/null || true)
[[ $version == *"Free Software Foundation"* ]] || skip "the C compiler (${CC:-cc}) is not GCC"
command -v nm > /dev/null || skip "no nm (binutils)"

small_model m 2 paci 2 6
mkdir -p "$work/m"
"$pacic" "$work/m.paci" -o "$work/m/run" > /dev/null || fail "pacic"
symbols=$(nm -D --undefined-only "$work/m/run")
vector=$(grep -c '_ZGV[a-zA-Z]*[0-9]*v_expf' <<< "$symbols" || true)
[ "$vector" -gt 0 ] || fail "run calls no vector expf (libmvec): the GELU and softmax rows run one element at a time"
(cd "$work/m" && ./run --quiet --no-checkpoint --metrics metrics.jsonl) || fail "run failed"
[ "$(grep -c '"loss"' "$work/m/metrics.jsonl")" = 6 ] || fail "the run logged no 6 losses"
echo "run calls $vector vector expf variant(s) from libmvec"
