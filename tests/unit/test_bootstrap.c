/* test_bootstrap.c: the TCP id exchange on loopback, one thread per rank: every world size
 * from 2 to 8, a rank that never comes, a stray connection, a rank 0 that starts late, a
 * port that answers something else, the collectives on the kept connections, and a wait
 * whose deadline a stop outlasted. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "prt.h"

/* A port nothing listens on right now: the kernel's pick for a socket we then close. */
static int free_port(void)
{
    char err[PR_ERR_LEN];
    uint16_t port = 0;
    int fd = pr_sock_listen(0, 1, &port, err);
    assert_true(fd >= 0);
    close(fd);
    return port;
}

typedef struct rank_job {
    pr_launch launch;
    double timeout, start_delay;
    pr_bootstrap boot;
    int rc;
    char err[PR_ERR_LEN];
} rank_job;

static void *run_rank(void *arg)
{
    rank_job *j = arg;
    if (j->start_delay > 0)
        usleep((useconds_t)(j->start_delay * 1e6));
    if (j->launch.rank == 0)
        for (int i = 0; i < PR_BOOT_ID_BYTES; i++)
            j->boot.id[i] = (unsigned char)(i * 7 + 3);
    j->rc = pr_bootstrap_tcp(&j->launch, j->timeout, (uint16_t)(1000 + j->launch.rank), &j->boot,
                             j->err);
    return NULL;
}

/* Starts ranks [0, world) except `absent`, rank 0 after `late` seconds; joins them. */
static void run_world(rank_job *jobs, int world, int absent, double late, double timeout, int port)
{
    pthread_t th[PACI_MAX_STAGES];
    for (int r = 0; r < world; r++) {
        memset(&jobs[r], 0, sizeof jobs[r]);
        jobs[r].launch = (pr_launch){.launcher = PR_LAUNCH_TORCHRUN, .rank = r, .world = world,
                                     .master_addr = "127.0.0.1", .master_port = port};
        jobs[r].timeout = timeout;
        jobs[r].start_delay = r == 0 ? late : 0;
        if (r != absent)
            pthread_create(&th[r], NULL, run_rank, &jobs[r]);
    }
    for (int r = 0; r < world; r++)
        if (r != absent)
            pthread_join(th[r], NULL);
}

static void close_world(rank_job *jobs, int world)
{
    for (int r = 0; r < world; r++)
        pr_bootstrap_close(&jobs[r].boot);
}

static void test_every_world_size_gets_the_id(void **state)
{
    for (int world = 2; world <= 8; world++) {
        rank_job jobs[8];
        run_world(jobs, world, -1, 0, 20, free_port());
        for (int r = 0; r < world; r++) {
            assert_int_equal(jobs[r].rc, 0);
            assert_memory_equal(jobs[r].boot.id, jobs[0].boot.id, PR_BOOT_ID_BYTES);
            assert_int_equal(jobs[r].boot.id[5], 38);
            for (int q = 0; q < world; q++) {
                assert_int_equal(jobs[r].boot.port[q], 1000 + q);
                assert_int_equal(jobs[r].boot.addr[q], htonl(INADDR_LOOPBACK));
            }
        }
        close_world(jobs, world);
    }
}

static void test_missing_rank_times_out_and_is_named(void **state)
{
    rank_job jobs[4];
    run_world(jobs, 4, 2, 0, 1.0, free_port());
    assert_int_equal(jobs[0].rc, -1);
    assert_non_null(strstr(jobs[0].err, "rank 0: no bootstrap connection from rank 2 within 1 s"));
    // The ranks that did connect learn why rank 0 gave up, instead of waiting on.
    for (int r = 1; r < 4; r += 2) {
        assert_int_equal(jobs[r].rc, -1);
        assert_non_null(strstr(jobs[r].err, "rank 0 gave up: rank 0: no bootstrap connection "
                                            "from rank 2"));
    }
    run_world(jobs, 4, 0, 0, 0.5, free_port());
    for (int r = 1; r < 4; r++) {
        assert_int_equal(jobs[r].rc, -1);
        assert_non_null(strstr(jobs[r].err, "cannot reach rank 0 at 127.0.0.1:"));
        assert_non_null(strstr(jobs[r].err, "within 0.5 s (last: Connection refused)"));
    }
    close_world(jobs, 4);
}

