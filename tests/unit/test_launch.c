/* test_launch.c: rank, world, local rank and the rank-0 host from each launcher's
 * variables, their precedence, and every inconsistency named by its variable. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "prt.h"

static char err[PR_ERR_LEN];

/* Parses a launch from the given variables for a program of `stages` stages. */
#define PARSE(l, stages, port, ...)                                                      \
    pr_launch_parse((const char *const[]){__VA_ARGS__, NULL}, stages, 1, port, l, err)

static void test_no_launcher_is_one_process(void **state)
{
    pr_launch l;
    assert_int_equal(PARSE(&l, 8, 0, "HOME=/root", "PATH=/bin"), 0);
    assert_int_equal(l.launcher, PR_LAUNCH_SINGLE);
    assert_int_equal(l.world, 1);
    assert_int_equal(l.rank, 0);
    assert_int_equal(l.master_port, PR_DEFAULT_MASTER_PORT);
    // WORLD_SIZE=1 is one process too, whatever the stage count.
    assert_int_equal(PARSE(&l, 4, 0, "RANK=0", "WORLD_SIZE=1"), 0);
    assert_int_equal(l.world, 1);
}

/* With `parallel { data D }` the world is stages x D, from any launcher (rank = replica x p
 * + stage: srun's 16 tasks for 8 stages x 2 replicas); another world names both counts. */
static void test_world_of_replicas(void **state)
{
    pr_launch l;
    assert_int_equal(pr_launch_parse((const char *const[]){"SLURM_PROCID=13", "SLURM_NTASKS=16",
                                                           "SLURM_LOCALID=5", "MASTER_ADDR=n1", NULL},
                                     8, 2, 0, &l, err), 0);
    assert_int_equal(l.world, 16);
    assert_int_equal(l.rank, 13);
    assert_int_equal(l.local_rank, 5);
    assert_int_equal(pr_launch_parse((const char *const[]){"RANK=0", "WORLD_SIZE=8",
                                                           "MASTER_ADDR=h", NULL},
                                     8, 2, 0, &l, err), -1);
    assert_string_equal(err, "WORLD_SIZE=8, but the program has 8 stages x 2 replicas (data 2): start "
                             "one process per stage and replica (16), or one process for all");
    // One process still runs everything.
    assert_int_equal(pr_launch_parse((const char *const[]){"HOME=/root", NULL}, 8, 2, 0, &l, err), 0);
    assert_int_equal(l.world, 1);
}

static void test_torchrun(void **state)
{
    pr_launch l;
    assert_int_equal(PARSE(&l, 4, 0, "RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1",
                           "MASTER_ADDR=node7", "MASTER_PORT=1234"), 0);
    assert_int_equal(l.launcher, PR_LAUNCH_TORCHRUN);
    assert_int_equal(l.rank, 3);
    assert_int_equal(l.world, 4);
    assert_int_equal(l.local_rank, 1);
    assert_string_equal(l.master_addr, "node7");
    assert_string_equal(l.addr_from, "MASTER_ADDR");
    assert_int_equal(l.master_port, 1234);
    // Without LOCAL_RANK every rank is taken to be on one node.
    assert_int_equal(PARSE(&l, 2, 0, "RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1"), 0);
    assert_int_equal(l.local_rank, 1);
    // --master-port beats MASTER_PORT.
    assert_int_equal(PARSE(&l, 2, 4321, "RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h",
                           "MASTER_PORT=1234"), 0);
    assert_int_equal(l.master_port, 4321);
}

static void test_open_mpi(void **state)
{
    pr_launch l;
    assert_int_equal(PARSE(&l, 8, 0, "OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=8",
                           "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=4",
                           "MASTER_ADDR=10.0.0.1"), 0);
    assert_int_equal(l.launcher, PR_LAUNCH_OPEN_MPI);
    assert_int_equal(l.rank, 5);
    assert_int_equal(l.world, 8);
    assert_int_equal(l.local_rank, 1);
    assert_string_equal(l.master_addr, "10.0.0.1");
    // Every rank on this node: rank 0 is local.
    assert_int_equal(PARSE(&l, 2, 0, "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
                           "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2"), 0);
    assert_string_equal(l.master_addr, "127.0.0.1");
    // Across nodes without MASTER_ADDR nobody knows where rank 0 is.
    assert_int_equal(PARSE(&l, 8, 0, "OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=8",
                           "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=4"), -1);
    assert_string_equal(err, "OMPI_COMM_WORLD_SIZE=8 needs the rank-0 host: set MASTER_ADDR");
}

static void test_slurm(void **state)
{
    pr_launch l;
    assert_int_equal(PARSE(&l, 4, 0, "SLURM_PROCID=2", "SLURM_NTASKS=4", "SLURM_LOCALID=0",
                           "SLURM_NODELIST=gpu[07-09,12]"), 0);
    assert_int_equal(l.launcher, PR_LAUNCH_SLURM);
    assert_int_equal(l.rank, 2);
    assert_int_equal(l.world, 4);
    assert_string_equal(l.master_addr, "gpu07");
    assert_string_equal(l.addr_from, "SLURM_NODELIST");
    // The step's node list and task count beat the allocation's.
    assert_int_equal(PARSE(&l, 2, 0, "SLURM_PROCID=1", "SLURM_NTASKS=8", "SLURM_STEP_NUM_TASKS=2",
                           "SLURM_LOCALID=1", "SLURM_NODELIST=a[1-8]",
                           "SLURM_STEP_NODELIST=b[3-4]"), 0);
    assert_int_equal(l.world, 2);
    assert_string_equal(l.master_addr, "b3");
    // The launch node's address when there is no node list; MASTER_ADDR beats both.
    assert_int_equal(PARSE(&l, 2, 0, "SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_LOCALID=0",
                           "SLURM_LAUNCH_NODE_IPADDR=10.1.2.3"), 0);
    assert_string_equal(l.master_addr, "10.1.2.3");
    assert_int_equal(PARSE(&l, 2, 0, "SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_LOCALID=0",
                           "SLURM_NODELIST=n[1-2]", "MASTER_ADDR=head"), 0);
    assert_string_equal(l.master_addr, "head");
}

