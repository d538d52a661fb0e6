/* test_links.c: the mapping from the table's send and receive instructions to the links a
 * native transport (NCCL) carries: one two-rank communicator per directed link, sender rank
 * 0. NCCL pairs a communicator's k-th send with its k-th receive, so every schedule's sender
 * and receiver must list the same micro-batches in the same order on each link; and the
 * transport's sender ring of channel_capacity messages must be what keeps the table
 * deadlock-free (a bare NCCL send, which waits for its receive, is capacity 0 and deadlocks). */
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
    for (int kind = 0; kind < PACI_SCHED_COUNT; kind++) {
        int deadlocks = 0;
        for (size_t a = 0; a < sizeof ps / sizeof ps[0]; a++)
            for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++)
                check_schedule(kind, ps[a], ks[b], &deadlocks);
        // The ring is load-bearing: without it, 1F1B-style schedules stop.
        if (kind != PACI_SCHED_GPIPE)
            assert_true(deadlocks > 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_op_names_its_link_and_ranks),
        cmocka_unit_test(test_native_between_processes_or_gpus),
        cmocka_unit_test(test_every_schedule_pairs_and_runs_on_the_ring),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
