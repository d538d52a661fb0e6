/* test_links.c: the mapping from the table's send and receive instructions to the links a
 * native transport (NCCL) carries: one two-rank communicator per directed link, sender rank
 * 0. NCCL pairs a communicator's k-th send with its k-th receive, so every schedule's sender
 * and receiver must list the same micro-batches in the same order on each link; and the
 * transport's sender ring of channel_capacity messages must be what keeps the table
 * deadlock-free (a bare NCCL send, which waits for its receive, is capacity 0 and deadlocks).
 * And the device links' protocol: which events each copy waits for and records. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "pacic.h"
#include "pipeline_config.h"
#include "prt.h"

static void test_each_op_names_its_link_and_ranks(void **state)
{
    (void)state;
    pr_link_use u;
    assert_int_equal(pr_link_of(PACI_OP_SEND_ACT, 1, 4, &u), 0);
    assert_true(u.kind == PR_LINK_ACT && u.index == 1 && u.sending && u.peer == 2);
    assert_true(u.self_rank == 0 && u.peer_rank == 1);
    assert_int_equal(pr_link_of(PACI_OP_RECV_ACT, 2, 4, &u), 0);
    assert_true(u.kind == PR_LINK_ACT && u.index == 1 && !u.sending && u.peer == 1);
    assert_true(u.self_rank == 1 && u.peer_rank == 0);
    assert_int_equal(pr_link_of(PACI_OP_SEND_GRAD, 2, 4, &u), 0);
    assert_true(u.kind == PR_LINK_GRAD && u.index == 1 && u.sending && u.peer == 1);
    assert_true(u.self_rank == 0 && u.peer_rank == 1);
    assert_int_equal(pr_link_of(PACI_OP_RECV_GRAD, 1, 4, &u), 0);
    assert_true(u.kind == PR_LINK_GRAD && u.index == 1 && !u.sending && u.peer == 2);
    assert_true(u.self_rank == 1 && u.peer_rank == 0);
    // No peer past either end, and compute ops use no link.
    assert_int_equal(pr_link_of(PACI_OP_RECV_ACT, 0, 4, &u), -1);
    assert_int_equal(pr_link_of(PACI_OP_SEND_GRAD, 0, 4, &u), -1);
    assert_int_equal(pr_link_of(PACI_OP_SEND_ACT, 3, 4, &u), -1);
    assert_int_equal(pr_link_of(PACI_OP_RECV_GRAD, 3, 4, &u), -1);
    assert_int_equal(pr_link_of(PACI_OP_FWD, 1, 4, &u), -1);
    assert_int_equal(pr_link_of(PACI_OP_STEP, 1, 4, &u), -1);
}

static void test_native_between_processes_or_gpus(void **state)
{
    (void)state;
    assert_true(pr_link_native(2, 0, 0));  // processes: always, even on one GPU
    assert_true(pr_link_native(1, 0, 1));  // one process, two GPUs
    assert_false(pr_link_native(1, 1, 1)); // stages sharing a GPU keep the channel
}

static Config make_config(int kind, int stages, int window, long steps)
{
    return pipeline_config(kind, stages, window, steps, 16);
}

typedef struct lists {
    int p;
    paci_instr *list[PACI_MAX_STAGES];
    long n[PACI_MAX_STAGES];
} lists;

/* Every directed link: the sender's micro-batches, in order, are the receiver's. */
static void check_pairing(const lists *l)
{
    for (int kind = 0; kind < PR_LINK_KINDS; kind++)
        for (int i = 0; i + 1 < l->p; i++) {
            int32_t sent[4096], got[4096];
            int n_sent = 0, n_got = 0;
            for (int s = i; s <= i + 1; s++)
                for (long k = 0; k < l->n[s]; k++) {
                    pr_link_use u;
                    if (pr_link_of(l->list[s][k].op, s, l->p, &u) != 0 || u.kind != kind || u.index != i)
                        continue;
                    assert_int_equal(u.self_rank, u.sending ? 0 : 1);
                    assert_int_equal(u.peer, s == i ? i + 1 : i);
                    if (u.sending && n_sent < 4096)
                        sent[n_sent++] = l->list[s][k].mb;
                    else if (!u.sending && n_got < 4096)
                        got[n_got++] = l->list[s][k].mb;
                }
            assert_int_equal(n_sent, n_got);
            assert_true(n_sent > 0);
            assert_memory_equal(sent, got, (size_t)n_sent * sizeof sent[0]);
        }
}