static void *stray_client(void *arg)
{
    int port = *(int *)arg;
    char err[PR_ERR_LEN];
    uint32_t lo = htonl(INADDR_LOOPBACK);
    int fd = -1;
    // Until rank 0 listens, however late a loaded machine starts it (60 s: a hang guard).
    for (double give_up = pr_now() + 60; fd < 0 && pr_now() < give_up;) {
        pr_deadline within_1s = pr_deadline_in(1);
        fd = pr_sock_connect(lo, (uint16_t)port, &within_1s, err);
        if (fd < 0)
            usleep(10000);
    }
    if (fd < 0)
        return (void *)(intptr_t)-2;
    pr_deadline within_5s = pr_deadline_in(5);
    pr_sock_write(fd, "GET / HTTP/1.0\r\n\r\n", 18, &within_5s);
    char byte;
    // Rank 0 must hang up on it: the read ends with the connection closed.
    int closed = pr_sock_read(fd, &byte, 1, &within_5s) != 0 && errno == EPIPE;
    close(fd);
    return (void *)(intptr_t)(closed ? 0 : -1);
}

static void test_wrong_magic_is_rejected(void **state)
{
    int port = free_port();
    pthread_t stray;
    pthread_create(&stray, NULL, stray_client, &port);
    rank_job jobs[3];
    // Rank 0 starts late, so the stray connection and the real ranks queue up before it.
    run_world(jobs, 3, -1, 0.3, 20, port);
    void *stray_rc;
    pthread_join(stray, &stray_rc);
    assert_int_equal((intptr_t)stray_rc, 0);
    for (int r = 0; r < 3; r++)
        assert_int_equal(jobs[r].rc, 0);
    close_world(jobs, 3);
}

static void test_late_rank_0_is_waited_for(void **state)
{
    rank_job jobs[3];
    run_world(jobs, 3, -1, 1.5, 20, free_port());
    for (int r = 0; r < 3; r++) {
        assert_int_equal(jobs[r].rc, 0);
        assert_memory_equal(jobs[r].boot.id, jobs[0].boot.id, PR_BOOT_ID_BYTES);
    }
    close_world(jobs, 3);
}

/* A listener that answers every connection with bytes of some other protocol. */
static void *foreign_server(void *arg)
{
    int listener = *(int *)arg;
    int fd = accept(listener, NULL, NULL);
    char hello[20];
    pr_deadline within_5s = pr_deadline_in(5);
    pr_sock_read(fd, hello, sizeof hello, &within_5s);
    pr_sock_write(fd, "SSH-2.0-OpenSSH_9.6\r\n", 21, &within_5s);
    usleep(200000);
    close(fd);
    return NULL;
}

static void test_foreign_service_on_the_port_is_an_error(void **state)
{
    char err[PR_ERR_LEN];
    uint16_t port;
    int listener = pr_sock_listen(0, 1, &port, err);
    pthread_t th;
    pthread_create(&th, NULL, foreign_server, &listener);
    pr_launch l = {.launcher = PR_LAUNCH_TORCHRUN, .rank = 1, .world = 2,
                   .master_addr = "127.0.0.1", .master_port = port};
    pr_bootstrap b;
    assert_int_equal(pr_bootstrap_tcp(&l, 5, 0, &b, err), -1);
    assert_non_null(strstr(err, "answered, but not as a pacic rank 0"));
    pthread_join(th, NULL);
    close(listener);
}

