/* bench/mpi_allreduce_order.c: whether Open MPI's MPI_Allreduce sums floats in rank order
 * (as the replicas' reduction does, runtime/replicas.c) and gives the same bits from run to
 * run. Every rank makes n pseudo-random floats of mixed magnitudes; rank 0 gathers them,
 * adds them in rank order, and counts the elements where MPI_Allreduce's sum differs. It
 * prints a hash of MPI's sums, so two runs can be compared. Run by mpi_allreduce_order.sh. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int n = argc > 1 ? atoi(argv[1]) : 1000000;
    float *mine = malloc((size_t)n * 4), *sum = malloc((size_t)n * 4);
    float *all = rank == 0 ? malloc((size_t)n * 4 * (size_t)world) : NULL;
    unsigned state = 12345u + 7919u * (unsigned)rank;
    for (int i = 0; i < n; i++) { // uniform in [-0.5, 0.5), scaled by 2^0 .. 2^15
        state = state * 1664525u + 1013904223u;
        mine[i] = ((float)(state >> 8) / 16777216.0f - 0.5f) * (float)(1u << (state % 16));
    }
    MPI_Allreduce(mine, sum, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Gather(mine, n, MPI_FLOAT, all, n, MPI_FLOAT, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        long differ = 0;
        unsigned long long hash = 0;
        for (int i = 0; i < n; i++) {
            float in_order = all[i];
            for (int q = 1; q < world; q++)
                in_order += all[(size_t)q * (size_t)n + (size_t)i];
            differ += memcmp(&in_order, &sum[i], 4) != 0;
            unsigned bits;
            memcpy(&bits, &sum[i], 4);
            hash = hash * 1000003u + bits;
        }
        printf("ranks %d, %d floats: %ld differ from the rank-order sum; MPI's sums hash to %016llx\n",
               world, n, differ, hash);
    }
    free(mine);
    free(sum);
    free(all);
    MPI_Finalize();
    return 0;
}