/* Runs the lists as the transport does: a receive waits for a message, a send waits while
 * `capacity` messages on its link are unreceived; capacity 0 is a bare rendezvous (the send
 * completes only together with its receive). 1 when every stage finishes. */
static int runs_to_the_end(const lists *l, int capacity)
{
    long pc[PACI_MAX_STAGES] = {0};
    int queued[PR_LINK_KINDS][PACI_MAX_STAGES] = {{0}};
    for (;;) {
        int moved = 0, done = 1;
        for (int s = 0; s < l->p; s++) {
            while (pc[s] < l->n[s]) {
                pr_link_use u;
                const paci_instr *in = &l->list[s][pc[s]];
                if (pr_link_of(in->op, s, l->p, &u) != 0) {
                    pc[s]++, moved = 1;
                    continue;
                }
                int *q = &queued[u.kind][u.index];
                if (!u.sending && *q > 0) {
                    (*q)--, pc[s]++, moved = 1;
                } else if (u.sending && *q < capacity) {
                    (*q)++, pc[s]++, moved = 1;
                } else if (u.sending && capacity == 0 && pc[u.peer] < l->n[u.peer]) {
                    pr_link_use v;
                    const paci_instr *other = &l->list[u.peer][pc[u.peer]];
                    if (pr_link_of(other->op, u.peer, l->p, &v) != 0 || v.kind != u.kind ||
                        v.index != u.index || v.sending)
                        break;
                    pc[s]++, pc[u.peer]++, moved = 1;
                } else {
                    break;
                }
            }
            done &= pc[s] == l->n[s];
        }
        if (done)
            return 1;
        if (!moved)
            return 0;
    }
}

static void check_schedule(int kind, int p, int K, int *rendezvous_deadlocks)
{
    Config cfg = make_config(kind, p, K, 6);
    Plan plan;
    assert_true(plan_build(&cfg, &plan));
    paci_table *t = schedule_build(&cfg, &plan);
    lists l = {.p = p};
    for (int s = 0; s < p; s++)
        l.n[s] = schedule_expand(t, 0, s, &l.list[s]);
    check_pairing(&l);
    if (!runs_to_the_end(&l, t->channel_capacity))
        fail_msg("%s p=%d K=%d deadlocks with the transport's ring of %d", paci_schedule_name(kind),
                 p, K, t->channel_capacity);
    *rendezvous_deadlocks += !runs_to_the_end(&l, 0);
    for (int s = 0; s < p; s++)
        free(l.list[s]);
    schedule_free(t);
}

static void test_every_schedule_pairs_and_runs_on_the_ring(void **state)
{
    (void)state;
    static const int ps[] = {2, 3, 4, 8}, ks[] = {1, 2, 3, 5};
    for (int kind = 0; kind < ONE_STAGE_SCHEDULES; kind++) {
        int deadlocks = 0;
        for (size_t a = 0; a < sizeof ps / sizeof ps[0]; a++)
            for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++)
                check_schedule(kind, ps[a], ks[b], &deadlocks);
        // The ring is load-bearing: without it, 1F1B-style schedules stop.
        if (kind != PACI_SCHED_GPIPE)
            assert_true(deadlocks > 0);
    }
}

/* ---- device links: the calls a send and a receive make, on a device that logs them ---- */

enum { LOG_MAX = 64 };
static char device_log[LOG_MAX][32];
static int n_logged;
static int events_made;

static void logf_call(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    assert_true(n_logged < LOG_MAX);
    vsnprintf(device_log[n_logged++], sizeof device_log[0], fmt, ap);
    va_end(ap);
}

static void *log_alloc(int stage, size_t bytes)
{
    return pr_alloc(bytes);
}

static void log_release(int stage, void *p)
{
    free(p);
}

