#!/usr/bin/env bash
# bench/mpi_allreduce_order.sh: measures whether MPI_Allreduce adds floats in rank order and
# repeats its bits (bench/mpi_allreduce_order.c), at 2, 3 and 4 ranks on this machine, twice
# each, with 1000 and 1000000 floats. The replicas' reduction (runtime/replicas.c) adds in rank
# order over its own sockets instead; docs/launch.md quotes what this prints. Needs mpicc and
# mpirun (Open MPI). No assertions: figures only.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpicc -O2 -o "$out/order" "$root/bench/mpi_allreduce_order.c"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # root in a container
mpirun --version | head -n 1
for np in 2 3 4; do
    for n in 1000 1000000; do
        for run in 1 2; do
            mpirun --oversubscribe --mca btl_vader_single_copy_mechanism none -np "$np" "$out/order" "$n"
        done
    done
done
