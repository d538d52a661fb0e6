/* test_transport.c: deadlines on the in-process links, the socket link between processes
 * (order, capacity by credits, a peer that goes away), and the message a stage prints when
 * its peer stops answering. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "toy_model.h"
#include "wait_for.h"

static void test_inprocess_waits_end_at_the_timeout(void **state)
{
    pr_channel c;
    pr_channel_init(&c, 1, 2);
    c.timeout = 0.2;
    float msg[2] = {1, 2}, got[2];
    int64_t mb = -1;
    assert_int_equal(pr_channel_recv_timed(&c, got, &mb), PR_LINK_TIMEOUT);
    assert_int_equal(pr_channel_send_timed(&c, 7, msg), PR_LINK_OK);
    // The one buffer is full: a second send waits for a receiver that never comes.
    assert_int_equal(pr_channel_send_timed(&c, 8, msg), PR_LINK_TIMEOUT);
    assert_int_equal(pr_channel_recv_timed(&c, got, &mb), PR_LINK_OK);
    assert_int_equal(mb, 7);
    assert_true(got[0] == 1 && got[1] == 2);
    pr_channel_destroy(&c);
}

typedef struct socket_sender {
    pr_channel *c;
    int sent, rc;
} socket_sender;

static void *send_three(void *arg)
{
    socket_sender *s = arg;
    float msg[3];
    for (int i = 0; i < 3; i++) {
        msg[0] = msg[1] = msg[2] = (float)i;
        s->rc |= pr_channel_send_timed(s->c, 20 + i, msg);
        __atomic_store_n(&s->sent, i + 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

static void test_socket_link_keeps_order_and_capacity(void **state)
{
    int fds[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    pr_channel out, in;
    pr_channel_init(&out, 2, 3);
    pr_channel_init(&in, 2, 3);
    pr_channel_attach_socket(&out, fds[0]);
    pr_channel_attach_socket(&in, fds[1]);
    out.timeout = in.timeout = 60; // hang guards only
    socket_sender s = {&out, 0, 0};
    pthread_t th;
    pthread_create(&th, NULL, send_three, &s);
    // Two messages go out unacknowledged; the third waits for a credit, which a receive sends.
    assert_true(wait_for_count(&s.sent, 2));
    float got[3];
    int64_t mb;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pr_channel_recv_timed(&in, got, &mb), PR_LINK_OK);
        assert_int_equal(mb, 20 + i);
        assert_true(got[0] == (float)i && got[2] == (float)i);
    }
    pthread_join(th, NULL);
    assert_int_equal(s.rc, PR_LINK_OK);
    // The capacity, with no other thread: two credits are back, so two sends go out; the next
    // finds two messages unacknowledged and waits for a credit until its timeout.
    float msg[3] = {7, 8, 9};
    assert_int_equal(pr_channel_send_timed(&out, 23, msg), PR_LINK_OK);
    assert_int_equal(pr_channel_send_timed(&out, 24, msg), PR_LINK_OK);
    out.timeout = 0.05;
    assert_int_equal(pr_channel_send_timed(&out, 25, msg), PR_LINK_TIMEOUT);
    for (int i = 23; i <= 24; i++) {
        assert_int_equal(pr_channel_recv_timed(&in, got, &mb), PR_LINK_OK);
        assert_int_equal(mb, i);
        assert_true(got[0] == 7 && got[2] == 9);
    }
    // A peer that has gone is told apart from a slow one.
    in.timeout = 0.2;
    assert_int_equal(pr_channel_recv_timed(&in, got, &mb), PR_LINK_TIMEOUT);
    pr_channel_destroy(&out);
    assert_int_equal(pr_channel_recv_timed(&in, got, &mb), PR_LINK_CLOSED);
    pr_channel_destroy(&in);
}

static char token_path[] = "/tmp/pacirt_transport_XXXXXX";

/* Runs stage 1 of a 2-stage toy pipeline alone in a child process (as rank 1 of a world of
 * 2 whose rank 0 never sends): its first receive must end at the timeout with the stages
 * and the micro-batch named. */
static void test_stuck_peer_ends_the_process_with_the_stages_named(void **state)
{
    int fd = mkstemp(token_path);
    assert_true(fd >= 0);
    close(fd);
    toy_write_tokens(token_path, 4096, 1);
    int out[2];
    assert_int_equal(pipe(out), 0);
    pid_t child = fork();
    if (child == 0) {
        dup2(out[1], STDERR_FILENO);
        static toy_table table;
        static pr_program prog;
        char err[PR_ERR_LEN];
        toy_build_stages(2);
        toy_build_table(&table, TOY_1F1B, 2, 2, 4, 4);
        prog = toy_program(&table.t, 4);
        pr_options opt = {.quiet = 1, .peer_timeout = 0.3, .rank = 1, .world = 2};
        pr_run run;
        if (pr_run_init(&run, &prog, &opt, err) != 0 ||
            pr_tokens_load(&run.train, token_path, TOY_V, TOY_B, TOY_T, err) != 0)
            _exit(3);
        pr_run_segment(&run, 0);
        _exit(0);
    }
    close(out[1]);
    char text[512] = "";
    size_t n = 0;
    ssize_t got;
    while (n + 1 < sizeof text && (got = read(out[0], text + n, sizeof text - 1 - n)) > 0)
        n += (size_t)got;
    text[n] = '\0';
    close(out[0]);
    int status;
    waitpid(child, &status, 0);
    unlink(token_path);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 1);
    assert_string_equal(text, "run: error: stage 1 (rank 1): no message from stage 0 for 0.3 s "
                              "(waiting for micro-batch 0)\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inprocess_waits_end_at_the_timeout),
        cmocka_unit_test(test_socket_link_keeps_order_and_capacity),
        cmocka_unit_test(test_stuck_peer_ends_the_process_with_the_stages_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