/* Events are named by kind and ring buffer: made in open's order, sent[k] then drained[k]. */
static void *log_event_create(int stage)
{
    int *id = pr_alloc(sizeof *id);
    *id = events_made++;
    return id;
}

static void log_event_destroy(int stage, void *event)
{
    free(event);
}

static const char *event_name(const void *event)
{
    static const char *const names[] = {"sent0", "drained0", "sent1", "drained1"};
    return names[*(const int *)event];
}

static void log_event_record(int stage, void *event)
{
    logf_call("%d record %s", stage, event_name(event));
}

static void log_event_wait(int stage, void *event)
{
    logf_call("%d wait %s", stage, event_name(event));
}

static const float *ring_of_link;

static void log_copy(int stage, void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
    if (dst >= (void *)ring_of_link && dst < (void *)(ring_of_link + 4))
        logf_call("%d copy in %d", stage, (int)((const float *)dst - ring_of_link) / 2);
    else
        logf_call("%d copy out %d", stage, (int)((const float *)src - ring_of_link) / 2);
}

/* Capacity 2, messages of 2 floats, sender stage 0, receiver 1: each event is waited for
 * only once its record was made, before the buffer it guards is written or read again. */
static void test_device_link_orders_its_copies_by_events(void **state)
{
    const pr_device dev = {.alloc = log_alloc, .release = log_release, .copy = log_copy,
                           .event_create = log_event_create, .event_destroy = log_event_destroy,
                           .event_record = log_event_record, .event_wait = log_event_wait};
    pr_dev_link l;
    pr_channel c;
    pr_channel_init(&c, 2, 0);
    c.timeout = 0.05;
    n_logged = events_made = 0;
    pr_dev_link_open(&l, &dev, 0, 1, 2, 2);
    ring_of_link = l.ring;
    float msg[3][2] = {{1, 2}, {3, 4}, {5, 6}}, got[2];
    int64_t mb = -1;
    assert_int_equal(pr_dev_link_send(&l, &dev, &c, 10, msg[0]), PR_LINK_OK);
    assert_int_equal(pr_dev_link_send(&l, &dev, &c, 11, msg[1]), PR_LINK_OK);
    // Two messages unreceived: a third send waits for room until the timeout, copying nothing.
    assert_int_equal(pr_dev_link_send(&l, &dev, &c, 12, msg[2]), PR_LINK_TIMEOUT);
    assert_int_equal(pr_dev_link_recv(&l, &dev, &c, got, &mb), PR_LINK_OK);
    assert_true(mb == 10 && got[0] == 1 && got[1] == 2);
    assert_int_equal(pr_dev_link_send(&l, &dev, &c, 12, msg[2]), PR_LINK_OK);
    assert_int_equal(pr_dev_link_recv(&l, &dev, &c, got, &mb), PR_LINK_OK);
    assert_true(mb == 11 && got[0] == 3 && got[1] == 4);
    assert_int_equal(pr_dev_link_recv(&l, &dev, &c, got, &mb), PR_LINK_OK);
    assert_true(mb == 12 && got[0] == 5 && got[1] == 6);
    static const char *const expected[] = {
        "0 copy in 0", "0 record sent0", "0 copy in 1", "0 record sent1",
        "1 wait sent0", "1 copy out 0", "1 record drained0",
        "0 wait drained0", "0 copy in 0", "0 record sent0",
        "1 wait sent1", "1 copy out 1", "1 record drained1",
        "1 wait sent0", "1 copy out 0", "1 record drained0",
    };
    // Nothing left: a receive waits until the timeout and takes nothing.
    assert_int_equal(pr_dev_link_recv(&l, &dev, &c, got, &mb), PR_LINK_TIMEOUT);
    assert_int_equal(n_logged, sizeof expected / sizeof expected[0]);
    for (int i = 0; i < n_logged; i++)
        assert_string_equal(device_log[i], expected[i]);
    pr_dev_link_close(&l, &dev);
    assert_null(l.ring);
    pr_channel_destroy(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_link_orders_its_copies_by_events),
        cmocka_unit_test(test_each_op_names_its_link_and_ranks),
        cmocka_unit_test(test_native_between_processes_or_gpus),
        cmocka_unit_test(test_every_schedule_pairs_and_runs_on_the_ring),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
