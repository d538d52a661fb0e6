#!/usr/bin/env bash
# Under mpirun, a `run` built where Open MPI was found starts MPI, learns rank 0's host by an
# MPI broadcast (no MASTER_ADDR) and runs its collectives through MPI; 1f1b at p = 2 (whose
# clipping allgathers gradient-norm sums every step) then trains bit-identically to the
# threaded run. Skips (exit 77) on a build without MPI or without mpirun.
source tests/e2e/lib.sh

[ -f "${PACI_BUILD:-build}/lib/pacic/libpacirt_mpi.a" ] ||
    skip "built without MPI (no ${PACI_BUILD:-build}/lib/pacic/libpacirt_mpi.a)"
command -v mpirun > /dev/null || skip "no mpirun on PATH"
# Root in a container: Open MPI asks for both variables; shared-memory single copy needs
# ptrace rights a container may not grant.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi_flags=(--oversubscribe --mca btl_vader_single_copy_mechanism none)

small_model clip 2 1f1b 3 12 6
train clip
unset MASTER_ADDR MASTER_PORT RANK WORLD_SIZE
mkdir -p "$work/mp/rank0" "$work/mp/rank1"
mpirun "${mpi_flags[@]}" -np 2 sh -c "cd $work/mp/rank\$OMPI_COMM_WORLD_RANK && exec $work/clip/run \
    --metrics metrics.jsonl --master-port $port > out.txt 2>&1" || {
    cat "$work"/mp/rank*/out.txt
    fail "mpirun -np 2 ./run failed"
}
for r in 0 1; do
    grep -q "^run: rank $r of 2 (Open MPI, collectives over MPI); rank 0 at 127.0.0.1:$port (from MPI (rank 0 is on this host))$" \
        "$work/mp/rank$r/out.txt" || fail "rank $r did not bootstrap over MPI: $(head -3 "$work/mp/rank$r/out.txt")"
done
[ "$(losses clip)" = "$(sed -n 's/.*"loss": \([^,]*\),.*/\1/p' "$work/mp/rank1/metrics.jsonl")" ] ||
    fail "the last rank's losses differ from the threaded run's"
cmp "$work/clip/ckpt/step_00000012/model.bin" "$work/mp/rank0/ckpt/step_00000012/model.bin" ||
    fail "model.bin differs from the threaded run's"
cmp "$work/clip/ckpt/step_00000012/state.bin" "$work/mp/rank0/ckpt/step_00000012/state.bin" ||
    fail "state.bin differs from the threaded run's"
echo "mpirun -np 2: rank 0's host by MPI broadcast, collectives over MPI, identical to threads"