typedef struct collective_job {
    pr_bootstrap *boot;
    double sums[4 * 3];
    float block[3];
    float *gathered[4];
    int rc;
} collective_job;

static void *run_collectives(void *arg)
{
    collective_job *j = arg;
    char err[PR_ERR_LEN];
    int r = j->boot->rank;
    double mine[3] = {r, 10.0 * r, 100.0 * r};
    j->rc = pr_bootstrap_allgather(j->boot, mine, sizeof mine, j->sums, err);
    for (int i = 0; i < 3; i++)
        j->block[i] = (float)(r + i);
    size_t sizes[4] = {0, sizeof j->block, sizeof j->block, sizeof j->block};
    j->rc |= pr_bootstrap_gather(j->boot, j->block, sizeof j->block, (void *const *)j->gathered,
                                 sizes, err);
    return NULL;
}

static void test_allgather_and_gather_on_the_kept_connections(void **state)
{
    rank_job jobs[4];
    run_world(jobs, 4, -1, 0, 20, free_port());
    collective_job cj[4];
    float into[4][3];
    pthread_t th[4];
    for (int r = 0; r < 4; r++) {
        assert_int_equal(jobs[r].rc, 0);
        cj[r] = (collective_job){.boot = &jobs[r].boot};
        for (int q = 0; q < 4; q++)
            cj[r].gathered[q] = into[q];
        pthread_create(&th[r], NULL, run_collectives, &cj[r]);
    }
    for (int r = 0; r < 4; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < 4; r++) {
        assert_int_equal(cj[r].rc, 0);
        for (int q = 0; q < 4; q++)
            assert_true(cj[r].sums[3 * q + 1] == 10.0 * q && cj[r].sums[3 * q + 2] == 100.0 * q);
    }
    for (int q = 1; q < 4; q++)
        for (int i = 0; i < 3; i++)
            assert_true(into[q][i] == (float)(q + i));
    close_world(jobs, 4);
}

static void *write_a_byte_after_1s(void *arg)
{
    usleep(1000000);
    return (void *)(intptr_t)write(*(int *)arg, "x", 1);
}

/* A process stopped and continued between the making of a deadline and a wait on it (between
 * two parts of one message, with its peer continued a moment later) finds the deadline passed:
 * the wait starts its span again rather than time out at once. Without a continue, the same
 * wait times out. */
static void test_a_continue_after_the_deadline_was_made_restarts_the_wait(void **state)
{
    (void)state;
    int sv[2];
    char byte;
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    pr_watch_stops();
    pr_deadline deadline = pr_deadline_in(5);
    deadline.at = pr_now() - 0.1; // the stop outlasted it
    raise(SIGCONT);               // what a continue delivers; the wait below starts after it
    pthread_t writer;
    assert_int_equal(pthread_create(&writer, NULL, write_a_byte_after_1s, &sv[1]), 0);
    double start = pr_now();
    assert_int_equal(pr_sock_read(sv[0], &byte, 1, &deadline), 0);
    assert_true(pr_now() - start >= 0.5); // it did wait for the byte
    assert_true(deadline.at > start);      // and moved the deadline for the message's next part
    pthread_join(writer, NULL);

    pr_deadline no_stop = pr_deadline_in(0.2);
    assert_int_not_equal(pr_sock_read(sv[0], &byte, 1, &no_stop), 0);
    assert_int_equal(errno, ETIMEDOUT);
    close(sv[0]);
    close(sv[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_world_size_gets_the_id),
        cmocka_unit_test(test_missing_rank_times_out_and_is_named),
        cmocka_unit_test(test_wrong_magic_is_rejected),
        cmocka_unit_test(test_late_rank_0_is_waited_for),
        cmocka_unit_test(test_foreign_service_on_the_port_is_an_error),
        cmocka_unit_test(test_allgather_and_gather_on_the_kept_connections),
        cmocka_unit_test(test_a_continue_after_the_deadline_was_made_restarts_the_wait),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
