/* mpi/mpi_bootstrap.c: what MPI does for a run launched by mpirun, when the build found an
 * MPI compiler (libpacirt_mpi.a; pacic links it into `run` only then).
 *
 * MPI_Init, then two things the TCP bootstrap cannot do alone: rank 0's host name reaches
 * every rank by MPI_Bcast (so a run across nodes needs no MASTER_ADDR), and the small
 * collectives, among them the exchange of NCCL unique ids and the gradient-norm sums, go
 * through MPI_Allgather instead of rank 0's TCP star. The TCP bootstrap still carries the
 * rest (the neighbour addresses, the gathers of the model for checkpoints).
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../prt.h"

static int started;

static int mpi_failed(int rc, const char *call, char *err)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return pr_fail(err, "%s failed: %s", call, text);
}

static int mpi_start(pr_launch *l, char *err)
{
    int provided = 0, rank = 0, world = 0, rc;
    // Stage threads call the collectives, never two at once: serialized access is enough.
    if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided)) != MPI_SUCCESS)
        return mpi_failed(rc, "MPI_Init_thread", err);
    started = 1;
    if (provided < MPI_THREAD_SERIALIZED)
        return pr_fail(err, "MPI provides thread level %d, below MPI_THREAD_SERIALIZED", provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (rank != l->rank || world != l->world)
        return pr_fail(err, "MPI says rank %d of %d, the launcher's variables rank %d of %d", rank,
                       world, l->rank, l->world);
    if (l->addr_from && strcmp(l->addr_from, "MASTER_ADDR") == 0)
        return 0; // the user's choice stands
    char mine[PR_HOST_LEN] = "", host[PR_HOST_LEN] = "";
    if (gethostname(mine, sizeof mine - 1) != 0)
        return pr_fail(err, "rank %d: gethostname failed", rank);
    if (rank == 0)
        strcpy(host, mine);
    if ((rc = MPI_Bcast(host, PR_HOST_LEN, MPI_CHAR, 0, MPI_COMM_WORLD)) != MPI_SUCCESS)
        return mpi_failed(rc, "MPI_Bcast of rank 0's host name", err);
    host[PR_HOST_LEN - 1] = '\0';
    // On rank 0's own node loopback always works; elsewhere its name must resolve.
    int same = strcmp(host, mine) == 0;
    strcpy(l->master_addr, same ? "127.0.0.1" : host);
    l->addr_from = same ? "MPI (rank 0 is on this host)" : "MPI (rank 0's host name)";
    return 0;
}

static int mpi_allgather(const void *mine, size_t bytes, void *all, char *err)
{
    int rc = MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : mpi_failed(rc, "MPI_Allgather", err);
}

static void mpi_finish(void)
{
    if (started)
        MPI_Finalize();
    started = 0;
}

const pr_mpi_ops pr_mpi_impl = {
    .name = "MPI",
    .start = mpi_start,
    .allgather = mpi_allgather,
    .finish = mpi_finish,
};
