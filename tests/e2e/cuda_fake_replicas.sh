#!/usr/bin/env bash
# Data parallelism on the GPU path, without a GPU: `parallel { data 2 }` at p = 2 as four
# processes (rank = replica x 2 + stage), one fake GPU each (the local rank picks it), on the
# fake CUDA stack of tests/cuda_fake: the stages' links over NCCL send/receive and each stage's
# two replicas in an NCCL communicator of their own, whose ncclAllReduce sums the gradients
# range by range during the window's last backward (on a stream of their own, ordered by
# events; FAKE_CUDA_JITTER_US makes a missing wait show) and the step's loss. It must train as the CPU runs the same program with its replicas as
# threads (losses to LOSS_TOL relative, weights to WEIGHT_TOL, as tests/e2e/cuda_fake.sh; the
# noise scale to 1e-4, same_noise in lib.sh). A
# replica stopped mid-run ends its group's other member at the peer timeout, named.
# Skips (exit 77) where tests/cuda_emu cannot run (need_cuda_emu) or pacic writes no stages.cu.
source tests/e2e/lib.sh
need_cuda_emu
export PACIC_CACHE=$work/cache
LOSS_TOL=1e-5
WEIGHT_TOL=1e-4

fake_replicas_model dp
fake_replicas_run dp
compare_devices "data 2 x 2 stages, four GPUs" "$work/dp/joined" "$work/dp/cpu" "$LOSS_TOL" "$WEIGHT_TOL"
# the noise scale: the stages' averages ride on the processes' exchange of the clipping sums
same_noise "data 2 x 2 stages, four GPUs" "$work/dp/joined" "$work/dp/cpu"
# 6 steps, three allreduces each: the window's last backward starts one per range of
# gradients as it finishes them (stage 0: its layer, then the embeddings; stage 1: the head,
# then its layer), then the step sums the loss and stop flag
expect_allreduces dp 18 18
[ "$(grep -c '"loss"' "$work/dp/rank3/metrics.jsonl")" = 0 ] || fail "replica 1 logged losses"
# A stuck replica: rank 3 (stage 1 of replica 1) is stopped once rank 1 has logged a step.
# Ranks 0, 1 and 2 each give up (at their peer timeout, or when a peer that gave up first
# goes), and each one's last line names rank 3 as the one the run is stuck on, whichever wait
# each was in: rank 1 may abort its NCCL reduction with rank 3, or wait for rank 0, which
# waits for rank 2, which waits for rank 3.
sed -i 's/steps 6/steps 40/; s/every 3; batches/every 0; batches/' "$work/dp.paci"
"$pacic" "$work/dp.paci" -o "$work/dp/long.run" || fail "building the long run"
pids=()
port=$((port + 1))
for r in 0 1 2 3; do
    mkdir -p "$work/dp/long$r"
    (cd "$work/dp/long$r" && exec env RANK=$r LOCAL_RANK=$r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$port LD_LIBRARY_PATH=$work/dp/lib FAKE_CUDA_GPUS=4 ../long.run --device cuda \
        --peer-timeout 10 --connect-timeout 60 > out.txt 2> err.txt) &
    pids+=($!)
done
await_step "$work/dp/long1/out.txt" "${pids[1]}" || fail "rank 1 ended before logging a step: $(cat "$work"/dp/long*/err.txt)"
kill -STOP "${pids[3]}"
# a hang guard, should the stuck replica never be noticed
for ((i = 0; i < 6000; i++)); do
    kill -0 "${pids[0]}" 2>/dev/null || kill -0 "${pids[1]}" 2>/dev/null || kill -0 "${pids[2]}" 2>/dev/null || break
    sleep 0.1
done
rcs=()
for r in 0 1 2; do
    kill -KILL "${pids[r]}" 2>/dev/null || true
    rcs[r]=0
    wait "${pids[r]}" || rcs[r]=$?
done
kill -KILL "${pids[3]}" 2>/dev/null || true
wait "${pids[3]}" 2>/dev/null || true
for r in 0 1 2; do
    [ "${rcs[r]}" = 1 ] || fail "rank $r exited with ${rcs[r]} after rank 3 was stopped (peer timeout 10 s): $(cat "$work/dp/long$r/err.txt")"
    tail -n 1 "$work/dp/long$r/err.txt" | grep -Eq "^run: error: .*; the run is stuck on rank 3 \(stage 1 of replica 1\): it does not answer \(stopped, or hung with all its threads\), found by rank [0-2]( \(.*\))?\$" ||
        fail "rank $r's last line: $(tail -n 1 "$work/dp/long$r/err.txt")"
done

# accumulate pairwise adds on the host: the GPU path refuses it, naming the way out.
small_model pw 2 1f1b 2 2
sed -i -e "s/^batch { micro 2 }/batch { micro 2; accumulate pairwise }/" -e "s/layers 4;/layers 2;/" "$work/pw.paci"
fake_build pw
out=$(cd "$work/pw" && LD_LIBRARY_PATH=$work/pw/lib FAKE_CUDA_GPUS=2 ./run --quiet --device cuda 2>&1) &&
    fail "accumulate pairwise ran on the fake GPUs"
grep -q "accumulate pairwise runs on the CPU only for now; run with --device cpu" <<< "$out" ||
    fail "accumulate pairwise on --device cuda: $out"
echo "data 2 on four fake GPUs trains as the CPU's threads; 18 ncclAllReduce calls per rank (overlapped with the backward); a stopped replica is named by every other rank; accumulate pairwise is refused"