static void test_precedence(void **state)
{
    pr_launch l;
    // srun torchrun: torchrun's variables describe this process, Slurm's its agent.
    assert_int_equal(PARSE(&l, 4, 0, "SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_LOCALID=0",
                           "RANK=3", "WORLD_SIZE=4", "MASTER_ADDR=h"), 0);
    assert_int_equal(l.launcher, PR_LAUNCH_TORCHRUN);
    assert_int_equal(l.rank, 3);
    // mpirun inside a Slurm allocation: Open MPI's numbering wins.
    assert_int_equal(PARSE(&l, 2, 0, "SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0",
                           "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
                           "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2"), 0);
    assert_int_equal(l.launcher, PR_LAUNCH_OPEN_MPI);
    assert_int_equal(l.rank, 1);
}

static void test_inconsistent_values_name_the_variable(void **state)
{
    pr_launch l;
    assert_int_equal(PARSE(&l, 2, 0, "RANK=2", "WORLD_SIZE=2", "MASTER_ADDR=h"), -1);
    assert_string_equal(err, "RANK=2 is not below WORLD_SIZE=2");
    assert_int_equal(PARSE(&l, 4, 0, "RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h"), -1);
    assert_string_equal(err, "WORLD_SIZE=2, but the program has 4 stages: start one process per "
                        "stage (4), or one process for all");
    assert_int_equal(PARSE(&l, 2, 0, "RANK=0", "WORLD_SIZE=2"), -1);
    assert_string_equal(err, "WORLD_SIZE=2 needs the rank-0 host: set MASTER_ADDR");
    assert_int_equal(PARSE(&l, 2, 0, "RANK=1"), -1);
    assert_string_equal(err, "RANK is set but WORLD_SIZE is not: set both");
    assert_int_equal(PARSE(&l, 2, 0, "WORLD_SIZE=2"), -1);
    assert_string_equal(err, "WORLD_SIZE is set but RANK is not: set both");
    assert_int_equal(PARSE(&l, 2, 0, "RANK=one", "WORLD_SIZE=2"), -1);
    assert_string_equal(err, "RANK='one' is not an integer in [0, 1048576]");
    assert_int_equal(PARSE(&l, 2, 0, "RANK=-1", "WORLD_SIZE=2"), -1);
    assert_string_equal(err, "RANK='-1' is not an integer in [0, 1048576]");
    assert_int_equal(PARSE(&l, 2, 0, "RANK=0", "WORLD_SIZE=0"), -1);
    assert_string_equal(err, "WORLD_SIZE='0' is not an integer in [1, 1048576]");
    assert_int_equal(PARSE(&l, 2, 0, "RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h",
                           "MASTER_PORT=70000"), -1);
    assert_string_equal(err, "MASTER_PORT='70000' is not an integer in [1, 65535]");
    assert_int_equal(PARSE(&l, 2, 0, "RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h",
                           "LOCAL_RANK=x"), -1);
    assert_string_equal(err, "LOCAL_RANK='x' is not an integer in [0, 1048576]");
    assert_int_equal(PARSE(&l, 2, 0, "OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2"), -1);
    assert_string_equal(err, "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_LOCAL_RANK is not: "
                        "set both");
    assert_int_equal(PARSE(&l, 2, 0, "SLURM_PROCID=3", "SLURM_NTASKS=2", "SLURM_LOCALID=0",
                           "SLURM_NODELIST=n1"), -1);
    assert_string_equal(err, "SLURM_PROCID=3 is not below SLURM_NTASKS=2");
    assert_int_equal(PARSE(&l, 2, 0, "SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_LOCALID=0",
                           "SLURM_NODELIST=n[1-2"), -1);
    assert_string_equal(err, "SLURM_NODELIST='n[1-2' is not a Slurm node list");
    assert_int_equal(PARSE(&l, 2, 0, "SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_LOCALID=0"), -1);
    assert_string_equal(err, "SLURM_NTASKS=2 needs the rank-0 host: set MASTER_ADDR");
}

static void test_slurm_first_host(void **state)
{
    char host[PR_HOST_LEN];
    static const char *const cases[][2] = {
        {"node01", "node01"},         {"a,b,c", "a"},
        {"gpu[07-09,12]", "gpu07"},   {"gpu[12,07-09],cpu1", "gpu12"},
        {"r[001-004]-ib", "r001-ib"}, {"rack[2-3]n[5-6]", "rack2n5"},
        {"host-1.example", "host-1.example"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(pr_slurm_first_host(cases[i][0], host, sizeof host), 0);
        assert_string_equal(host, cases[i][1]);
    }
    assert_int_equal(pr_slurm_first_host("", host, sizeof host), -1);
    assert_int_equal(pr_slurm_first_host("n[1-2", host, sizeof host), -1);
    assert_int_equal(pr_slurm_first_host("n]1", host, sizeof host), -1);
    assert_int_equal(pr_slurm_first_host("abcdef", host, 4), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_launcher_is_one_process),
        cmocka_unit_test(test_torchrun),
        cmocka_unit_test(test_world_of_replicas),
        cmocka_unit_test(test_open_mpi),
        cmocka_unit_test(test_slurm),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_inconsistent_values_name_the_variable),
        cmocka_unit_test(test_slurm_first_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
