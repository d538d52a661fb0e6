#!/usr/bin/env bash
# stop_stress.sh RUNS [GPUS [JITTER_US]]: a reproducer for an early stop that reaches a stage
# out of place ("run: internal error: stage S: a stop after step N arrived in place of
# micro-batch M", seen once in the GPU check's dry run). Builds GPT-2 Medium's 8-stage example
# shrunk as tests/gpu/check.sh's dry run shrinks it (8 layers of width 32, micro 1, window 2,
# schedule paci) on the fake CUDA stack, then runs it RUNS times as the check does (--steps 2,
# so the stop travels down the pipeline as a stop mark) on GPUS fake GPUs (default 1: all
# stages on one GPU, host channels between them; 2 or more: NCCL between neighbours) with
# FAKE_CUDA_JITTER_US=JITTER_US (default 0). Prints the failures and a count; exit 1 if any
# run failed, 77 where the fake stack cannot be built. Test tooling, not part of make test
# (a run takes 10-30 s of a loaded 2-core machine); the logs stay in $STRESS_DIR (default a
# fresh temporary folder, printed).
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: stop_stress.sh RUNS [GPUS [JITTER_US]]" >&2; exit 2; }
runs=$1 gpus=${2:-1} jitter=${3:-0}
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${STRESS_DIR:-$(mktemp -d)}
mkdir -p "$dir"
sed -E -e "/^[[:space:]]*(layers|width|heads|context|vocab)[[:space:]]/d" \
    -e "s/^(model[^{]*\{)/\1\n    layers 8\n    width 32\n    heads 2\n    context 16\n    vocab 256\n/" \
    -e "s/micro[[:space:]]+[0-9_]+/micro 1/" -e "s/window[[:space:]]+[0-9_]+/window 2/" \
    -e "s/schedule[[:space:]]+[a-z0-9]+/schedule paci/" -e "s/batches[[:space:]]+[0-9]+/batches 1/" \
    -e "s|\"[^\"]*owt_train.bin\"|\"$root/examples/data/tiny_train.bin\"|" \
    -e "s|\"[^\"]*owt_val.bin\"|\"$root/examples/data/tiny_val.bin\"|" \
    "$root/examples/gpt2-medium-8.paci" > "$dir/m.paci"
status=0
PACIC_CACHE=$dir/cache "$root/tests/cuda_fake/build.sh" "$dir/m.paci" "$dir" > "$dir/build.log" 2>&1 || status=$?
[ "$status" -ne 77 ] || { echo "stop_stress: no fake CUDA stack here (build.sh exit 77)"; exit 77; }
[ "$status" -eq 0 ] || { tail -5 "$dir/build.log"; echo "stop_stress: build.sh failed" >&2; exit 1; }
echo "stop_stress: $runs runs on $gpus fake GPU(s), jitter $jitter us, in $dir"
failed=0
for i in $(seq 1 "$runs"); do
    (cd "$dir" && LD_LIBRARY_PATH=$dir/lib FAKE_CUDA_GPUS=$gpus FAKE_CUDA_JITTER_US=$jitter \
        nice ./run --device cuda --steps 2 --no-checkpoint --metrics m.jsonl \
        --profile-out medium.profile > "out.$i.txt" 2>&1)
    rc=$?
    if [ $rc -ne 0 ]; then
        failed=$((failed + 1))
        echo "run $i: exit $rc: $(grep -m1 -E 'error|fake' "$dir/out.$i.txt")"
    else
        rm -f "$dir/out.$i.txt"
    fi
done
echo "stop_stress: $failed of $runs runs failed ($gpus fake GPU(s), jitter $jitter us)"
[ "$failed" -eq 0 ]
